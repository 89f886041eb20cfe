//! Relay statements: claim, settle, release.
