//! Who makes a change and why, for its audit row: `--actor` and `--reason`, checked in one place.

use crate::cli::AuditArgs;
use crate::config;
use crate::db::audit::Audit;
use crate::exit::CodedError;

/// `--reason`, trimmed; `None` when not given. An empty one is refused (exit 2): an audit row
/// that says nothing was asked for.
pub fn reason(given: Option<&str>) -> Result<Option<String>, CodedError> {
    match given.map(str::trim) {
        Some("") => Err(CodedError::usage("--reason must not be empty")),
        r => Ok(r.map(str::to_owned)),
    }
}

/// The audit of a change: `--actor` ([`config::actor`]) and `--reason` ([`reason`]).
pub fn audit(actor: &AuditArgs, reason_given: Option<&str>) -> anyhow::Result<Audit> {
    Ok(Audit {
        actor: config::actor(actor)?,
        reason: reason(reason_given)?,
    })
}
