//! smolrun platform adapter for android.
