//! `outboxctl events edit`: change an event's payload, headers or type before it is handled.
//!
//! All or nothing, like `cancel`: inside one transaction the rows are locked with `FOR UPDATE SKIP
//! LOCKED` (a row locked by someone else is a relay in tx mode publishing it right now), every
//! row's state is checked under that lock, and one statement ([`db::events::edit`]) changes them
//! all, re-checking the state itself and writing the audit rows. A dry run shows per row the diff
//! that the same SQL expressions compute ([`db::events::preview_edit`]).

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::cli::EditArgs;
use crate::config::{self, DbConfig};
use crate::db::{self, audit::Audit, events::EditPreview, events::EditSpec, events::EventState};
use crate::exit::{CodedError, FAILURE, OK};
use crate::json::JsonText;
use crate::ops::change::{
    commit_all, id_list, lock_all, peek_refusals, refusal_error, sorted_ids, Refusal, Seen,
};
use crate::ops::new_event::{has_nul, payload_arg, NUL};
use crate::output;

/// Why `edit` refuses an event, or None when it may be changed.
pub fn edit_refusal(seen: Seen, requeue: bool) -> Option<String> {
    match seen {
        Seen::Missing => Some("does not exist".into()),
        Seen::Locked => Some(
            "is being published by a relay right now (row locked): try again in a moment".into(),
        ),
        Seen::State(EventState::Published) => Some(
            "is already published, and an edit cannot change what consumers received (publish a new event instead)"
                .into(),
        ),
        Seen::State(EventState::InFlight) => Some(
            "is in flight (leased by a relay): edit it once the attempt is over".into(),
        ),
        Seen::State(EventState::Ready | EventState::Scheduled) if requeue => Some(
            "is not dead-lettered, and --requeue is only for dead events (leave it out: the edit applies to the next attempt)"
                .into(),
        ),
        Seen::State(_) => None,
    }
}

/// The change the flags describe, validated before any I/O.
pub fn spec_of(args: &EditArgs) -> Result<EditSpec, CodedError> {
    let payload = match args.payload.as_deref() {
        None => None,
        Some(raw) => {
            let text = payload_arg(raw)?;
            // Checked without converting numbers: the text goes to PostgreSQL as it is.
            crate::json::validate(&text)
                .map_err(|e| CodedError::usage(format!("--payload is not valid JSON: {e}")))?;
            if has_nul(&text) {
                return Err(CodedError::usage(format!("--payload {NUL}")));
            }
            Some(text)
        }
    };
    let mut set_headers = Map::new();
    for h in &args.set_headers {
        let (k, v) = h
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| {
                CodedError::usage(format!("invalid --set-header `{h}`: use KEY=VALUE"))
            })?;
        if h.contains('\0') {
            return Err(CodedError::usage(format!("--set-header {NUL}")));
        }
        set_headers.insert(k.trim().to_owned(), Value::String(v.to_owned()));
    }
    let mut unset_headers = Vec::new();
    for k in &args.unset_headers {
        let k = k.trim();
        if k.is_empty() {
            return Err(CodedError::usage("--unset-header must not be empty"));
        }
        if set_headers.contains_key(k) {
            return Err(CodedError::usage(format!(
                "header `{k}` is both set and unset; give one of --set-header and --unset-header"
            )));
        }
        unset_headers.push(k.to_owned());
    }
    let event_type = match args.event_type.as_deref() {
        Some(t) if t.trim().is_empty() => {
            return Err(CodedError::usage("--event-type must not be empty"))
        }
        Some(t) if t.contains('\0') => {
            return Err(CodedError::usage(format!("--event-type {NUL}")))
        }
        other => other.map(str::to_owned),
    };
    if payload.is_none()
        && set_headers.is_empty()
        && unset_headers.is_empty()
        && event_type.is_none()
    {
        return Err(CodedError::usage(
            "nothing to change: give --payload, --set-header, --unset-header or --event-type",
        ));
    }
    Ok(EditSpec {
        payload,
        set_headers,
        unset_headers,
        event_type,
        requeue: args.requeue,
    })
}

/// One event's values, as `--json` shows them before and after.
#[derive(Debug, Serialize, schemars::JsonSchema)]
struct Values<'a> {
    event_type: &'a str,
    headers: &'a JsonText,
    payload: &'a JsonText,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
struct EditedRow<'a> {
    id: i64,
    state: EventState,
    /// Dead and sent again (--requeue).
    requeued: bool,
    /// Whether anything differs (false: the edit writes the same values).
    changed: bool,
    before: Values<'a>,
    after: Values<'a>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
struct EditReport<'a> {
    dry_run: bool,
    /// Edited (with --dry-run: would be edited), with their values before and after.
    edited: Vec<EditedRow<'a>>,
    refused: &'a [Refusal],
}

fn report_rows(previews: &[EditPreview], requeue: bool) -> Vec<EditedRow<'_>> {
    previews
        .iter()
        .map(|p| EditedRow {
            id: p.id,
            state: p.state,
            requeued: requeue,
            changed: changed(p),
            before: Values {
                event_type: &p.event_type,
                headers: &p.headers,
                payload: &p.payload,
            },
            after: Values {
                event_type: &p.new_event_type,
                headers: &p.new_headers,
                payload: &p.new_payload,
            },
        })
        .collect()
}

fn changed(p: &EditPreview) -> bool {
    p.event_type != p.new_event_type || p.headers != p.new_headers || p.payload != p.new_payload
}

pub async fn run(args: EditArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let spec = spec_of(&args)?;
    let ids = sorted_ids(&args.ids);
    let json = args.change.output.json;
    let audit = Audit {
        actor: config::actor(&args.change.audit)?,
        reason: args.reason.clone(),
    };
    let mut conn = db::conn_migrated_through(&cfg, db::migrate::EDIT_SCHEMA).await?;
    let refuse = |refused: &[Refusal], dry_run: bool| -> anyhow::Result<anyhow::Error> {
        if json {
            output::print_json(&EditReport {
                dry_run,
                edited: Vec::new(),
                refused,
            })?;
        }
        Ok(refusal_error("edit", refused).into())
    };

    // `--json`: what was (or with --dry-run, would be) edited.
    let print_edited = |previews: &[EditPreview], dry_run: bool| {
        output::print_json(&EditReport {
            dry_run,
            edited: report_rows(previews, spec.requeue),
            refused: &[],
        })
    };
    let refused = peek_refusals(&mut conn, &ids, |s| edit_refusal(s, spec.requeue)).await?;
    if !refused.is_empty() {
        return Err(refuse(&refused, args.change.preview.dry_run)?);
    }
    let what = output::plural(ids.len() as u64, "event", "events");
    if args.change.preview.dry_run {
        let previews = db::events::preview_edit(&mut conn, &ids, &spec).await?;
        if json {
            print_edited(&previews, true)?;
        } else {
            for p in &previews {
                output::print_line(output::escape_lines(
                    render_diff(p, spec.requeue).trim_end(),
                ))?;
            }
            output::print_summary(format_args!(
                "would edit {what}: {} (dry run: nothing changed)",
                id_list(&ids)
            ))?;
        }
        return Ok(OK);
    }
    if ids.len() > 1
        && !crate::confirm::confirm(
            args.change.confirm.yes,
            &format!("edit {what} ({})?", id_list(&ids)),
        )?
    {
        output::eprint_line("aborted; nothing was changed");
        return Ok(FAILURE);
    }

    let mut tx = match lock_all(&mut conn, &ids, |s| edit_refusal(s, spec.requeue)).await? {
        Ok(tx) => tx,
        Err(refused) => return Err(refuse(&refused, false)?),
    };
    // Under the lock: exactly the values the edit writes, for the report.
    let previews = db::events::preview_edit(&mut tx, &ids, &spec).await?;
    let mut edited = db::events::edit(&mut tx, &ids, &spec, &audit).await?;
    edited.sort_unstable();
    commit_all(tx, &ids, edited.iter().copied(), "edited").await?;
    if json {
        print_edited(&previews, false)?;
    } else {
        let unchanged = previews.iter().filter(|p| !changed(p)).count() as u64;
        let mut line = format!(
            "edited {what}{}: {}",
            match (spec.requeue, ids.len()) {
                (false, _) => "",
                (true, 1) => " and requeued it",
                (true, _) => " and requeued them",
            },
            id_list(&ids)
        );
        if unchanged > 0 {
            line.push_str(&format!(
                " ({} already had these values)",
                output::plural(unchanged, "event", "events")
            ));
        }
        output::print_summary(line)?;
    }
    Ok(OK)
}

/// The per-event diff of a dry run: event type, headers (key by key), payload (pretty JSON, line by
/// line), and what --requeue does. Unchanged parts are named as such. The row's text is escaped
/// for the terminal (`output::escape_controls`).
pub fn render_diff(p: &EditPreview, requeue: bool) -> String {
    use crate::output::escape_controls as esc;
    let mut out = format!("event {} ({})\n", p.id, p.state);
    if !changed(p) {
        out.push_str("  no change: the event already has these values\n");
    }
    if p.event_type != p.new_event_type {
        out.push_str(&format!(
            "  event_type: {} -> {}\n",
            esc(&p.event_type),
            esc(&p.new_event_type)
        ));
    }
    if p.headers != p.new_headers {
        out.push_str("  headers:\n");
        let old = p.headers.members().unwrap_or_default();
        let new = p.new_headers.members().unwrap_or_default();
        let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
        for key in keys {
            let k = esc(key);
            let show = |v: &JsonText| esc(&v.as_text()).into_owned();
            match (old.get(key), new.get(key)) {
                (Some(a), Some(b)) if a == b => out.push_str(&format!("      {k}: {}\n", show(a))),
                (a, b) => {
                    if let Some(a) = a {
                        out.push_str(&format!("    - {k}: {}\n", show(a)));
                    }
                    if let Some(b) = b {
                        out.push_str(&format!("    + {k}: {}\n", show(b)));
                    }
                }
            }
        }
    }
    if p.payload != p.new_payload {
        out.push_str("  payload:\n");
        let (a, b) = (
            crate::json::pretty(p.payload.get()),
            crate::json::pretty(p.new_payload.get()),
        );
        for line in line_diff(&a, &b) {
            out.push_str("    ");
            out.push_str(&esc(&line));
            out.push('\n');
        }
    }
    if requeue {
        out.push_str("  requeue: dead -> ready now, attempt_count 0\n");
    }
    out
}

/// A line diff (longest common subsequence): "  " kept, "- " removed, "+ " added. Inputs beyond
/// a few thousand lines are shown as all removed, all added.
pub fn line_diff(a: &str, b: &str) -> Vec<String> {
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    if a.len().saturating_mul(b.len()) > 4_000_000 {
        return a
            .iter()
            .map(|l| format!("- {l}"))
            .chain(b.iter().map(|l| format!("+ {l}")))
            .collect();
    }
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push(format!("  {}", a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push(format!("- {}", a[i]));
            i += 1;
        } else {
            out.push(format!("+ {}", b[j]));
            j += 1;
        }
    }
    out
}

/// The `--json` output of `events edit` (docs/reference/json.md).
pub fn json_outputs() -> Vec<crate::schema::Output> {
    vec![crate::schema::Output::of::<EditReport<'static>>(
        "events edit --json",
        "",
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_rules() {
        use crate::ops::change::allowed;
        use EventState::*;
        assert_eq!(allowed(|s| edit_refusal(s, true)), [Seen::State(Dead)]);
        let unrequeued = [Ready, Scheduled, Dead].map(Seen::State);
        assert_eq!(allowed(|s| edit_refusal(s, false)), unrequeued);
    }

    #[test]
    fn line_diff_keeps_common_lines() {
        let d = line_diff(
            "{\n  \"a\": 1,\n  \"b\": 2\n}",
            "{\n  \"a\": 1,\n  \"b\": 3\n}",
        );
        assert_eq!(
            d,
            [
                "  {",
                "    \"a\": 1,",
                "-   \"b\": 2",
                "+   \"b\": 3",
                "  }"
            ]
        );
        assert_eq!(line_diff("", "x"), ["+ x"]);
        assert_eq!(line_diff("x", ""), ["- x"]);
    }
}
