//! A `timestamptz` as a row may hold it: `infinity` and `-infinity` included (an application may
//! park an event with `available_at = 'infinity'`), and years chrono cannot represent (PostgreSQL
//! goes to 294276 AD, chrono to 262143). sqlx's own `DateTime<Utc>` decoding panics on all of
//! these, which stopped every command that lists rows at the first such row.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize, Serializer};
use sqlx::postgres::{PgTypeInfo, PgValueFormat, PgValueRef};
use sqlx::{Decode, Postgres, Type};

/// A row's time: a date chrono can hold, one of PostgreSQL's infinities, or a date beyond
/// chrono's range (microseconds since 2000-01-01, PostgreSQL's epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timestamp {
    At(DateTime<Utc>),
    Infinity,
    NegInfinity,
    Beyond(i64),
}

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

impl Timestamp {
    /// The time, when chrono can hold it.
    pub fn finite(self) -> Option<DateTime<Utc>> {
        match self {
            Timestamp::At(t) => Some(t),
            _ => None,
        }
    }

    fn from_pg_micros(us: i64) -> Self {
        match us {
            i64::MAX => Timestamp::Infinity,
            i64::MIN => Timestamp::NegInfinity,
            _ => us
                .checked_add(PG_EPOCH_UNIX_MICROS)
                .and_then(DateTime::from_timestamp_micros)
                .map_or(Timestamp::Beyond(us), Timestamp::At),
        }
    }

    /// As [`std::fmt::Display`] does, with `format` (chrono's) for a date chrono holds.
    pub fn format(self, format: &str) -> String {
        match self {
            Timestamp::At(t) => t.format(format).to_string(),
            other => other.to_string(),
        }
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(t: DateTime<Utc>) -> Self {
        Timestamp::At(t)
    }
}

/// RFC 3339 for a date chrono holds (as chrono's serde writes it), `infinity` / `-infinity` as
/// PostgreSQL spells them, and a date beyond chrono's range as `+YYYYYY-MM-DDTHH:MM:SS.ffffffZ`.
impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Timestamp::At(t) => write!(
                f,
                "{}",
                t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
            ),
            Timestamp::Infinity => f.write_str("infinity"),
            Timestamp::NegInfinity => f.write_str("-infinity"),
            Timestamp::Beyond(us) => {
                let (days, rest) = (us.div_euclid(86_400_000_000), us.rem_euclid(86_400_000_000));
                // 2000-01-01 is day 10957 of the Unix epoch.
                let (y, m, d) = civil_from_days(days + 10_957);
                let secs = rest / 1_000_000;
                write!(
                    f,
                    "{}{:06}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}Z",
                    if y < 0 { '-' } else { '+' },
                    y.unsigned_abs(),
                    secs / 3600,
                    secs / 60 % 60,
                    secs % 60,
                    rest % 1_000_000
                )
            }
        }
    }
}

/// Year, month, day of a day count from 1970-01-01 in the proleptic Gregorian calendar (Howard
/// Hinnant's `civil_from_days`), for dates chrono cannot hold.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Timestamp::At(t) => t.serialize(s),
            other => s.collect_str(other),
        }
    }
}

/// Reads what [`Serialize`] and PostgreSQL's `to_json` write: RFC 3339, `infinity`, `-infinity`.
impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "infinity" => Ok(Timestamp::Infinity),
            "-infinity" => Ok(Timestamp::NegInfinity),
            _ => DateTime::parse_from_rfc3339(&s)
                .map(|t| Timestamp::At(t.with_timezone(&Utc)))
                .map_err(serde::de::Error::custom),
        }
    }
}

impl Type<Postgres> for Timestamp {
    fn type_info() -> PgTypeInfo {
        <DateTime<Utc> as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <DateTime<Utc> as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for Timestamp {
    fn decode(value: PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        match value.format() {
            PgValueFormat::Binary => {
                let us = <i64 as Decode<Postgres>>::decode(value)?;
                Ok(Self::from_pg_micros(us))
            }
            PgValueFormat::Text => match value.as_str()? {
                "infinity" => Ok(Timestamp::Infinity),
                "-infinity" => Ok(Timestamp::NegInfinity),
                _ => Ok(Timestamp::At(<DateTime<Utc> as Decode<Postgres>>::decode(
                    value,
                )?)),
            },
        }
    }
}

// An RFC 3339 time, or `infinity` / `-infinity`: the reference pages (`docs/reference/json.md`)
// describe it so.
crate::schema::fixed_schema!(Timestamp, "Timestamp", {
    "type": "string",
    "description": "an RFC 3339 time (database clock), or infinity / -infinity as stored"
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infinities_and_far_dates_print_as_postgresql_holds_them() {
        assert_eq!(Timestamp::from_pg_micros(i64::MAX), Timestamp::Infinity);
        assert_eq!(Timestamp::from_pg_micros(i64::MIN), Timestamp::NegInfinity);
        let t = Timestamp::from_pg_micros(0);
        assert_eq!(t.to_string(), "2000-01-01T00:00:00Z");
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            serde_json::to_string(&t.finite().unwrap()).unwrap(),
            "as chrono serializes it"
        );
        // A date beyond chrono is printed by the same calendar chrono uses for the ones it has.
        use chrono::{Datelike, Timelike};
        for us in [
            0,
            1,
            -1,
            86_399_999_999,
            7_000_000_000_123_456,
            -60_000_000_000_000_001,
        ] {
            let t = Timestamp::from_pg_micros(us).finite().unwrap();
            let want = format!(
                "{}{:06}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
                if t.year() < 0 { '-' } else { '+' },
                t.year().unsigned_abs(),
                t.month(),
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
                t.nanosecond() / 1000
            );
            assert_eq!(Timestamp::Beyond(us).to_string(), want, "{us}");
        }
        assert_eq!(Timestamp::Infinity.format("%Y"), "infinity");
        for t in [Timestamp::Infinity, Timestamp::NegInfinity, t] {
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(
                serde_json::from_str::<Timestamp>(&json).unwrap(),
                t,
                "{json}"
            );
        }
    }
}
