//! A point in time that `--since` / `--until` name: parsed by [`crate::cli`], validated into a
//! filter by [`crate::select`], bound by [`crate::db`]. A leaf of its own, so that none of them
//! needs another's types for it.

/// A point in time to filter on: absolute, or a duration before the database's `now()` (the SQL
/// resolves it, so time always comes from the database clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeArg {
    At(chrono::DateTime<chrono::Utc>),
    Ago(std::time::Duration),
}
