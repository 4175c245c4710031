//! (filled in by the issue that builds it)
