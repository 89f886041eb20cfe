//! Which events an operating command acts on: the filter flags shared by `dead`, `requeue` and
//! `events`, validated once here (before any I/O) into an [`EventFilter`] that `db` turns into
//! bound parameters. Destructive commands also resolve ids / filters / `--all` into a
//! [`Selection`], refusing an empty one.

use crate::cli::FilterArgs;
use crate::config::Error;
use crate::when::TimeArg;

/// A validated filter. Every field is bound as a query parameter; the SQL text never varies with
/// user input, only with which filters are present.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventFilter {
    /// `LIKE` pattern (escape character `\`) from the `--event-type` glob.
    pub event_type_like: Option<String>,
    pub tenant: Option<uuid::Uuid>,
    pub aggregate_type: Option<String>,
    pub aggregate_id: Option<String>,
    pub since: Option<TimeArg>,
    pub until: Option<TimeArg>,
    /// `ILIKE` pattern (escape character `\`): the `--error` text anywhere in last_error.
    pub error_like: Option<String>,
    /// A PostgreSQL regular expression for last_error.
    pub error_regex: Option<String>,
}

impl EventFilter {
    pub fn from_args(a: &FilterArgs) -> Result<Self, Error> {
        let text = |flag: &str, v: &Option<String>| -> Result<Option<String>, Error> {
            match v {
                Some(s) if s.trim().is_empty() => {
                    Err(Error::invalid(format!("{flag} must not be empty")))
                }
                other => Ok(other.clone()),
            }
        };
        let event_type_like = text("--event-type", &a.event_type)?
            .map(|g| glob_to_like(&g))
            .transpose()
            .map_err(|e| Error::invalid(format!("invalid --event-type glob: {e}")))?;
        if let (Some(since), Some(until)) = (a.since, a.until) {
            let inverted = match (since, until) {
                (TimeArg::At(s), TimeArg::At(u)) => s >= u,
                (TimeArg::Ago(s), TimeArg::Ago(u)) => s <= u,
                _ => false,
            };
            if inverted {
                return Err(Error::invalid(
                    "--since must be earlier than --until (with durations: --since 2h --until 1h)",
                ));
            }
        }
        Ok(Self {
            event_type_like,
            tenant: a.tenant,
            aggregate_type: text("--aggregate-type", &a.aggregate_type)?,
            aggregate_id: text("--aggregate-id", &a.aggregate_id)?,
            since: a.since,
            until: a.until,
            error_like: text("--error", &a.error)?.map(|e| format!("%{}%", escape_like(&e))),
            error_regex: text("--error-regex", &a.error_regex)?,
        })
    }

    /// True when no filter is set (the filter matches every row).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The rows a destructive command acts on.
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    Ids(Vec<i64>),
    Filter(EventFilter),
    All,
}

impl Selection {
    /// Ids, filters or `--all`: exactly one of them. `verb` names the action in messages
    /// ("requeue", "discard").
    pub fn resolve(ids: &[i64], filter: EventFilter, all: bool, verb: &str) -> Result<Self, Error> {
        Self::resolve_among(ids, filter, all, verb, "dead-lettered")
    }

    /// [`Selection::resolve`] among the events `which` names ("dead-lettered", "published"): what
    /// `--all` means.
    pub fn resolve_among(
        ids: &[i64],
        filter: EventFilter,
        all: bool,
        verb: &str,
        which: &str,
    ) -> Result<Self, Error> {
        match (ids.is_empty(), filter.is_empty(), all) {
            (true, true, false) => Err(Error::conflict(format!(
                "nothing selected: give event ids, filters (e.g. --event-type, --since, --error) \
                 or --all to {verb} every {which} event"
            ))),
            (false, false, _) => Err(Error::conflict(
                "give either event ids or filters, not both",
            )),
            (false, true, true) | (true, false, true) => Err(Error::conflict(format!(
                "--all selects every {which} event; leave out ids and filters with it"
            ))),
            (false, true, false) => {
                let mut ids = ids.to_vec();
                ids.sort_unstable();
                ids.dedup();
                Ok(Self::Ids(ids))
            }
            (true, false, false) => Ok(Self::Filter(filter)),
            (true, true, true) => Ok(Self::All),
        }
    }
}

/// Escapes `%`, `_` and `\` for a `LIKE` pattern whose escape character is `\`.
pub fn escape_like(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Translates a glob (`*` any run, `?` one character, `\x` a literal x) into a `LIKE` pattern
/// with escape character `\`.
pub fn glob_to_like(glob: &str) -> Result<String, String> {
    let mut out = String::with_capacity(glob.len() + 4);
    let mut chars = glob.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' => out.push('%'),
            '?' => out.push('_'),
            '\\' => match chars.next() {
                Some(next) => out.push_str(&escape_like(&next.to_string())),
                None => {
                    return Err(format!(
                        "`{}` ends with a lone backslash",
                        crate::output::escape_controls(glob)
                    ))
                }
            },
            other => out.push_str(&escape_like(&other.to_string())),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_become_escaped_like_patterns() {
        for (glob, like) in [
            ("order.placed", "order.placed"),
            ("order.*", "order.%"),
            ("order.?laced", "order._laced"),
            ("100%_done", "100\\%\\_done"),
            ("a\\*b", "a*b"),
            ("a\\\\b", "a\\\\b"),
            ("*", "%"),
        ] {
            assert_eq!(glob_to_like(glob).unwrap(), like, "{glob}");
        }
        assert!(glob_to_like("oops\\").is_err());
    }

    fn args() -> FilterArgs {
        FilterArgs::default()
    }

    #[test]
    fn filter_validation() {
        assert!(EventFilter::from_args(&args()).unwrap().is_empty());
        let f = EventFilter::from_args(&FilterArgs {
            error: Some("50%".into()),
            ..args()
        })
        .unwrap();
        assert_eq!(f.error_like.as_deref(), Some("%50\\%%"));
        assert!(!f.is_empty());
        let empty = FilterArgs {
            aggregate_id: Some(" ".into()),
            ..args()
        };
        assert!(EventFilter::from_args(&empty).is_err());
        let inverted = FilterArgs {
            since: Some(TimeArg::Ago(std::time::Duration::from_secs(60))),
            until: Some(TimeArg::Ago(std::time::Duration::from_secs(3600))),
            ..args()
        };
        assert!(EventFilter::from_args(&inverted).is_err());
    }

    #[test]
    fn selection_needs_exactly_one_kind() {
        let f = |et: Option<&str>| {
            EventFilter::from_args(&FilterArgs {
                event_type: et.map(str::to_owned),
                ..args()
            })
            .unwrap()
        };
        assert!(Selection::resolve(&[], f(None), false, "requeue").is_err());
        assert!(Selection::resolve(&[1], f(Some("x")), false, "requeue").is_err());
        assert!(Selection::resolve(&[1], f(None), true, "requeue").is_err());
        assert!(Selection::resolve(&[], f(Some("x")), true, "requeue").is_err());
        assert_eq!(
            Selection::resolve(&[3, 1, 3], f(None), false, "requeue").unwrap(),
            Selection::Ids(vec![1, 3])
        );
        assert_eq!(
            Selection::resolve(&[], f(None), true, "requeue").unwrap(),
            Selection::All
        );
        assert!(matches!(
            Selection::resolve(&[], f(Some("x")), false, "requeue").unwrap(),
            Selection::Filter(_)
        ));
    }
}
