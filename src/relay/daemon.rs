//! The loop around [`Relay::step`], in two configurations: `once` drains what is ready and
//! returns; `daemon` runs until shutdown, sleeping between batches until a NOTIFY, the next delayed
//! event's due time, or the poll tick, whichever comes first. One loop ([`run`]) keeps what both
//! share in a small explicit state ([`Turn`]); what differs (when the run ends, how it waits,
//! what it budgets, the heartbeat, LISTEN and the sink's circuit) is each configuration's
//! ([`Flavour`]: [`OnceRun`], [`DaemonRun`]). Both finish a lease-mode settle that a broken
//! connection interrupted ([`super::pipeline::step_settled`]) and emit what the step reports
//! ([`RelayEvent`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

use super::events::{Heartbeat, RelayEvent, StepDone};
use super::metrics::Health;
use super::pipeline::{Next, Pipeline, Started};
use super::step::MAX_PIPELINE_DEPTH;
use super::{Backoff, Relay, Report, StepError};
use crate::sink::SinkError;

/// Limits of a `--once` run.
#[derive(Debug, Clone, Copy)]
pub struct OnceLimits {
    pub max_events: Option<u64>,
    pub max_duration: Option<Duration>,
    /// How long the database may keep failing (connection lost, server restarting) before the
    /// run gives up; the CLI uses `--connect-timeout`.
    pub reconnect_for: Duration,
}

impl Default for OnceLimits {
    fn default() -> Self {
        Self {
            max_events: None,
            max_duration: None,
            reconnect_for: Duration::from_secs(10),
        }
    }
}

/// Drains ready rows until a batch comes back short (nothing more is ready and unlocked), a limit
/// is reached, or shutdown. A transient database error (lost connection, restart) is retried
/// with backoff on a new connection; the run fails only when the database keeps failing for
/// `reconnect_for`, or is failing when `max_duration` ends, or on a permanent error.
///
/// Up to `--pipeline-depth` steps run at once ([`Pipeline`]): the next batch is claimed while
/// the previous one publishes, when that one's claim came back full, and never past
/// `max_events`. Whatever ends the run (a limit, shutdown, the sink down, an error) lets the
/// steps in flight finish first.
pub async fn once(
    relay: &Relay,
    limits: OnceLimits,
    shutdown: &CancellationToken,
) -> Result<Report, StepError> {
    relay.start.run_once();
    relay.ordering.run_once();
    resume_floor(relay).await;
    let mut flavour = OnceRun {
        limits,
        started: Instant::now(),
        failing: None,
    };
    let ended = run(relay, &mut flavour, shutdown).await;
    if let Some(e) = ended.error {
        return Err(e);
    }
    if ended.drained {
        save_floor(relay).await;
    }
    Ok(ended.total)
}

/// Starts the run where the last one's claims reached ([`crate::db::floor`]). Without it (none
/// saved, an older schema, or the database not answering yet: the first claim will say so) the
/// run starts at the start, as it always may.
async fn resume_floor(relay: &Relay) {
    let Ok(mut conn) = relay.db.hold().await else {
        return;
    };
    match conn.run(async |c| crate::db::floor::load(c).await).await {
        Ok(loaded) => {
            relay.start.resume(loaded.saved);
            relay.ordering.resume(loaded.key, loaded.key_columns);
        }
        Err(e) => {
            tracing::debug!("the saved claim floor was not read: {e}");
        }
    }
}

/// Saves where this run's claims reached for the next run, when it drained what it found, and the
/// ordered walk's floor. A failure costs the next run only its first claim's walk from the start.
async fn save_floor(relay: &Relay) {
    let floor = crate::db::floor::ToSave {
        floor: relay.start.to_save(),
        key: relay.ordering.to_save(),
    };
    if floor == crate::db::floor::ToSave::default() {
        return;
    }
    let Ok(mut conn) = relay.db.hold().await else {
        return;
    };
    let saved = conn
        .run(async |c| crate::db::floor::save(c, &floor).await)
        .await;
    if let Err(e) = saved {
        tracing::warn!("the claim floor was not saved for the next run: {e}");
    }
}

/// Steps in flight at most (`--pipeline-depth`).
fn depth(relay: &Relay) -> usize {
    relay.cfg.pipeline_depth.clamp(1, MAX_PIPELINE_DEPTH) as usize
}

fn emit_all(r: &Report) {
    for e in &r.events {
        e.emit();
    }
}

/// The step's counts and timings (when it claimed something).
fn step_done(r: &Report, started: Instant) {
    RelayEvent::Writable.emit();
    if r.claimed > 0 {
        RelayEvent::StepDone(StepDone::new(r, started.elapsed())).emit();
    }
}

fn step_failed(e: &StepError, retry_in: Duration) {
    if crate::db::is_read_only(e.db()) {
        // Said once, not at every retry: a standby stays one until it is promoted.
        RelayEvent::ReadOnly { retry_in }.emit();
        return;
    }
    if let StepError::RolledBack { published, source } = e {
        RelayEvent::TxRolledBack {
            events: *published,
            error: source.to_string(),
        }
        .emit();
    }
    let error = if crate::db::is_transaction_pooler_symptom(e.db()) {
        format!("{}: {}", crate::db::TRANSACTION_POOLER_HINT, e.db())
    } else {
        e.db().to_string()
    };
    RelayEvent::StepFailed { error, retry_in }.emit();
}

/// Settings of the daemon loop.
#[derive(Debug, Clone)]
pub struct DaemonSettings {
    pub poll_interval: Duration,
    /// NOTIFY channel of the outbox's insert trigger.
    pub channel: String,
    /// How often the INFO heartbeat is logged, also when idle.
    pub heartbeat: Duration,
    /// What `/livez` and `/readyz` read (see [`Health`]); the loop updates it either way.
    pub health: Arc<Health>,
}

/// How soon a daemon that claimed nothing looks again while ordering is on and rows are due (a
/// key's head was leased by another relay, backing off, or blocked), unless woken by a NOTIFY.
pub const ORDERED_RETRY: Duration = Duration::from_millis(200);

/// The heartbeat's default interval.
pub const HEARTBEAT: Duration = Duration::from_secs(60);

/// Runs until `shutdown`; survives database and sink outages (logs, backs off, goes on).
///
/// Up to `--pipeline-depth` steps run at once ([`Pipeline`]), the next claimed while the previous
/// one publishes when that one's claim came back full. Whatever pauses or stops the loop (an idle
/// outbox, the sink down, a database error, shutdown) lets the steps in flight finish first;
/// while the sink's circuit is open, one probe runs at a time.
pub async fn daemon(
    relay: &Relay,
    settings: &DaemonSettings,
    shutdown: &CancellationToken,
) -> Result<Report, StepError> {
    let mut flavour = DaemonRun {
        settings,
        listener: None,
        circuit: None,
        last_beat: tokio::time::Instant::now(),
        since_beat: Report::default(),
        // A step ends by its lease (no publish outlives it; a broken settle is retried within
        // it), plus the shutdown grace; Health's margin covers the statements around it.
        step_bound: relay.cfg.lease + relay.cfg.shutdown_grace,
    };
    let ended = run(relay, &mut flavour, shutdown).await;
    match ended.error {
        Some(e) => Err(e),
        None => Ok(ended.total),
    }
}

/// What the loop keeps whichever its configuration.
struct Turn {
    total: Report,
    backoff: ErrorBackoff,
    /// False once a claim came back short: nothing more is ready (`once` ends, the daemon waits
    /// for work).
    more: bool,
    /// A claim came back short beside other steps in flight: claim once more after them.
    recheck: bool,
    /// Whether the latest short claim took nothing.
    claimed_none: bool,
    /// Start no more steps; the run ends, so, once those in flight have.
    end: Option<Result<(), StepError>>,
    /// The sink is down or the database failed: wait this long once the steps in flight ended.
    pause: Option<Duration>,
}

impl Turn {
    fn pause_at_least(&mut self, wait: Duration) {
        self.pause = Some(self.pause.map_or(wait, |p| p.max(wait)));
    }

    /// Takes in a claim's notice (also the one that comes with its step's end: a step that
    /// claimed nothing may end in the same poll as its claim; a full one told nothing new there).
    /// A short claim means nothing more is ready, unless it was started beside other steps: they
    /// may have held rows it had to skip (an ordered key's head, claimed by the step before), so
    /// `recheck` asks for one more claim after them.
    fn note_claim(&mut self, next: &Next) {
        let (step, n) = match next {
            Next::Claimed(step, n) | Next::Done(step, Some(n), _) => (step, n),
            Next::Done(_, None, _) => return,
        };
        if matches!(next, Next::Claimed(..)) || !n.full {
            self.claimed_none = n.rows == 0;
        }
        if !n.full {
            self.more = false;
            if step.beside {
                self.recheck = true;
            }
        }
    }
}

/// How a run ended.
struct Ended {
    total: Report,
    /// Nothing more was ready (`once`): not a limit, shutdown or the sink.
    drained: bool,
    error: Option<StepError>,
}

/// Where `once` and the daemon differ.
trait Flavour {
    /// Before each turn of the loop.
    async fn upkeep(&mut self, _relay: &Relay) {}

    /// Whether the run ends once nothing is in flight, besides what [`Turn::end`] says.
    fn stopping(&self, _shutdown: &CancellationToken) -> bool {
        false
    }

    /// Waits out [`Turn::pause`].
    async fn pause(&mut self, wait: Duration, shutdown: &CancellationToken);

    /// Nothing more is ready and nothing is in flight: waits for work and returns true, or
    /// returns false to end the run, drained.
    async fn wait_for_work(
        &mut self,
        relay: &Relay,
        turn: &Turn,
        shutdown: &CancellationToken,
    ) -> bool;

    /// Before steps are started (the daemon LISTENs).
    async fn before_claims(&mut self, _relay: &Relay) {}

    /// Steps in flight at most.
    fn room(&self, depth: usize) -> usize {
        depth
    }

    /// The limit of the next step and whether it is a probe, or `None` to start none now.
    /// Not asked once shutdown has begun: then no step starts.
    fn next_step(
        &mut self,
        relay: &Relay,
        turn: &mut Turn,
        pipe: &Pipeline<'_>,
    ) -> Option<(u32, bool)>;

    /// After a step's report was emitted and counted.
    fn step_done(&mut self, relay: &Relay, turn: &mut Turn, step: Started, r: &Report);

    /// A step failed.
    fn step_failed(&mut self, turn: &mut Turn, e: StepError);
}

/// Up to `--pipeline-depth` steps in flight ([`Pipeline`]); whatever pauses or ends the run lets
/// the steps in flight finish first.
async fn run(relay: &Relay, flavour: &mut impl Flavour, shutdown: &CancellationToken) -> Ended {
    let depth = depth(relay);
    let mut pipe = Pipeline::new(relay, shutdown);
    let mut turn = Turn {
        total: Report::default(),
        backoff: ErrorBackoff::default(),
        more: true,
        recheck: false,
        claimed_none: false,
        end: None,
        pause: None,
    };
    let ended = |turn: Turn, drained: bool, end: Result<(), StepError>| Ended {
        total: turn.total,
        drained,
        error: end.err(),
    };
    loop {
        if pipe.is_empty() {
            if flavour.stopping(shutdown) {
                turn.end.get_or_insert(Ok(()));
            }
            if let Some(end) = turn.end.take() {
                return ended(turn, false, end);
            }
        }
        flavour.upkeep(relay).await;
        if pipe.is_empty() {
            if let Some(wait) = turn.pause.take() {
                flavour.pause(wait, shutdown).await;
                turn.more = true;
                continue;
            }
            if !turn.more && !std::mem::take(&mut turn.recheck) {
                if !flavour.wait_for_work(relay, &turn, shutdown).await {
                    return ended(turn, true, Ok(()));
                }
                turn.more = true;
                continue;
            }
            turn.more = true;
        }
        flavour.before_claims(relay).await;
        let room = flavour.room(depth);
        while turn.end.is_none()
            && turn.pause.is_none()
            && turn.more
            && pipe.len() < room
            && pipe.may_start_another()
        {
            // After shutdown, the run ends once the steps in flight are done.
            if shutdown.is_cancelled() {
                turn.end = Some(Ok(()));
                break;
            }
            let Some((limit, probe)) = flavour.next_step(relay, &mut turn, &pipe) else {
                break;
            };
            pipe.start(limit, probe);
        }
        let Some(next) = pipe.next().await else {
            continue;
        };
        turn.note_claim(&next);
        match next {
            Next::Claimed(..) => {}
            Next::Done(step, _, Ok(r)) => {
                turn.backoff.reset();
                emit_all(&r);
                step_done(&r, step.at);
                turn.total.add(&r);
                flavour.step_done(relay, &mut turn, step, &r);
                // Rows given back unpublished (a slow sink ran out of lease time) are ready
                // again at once.
                if r.released > 0 {
                    turn.more = true;
                }
            }
            Next::Done(_, _, Err(e)) => flavour.step_failed(&mut turn, e),
        }
    }
}

/// `--once`: ends drained, at a limit, at shutdown, when the sink is down, on a permanent error,
/// or when the database keeps failing for `reconnect_for`.
struct OnceRun {
    limits: OnceLimits,
    started: Instant,
    /// Since when the database has been failing, and how.
    failing: Option<(Instant, StepError)>,
}

impl Flavour for OnceRun {
    async fn pause(&mut self, wait: Duration, shutdown: &CancellationToken) {
        sleep_or_shutdown(wait, shutdown).await;
    }

    async fn wait_for_work(&mut self, _: &Relay, _: &Turn, _: &CancellationToken) -> bool {
        false
    }

    fn next_step(
        &mut self,
        relay: &Relay,
        turn: &mut Turn,
        pipe: &Pipeline<'_>,
    ) -> Option<(u32, bool)> {
        if self
            .limits
            .max_duration
            .is_some_and(|d| self.started.elapsed() >= d)
        {
            turn.end = Some(self.failing.take().map_or(Ok(()), |(_, e)| Err(e)));
            return None;
        }
        // Split what is left of the budget between the steps in flight: never claim past it.
        let remaining = self
            .limits
            .max_events
            .map(|m| m.saturating_sub(turn.total.claimed + pipe.reserved()));
        if remaining == Some(0) {
            if pipe.is_empty() {
                turn.end = Some(Ok(()));
            }
            return None;
        }
        let limit = remaining.map_or(relay.cfg.batch_size, |r| {
            r.min(u64::from(relay.cfg.batch_size)) as u32
        });
        Some((limit, false))
    }

    fn step_done(&mut self, _: &Relay, turn: &mut Turn, _: Started, r: &Report) {
        self.failing = None;
        if r.sink_down.is_some() {
            // The sink could not take the batch (outage, closed or stalled consumer): the rows
            // were given back untouched; a cron run stops here rather than spin.
            turn.end.get_or_insert(Ok(()));
        }
    }

    fn step_failed(&mut self, turn: &mut Turn, e: StepError) {
        if !e.is_transient() {
            if !matches!(turn.end, Some(Err(_))) {
                turn.end = Some(Err(e));
            }
            return;
        }
        let since = self.failing.as_ref().map_or_else(Instant::now, |(t, _)| *t);
        let left = self.limits.reconnect_for.saturating_sub(since.elapsed());
        if left.is_zero() {
            RelayEvent::GaveUp {
                error: e.to_string(),
                after: since.elapsed(),
            }
            .emit();
            turn.end = Some(Err(e));
            return;
        }
        let wait = turn.backoff.next().min(left);
        step_failed(&e, wait);
        self.failing = Some((since, e));
        turn.pause_at_least(wait);
    }
}

/// The daemon: runs until shutdown (or the sink's reader is gone), waits for work, keeps a
/// LISTEN connection, logs a heartbeat, updates what `/livez` and `/readyz` read, and probes an
/// unavailable sink through its circuit.
struct DaemonRun<'a> {
    settings: &'a DaemonSettings,
    listener: Option<PgListener>,
    circuit: Option<Circuit>,
    last_beat: tokio::time::Instant,
    since_beat: Report,
    step_bound: Duration,
}

impl DaemonRun<'_> {
    fn next_beat(&self) -> tokio::time::Instant {
        self.last_beat + self.settings.heartbeat
    }
}

impl Flavour for DaemonRun<'_> {
    async fn upkeep(&mut self, relay: &Relay) {
        self.settings.health.expect_within(self.step_bound);
        if self.last_beat.elapsed() >= self.settings.heartbeat {
            heartbeat(relay, &self.since_beat, self.last_beat.elapsed()).await;
            self.last_beat = tokio::time::Instant::now();
            self.since_beat = Report::default();
        }
    }

    fn stopping(&self, shutdown: &CancellationToken) -> bool {
        shutdown.is_cancelled()
    }

    async fn pause(&mut self, wait: Duration, shutdown: &CancellationToken) {
        let next_beat = self.next_beat();
        self.settings.health.expect_within(until(wait, next_beat));
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = tokio::time::sleep(wait) => {}
            _ = tokio::time::sleep_until(next_beat) => {}
        }
    }

    async fn wait_for_work(
        &mut self,
        relay: &Relay,
        turn: &Turn,
        shutdown: &CancellationToken,
    ) -> bool {
        let next_beat = self.next_beat();
        idle(
            relay,
            self.settings,
            &mut self.listener,
            turn.claimed_none,
            next_beat,
            shutdown,
        )
        .await;
        true
    }

    /// LISTEN before looking for work, so an insert committed after the claim still wakes us.
    /// Not through a transaction-pooling proxy: its server connection (and the LISTEN on it) goes
    /// to another client after each transaction; the poll interval stands in.
    async fn before_claims(&mut self, relay: &Relay) {
        if self.listener.is_none() && !relay.db.is_pinned() {
            self.listener = listen(relay, &self.settings.channel).await;
        }
    }

    /// While the sink's circuit is open, one probe runs at a time.
    fn room(&self, depth: usize) -> usize {
        if self.circuit.is_some() {
            1
        } else {
            depth
        }
    }

    fn next_step(&mut self, relay: &Relay, _: &mut Turn, _: &Pipeline<'_>) -> Option<(u32, bool)> {
        let limit = self
            .circuit
            .as_ref()
            .map_or(relay.cfg.batch_size, |c| c.probe_size(relay.cfg.batch_size));
        Some((limit, self.circuit.is_some()))
    }

    fn step_done(&mut self, relay: &Relay, turn: &mut Turn, step: Started, r: &Report) {
        self.since_beat.add(r);
        let health = &self.settings.health;
        match &r.sink_down {
            Some(SinkError::Closed(e)) => {
                tracing::info!(error = %e, "the sink's reader is gone; stopping");
                turn.end = Some(Ok(()));
            }
            Some(SinkError::Stalled(e)) => {
                tracing::error!(error = %e, "the sink stalled; stopping");
                turn.end = Some(Ok(()));
            }
            // A batch claimed before the circuit opened: the outage is known already.
            Some(_) if self.circuit.is_some() && !step.probe => {}
            Some(e) => {
                let wait = Circuit::failed(&mut self.circuit, e, r.unavailable, relay.cfg.backoff);
                health.set_circuit_open(true);
                turn.pause_at_least(wait);
            }
            // Only a probe closes the circuit: a batch claimed before it opened says nothing
            // about the sink now.
            None if r.claimed > 0 && step.probe => {
                if let Some(c) = self.circuit.take() {
                    c.close();
                    health.set_circuit_open(false);
                }
            }
            None => {}
        }
    }

    fn step_failed(&mut self, turn: &mut Turn, e: StepError) {
        // The log switch is not where this relay's mode needs it: waiting would not help.
        if super::log::SwitchError::of(e.db()).is_some() {
            turn.end.get_or_insert(Err(e));
            return;
        }
        let wait = turn.backoff.next();
        step_failed(&e, wait);
        if e.db().as_database_error().is_none() {
            self.listener = None; // the connection may be gone; LISTEN again when back
        }
        turn.pause_at_least(wait);
    }
}

/// Waits for work after a short claim: a NOTIFY, the next delayed event's due time, the poll
/// tick or the heartbeat, whichever comes first (or shutdown).
async fn idle(
    relay: &Relay,
    settings: &DaemonSettings,
    listener: &mut Option<PgListener>,
    claimed_none: bool,
    next_beat: tokio::time::Instant,
    shutdown: &CancellationToken,
) {
    let due = relay
        .db
        .run(async |c| match relay.cfg.mode {
            super::Mode::Log => crate::db::log::next_due_in(c).await,
            _ => crate::db::relay::next_due_in(c).await,
        })
        .await
        .ok()
        .flatten();
    let mut wait = wait_time(due, claimed_none, settings.poll_interval);
    if claimed_none && relay.ordering.is_active() {
        // Rows of ordered keys behind a leased, backing-off or blocked head are due but not
        // claimable: look again every ORDERED_RETRY rather than spin.
        wait = wait.max(ORDERED_RETRY.min(settings.poll_interval));
    }
    settings.health.expect_within(until(wait, next_beat));
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = tokio::time::sleep(wait) => {}
        _ = tokio::time::sleep_until(next_beat) => {}
        n = recv(listener) => {
            if !n {
                *listener = None;
            }
            if let Some(l) = listener.as_mut() {
                // Many inserts may have notified while we worked: one wake-up is enough.
                while l.next_buffered().is_some() {}
            }
        }
    }
}

/// How long a wait of `wait` that also ends at `next_beat` lasts at most.
fn until(wait: Duration, next_beat: tokio::time::Instant) -> Duration {
    wait.min(next_beat.saturating_duration_since(tokio::time::Instant::now()))
}

/// The circuit around an unavailable sink. While it is open the daemon claims no batches: it
/// probes with the oldest ready event, backing off from `--backoff-base` to `--backoff-max` (or
/// the sink's Retry-After), and gives every probe back untouched while the outage lasts. It
/// closes on the first probe the sink takes or judges as a per-event failure.
///
/// A "poison probe" (an event for which the server itself answers 502 every time) would look like
/// an outage forever and hold up everything behind it. So every [`PROBE_WIDEN_EVERY`] failed
/// probes the probe doubles (up to [`PROBE_MAX`] and the batch size): once another event of the
/// probe gets through, the batch is not an outage, and the poison event is charged an attempt
/// like any per-event failure, backs off, and is dead-lettered after `--max-attempts`.
struct Circuit {
    since: Instant,
    probes: u32,
    last_warn: Instant,
}

const OUTAGE_WARN_EVERY: Duration = Duration::from_secs(60);
const PROBE_WIDEN_EVERY: u32 = 3;
const PROBE_MAX: u32 = 16;

impl Circuit {
    /// Records an outage batch (opening the circuit, with a WARN, if it was closed) and returns
    /// how long to wait before the next probe. `events`: how many the batch gave back.
    fn failed(
        circuit: &mut Option<Circuit>,
        e: &SinkError,
        events: u64,
        backoff: Backoff,
    ) -> Duration {
        let retry_after = match e {
            SinkError::Unavailable { retry_after, .. } => *retry_after,
            _ => None,
        };
        let c = match circuit {
            Some(c) => {
                c.probes += 1;
                if c.last_warn.elapsed() >= OUTAGE_WARN_EVERY {
                    tracing::warn!(
                        error = %e,
                        down_for = %crate::output::human_duration(c.since.elapsed()),
                        probes = c.probes,
                        "sink still unavailable"
                    );
                    c.last_warn = Instant::now();
                }
                c
            }
            None => {
                RelayEvent::CircuitOpened {
                    error: e.to_string(),
                    events,
                }
                .emit();
                circuit.insert(Circuit {
                    since: Instant::now(),
                    probes: 0,
                    last_warn: Instant::now(),
                })
            }
        };
        let wait = retry_after.unwrap_or_else(|| backoff.delay(c.probes + 1));
        if c.probes > 0 {
            tracing::debug!(error = %e, probes = c.probes, next_in = ?wait, "probe failed; sink still unavailable");
        }
        wait
    }

    /// How many events the next probe claims.
    fn probe_size(&self, batch: u32) -> u32 {
        let doublings = (self.probes / PROBE_WIDEN_EVERY).min(8);
        (1u32 << doublings).min(PROBE_MAX).min(batch).max(1)
    }

    fn close(self) {
        RelayEvent::CircuitClosed {
            after: self.since.elapsed(),
            probes: self.probes,
        }
        .emit();
    }
}

/// Logs the heartbeat: the outbox's backlog (one query) and what the relay did since the last.
async fn heartbeat(relay: &Relay, since: &Report, interval: Duration) {
    let figures = relay
        .db
        .run(async |c| match relay.cfg.mode {
            super::Mode::Log => crate::db::log::backlog(c).await,
            _ => crate::db::relay::backlog(c).await,
        })
        .await;
    RelayEvent::Heartbeat(Heartbeat {
        figures: figures.map_err(|e| e.to_string()),
        interval,
        published: since.published,
        retried: since.retried,
        dead_lettered: since.dead_lettered,
        lease_lost: since.lease_lost,
    })
    .emit();
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
    let mut l = match PgListener::connect_with(relay.db.pool()).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "cannot open the LISTEN connection; polling until it works");
            return None;
        }
    };
    l.ignore_pool_close_event(true);
    match l.listen(channel).await {
        Ok(()) => Some(l),
        // A standby refuses LISTEN: its claims say so (once, RelayEvent::ReadOnly).
        Err(e) if crate::db::is_read_only(&e) => {
            tracing::debug!(error = %e, "LISTEN refused by a read-only database; polling");
            None
        }
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
    fn probes_start_with_one_event_and_widen_for_a_poison_probe() {
        let c = |probes| Circuit {
            since: Instant::now(),
            probes,
            last_warn: Instant::now(),
        };
        let sizes: Vec<u32> = (0..16).map(|p| c(p).probe_size(500)).collect();
        assert_eq!(sizes, [1, 1, 1, 2, 2, 2, 4, 4, 4, 8, 8, 8, 16, 16, 16, 16]);
        assert_eq!(c(100).probe_size(500), PROBE_MAX);
        assert_eq!(c(100).probe_size(3), 3, "never more than a batch");
        assert_eq!(c(0).probe_size(0), 1);
    }

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
