//! The loops around [`Relay::step`]: `once` drains what is ready and returns; `daemon` runs until
//! shutdown, sleeping between batches until a NOTIFY, the next delayed event's due time, or the
//! poll tick, whichever comes first.

use std::time::{Duration, Instant};

use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

use super::{Relay, Report};

/// Limits of a `--once` run.
#[derive(Debug, Clone, Copy, Default)]
pub struct OnceLimits {
    pub max_events: Option<u64>,
    pub max_duration: Option<Duration>,
}

/// Drains ready rows until a batch comes back short (nothing more is ready and unlocked), a limit
/// is reached, or shutdown. Database errors end the run.
pub async fn once(
    relay: &Relay,
    limits: OnceLimits,
    shutdown: &CancellationToken,
) -> Result<Report, sqlx::Error> {
    let started = Instant::now();
    let mut total = Report::default();
    loop {
        if shutdown.is_cancelled() || limits.max_duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        let remaining = limits.max_events.map(|m| m.saturating_sub(total.claimed));
        if remaining == Some(0) {
            break;
        }
        let limit = remaining.map_or(relay.cfg.batch_size, |r| {
            r.min(u64::from(relay.cfg.batch_size)) as u32
        });
        let r = relay.step(limit, shutdown).await?;
        total.add(&r);
        // A short batch means nothing more is ready, unless some rows were given back unpublished
        // (a slow sink ran out of lease time): those are ready again at once; or the byte budget
        // ended it.
        if r.claimed < u64::from(limit) && r.released == 0 && !r.budget_reached {
            break;
        }
    }
    Ok(total)
}

/// Settings of the daemon loop.
#[derive(Debug, Clone)]
pub struct DaemonSettings {
    pub poll_interval: Duration,
    /// NOTIFY channel of the outbox's insert trigger.
    pub channel: String,
}

/// Runs until `shutdown`; survives database and sink outages (logs, backs off, goes on).
pub async fn daemon(
    relay: &Relay,
    settings: &DaemonSettings,
    shutdown: &CancellationToken,
) -> Report {
    let mut total = Report::default();
    let mut listener: Option<PgListener> = None;
    let mut error_backoff = ErrorBackoff::default();
    let mut last_log = Instant::now();
    let mut since_log = Report::default();
    loop {
        if shutdown.is_cancelled() {
            break;
        }
        // LISTEN before looking for work, so an insert committed after the claim still wakes us.
        if listener.is_none() {
            listener = listen(relay, &settings.channel).await;
        }
        let (full, claimed_none) = match relay.step(relay.cfg.batch_size, shutdown).await {
            Ok(r) => {
                error_backoff.reset();
                total.add(&r);
                since_log.add(&r);
                (
                    r.claimed >= u64::from(relay.cfg.batch_size)
                        || r.released > 0
                        || r.budget_reached,
                    r.claimed == 0,
                )
            }
            Err(e) => {
                let wait = error_backoff.next();
                tracing::warn!(error = %e, retry_in = ?wait, "relay step failed; backing off");
                if e.as_database_error().is_none() {
                    listener = None; // the connection may be gone; LISTEN again when back
                }
                sleep_or_shutdown(wait, shutdown).await;
                continue;
            }
        };
        if last_log.elapsed() >= Duration::from_secs(60) && since_log.claimed > 0 {
            tracing::info!(
                published = since_log.published,
                retried = since_log.retried,
                dead_lettered = since_log.dead_lettered,
                lease_lost = since_log.lease_lost,
                "relayed in the last {}s",
                last_log.elapsed().as_secs()
            );
            last_log = Instant::now();
            since_log = Report::default();
        }
        if full {
            continue; // more may be ready: claim again at once
        }
        let due = match relay.pool.acquire().await {
            Ok(mut conn) => crate::db::relay::next_due_in(&mut conn)
                .await
                .ok()
                .flatten(),
            Err(_) => None,
        };
        let wait = wait_time(due, claimed_none, settings.poll_interval);
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
            n = recv(&mut listener) => {
                if !n {
                    listener = None;
                }
                if let Some(l) = listener.as_mut() {
                    // Many inserts may have notified while we worked: one wake-up is enough.
                    while l.next_buffered().is_some() {}
                }
            }
        }
    }
    total
}

/// How long to sleep before the next claim. A row already due that the last claim could not take
/// is locked by another relay's open transaction (tx mode): look again shortly, without spinning.
fn wait_time(due: Option<Duration>, claimed_none: bool, poll: Duration) -> Duration {
    const LOCKED_RETRY: Duration = Duration::from_millis(25);
    match due {
        None => poll,
        Some(d) if d.is_zero() && claimed_none => LOCKED_RETRY.min(poll),
        // Wake a hair after the due time: the claim compares with the database clock.
        Some(d) => (d + Duration::from_millis(1)).min(poll),
    }
}

/// Waits for a notification. Returns false when the listener is unusable (it is then rebuilt);
/// a lost connection counts as a wake-up, since notifications may have been missed.
async fn recv(listener: &mut Option<PgListener>) -> bool {
    match listener.as_mut() {
        Some(l) => match l.try_recv().await {
            Ok(Some(_)) => true,
            Ok(None) => {
                tracing::info!("LISTEN connection lost; reconnecting");
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "LISTEN failed; will listen again");
                false
            }
        },
        None => std::future::pending().await,
    }
}

async fn listen(relay: &Relay, channel: &str) -> Option<PgListener> {
    let mut l = match PgListener::connect_with(&relay.pool).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "cannot open the LISTEN connection; polling until it works");
            return None;
        }
    };
    l.ignore_pool_close_event(true);
    match l.listen(channel).await {
        Ok(()) => Some(l),
        Err(e) => {
            tracing::warn!(error = %e, "LISTEN failed; polling until it works");
            None
        }
    }
}

async fn sleep_or_shutdown(d: Duration, shutdown: &CancellationToken) {
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = tokio::time::sleep(d) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_time_rules() {
        let poll = Duration::from_secs(5);
        assert_eq!(wait_time(None, true, poll), poll);
        assert_eq!(
            wait_time(Some(Duration::ZERO), false, poll),
            Duration::from_millis(1),
            "due now: claim again"
        );
        assert_eq!(
            wait_time(Some(Duration::ZERO), true, poll),
            Duration::from_millis(25),
            "due but locked elsewhere: no spin"
        );
        assert_eq!(
            wait_time(Some(Duration::from_millis(300)), true, poll),
            Duration::from_millis(301)
        );
        assert_eq!(wait_time(Some(Duration::from_secs(60)), true, poll), poll);
    }
}

/// Backoff after a failed step: 100 ms doubling to 30 s.
#[derive(Debug, Default)]
struct ErrorBackoff {
    failures: u32,
}

impl ErrorBackoff {
    fn next(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let b = super::Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(30),
        };
        b.delay(self.failures)
    }

    fn reset(&mut self) {
        self.failures = 0;
    }
}
