//! The value parsers of the flags (durations, times, uuids, listen addresses): pure functions
//! from text to a typed value or a message, shared by every subcommand and by `config`.

use std::time::Duration;

use crate::when::TimeArg;

/// The longest duration any flag takes: 10 years (of 365.25 days, humantime's year). Longer is a
/// typo, and would overflow the database's `now() + interval` or the microsecond count.
pub const MAX_DURATION: Duration = Duration::from_secs(315_576_000);

// Each quotes its input with its control characters escaped (`q`): an error is one line, and
// what a terminal would act on is shown, not acted on.

/// A uuid.
pub fn parse_uuid(s: &str) -> Result<uuid::Uuid, String> {
    let q = crate::output::escape_controls(s);
    uuid::Uuid::parse_str(s.trim())
        .map_err(|_| format!("`{q}` is not a uuid (e.g. 2f6c1d3e-8a4b-4c55-9d1e-0a7b6c5d4e3f)"))
}

/// An RFC 3339 time, a date (midnight UTC), or a humantime duration meaning that long before now.
pub fn parse_time_or_ago(s: &str) -> Result<TimeArg, String> {
    let q = crate::output::escape_controls(s);
    if let Some(t) = parse_time(s) {
        return Ok(TimeArg::At(t));
    }
    match humantime::parse_duration(s.trim()) {
        Ok(_) => parse_duration(s).map(TimeArg::Ago),
        Err(_) => Err(format!(
            "`{q}` is neither an RFC 3339 time, a date nor a duration; use e.g. 2026-12-01T09:00:00Z, 2026-12-01 or 2h"
        )),
    }
}

/// A humantime duration (`5m`, `7d`, `250ms`) of at most [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let q = crate::output::escape_controls(s);
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("`{q}` is not a duration ({e}); use e.g. 30s, 5m, 7d"))?;
    if d > MAX_DURATION {
        return Err(format!("`{q}` is longer than 10 years"));
    }
    Ok(d)
}

/// A listen address, HOST:PORT (an IP, `[v6]`, or a name resolved when binding). No I/O here.
pub fn parse_listen_addr(s: &str) -> Result<String, String> {
    let q = crate::output::escape_controls(s);
    let bad =
        || format!("`{q}` is not HOST:PORT; use e.g. 0.0.0.0:9464, 127.0.0.1:9464 or [::]:9464");
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_')
    };
    if !host_ok || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok(s.to_owned())
}

/// A humantime duration that must not be zero.
pub fn parse_nonzero_duration(s: &str) -> Result<Duration, String> {
    let q = crate::output::escape_controls(s);
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("`{q}` must be greater than zero"));
    }
    Ok(d)
}

/// An RFC 3339 time or a date alone (midnight UTC), at most 10 years from now.
pub fn parse_timestamp(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    let q = crate::output::escape_controls(s);
    let t = parse_time(s).ok_or_else(|| {
        format!(
            "`{q}` is not an RFC 3339 time or a date; use e.g. 2026-12-01T09:00:00Z or 2026-12-01"
        )
    })?;
    let limit = chrono::Utc::now() + chrono::Duration::from_std(MAX_DURATION).expect("fits");
    if t > limit {
        return Err(format!("`{q}` is more than 10 years from now"));
    }
    Ok(t)
}

/// RFC 3339 (`2026-12-01T09:00:00Z`, `+02:00`), or a date alone as midnight UTC.
fn parse_time(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let s = s.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&chrono::Utc));
    }
    chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
}

/// A rate of events: `N/s`, `N/m`, `N/h` (also `/sec`, `/min`, `/hour`), or `N` alone (per
/// second); `N` may have a fraction (`0.5/s`). Returns events per second, greater than zero.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let q = crate::output::escape_controls(s);
    let bad = || format!("`{q}` is not a rate; use e.g. 100/s, 600/m or 3600/h");
    let t = s.trim();
    let (n, per) = t.split_once('/').unwrap_or((t, "s"));
    let seconds = match per.trim() {
        "s" | "sec" | "second" => 1.0,
        "m" | "min" | "minute" => 60.0,
        "h" | "hour" => 3600.0,
        _ => return Err(bad()),
    };
    let n: f64 = n.trim().parse().map_err(|_| bad())?;
    if !n.is_finite() || n <= 0.0 {
        return Err(format!("`{q}` must be greater than zero"));
    }
    Ok(n / seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100/s"), Ok(100.0));
        assert_eq!(parse_rate("100"), Ok(100.0));
        assert_eq!(parse_rate(" 600/m "), Ok(10.0));
        assert_eq!(parse_rate("3600/hour"), Ok(1.0));
        assert_eq!(parse_rate("0.5/s"), Ok(0.5));
        for bad in ["0/s", "-1/s", "fast", "10/d", "", "NaN/s", "inf"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        for (input, ok) in [
            ("5m", true),
            ("7d", true),
            ("250ms", true),
            ("0s", true),
            ("soon", false),
            ("", false),
        ] {
            assert_eq!(parse_duration(input).is_ok(), ok, "{input}");
        }
        assert!(parse_nonzero_duration("0s").is_err());
        assert_eq!(
            parse_nonzero_duration("1h").unwrap(),
            Duration::from_secs(3600)
        );
    }

    #[test]
    fn time_or_ago() {
        assert_eq!(
            parse_time_or_ago("2h").unwrap(),
            TimeArg::Ago(Duration::from_secs(7200))
        );
        assert!(matches!(
            parse_time_or_ago("2026-12-01T09:00:00Z").unwrap(),
            TimeArg::At(_)
        ));
        assert!(parse_time_or_ago("yesterday").is_err());
        assert!(parse_uuid("not-a-uuid").is_err());
        assert!(parse_uuid("2f6c1d3e-8a4b-4c55-9d1e-0a7b6c5d4e3f").is_ok());
    }

    #[test]
    fn timestamps() {
        for (input, ok) in [
            ("2026-12-01T09:00:00Z", true),
            ("2026-12-01T09:00:00+02:00", true),
            ("1999-01-01", true),
            ("tomorrow", false),
            ("2999-01-01T00:00:00Z", false),
        ] {
            assert_eq!(parse_timestamp(input).is_ok(), ok, "{input}");
        }
        let midnight = parse_timestamp("2026-12-01T00:00:00Z").unwrap();
        assert_eq!(parse_timestamp("2026-12-01").unwrap(), midnight);
        let day = parse_time_or_ago("2026-12-01").unwrap();
        assert_eq!(day, TimeArg::At(midnight));
    }

    #[test]
    fn durations_are_bounded() {
        assert!(parse_duration("10years").is_ok());
        assert!(parse_duration("3652d").is_ok());
        for long in ["11years", "3653d", "100000000y"] {
            let e = parse_duration(long).unwrap_err();
            assert!(e.contains("10 years"), "{e}");
        }
        assert!(parse_time_or_ago("20000y")
            .unwrap_err()
            .contains("10 years"));
    }
}
