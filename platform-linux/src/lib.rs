//! smolrun platform adapter for linux.
