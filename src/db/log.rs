//! Log mode's statements (migration 14): the switch, the reader's lease and position, a page of
//! the log between two snapshots, the retry set, and the settle that moves the position.
//!
//! A batch is PgQ's: the events whose transaction is visible in the newer snapshot (`hi`) and
//! not in the older one (`lo`, the position). They are read in (xid, id) order from two ranges
//! of `outbox_xid_idx`: the transactions that were running at `lo` (its xip list, by exact id)
//! and those that began between `lo`'s xmax and `hi`'s. A transaction still running at `hi` is
//! not visible in it: its events come in a later batch, after it commits, and it holds nothing
//! up meanwhile. A batch larger than a page is read page by page (`window_to`, `after_xid`,
//! `after_id`): one row write per page, none per event.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::audit::Audit;
use super::ordering::Ordering;
use super::relay::{jsonb_size, ClaimedRow, Failure};

/// The index the reader's pages walk, built by `log enable`.
pub const XID_INDEX: &str = "outbox_xid_idx";

/// Session-level advisory lock class of the switch (per schema), held by `enable` and
/// `disable` across their row change and index DDL.
const SWITCH_LOCK_CLASS: i32 = 0x6f62_780e; // "obx" + 14

/// Whether the schema has migration 14 (the table is missing before it).
pub async fn migrated(conn: &mut PgConnection) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT to_regclass('outbox_log') IS NOT NULL")
        .persistent(true)
        .fetch_one(conn)
        .await
}

/// Whether log mode is switched on (false before migration 14).
pub async fn is_on(conn: &mut PgConnection) -> sqlx::Result<bool> {
    if !migrated(conn).await? {
        return Ok(false);
    }
    sqlx::query_scalar("SELECT EXISTS (SELECT FROM outbox_log)")
        .persistent(true)
        .fetch_one(conn)
        .await
}

/// Tries to take the switch's lock ([`super::try_lock_switch`]).
pub async fn try_lock_switch(conn: &mut PgConnection) -> sqlx::Result<bool> {
    super::try_lock_switch(conn, SWITCH_LOCK_CLASS).await
}

pub async fn unlock_switch(conn: &mut PgConnection) -> sqlx::Result<()> {
    super::unlock_switch(conn, SWITCH_LOCK_CLASS).await
}

/// Whether the xid index exists, and if so whether it is usable ([`super::index_state`]).
pub async fn xid_index(conn: &mut PgConnection) -> sqlx::Result<Option<bool>> {
    super::index_state(conn, XID_INDEX).await
}

/// Builds the xid index without blocking producers (`CONCURRENTLY`: it waits for the
/// transactions already writing the outbox). Rows written before migration 14 have no xid and
/// are left out.
pub async fn create_xid_index(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::raw_sql(
        "CREATE INDEX CONCURRENTLY outbox_xid_idx ON outbox (xid, id) WHERE xid IS NOT NULL",
    )
    .execute(conn)
    .await
    .map(drop)
}

pub async fn drop_xid_index(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::raw_sql("DROP INDEX CONCURRENTLY IF EXISTS outbox_xid_idx")
        .execute(conn)
        .await
        .map(drop)
}

/// Switches log mode on (the row, with an audit row): `false` when it already was. From this
/// commit on, no queue-mode claim takes a row ([`NOT_LOG`]). The position is set apart, by
/// [`seal`], once this has committed.
pub async fn switch_on(conn: &mut PgConnection, audit: &Audit) -> sqlx::Result<bool> {
    let n: i64 = sqlx::query_scalar(
        "WITH on_ AS (
           INSERT INTO outbox_log (enabled_by) VALUES ($1)
           ON CONFLICT (singleton) DO NOTHING
           RETURNING 1
         ), a AS (
           INSERT INTO outbox_audit (action, actor, reason, details)
           SELECT 'log', $1, $2, jsonb_build_object('enabled', true) FROM on_
         )
         SELECT count(*) FROM on_",
    )
    .bind(&audit.actor)
    .bind(audit.reason.as_deref())
    .fetch_one(conn)
    .await?;
    Ok(n > 0)
}

/// Takes the switch's snapshot and the log's first position, once, after the switch committed:
/// every queue-mode claim whose statement could still take a row began before that commit, so
/// what it can see is visible in this later snapshot, and belongs to queue mode's part (handed
/// over to the retry set by the first reader). The largest id is read in the same statement, so
/// in the same snapshot.
pub async fn seal(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE outbox_log
            SET switched = s.snap, position = s.snap, switched_id = coalesce(s.max_id, 0)
           FROM (SELECT pg_current_snapshot() AS snap, (SELECT max(id) FROM outbox) AS max_id) s
          WHERE switched IS NULL",
    )
    .execute(conn)
    .await
    .map(drop)
}

/// Condition that keeps a queue-mode claim off the outbox while log mode is on (an uncorrelated
/// subquery: one probe of a one-row table per claim, evaluated once).
pub const NOT_LOG: &str = "NOT EXISTS (SELECT FROM outbox_log) AND ";

/// Whether an event `o` has been passed by the log whose row is `l` (or the row named): written
/// after the switch, and visible in the position, or in the window being read up to its last
/// passed event. The one declaration of the fact: every statement that asks uses it, directly
/// (`prune`'s too) or through [`PENDING`] and [`PUBLISHED`].
macro_rules! passed {
    () => {
        passed!("l")
    };
    ($l:literal) => {
        concat!(
            "(o.xid IS NOT NULL AND NOT pg_visible_in_snapshot(o.xid, ",
            $l,
            ".switched)
   AND (pg_visible_in_snapshot(o.xid, ",
            $l,
            ".position)
        OR (",
            $l,
            ".window_to IS NOT NULL AND pg_visible_in_snapshot(o.xid, ",
            $l,
            ".window_to)
            AND (o.xid, o.id) <= (",
            $l,
            ".after_xid, ",
            $l,
            ".after_id))))"
        )
    };
}

pub(crate) use passed;

const PASSED: &str = passed!();

/// Whether a row `o` of `outbox` is still to be published while log mode is on: not passed by
/// the log, or passed and waiting in the retry set. For the figures of `stats` and the like.
pub const PENDING: &str = concat!(
    "(NOT EXISTS (SELECT FROM outbox_log l WHERE ",
    passed!(),
    ") OR EXISTS (SELECT FROM outbox_log_retry r WHERE r.id = o.id))"
);

/// Whether a row `o` carrying no mark (neither `published_at` nor `dead_lettered_at`) has been
/// published by the log: passed and not waiting in the retry set ([`PENDING`]'s complement;
/// never while log mode is off). It has no publication time. For the state `events` shows and
/// the changes that refuse a published event.
pub static PUBLISHED: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("(NOT {PENDING})"));

/// When a row `o` is due while log mode is on: its retry-set entry's time when it has one (the
/// reader sends it by that, `read_retries`), else its own `available_at` (the log reads it, and a
/// delayed one joins the retry set at that time).
pub const DUE_AT: &str =
    "coalesce((SELECT r.available_at FROM outbox_log_retry r WHERE r.id = o.id), \
     o.available_at)";

/// Whether a row `o` is written after the switch's position and not yet passed by the log `l`,
/// nor marked: what the log is behind by (`log status`, `doctor`). Read through the xid index.
const BEHIND: &str = concat!(
    "o.xid >= pg_snapshot_xmin(l.position) AND NOT ",
    passed!(),
    " AND o.published_at IS NULL AND o.dead_lettered_at IS NULL"
);

/// What `doctor` judges of log mode: the reader's lease and how far behind the log is.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Health {
    /// The relay holding the reader's lease (also after the lease ended), and until when.
    pub holder: Option<Uuid>,
    pub lease_until: Option<DateTime<Utc>>,
    /// Whether a reader holds the lease now (a holder, and `lease_until` not past).
    pub lease_live: bool,
    /// Pages settled since the switch, and when the last one was.
    pub batches: i64,
    pub read_at: Option<DateTime<Utc>>,
    /// Events the log has not passed yet (at most 1,000,000, as [`status`] counts them).
    pub behind: i64,
    /// The oldest `created_at` among them.
    pub oldest_behind_created_at: Option<DateTime<Utc>>,
}

/// [`Health`]; `None` while log mode is off (or before the first position is set). One bounded
/// read of the xid index from the position's xmin on.
pub async fn health(conn: &mut PgConnection) -> sqlx::Result<Option<Health>> {
    if !is_on(conn).await? {
        return Ok(None);
    }
    sqlx::query_as(&format!(
        "SELECT l.holder, l.lease_until,
                coalesce(l.holder IS NOT NULL AND l.lease_until >= now(), false) AS lease_live,
                l.batches, l.read_at, b.behind, b.oldest_behind_created_at
           FROM outbox_log l,
                LATERAL (SELECT count(*) AS behind, min(created_at) AS oldest_behind_created_at
                           FROM (SELECT o.created_at FROM outbox o WHERE {BEHIND}
                                  LIMIT 1000000) x) b
          WHERE l.position IS NOT NULL"
    ))
    .fetch_optional(conn)
    .await
}

/// How far the log had read at one moment: its position and, inside a window, the window and the
/// last event passed (what [`passed_since`] counts from).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Mark {
    pub position: String,
    pub window_to: Option<String>,
    pub after_xid: Option<String>,
    pub after_id: Option<i64>,
}

/// The log's [`Mark`] now; `None` while log mode is off (or before its first position).
pub async fn mark(conn: &mut PgConnection) -> sqlx::Result<Option<Mark>> {
    if !is_on(conn).await? {
        return Ok(None);
    }
    sqlx::query_as(
        "SELECT position::text AS position, window_to::text AS window_to,
                after_xid::text AS after_xid, after_id
           FROM outbox_log WHERE position IS NOT NULL",
    )
    .fetch_optional(conn)
    .await
}

/// Events the log has published since `before`: passed now and not then, and not waiting in the
/// retry set (those sent from it are marked `published_at` and counted by that). Read through the
/// xid index from `before`'s xmin on: as many entries as were passed since.
pub async fn passed_since(conn: &mut PgConnection, before: &Mark) -> sqlx::Result<i64> {
    sqlx::query_scalar(concat!(
        "SELECT count(*)
           FROM outbox_log l,
                (SELECT l2.switched, $1::pg_snapshot AS position, $2::pg_snapshot AS window_to,
                        $3::xid8 AS after_xid, $4::bigint AS after_id FROM outbox_log l2) b,
                outbox o
          WHERE o.xid >= pg_snapshot_xmin($1::pg_snapshot) AND ",
        passed!("l"),
        " AND NOT ",
        passed!("b"),
        " AND NOT EXISTS (SELECT FROM outbox_log_retry r WHERE r.id = o.id)"
    ))
    .bind(&before.position)
    .bind(&before.window_to)
    .bind(&before.after_xid)
    .bind(before.after_id)
    .fetch_one(conn)
    .await
}

/// Switches log mode off, handing the outbox back to queue mode exactly at the position: the
/// events the log passed and published are marked published (one UPDATE over them: a per-row
/// write, once), those waiting in the retry set are pending again at their due time, those not
/// yet read are pending as they are. Waits for a reader's settle in progress (the row lock);
/// a reader that settles after this finds no row and changes nothing. `None` when it was off.
pub async fn switch_off(conn: &mut PgConnection, audit: &Audit) -> sqlx::Result<Option<u64>> {
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let on: Option<bool> =
        sqlx::query_scalar("SELECT position IS NOT NULL FROM outbox_log FOR UPDATE")
            .fetch_optional(&mut *tx)
            .await?;
    let Some(sealed) = on else {
        return Ok(None);
    };
    let marked = if sealed {
        sqlx::query(&format!(
            "UPDATE outbox o SET published_at = now()
               FROM outbox_log l
              WHERE o.published_at IS NULL AND o.dead_lettered_at IS NULL AND {PASSED}
                AND NOT EXISTS (SELECT FROM outbox_log_retry r WHERE r.id = o.id)"
        ))
        .execute(&mut *tx)
        .await?
        .rows_affected()
    } else {
        0
    };
    sqlx::query(
        "UPDATE outbox o SET available_at = r.available_at
           FROM outbox_log_retry r
          WHERE o.id = r.id AND o.published_at IS NULL AND o.dead_lettered_at IS NULL",
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM outbox_log_retry")
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "WITH d AS (DELETE FROM outbox_log RETURNING 1)
         INSERT INTO outbox_audit (action, actor, reason, details)
         SELECT 'log', $1, $2, jsonb_build_object('enabled', false, 'marked_published', $3::bigint)
           FROM d",
    )
    .bind(&audit.actor)
    .bind(audit.reason.as_deref())
    .bind(i64::try_from(marked).unwrap_or(i64::MAX))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(marked))
}

/// `log status`: the switch, the position and the reader (all empty while it is off).
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema, sqlx::FromRow)]
pub struct Status {
    /// Whether log mode is on.
    pub enabled: bool,
    pub enabled_at: Option<DateTime<Utc>>,
    pub enabled_by: Option<String>,
    /// The snapshot the log has been read up to (`xmin:xmax:xip,…`).
    pub position: Option<String>,
    /// The batch being read, page by page, when one is.
    pub window_to: Option<String>,
    /// The relay holding the reader's lease, and until when.
    pub holder: Option<Uuid>,
    pub lease_until: Option<DateTime<Utc>>,
    /// Raised each time another relay takes the lease over.
    pub fence: i64,
    /// Pages settled since the switch.
    pub batches: i64,
    pub read_at: Option<DateTime<Utc>>,
    /// Whether what queue mode left at the switch has been moved to the retry set.
    pub handed_over: bool,
    /// Events the log passed that wait for a retry, a due time, or a hand-over.
    pub retrying: i64,
    /// Of those, due now.
    pub retrying_due: i64,
    /// Events written after the switch and not yet passed by the log (an estimate only when the
    /// log is far behind: counted through the xid index, at most 1,000,000).
    pub behind: i64,
}

pub async fn status(conn: &mut PgConnection) -> sqlx::Result<Status> {
    if !is_on(conn).await? {
        return Ok(Status::default());
    }
    sqlx::query_as(&format!(
        "SELECT true AS enabled, l.enabled_at, l.enabled_by, l.position::text AS position,
                l.window_to::text AS window_to, l.holder,
                CASE WHEN l.lease_until > now() THEN l.lease_until END AS lease_until,
                l.fence, l.batches, l.read_at, l.handed_over,
                (SELECT count(*) FROM outbox_log_retry) AS retrying,
                (SELECT count(*) FROM outbox_log_retry WHERE available_at <= now()) AS retrying_due,
                CASE WHEN l.position IS NULL THEN 0 ELSE
                  (SELECT count(*) FROM (SELECT 1 FROM outbox o WHERE {BEHIND}
                    LIMIT 1000000) b) END AS behind
           FROM outbox_log l"
    ))
    .fetch_one(conn)
    .await
}

/// The reader's view of the log row, as its lease returned it.
#[derive(Debug, Clone)]
pub struct Reader {
    pub fence: i64,
    pub position: String,
    pub window_to: Option<String>,
    pub after: Option<(String, i64)>,
    pub handed_over: bool,
}

/// What taking the reader's lease found.
#[derive(Debug, Clone)]
pub enum Take {
    /// Log mode is off.
    Off,
    /// Switched on, its position not yet taken ([`seal`]).
    Unsealed,
    /// Another relay holds the lease.
    Standby { holder: Uuid },
    /// Ours, until now() + the lease.
    Held(Reader),
}

/// Takes (or renews) the reader's lease for `me`: free, lapsed or already ours. A relay that
/// takes it from another raises the fence, so the other's later settles change nothing.
///
/// A lease of ours with more than half of it left (every settle renews it) is only read, so a
/// page costs one write and one commit, its settle's: a row version and a WAL flush less per page
/// (the drain to the null sink did not change measurably: old and new binary alternating,
/// `bench/results/2026-12-07-1630-log-mode-ab-old-new.log`).
pub async fn take(conn: &mut PgConnection, me: Uuid, lease: Duration) -> sqlx::Result<Take> {
    let micros = i64::try_from(lease.as_micros()).unwrap_or(i64::MAX);
    let row = sqlx::query(
        "WITH renewed AS (
           UPDATE outbox_log
              SET fence = fence + (holder IS DISTINCT FROM $1)::int, holder = $1,
                  lease_until = now() + $2 * interval '1 microsecond'
            WHERE position IS NOT NULL
              AND (holder = $1 OR holder IS NULL OR lease_until < now())
              AND (holder IS DISTINCT FROM $1 OR lease_until IS NULL
                   OR lease_until <= now() + ($2 / 2) * interval '1 microsecond')
            RETURNING fence, position, window_to, after_xid, after_id, handed_over
         ), fresh AS (
           SELECT fence, position, window_to, after_xid, after_id, handed_over FROM outbox_log
            WHERE position IS NOT NULL
              AND holder = $1 AND lease_until > now() + ($2 / 2) * interval '1 microsecond'
              AND NOT EXISTS (SELECT FROM renewed)
         )
         SELECT fence, position::text AS position, window_to::text AS window_to,
                after_xid::text AS after_xid, after_id, handed_over
           FROM (SELECT * FROM renewed UNION ALL SELECT * FROM fresh) t",
    )
    .bind(me)
    .bind(micros)
    .persistent(true)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(row) = row {
        let after_xid: Option<String> = row.try_get("after_xid")?;
        let after_id: Option<i64> = row.try_get("after_id")?;
        return Ok(Take::Held(Reader {
            fence: row.try_get("fence")?,
            position: row.try_get("position")?,
            window_to: row.try_get("window_to")?,
            after: after_xid.zip(after_id),
            handed_over: row.try_get("handed_over")?,
        }));
    }
    let row = sqlx::query("SELECT position IS NULL AS unsealed, holder FROM outbox_log")
        .fetch_optional(conn)
        .await?;
    Ok(match row {
        None => Take::Off,
        Some(r) if r.try_get::<bool, _>("unsealed")? => Take::Unsealed,
        Some(r) => Take::Standby {
            holder: r.try_get::<Option<Uuid>, _>("holder")?.unwrap_or_default(),
        },
    })
}

/// Gives the lease up (at shutdown), so a standby takes over at once.
pub async fn release(conn: &mut PgConnection, me: Uuid, fence: i64) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE outbox_log SET holder = NULL, lease_until = NULL WHERE holder = $1 AND fence = $2",
    )
    .bind(me)
    .bind(fence)
    .execute(conn)
    .await
    .map(drop)
}

/// An event of a page, and what the reader needs besides.
#[derive(Debug)]
pub struct LogRow {
    pub event: ClaimedRow,
    /// Its transaction id, as text (the page's keyset).
    pub xid: String,
    /// Due now (`available_at <= now()`); a delayed event goes to the retry set.
    pub due: bool,
    /// Neither published nor dead-lettered (an event cancelled by hand is passed over).
    pub live: bool,
    pub available_at: DateTime<Utc>,
}

impl<'r> sqlx::FromRow<'r, PgRow> for LogRow {
    fn from_row(row: &'r PgRow) -> sqlx::Result<Self> {
        Ok(Self {
            event: ClaimedRow::from_row(row)?,
            xid: row.try_get(10)?,
            due: row.try_get(11)?,
            live: row.try_get(12)?,
            available_at: row.try_get(13)?,
        })
    }
}

/// The event columns of a page or a retry read, then the reader's three.
const EVENT_COLUMNS: &str = "o.id, o.tenant_id, o.aggregate_type, o.aggregate_id, o.event_type,
       o.payload::text AS payload, o.headers::text AS headers, o.idempotency_key,
       o.created_at, o.attempt_count + 1 AS attempt_count, o.xid::text AS xid,
       o.available_at <= now() AS due,
       (o.published_at IS NULL AND o.dead_lettered_at IS NULL) AS live, o.available_at";

/// One page of the log.
#[derive(Debug, Default)]
pub struct Page {
    pub rows: Vec<LogRow>,
    /// More of the window may follow: the page took `limit` rows, or the byte budget ended it.
    pub more: bool,
    /// The window's upper snapshot (`None`: a new batch that found nothing).
    pub hi: Option<String>,
    /// The page's last event (transaction id as text, id), where the next page starts; `None`
    /// for an empty page. An event deleted between the plan and the fetch is not in `rows` but
    /// may be this one.
    pub last: Option<(String, i64)>,
}

/// Where a page of the log ends, before its events are fetched ([`plan_page`]).
#[derive(Debug, Clone, Default)]
pub struct PagePlan {
    /// The window's upper snapshot (`None`: a new batch that found nothing).
    pub hi: Option<String>,
    /// The page's last event; `None` for an empty page.
    pub last: Option<(String, i64)>,
    /// More of the window may follow.
    pub more: bool,
}

/// The keyset of a page (`$1` the position, `$2` the window's `hi` CTE `s`, `$3`/`$4` the event
/// the page starts after): the window's events from the two ranges of the xid index, the
/// transactions running at the position (its xip list) and those begun since its xmax, both
/// visible in `hi`, in (xid, id) order. `{cols}` are the columns each branch reads, `{upto}` an
/// upper bound, `{limit}` a LIMIT.
fn page_branches(cols: &str, upto: &str, limit: &str) -> String {
    let branch = |range: &str| {
        format!(
            "(SELECT {cols} FROM outbox o
               WHERE {range}
                 AND (xid, id) > (coalesce($3::xid8, '0'::xid8), coalesce($4::bigint, {min})){upto}
                 AND pg_visible_in_snapshot(xid, (SELECT hi FROM s))
               ORDER BY xid, id{limit})",
            min = i64::MIN
        )
    };
    format!(
        "{} UNION ALL {}",
        branch("xid = ANY(ARRAY(SELECT pg_snapshot_xip($1::pg_snapshot)))"),
        branch(
            "xid >= pg_snapshot_xmax($1::pg_snapshot) AND xid < pg_snapshot_xmax((SELECT hi FROM s))"
        )
    )
}

/// The event a page of `r` starts after, when it reads on in the window `hi`.
fn page_after<'a>(r: &'a Reader, hi: Option<&str>) -> (Option<&'a str>, Option<i64>) {
    match &r.after {
        Some((x, i)) if hi.is_some() && r.window_to.as_deref() == hi => {
            (Some(x.as_str()), Some(*i))
        }
        _ => (None, None),
    }
}

/// Plans the next page of the batch from the reader's position to `hi` (the window being read;
/// `None`: a new batch, up to the current snapshot, taken by the same statement and returned in
/// [`PagePlan::hi`]): at most `limit` events, and, after the first, no more than `bytes` of
/// payload and headers. One row comes back: where the page ends, read from the index and the
/// rows' sizes without sending an event, so a step can plan the page after it while this one
/// is fetched ([`fetch_page`]).
pub async fn plan_page(
    conn: &mut PgConnection,
    r: &Reader,
    hi: Option<&str>,
    limit: i64,
    bytes: i64,
) -> sqlx::Result<PagePlan> {
    let size = format!("{} + {}", jsonb_size("payload"), jsonb_size("headers"));
    let sql = format!(
        "WITH s AS MATERIALIZED (SELECT coalesce($2::pg_snapshot, pg_current_snapshot()) AS hi),
              p AS MATERIALIZED (
                SELECT xid, id, row_number() OVER w AS n, sum(size) OVER w - size AS before
                  FROM ({}) u
                WINDOW w AS (ORDER BY xid, id ROWS UNBOUNDED PRECEDING)
                 ORDER BY xid, id LIMIT $5)
         SELECT (SELECT hi::text FROM s) AS hi, (SELECT count(*) FROM p) AS scanned,
                f.xid::text AS last_xid, f.id AS last_id, coalesce(f.n, 0) AS taken
           FROM (SELECT) one
           LEFT JOIN LATERAL (SELECT xid, id, n FROM p WHERE n = 1 OR before < $6
                               ORDER BY n DESC LIMIT 1) f ON true",
        page_branches(&format!("xid, id, {size} AS size"), "", " LIMIT $5"),
    );
    let (after_xid, after_id) = page_after(r, hi);
    let row = sqlx::query(&sql)
        .bind(&r.position)
        .bind(hi)
        .bind(after_xid)
        .bind(after_id)
        .bind(limit)
        .bind(bytes)
        .persistent(true)
        .fetch_one(conn)
        .await?;
    let scanned: i64 = row.try_get("scanned")?;
    let taken: i64 = row.try_get("taken")?;
    let last = match row.try_get::<Option<String>, _>("last_xid")? {
        Some(x) => Some((x, row.try_get::<i64, _>("last_id")?)),
        None => None,
    };
    Ok(PagePlan {
        hi: if scanned == 0 {
            hi.map(str::to_owned)
        } else {
            Some(row.try_get("hi")?)
        },
        more: scanned >= limit || taken < scanned,
        last,
    })
}

/// The events of a planned page: those of `r`'s window `plan.hi` after where the page starts
/// and up to `plan.last`, in (xid, id) order. An event changed since the plan comes as it is
/// now (an edit keeps its xid and id); one deleted since (cancelled) is not there.
pub async fn fetch_page(
    conn: &mut PgConnection,
    r: &Reader,
    from_hi: Option<&str>,
    plan: PagePlan,
) -> sqlx::Result<Page> {
    let (Some(hi), Some((last_xid, last_id))) = (&plan.hi, &plan.last) else {
        return Ok(Page {
            rows: Vec::new(),
            more: plan.more,
            hi: plan.hi,
            last: None,
        });
    };
    let sql = format!(
        "WITH s AS MATERIALIZED (SELECT $2::pg_snapshot AS hi)
         SELECT * FROM ({}) u ORDER BY sort_xid, id",
        page_branches(
            &format!("{EVENT_COLUMNS}, o.xid AS sort_xid"),
            " AND (xid, id) <= ($5::xid8, $6::bigint)",
            "",
        ),
    );
    let (after_xid, after_id) = page_after(r, from_hi);
    let rows = sqlx::query(&sql)
        .bind(&r.position)
        .bind(hi)
        .bind(after_xid)
        .bind(after_id)
        .bind(last_xid)
        .bind(last_id)
        .persistent(true)
        .fetch_all(conn)
        .await?
        .iter()
        .map(<LogRow as sqlx::FromRow<PgRow>>::from_row)
        .collect::<sqlx::Result<Vec<_>>>()?;
    Ok(Page {
        rows,
        more: plan.more,
        hi: plan.hi,
        last: plan.last,
    })
}

/// [`plan_page`], then [`fetch_page`], on one connection.
pub async fn read_page(
    conn: &mut PgConnection,
    r: &Reader,
    hi: Option<&str>,
    limit: i64,
    bytes: i64,
) -> sqlx::Result<Page> {
    let plan = plan_page(&mut *conn, r, hi, limit, bytes).await?;
    fetch_page(conn, r, hi, plan).await
}

/// Reads at most `limit` due events of the retry set (live ones; an entry whose event was
/// published, dead-lettered or deleted meanwhile is dropped on the way). With `ordered` (the
/// switch of ordered delivery, while a type is ordered), an entry of an ordered type is read only
/// when it is its key's head: no earlier entry of the key ([`NO_EARLIER_ENTRY`]) and the key not
/// blocked by a dead-lettered head. The key's later entries wait for it, due or not.
pub async fn read_retries(
    conn: &mut PgConnection,
    limit: i64,
    ordered: Option<&Ordering>,
) -> sqlx::Result<Vec<LogRow>> {
    let sql = read_retries_sql(ordered.is_some());
    let q = sqlx::query_as(&sql).bind(limit);
    let q = match ordered {
        None => q,
        Some(o) => q.bind(o.all).bind(&o.types),
    };
    q.persistent(true).fetch_all(conn).await
}

/// [`read_retries`]' statement: `$1` the limit; `ordered`: with `$2` every type ordered and `$3`
/// the ordered types (the plan is pinned by a test).
pub fn read_retries_sql(ordered: bool) -> String {
    let heads = match ordered {
        false => String::new(),
        true => format!(
            "\n                    AND (NOT {} OR ({NO_EARLIER_ENTRY} AND NOT {}))",
            super::ordering::type_ordered("r", "$2", "$3"),
            super::ordering::key_blocked("r"),
        ),
    };
    format!(
        "WITH stale AS (
           DELETE FROM outbox_log_retry r
            WHERE r.available_at <= now()
              AND NOT EXISTS (SELECT FROM outbox o WHERE o.id = r.id
                                 AND o.published_at IS NULL AND o.dead_lettered_at IS NULL)
         )
         SELECT {EVENT_COLUMNS}
           FROM (SELECT id, available_at FROM outbox_log_retry r
                  WHERE available_at <= now(){heads}
                  ORDER BY available_at, id LIMIT $1) r
           JOIN outbox o ON o.id = r.id
          WHERE o.published_at IS NULL AND o.dead_lettered_at IS NULL
            AND (o.locked_until IS NULL OR o.locked_until < now())
          ORDER BY r.available_at, r.id"
    )
}

/// Whether the retry-set entry `r` has no earlier entry of its key (in (xid, id) order, the order
/// the log reads) whose event is still to be sent. Probes `outbox_log_retry_key_idx` (migration
/// 15): a head has no earlier entry at all, a waiting entry meets its head first.
const NO_EARLIER_ENTRY: &str = "NOT EXISTS (
                          SELECT FROM outbox_log_retry e JOIN outbox p ON p.id = e.id
                           WHERE e.aggregate_type = r.aggregate_type AND e.tenant_id = r.tenant_id
                             AND e.aggregate_id = r.aggregate_id AND (e.xid, e.id) < (r.xid, r.id)
                             AND p.published_at IS NULL AND p.dead_lettered_at IS NULL)";

/// Which of `keys` (aggregate type, tenant, aggregate id) have their events wait: an event of
/// the key is in the retry set and still to be sent, or a dead-lettered head blocks the key.
/// A page's event of such a key (of an ordered type) is not published: it joins the retry set
/// behind them. Returns the indexes into `keys`, in one statement (a probe of
/// `outbox_log_retry_key_idx` and of `outbox_blocking_idx` per key).
pub async fn waiting_keys(
    conn: &mut PgConnection,
    keys: &[(&str, Uuid, &str)],
) -> sqlx::Result<Vec<usize>> {
    let (types, (tenants, aggs)): (Vec<&str>, (Vec<Uuid>, Vec<&str>)) =
        keys.iter().map(|&(t, n, a)| (t, (n, a))).unzip();
    let found: Vec<i64> = sqlx::query_scalar(&waiting_keys_sql())
        .bind(&types)
        .bind(&tenants)
        .bind(&aggs)
        .persistent(true)
        .fetch_all(conn)
        .await?;
    Ok(found
        .into_iter()
        .filter_map(|i| usize::try_from(i).ok())
        .collect())
}

/// [`waiting_keys`]' statement: `$1`..`$3` the keys' columns (the plan is pinned by a test).
pub fn waiting_keys_sql() -> String {
    format!(
        "SELECT (k.i - 1)::bigint
           FROM unnest($1::text[], $2::uuid[], $3::text[]) WITH ORDINALITY
                  AS k(aggregate_type, tenant_id, aggregate_id, i)
          WHERE EXISTS (SELECT FROM outbox_log_retry r JOIN outbox o ON o.id = r.id
                         WHERE r.aggregate_type = k.aggregate_type AND r.tenant_id = k.tenant_id
                           AND r.aggregate_id = k.aggregate_id
                           AND o.published_at IS NULL AND o.dead_lettered_at IS NULL)
             OR {}",
        super::ordering::key_blocked("k")
    )
}

/// Moves what queue mode left pending at the switch into the retry set (at its due time; a row
/// leased by a queue-mode relay at the lease's end, so if that relay settles it, the entry is
/// dropped as stale). Rows a queue-mode transaction still holds are skipped; once none is left,
/// the hand-over is done. Fenced: changes nothing unless `me` holds the lease at `fence`.
/// Returns the rows moved, or `None` when the lease was lost.
pub async fn hand_over(conn: &mut PgConnection, me: Uuid, fence: i64) -> sqlx::Result<Option<u64>> {
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let held: Option<(String, i64)> = sqlx::query_as(
        "SELECT switched::text, switched_id FROM outbox_log
          WHERE holder = $1 AND fence = $2 FOR UPDATE",
    )
    .bind(me)
    .bind(fence)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((switched, switched_id)) = held else {
        return Ok(None);
    };
    let queue_part = "o.published_at IS NULL AND o.dead_lettered_at IS NULL AND o.id <= $2
        AND (o.xid IS NULL OR pg_visible_in_snapshot(o.xid, $1::pg_snapshot))
        AND NOT EXISTS (SELECT FROM outbox_log_retry r WHERE r.id = o.id)";
    let moved = sqlx::query(&format!(
        "WITH q AS (SELECT o.id, greatest(o.available_at, o.locked_until) AS at FROM outbox o
                     WHERE {queue_part} FOR UPDATE OF o SKIP LOCKED)
         INSERT INTO outbox_log_retry (id, available_at) SELECT id, at FROM q
         ON CONFLICT (id) DO NOTHING"
    ))
    .bind(&switched)
    .bind(switched_id)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let left: bool = sqlx::query_scalar(&format!(
        "SELECT EXISTS (SELECT FROM outbox o WHERE {queue_part})"
    ))
    .bind(&switched)
    .bind(switched_id)
    .fetch_one(&mut *tx)
    .await?;
    if !left {
        sqlx::query("UPDATE outbox_log SET handed_over = true")
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(Some(moved))
}

/// Where a settle moves the position.
#[derive(Debug, Clone)]
pub enum Advance {
    /// Nowhere (a retry batch, or a page the sink took none of).
    Stay,
    /// Within the batch up to `hi`, after its event (`xid`, `id`).
    Within { hi: String, xid: String, id: i64 },
    /// To `hi`: the batch is passed.
    To { hi: String },
}

/// What a reader's settle writes.
#[derive(Debug, Default)]
pub struct LogSettle<'a> {
    /// Published events taken from the retry set: marked published, their entries dropped.
    pub retried_out: &'a [i64],
    /// Failed publishes: stored as queue mode stores them, then in the retry set (or dead).
    pub failures: &'a [Failure],
    /// Events passed by the position and not published (given back, or delayed): into the
    /// retry set, due at the time given.
    pub later: &'a [(i64, DateTime<Utc>)],
    /// A page read on from the page before it while that one was in flight: the id the position
    /// must be just after (that page's settle moved it there), or nothing moves.
    pub after_id: Option<i64>,
}

/// The outcome of a settle.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LogSettled {
    /// The failures stored (ids), dead-lettered or scheduled.
    pub failed: Vec<i64>,
}

/// Settles a page or a retry batch in one transaction, fenced: it moves the position and renews
/// the lease only while `me` holds it at `fence` (and the position is just after
/// [`LogSettle::after_id`], when given); otherwise nothing changes and `None` comes back (the new
/// holder reads the same events again: at least once).
pub async fn settle(
    conn: &mut PgConnection,
    me: Uuid,
    fence: i64,
    lease: Duration,
    advance: &Advance,
    s: &LogSettle<'_>,
) -> sqlx::Result<Option<LogSettled>> {
    let micros = i64::try_from(lease.as_micros()).unwrap_or(i64::MAX);
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let (hi, xid, id, done) = match advance {
        Advance::Stay => (None, None, None, false),
        Advance::Within { hi, xid, id } => {
            (Some(hi.as_str()), Some(xid.as_str()), Some(*id), false)
        }
        Advance::To { hi } => (Some(hi.as_str()), None, None, true),
    };
    let held = sqlx::query(
        "UPDATE outbox_log
            SET position = CASE WHEN $4::bool THEN $5::pg_snapshot ELSE position END,
                window_to = CASE WHEN $4::bool THEN NULL
                                 WHEN $5::pg_snapshot IS NULL THEN window_to
                                 ELSE $5::pg_snapshot END,
                after_xid = CASE WHEN $4::bool THEN NULL
                                 WHEN $5::pg_snapshot IS NULL THEN after_xid ELSE $6::xid8 END,
                after_id = CASE WHEN $4::bool THEN NULL
                                WHEN $5::pg_snapshot IS NULL THEN after_id ELSE $7::bigint END,
                batches = batches + 1, read_at = now(),
                lease_until = now() + $3 * interval '1 microsecond'
          WHERE holder = $1 AND fence = $2 AND ($8::bigint IS NULL OR after_id = $8)",
    )
    .bind(me)
    .bind(fence)
    .bind(micros)
    .bind(done)
    .bind(hi)
    .bind(xid)
    .bind(id)
    .bind(s.after_id)
    .persistent(true)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if held == 0 {
        tx.rollback().await?;
        return Ok(None);
    }
    if !s.retried_out.is_empty() {
        sqlx::query(
            "WITH d AS (DELETE FROM outbox_log_retry WHERE id = ANY($1) RETURNING id)
             UPDATE outbox o SET published_at = now(), last_error = NULL
               FROM d WHERE o.id = d.id AND o.published_at IS NULL",
        )
        .bind(s.retried_out)
        .execute(&mut *tx)
        .await?;
    }
    let mut failed = Vec::new();
    if !s.failures.is_empty() {
        let ids: Vec<i64> = s.failures.iter().map(|f| f.id).collect();
        let dead: Vec<bool> = s.failures.iter().map(|f| f.dead).collect();
        let counted: Vec<bool> = s.failures.iter().map(|f| f.counted).collect();
        let errors: Vec<&str> = s.failures.iter().map(|f| f.error.as_str()).collect();
        let retry: Vec<f64> = s
            .failures
            .iter()
            .map(|f| f.retry_in.as_secs_f64())
            .collect();
        failed = sqlx::query_scalar(
            "WITH f AS (
               SELECT * FROM unnest($1::bigint[], $2::bool[], $3::bool[], $4::text[], $5::float8[])
                        AS f(id, dead, counted, err, retry_secs)
             ), u AS (
               UPDATE outbox o
                  SET attempt_count = o.attempt_count + f.counted::int,
                      last_error = f.err,
                      available_at = CASE WHEN f.dead THEN o.available_at
                                          ELSE now() + f.retry_secs * interval '1 second' END,
                      dead_lettered_at = CASE WHEN f.dead THEN now() END
                 FROM f
                WHERE o.id = f.id AND o.published_at IS NULL AND o.dead_lettered_at IS NULL
                RETURNING o.id, f.dead, o.available_at
             ), gone AS (
               DELETE FROM outbox_log_retry r USING u WHERE r.id = u.id AND u.dead
             ), later AS (
               INSERT INTO outbox_log_retry (id, available_at)
               SELECT id, available_at FROM u WHERE NOT dead
               ON CONFLICT (id) DO UPDATE SET available_at = EXCLUDED.available_at
             )
             SELECT id FROM u",
        )
        .bind(&ids)
        .bind(&dead)
        .bind(&counted)
        .bind(&errors)
        .bind(&retry)
        .fetch_all(&mut *tx)
        .await?;
    }
    if !s.later.is_empty() {
        let (ids, at): (Vec<i64>, Vec<DateTime<Utc>>) = s.later.iter().copied().unzip();
        sqlx::query(
            "INSERT INTO outbox_log_retry (id, available_at)
             SELECT * FROM unnest($1::bigint[], $2::timestamptz[])
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(&ids)
        .bind(&at)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(Some(LogSettled { failed }))
}

/// How long until the retry set's next event is due (zero when one is); `None` when it is empty.
pub async fn next_due_in(conn: &mut PgConnection) -> sqlx::Result<Option<Duration>> {
    let secs: Option<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM (SELECT min(available_at) FROM outbox_log_retry) - now())::float8",
    )
    .persistent(true)
    .fetch_one(conn)
    .await?;
    Ok(secs.map(|s| Duration::from_secs_f64(s.max(0.0))))
}

/// The heartbeat's figures in log mode: `backlog` is what the log has not read yet (at most
/// 1,000,000, as [`status`] counts it) and the retry set's due events; `scheduled` the retry set's
/// others; nothing is leased.
pub async fn backlog(conn: &mut PgConnection) -> sqlx::Result<super::relay::Backlog> {
    let s = status(conn).await?;
    Ok(super::relay::Backlog {
        backlog: s.behind + s.retrying_due,
        scheduled: s.retrying - s.retrying_due,
        in_flight: 0,
    })
}
