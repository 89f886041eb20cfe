//! The relay settings doctor is given (`--lease`, `--publish-timeout`, the retries): a publish
//! timeout that outlives the lease, and the retry horizon a deduplicating sink must cover.

use std::time::Duration;

use serde_json::json;

use super::{check, secs, Check, Status};

/// The relay settings given to check (`--lease`, `--publish-timeout`, retries).
#[derive(Debug, Clone)]
pub struct RelaySettings {
    pub lease: Duration,
    pub publish_timeout: Duration,
    pub max_attempts: u32,
    pub backoff: crate::relay::Backoff,
}

impl RelaySettings {
    /// The longest time between an event's first publish attempt and its last: every backoff at
    /// its ceiling (jitter only shortens them) plus a publish timeout per attempt. A sink that
    /// deduplicates must remember an id at least this long to drop every re-publish.
    pub fn retry_horizon(&self) -> Duration {
        let waits: Duration = (1..self.max_attempts)
            .map(|a| self.backoff.ceiling(a))
            .fold(Duration::ZERO, |acc, d| acc.saturating_add(d));
        waits.saturating_add(self.publish_timeout.saturating_mul(self.max_attempts))
    }
}

pub(super) fn lease_check(r: &RelaySettings) -> Check {
    let details = json!({ "lease_seconds": r.lease.as_secs_f64(), "publish_timeout_seconds": r.publish_timeout.as_secs_f64() });
    if r.publish_timeout >= r.lease {
        check(
            "settings:lease",
            Status::Fail,
            format!(
                "--publish-timeout {} is not shorter than --lease {}: a slow publish outlives its claim and another relay publishes the event again (the relay refuses to start)",
                secs(r.publish_timeout),
                secs(r.lease)
            ),
            details,
        )
    } else {
        check(
            "settings:lease",
            Status::Pass,
            format!(
                "--publish-timeout {} is shorter than --lease {}",
                secs(r.publish_timeout),
                secs(r.lease)
            ),
            details,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_horizon_sums_capped_backoffs_and_timeouts() {
        let r = RelaySettings {
            lease: Duration::from_secs(30),
            publish_timeout: Duration::from_secs(15),
            max_attempts: 10,
            backoff: crate::relay::Backoff {
                base: Duration::from_secs(1),
                max: Duration::from_secs(300),
            },
        };
        // 1+2+4+...+256 = 511 s of backoff for 9 retries, plus 10 × 15 s of publish timeouts.
        assert_eq!(r.retry_horizon(), Duration::from_secs(511 + 150));
        // The cap applies: 1+2+4+8 then 10, 10.
        let capped = RelaySettings {
            max_attempts: 7,
            backoff: crate::relay::Backoff {
                base: Duration::from_secs(1),
                max: Duration::from_secs(10),
            },
            ..r
        };
        assert_eq!(
            capped.retry_horizon(),
            Duration::from_secs(15 + 20 + 7 * 15)
        );
    }

    #[test]
    fn a_publish_timeout_must_be_shorter_than_the_lease() {
        let r = |timeout| RelaySettings {
            lease: Duration::from_secs(30),
            publish_timeout: Duration::from_secs(timeout),
            max_attempts: 3,
            backoff: crate::relay::Backoff {
                base: Duration::from_secs(1),
                max: Duration::from_secs(60),
            },
        };
        assert_eq!(lease_check(&r(15)).status, Status::Pass);
        assert_eq!(lease_check(&r(30)).status, Status::Fail);
    }
}
