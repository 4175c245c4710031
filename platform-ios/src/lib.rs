//! smolrun platform adapter for ios.
