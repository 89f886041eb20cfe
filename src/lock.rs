//! Taking a mutex whose holder panicked. The state behind every lock here is plain (warned-once
//! sets, a last problem, a producer handle, a cursor): a panic elsewhere leaves it usable, and a
//! relay that stopped publishing because one log line's bookkeeping panicked would be worse.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, poisoned or not.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
