//! Ordered delivery per key (migration 6): the switch (`outbox_ordering`), the ordered claim,
//! blocked keys and the skip of a blocking head.
//!
//! The key is `(tenant_id, aggregate_type, aggregate_id)`. Design "A" of the design note: a key's
//! rows are taken only from its first pending row (its *head*) onwards, and only when that head is
//! due, not leased, not row-locked by another relay and the key is not blocked by a dead-lettered
//! head. The claim that takes a head holds the whole key until it settles, so the rows of a key
//! are published one claim at a time, in id order. Nothing changes for producers.
//!
//! Finding heads: the claim walks `outbox_key_pending_idx` in key order, in chunks (a range scan
//! of a few hundred entries at most, then a fresh descent just after the key the chunk ended in,
//! so a deep key costs one chunk, not its depth). In key order a key's first pending entry is its
//! head, so there is no `NOT EXISTS (an earlier pending row of the key)` per row, which is
//! quadratic in per-key depth (pg-boss #871). Each relay walks on from where its last claim
//! stopped (a cursor), wrapping round at the end, so every key is reached in turn and a run of
//! leased or blocked keys costs a few index entries each. No global xmin watermark is involved: a
//! key waits only for its own head.

use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use super::audit::Audit;
use super::relay::{BatchLimit, ClaimedRow};

/// What a dead-lettered head does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnDead {
    /// The key stops until the head is requeued or skipped.
    Block,
    /// The key moves on past the dead head.
    Skip,
}

impl OnDead {
    pub fn as_str(self) -> &'static str {
        match self {
            OnDead::Block => "block",
            OnDead::Skip => "skip",
        }
    }
}

/// The aggregate type that stands for every type in `outbox_ordering`.
pub const ALL_TYPES: &str = "*";

/// Which aggregate types are ordered, as the relay needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ordering {
    /// Every aggregate type is ordered.
    pub all: bool,
    /// The named ordered types (sorted), when not `all`.
    pub types: Vec<String>,
}

impl Ordering {
    pub fn is_active(&self) -> bool {
        self.all || !self.types.is_empty()
    }

    /// Whether events of `aggregate_type` are ordered.
    pub fn orders(&self, aggregate_type: &str) -> bool {
        self.all
            || self
                .types
                .binary_search_by(|t| t.as_str().cmp(aggregate_type))
                .is_ok()
    }
}

/// Whether the schema has migration 6 (the switch's table). Asked rather than left to a failing
/// statement: inside a transaction a failed statement aborts it (see [`load`]).
async fn migrated(conn: &mut PgConnection) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT to_regclass('outbox_ordering') IS NOT NULL")
        .persistent(true)
        .fetch_one(conn)
        .await
}

/// Reads the switch. `None` when the schema has no migration 6 yet (the table is missing): the
/// relay then claims as before. The table's existence is asked first, rather than the `SELECT`
/// left to fail: tx mode reads the switch inside the claim's transaction, where a failed statement
/// aborts the transaction and with it the claim (a relay upgraded before `migrate` ran failed
/// every claim that way). Two statements once per refresh (a second), not per claim.
pub async fn load(conn: &mut PgConnection) -> sqlx::Result<Option<Ordering>> {
    if !migrated(conn).await? {
        return Ok(None);
    }
    let types: Vec<String> =
        sqlx::query_scalar("SELECT aggregate_type FROM outbox_ordering ORDER BY aggregate_type")
            .persistent(true)
            .fetch_all(conn)
            .await?;
    let all = types.iter().any(|t| t == ALL_TYPES);
    Ok(Some(Ordering {
        all,
        types: if all { Vec::new() } else { types },
    }))
}

/// Whether the key of the row `{k}` (its `aggregate_type`, `tenant_id` and `aggregate_id`) is
/// blocked by a dead-lettered head (`ordering enable --on-dead block`): a probe of the tiny
/// `outbox_blocking_idx`. The ordered claim and log mode's ordered reads both ask it.
pub fn key_blocked(k: &str) -> String {
    format!(
        "EXISTS (SELECT FROM outbox b
                  WHERE b.blocks_key AND b.dead_lettered_at IS NOT NULL
                    AND b.aggregate_type = {k}.aggregate_type AND b.tenant_id = {k}.tenant_id
                    AND b.aggregate_id = {k}.aggregate_id)"
    )
}

/// Whether the row `{k}`'s aggregate type is ordered, by the switch as a relay read it (`$all`:
/// every type, `$types`: the named ones): two parameters, so a statement that asks it is planned
/// once whatever the switch.
pub fn type_ordered(k: &str, all: &str, types: &str) -> String {
    format!("({all} OR {k}.aggregate_type = ANY({types}))")
}

/// One row of `ordering status`.
#[derive(Debug, Clone, sqlx::FromRow, Serialize, schemars::JsonSchema)]
pub struct StatusRow {
    /// `*` for every type.
    pub aggregate_type: String,
    pub on_dead: String,
    pub enabled_at: chrono::DateTime<chrono::Utc>,
    pub enabled_by: Option<String>,
    /// Keys of this type blocked by a dead-lettered head (for `*`: of every type).
    pub blocked_keys: i64,
}

/// The switch's rows, with the blocked keys of each (reads the tiny `outbox_blocking_idx`).
pub async fn status(conn: &mut PgConnection) -> sqlx::Result<Vec<StatusRow>> {
    sqlx::query_as(
        "SELECT c.aggregate_type, c.on_dead, c.enabled_at, c.enabled_by,
                (SELECT count(DISTINCT (b.tenant_id, b.aggregate_id, b.aggregate_type)) FROM outbox b
                  WHERE b.blocks_key AND b.dead_lettered_at IS NOT NULL
                    AND (c.aggregate_type = '*' OR b.aggregate_type = c.aggregate_type)) AS blocked_keys
           FROM outbox_ordering c ORDER BY c.aggregate_type",
    )
    .fetch_all(conn)
    .await
}

/// Switches ordering on for `types` (`["*"]`: every type), or changes their `on_dead`, and
/// records it in the audit trail (action `ordering`). Returns the types whose row changed. The
/// next `relay --once` run's walk starts without its id floor: the newly ordered types' pending
/// rows may lie below it ([`super::floor::forget_key_floor`]).
pub async fn enable(
    conn: &mut PgConnection,
    types: &[String],
    on_dead: OnDead,
    audit: &Audit,
) -> sqlx::Result<Vec<String>> {
    let changed: Vec<String> = sqlx::query_scalar(
        "WITH up AS (
             INSERT INTO outbox_ordering (aggregate_type, on_dead, enabled_by)
             SELECT t, $2, $3 FROM unnest($1::text[]) t
             ON CONFLICT (aggregate_type) DO UPDATE SET on_dead = EXCLUDED.on_dead
              WHERE outbox_ordering.on_dead IS DISTINCT FROM EXCLUDED.on_dead
             RETURNING aggregate_type
         )
         INSERT INTO outbox_audit (action, actor, reason, details)
         SELECT 'ordering', $3, $4,
                jsonb_build_object('enabled', true, 'aggregate_type', aggregate_type, 'on_dead', $2)
           FROM up
         RETURNING details ->> 'aggregate_type'",
    )
    .bind(types)
    .bind(on_dead.as_str())
    .bind(&audit.actor)
    .bind(audit.reason.as_deref())
    .fetch_all(&mut *conn)
    .await?;
    super::floor::forget_key_floor_if(conn, changed).await
}

/// Switches ordering off for `types`, or for every row when `types` is empty; audited. Returns
/// the types switched off.
pub async fn disable(
    conn: &mut PgConnection,
    types: &[String],
    audit: &Audit,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(
        "WITH d AS (
             DELETE FROM outbox_ordering
              WHERE cardinality($1::text[]) = 0 OR aggregate_type = ANY($1)
             RETURNING aggregate_type, on_dead
         )
         INSERT INTO outbox_audit (action, actor, reason, details)
         SELECT 'ordering', $2, $3,
                jsonb_build_object('enabled', false, 'aggregate_type', aggregate_type,
                                   'on_dead', on_dead)
           FROM d
         RETURNING details ->> 'aggregate_type'",
    )
    .bind(types)
    .bind(&audit.actor)
    .bind(audit.reason.as_deref())
    .fetch_all(conn)
    .await
}

/// The key index the ordered claim walks (see the module doc). It costs every producer insert one
/// more index entry, ordered type or not, so it exists only while some type is ordered: built by
/// `ordering enable`, dropped by the `ordering disable` that switches the last type off
/// (migration 7 dropped it where ordering was off).
pub const KEY_INDEX: &str = "outbox_key_pending_idx";

/// Advisory lock class of the ordering switch (first key of the two-int form; the second is the
/// schema): `enable` and `disable` hold it across their row change and the index DDL, so an
/// `enable` racing the last `disable` cannot end with ordering on and no index.
const SWITCH_LOCK_CLASS: i32 = 0x6f62_7806; // "obx" + 6

/// Tries to take the ordering switch's lock ([`super::try_lock_switch`]).
pub async fn try_lock_switch(conn: &mut PgConnection) -> sqlx::Result<bool> {
    super::try_lock_switch(conn, SWITCH_LOCK_CLASS).await
}

pub async fn unlock_switch(conn: &mut PgConnection) -> sqlx::Result<()> {
    super::unlock_switch(conn, SWITCH_LOCK_CLASS).await
}

/// Whether the key index exists, and if so whether it is usable ([`super::index_state`]).
pub async fn key_index(conn: &mut PgConnection) -> sqlx::Result<Option<bool>> {
    super::index_state(conn, KEY_INDEX).await
}

/// Builds the key index without blocking producers or relays (`CONCURRENTLY`, so it waits for the
/// transactions already writing the outbox, and takes a full scan of it). Simple protocol: a
/// concurrent build may not run in a transaction block. The definition is migration 6's.
pub async fn create_key_index(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::raw_sql(
        "CREATE INDEX CONCURRENTLY outbox_key_pending_idx
           ON outbox (aggregate_type, tenant_id, aggregate_id, id)
          WHERE published_at IS NULL AND dead_lettered_at IS NULL",
    )
    .execute(conn)
    .await
    .map(drop)
}

/// How far this session's index build is: `(phase, blocks done, blocks total)` from
/// `pg_stat_progress_create_index`, read on another connection while `pid` builds.
pub async fn key_index_progress(
    conn: &mut PgConnection,
    pid: i32,
) -> sqlx::Result<Option<(String, i64, i64)>> {
    sqlx::query_as(
        "SELECT phase, blocks_done, blocks_total FROM pg_stat_progress_create_index WHERE pid = $1",
    )
    .bind(pid)
    .fetch_optional(conn)
    .await
}

/// This session's backend pid (to follow its index build from another connection).
pub async fn backend_pid(conn: &mut PgConnection) -> sqlx::Result<i32> {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(conn)
        .await
}

/// Drops the key index without blocking producers or relays (waits for their transactions).
pub async fn drop_key_index(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::raw_sql("DROP INDEX CONCURRENTLY IF EXISTS outbox_key_pending_idx")
        .execute(conn)
        .await
        .map(drop)
}

/// Whether any aggregate type is ordered.
pub async fn any_enabled(conn: &mut PgConnection) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT FROM outbox_ordering)")
        .fetch_one(conn)
        .await
}

/// What `ordering skip` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Skipped {
    /// The dead head no longer blocks its key.
    Unblocked,
    /// The pending head was dead-lettered without blocking its key.
    DeadLettered,
}

/// Skips the head `id` of its key, with an audit row (action `skip`), in one statement: a
/// dead-lettered head that blocks its key stops blocking it; a pending head that is not leased
/// is dead-lettered (`last_error` says so) without blocking. Either way the rest of the key flows.
/// The claim token is cleared, as `events edit` does: a relay whose lease on the head ran out
/// (paused, say) and that settles late, or retries its settle after a lost connection, must not
/// count the skipped head as published ([`crate::db::relay::still_claimed`]). `None` when `id` is neither (published, by the log too, leased, unknown, or a dead letter that blocks nothing).
pub async fn skip(
    conn: &mut PgConnection,
    id: i64,
    audit: &Audit,
) -> sqlx::Result<Option<Skipped>> {
    // In log mode an event the log published carries no mark: it is not a pending head.
    let unpublished = if super::log::is_on(&mut *conn).await? {
        format!(" AND NOT {}", *super::log::PUBLISHED)
    } else {
        String::new()
    };
    let done: Option<bool> = sqlx::query_scalar(&format!(
        "WITH old AS (
             SELECT o.id, o.dead_lettered_at, o.attempt_count, o.last_error, o.blocks_key
               FROM outbox o
              WHERE o.id = $1 AND o.published_at IS NULL
                AND ((o.dead_lettered_at IS NOT NULL AND o.blocks_key)
                     OR (o.dead_lettered_at IS NULL
                         AND (o.locked_until IS NULL OR o.locked_until < now()){unpublished}))
                FOR UPDATE OF o
         ), s AS (
             UPDATE outbox o
                SET blocks_key = false,
                    dead_lettered_at = coalesce(o.dead_lettered_at, now()),
                    locked_until = NULL,
                    claim_token = NULL,
                    last_error = CASE WHEN o.dead_lettered_at IS NULL
                                      THEN 'skipped by ' || $2 || coalesce(': ' || $3, '')
                                      ELSE o.last_error END
               FROM old WHERE o.id = old.id
             RETURNING o.id, old.dead_lettered_at IS NOT NULL AS was_dead, old.dead_lettered_at,
                       old.attempt_count, old.last_error
         )
         INSERT INTO outbox_audit (action, event_id, actor, reason, previous, details)
         SELECT 'skip', id, $2, $3,
                jsonb_build_object('dead_lettered_at', dead_lettered_at,
                                   'attempt_count', attempt_count, 'last_error', last_error),
                jsonb_build_object('was_dead', was_dead)
           FROM s
         RETURNING (details ->> 'was_dead')::boolean"
    ))
    .bind(id)
    .bind(&audit.actor)
    .bind(audit.reason.as_deref())
    .fetch_optional(conn)
    .await?;
    Ok(done.map(|was_dead| {
        if was_dead {
            Skipped::Unblocked
        } else {
            Skipped::DeadLettered
        }
    }))
}

/// Blocked keys: how many, the events they hold back, and the oldest block.
#[derive(Debug, Clone, Default, sqlx::FromRow, Serialize, PartialEq, schemars::JsonSchema)]
pub struct Blocked {
    /// Ordered keys blocked by a dead-lettered head.
    pub blocked_keys: i64,
    /// Pending events of the blocked keys.
    pub blocked_events: i64,
    /// When the oldest blocking head was dead-lettered; null when none blocks.
    pub oldest_blocked_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// What a blocked key holds back of its rows `o`: the pending ones, and in log mode (where an
/// event the log published has no mark) only those the log has not published
/// ([`super::log::PENDING`]): `stats`, `doctor`, `dead list` and `top` mean the same in both.
async fn held_back(conn: &mut PgConnection) -> sqlx::Result<String> {
    Ok(if super::log::is_on(conn).await? {
        format!(" AND {}", super::log::PENDING)
    } else {
        String::new()
    })
}

/// The blocked keys' figures: the blocking heads from `outbox_blocking_idx`, their keys' pending
/// rows from `outbox_key_pending_idx` (while it exists).
pub async fn blocked(conn: &mut PgConnection) -> sqlx::Result<Blocked> {
    let held = held_back(&mut *conn).await?;
    sqlx::query_as(&format!(
        "WITH k AS (
             SELECT aggregate_type, tenant_id, aggregate_id, min(dead_lettered_at) AS at
               FROM outbox WHERE blocks_key AND dead_lettered_at IS NOT NULL
              GROUP BY 1, 2, 3
         )
         SELECT count(*) AS blocked_keys,
                coalesce(sum((SELECT count(*) FROM outbox o
                               WHERE o.aggregate_type = k.aggregate_type
                                 AND o.tenant_id = k.tenant_id AND o.aggregate_id = k.aggregate_id
                                 AND o.published_at IS NULL AND o.dead_lettered_at IS NULL{held})), 0)::bigint
                  AS blocked_events,
                min(at) AS oldest_blocked_at
           FROM k"
    ))
    .fetch_one(conn)
    .await
}

/// [`blocked`], or `None` on a schema without migration 6.
pub async fn blocked_if_migrated(conn: &mut PgConnection) -> sqlx::Result<Option<Blocked>> {
    if !migrated(conn).await? {
        return Ok(None);
    }
    blocked(conn).await.map(Some)
}

/// One ordered key blocked by a dead-lettered head (`top` lists the oldest few).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct BlockedKey {
    pub aggregate_type: String,
    pub tenant_id: uuid::Uuid,
    pub aggregate_id: String,
    /// The blocking head's id.
    pub head_id: i64,
    /// When the head was dead-lettered.
    pub blocked_at: chrono::DateTime<chrono::Utc>,
    /// The key's pending events it holds back.
    pub pending: i64,
}

/// The `$1` keys blocked longest: the blocking heads from `outbox_blocking_idx` (only dead rows
/// that block: a handful), each key's pending rows counted from `outbox_key_pending_idx` (or,
/// with ordering switched off and that index dropped, from `outbox_ready_idx`: pending rows only
/// either way; `{held}`: [`held_back`]).
fn blocked_keys_sql(held: &str) -> String {
    format!(
        "SELECT d.aggregate_type, d.tenant_id, d.aggregate_id, d.id AS head_id,
        d.dead_lettered_at AS blocked_at,
        (SELECT count(*) FROM outbox o
          WHERE o.aggregate_type = d.aggregate_type AND o.tenant_id = d.tenant_id
            AND o.aggregate_id = d.aggregate_id
            AND o.published_at IS NULL AND o.dead_lettered_at IS NULL{held}) AS pending
   FROM outbox d
  WHERE d.blocks_key AND d.dead_lettered_at IS NOT NULL
  ORDER BY d.dead_lettered_at, d.id
  LIMIT $1"
    )
}

/// [`blocked_keys_sql`] in queue mode (its plan is pinned by a test).
pub static BLOCKED_KEYS: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| blocked_keys_sql(""));

/// The `limit` keys blocked longest ([`blocked_keys_sql`]); empty on a schema without
/// migration 6.
pub async fn blocked_keys(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<BlockedKey>> {
    if !migrated(conn).await? {
        return Ok(Vec::new());
    }
    let held = held_back(&mut *conn).await?;
    sqlx::query_as(&blocked_keys_sql(&held))
        .bind(limit)
        .fetch_all(conn)
        .await
}

/// Every dead head that blocks its key, with how many pending events of the key it holds back
/// (`dead list` marks them). One row per blocked key at most, from `outbox_blocking_idx`; empty
/// on a schema without migration 6.
pub async fn blocking_heads(
    conn: &mut PgConnection,
) -> sqlx::Result<std::collections::HashMap<i64, i64>> {
    if !migrated(conn).await? {
        return Ok(Default::default());
    }
    let held = held_back(&mut *conn).await?;
    let rows: Vec<(i64, i64)> = sqlx::query_as(&format!(
        "SELECT d.id, (SELECT count(*) FROM outbox o
                        WHERE o.aggregate_type = d.aggregate_type AND o.tenant_id = d.tenant_id
                          AND o.aggregate_id = d.aggregate_id
                          AND o.published_at IS NULL AND o.dead_lettered_at IS NULL{held})
           FROM outbox d
          WHERE d.blocks_key AND d.dead_lettered_at IS NOT NULL"
    ))
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().collect())
}

/// Where a relay's walk over the keys goes on from: just after this key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub aggregate_type: String,
    pub tenant_id: Uuid,
    pub aggregate_id: String,
}

impl Default for Cursor {
    /// Before every key.
    fn default() -> Self {
        Self {
            aggregate_type: String::new(),
            tenant_id: Uuid::nil(),
            aggregate_id: String::new(),
        }
    }
}

/// Where an ordered claim's walk starts: just after the key `cursor`, over the index entries of
/// ids above `floor` (0: every entry). The entries at or below the floor are skipped inside the
/// index, without reading their rows; a key with a pending row at or below it is not claimed (its
/// head is that row, which the walk does not see).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WalkStart {
    pub cursor: Cursor,
    pub floor: i64,
}

/// What an ordered claim took, and where the next one goes on.
#[derive(Debug, Default)]
pub struct OrderedClaim {
    /// Sorted by key, then id: each key's rows are consecutive, in the order to publish them.
    pub rows: Vec<ClaimedRow>,
    pub cursor: Cursor,
    /// More may be claimable now: the walk stopped before the last key, the byte budget left rows
    /// out, or a key had more rows than this claim took. (Not: keys before where the walk began.)
    pub more: bool,
    /// The least id among the pending entries the walk read (above the floor): each key's first,
    /// but for the heads this claim took whose key had nothing else pending (they are published
    /// or dead-lettered unless the relay gives them back, and then it lowers its floor below
    /// them itself: [`crate::relay::ordering::OrderingState::gave_back`]). So a pass that took
    /// every key it met (a drain of one event per key) lets the floor rise past all of them,
    /// and the next pass does not read their entries again.
    pub walk_min: Option<i64>,
    /// The greatest id in the outbox that this claim's snapshot sees.
    pub top: Option<i64>,
    /// This claim's snapshot's `(xmin, xmax)`: every transaction below `xmin` had ended, every
    /// one from `xmax` on had not begun.
    pub xids: Option<(i64, i64)>,
}

/// How many index entries one claim's walk reads at most (of leased, backing-off, blocked, taken
/// or deep keys alike), per row of the batch it may take. Bounds the claim's cost when most keys
/// are busy.
pub const WALK_PER_ROW: i64 = 4;

/// Index entries one step of the walk reads: as many as the batch still lacks, but at most four
/// per key the previous chunk held (the first chunk: [`CHUNK_FIRST`]), within
/// [`CHUNK_MIN`]..[`CHUNK_MAX`]. So over keys of one event each a chunk is a few hundred keys,
/// and over deep keys it shrinks to a few entries a key: each entry read costs a heap visit (the
/// rows of a deep key lie on as many pages), a fresh descent of the index only a few index pages.
const CHUNK_MIN: i64 = 4;
const CHUNK_MAX: i64 = 256;
const CHUNK_FIRST: i64 = 64;

/// The next chunk of pending entries of ordered keys after the walk's position `h`, in key order
/// (`outbox_key_pending_idx`), at most `{chunk}` of them. Every type ordered (`*`): one range
/// scan from `h`'s key. Named types: the same scan per named type from `h`'s on (in `$4`'s order,
/// which [`load`] sorts; the nested loop keeps it), so unordered types' pending rows between them
/// are never read.
fn chunk_source(all: bool, chunk: &str) -> String {
    let scan = |type_cond: &str, after: &str| {
        format!(
            "SELECT o.aggregate_type, o.tenant_id, o.aggregate_id, o.id, o.ctid, o.available_at,
                    o.locked_until
               FROM outbox o
              WHERE o.published_at IS NULL AND o.dead_lettered_at IS NULL{type_cond}
                AND {after}
                AND o.id > $11
                AND ($3 OR o.aggregate_type = ANY($4))
                AND NOT (SELECT yes FROM few)
              ORDER BY o.aggregate_type, o.tenant_id, o.aggregate_id, o.id
              LIMIT {chunk}"
        )
    };
    let index = if all {
        scan(
            "",
            "(o.aggregate_type, o.tenant_id, o.aggregate_id)
                    > (h.aggregate_type, h.tenant_id, h.aggregate_id)",
        )
    } else {
        // Per type `ty.t`: from just after `h`'s key when `h` is of that type, else from the
        // type's first key; up to the type's last (`<=`). Not `o.aggregate_type = ty.t`: with an
        // equality on the first column the scan starts at the type's first entry and skips to
        // `h`'s key entry by entry, so each chunk read every entry before it (under a held
        // snapshot the dead ones too: 1,215 buffers and 9 ms before its first row, against 267
        // and 0.07 ms; the drain slowed round after round).
        format!(
            "SELECT s.* FROM unnest($4::text[]) ty(t) CROSS JOIN LATERAL ({}) s
              WHERE ty.t >= h.aggregate_type
              LIMIT {chunk}",
            scan(
                "\n                AND o.aggregate_type <= ty.t",
                "(o.aggregate_type, o.tenant_id, o.aggregate_id, o.id)
                    > (ty.t,
                       CASE WHEN ty.t = h.aggregate_type THEN h.tenant_id
                            ELSE '00000000-0000-0000-0000-000000000000'::uuid END,
                       CASE WHEN ty.t = h.aggregate_type THEN h.aggregate_id ELSE '' END,
                       CASE WHEN ty.t = h.aggregate_type THEN '9223372036854775807'::bigint
                            ELSE '-9223372036854775808'::bigint END)",
            )
        )
    };
    format!(
        "(SELECT c.aggregate_type, c.tenant_id, c.aggregate_id, c.id, c.ctid, c.available_at,
                 c.locked_until
            FROM probe c
           WHERE (SELECT yes FROM few) AND c.pending
             AND (c.aggregate_type, c.tenant_id, c.aggregate_id)
                 > (h.aggregate_type, h.tenant_id, h.aggregate_id)
           ORDER BY c.aggregate_type, c.tenant_id, c.aggregate_id, c.id
           LIMIT {chunk})
         UNION ALL
         ({index})"
    )
}

/// Rows above the walk's floor the claim reads by primary key before it walks: when there are
/// fewer (the end of the table came first), the walk goes over them alone instead of the key
/// index. Over a floor just below the newest events that is a few rows, where the key index
/// still holds an entry for every row published since the last VACUUM that could remove it: the
/// walk skips the entries at or below the floor inside the index, but it reads every one of their
/// pages (under a held snapshot, one event claimed in 148-172 ms over 500k such entries, against
/// 57-63 ms with none; issue 30).
pub const PROBE_ROWS: i64 = 256;

/// The ordered claim, around `set`. Parameters: `$1` row limit, `$2` rows per key at most,
/// `$3` every type ordered, `$4` the ordered types (sorted), `$5..$7` the cursor, `$8` index
/// entries the walk reads at most, `$9` keys to gather at least when there are enough (so a
/// batch of deep keys is still published over that many lanes), `$10` byte budget, `$11` the
/// walk's id floor ([`WalkStart`]: 0 for none).
///
/// - `probe`, `few`: with a floor, the first [`PROBE_ROWS`] rows above it by primary key; when
///   the end of the table came first (`few`), every chunk of the walk is cut from them (sorted
///   by key) instead of from the key index, which is then not read at all (a one-time filter).
/// - `walk`: from the cursor, chunks of the key index in key order ([`chunk_source`]), each
///   starting just after the key the previous one ended in (a fresh descent of the index, so the
///   rest of a deep key is skipped, not read). In key order a key's first pending entry is its
///   *head*; a head is `free` when it is due, not leased, its key not blocked, and (with a
///   floor) the key has no pending row at or below the floor (that row, which the walk skipped
///   inside the index, is the key's real head: the key waits for a pass without the floor). A step returns
///   the chunk's heads and its last entry (where the next step starts). It stops once the free
///   keys' entries cover `$1` rows (and `$9` keys, when there are as many), at `$8` entries, or
///   at the end of the keys; the key a full chunk ends in counts as four times the entries it
///   had in the chunk (it goes on: without that, a walk of deep keys in small chunks would need
///   a step per few rows). One step per chunk, not per key: walking 500 keys of one event each
///   took 1.3 ms, against 8.5 ms for the loose index scan of one key per step it replaces; and
///   there is no `NOT EXISTS (an earlier pending row of the key)` per row, which is quadratic in
///   per-key depth (pg-boss #871). A head whose key has no other entry in the chunk (and is not
///   the chunk's last) is `single`: the key has nothing else pending in this statement's
///   snapshot, so its rows need no second look.
/// - `lock`, `locked`: the free heads locked `FOR UPDATE SKIP LOCKED`, re-checked on the current row
///   version (READ COMMITTED re-evaluates the conditions on a row updated since the snapshot): a
///   head another relay is claiming or has just settled is left alone, and with it its key.
/// - `rows`: a single head alone; any other key's first pending rows from its head, at most a
///   fair share of the batch (`share`), locked (`FOR UPDATE`: whoever else could hold them holds
///   them only briefly, since a claim takes a key's rows only with its head; and a row changed
///   meanwhile by `events cancel` or `edit` is then re-read rather than silently left out of the
///   middle of a run); only the prefix that is due and not leased is taken (`ok`), so a row
///   scheduled later ends the key's run. Sized like the unordered claim's rows (payload and
///   headers as stored, compressed ones decompressed).
/// - `budget`, `taken`: round robin over the keys (every key's first row, then every key's
///   second...) up to `$1` rows and `$10` bytes (the first row whatever its size), so a batch
///   spreads over as many keys as it can, and what the budget leaves out of a key is the end of
///   its run, never a row in the middle.
/// - `upd`, `moved`: the taken rows updated by TID (`upd`), and by id those `upd` passed by
///   (`moved`, nearly always none). A row an operator changed (`events edit`, `reschedule`) after
///   this statement's snapshot was taken and before `rows` locked it was locked and re-checked on
///   its newest version, whose TID the statement's snapshot cannot see; an UPDATE by that TID
///   matches nothing, and the key's run would go out without it, its successors before it (issue
///   31). Reached by id, the row's old version is found and PostgreSQL follows its update chain to
///   the version this claim already holds locked. (A head changed before `lock` is the same case.)
///   The difference is an `EXCEPT` (hashed, linear), not `id <> ALL(upd's ids)` per taken row,
///   which is quadratic in the batch.
///
/// The statement returns the claimed rows plus one trailer row (`trailer`) with the cursor,
/// whether more may be claimable, the least id the walk read (`walk_min`, see
/// [`OrderedClaim::walk_min`]) and the greatest id in
/// the outbox (`top`, a backward step of the primary key) with the snapshot's `xmin` and `xmax`,
/// from which the relay raises its floor ([`crate::relay::ordering`]); the trailer's event
/// columns are placeholders. The walk was at
/// the end of the keys (`at_end`: the cursor goes back to the start) when its last chunk came back
/// short or it stopped with none of its limits reached (the next chunk was empty). More may be
/// claimable when it was not, when the budget left rows out, or when a key had more rows than its
/// share; whether to go round again after the last key is the relay's call (it knows whether the
/// pass that just ended claimed anything: [`crate::relay::ordering::OrderingState::advance`]).
fn claim_sql(set: &str, all: bool) -> String {
    let chunk =
        format!("greatest({CHUNK_MIN}, least({CHUNK_MAX}, $1 - h.acc, {CHUNK_MIN} * h.firsts))");
    let source = chunk_source(all, &chunk);
    let size = |col: &str| {
        format!(
            "CASE WHEN pg_column_compression(o.{col}) IS NULL THEN pg_column_size(o.{col})
                  ELSE pg_column_size(o.{col} #> '{{}}') END"
        )
    };
    let row_size = format!("{} + {}", size("payload"), size("headers"));
    let first_firsts = CHUNK_FIRST / CHUNK_MIN;
    let returning = "o.id, o.tenant_id, o.aggregate_type, o.aggregate_id, o.event_type,
                      o.payload::text AS payload, o.headers::text AS headers, o.idempotency_key,
                      o.created_at, o.attempt_count";
    const CUT_FACTOR: i64 = 4;
    let blocked = key_blocked("x");
    format!(
        "WITH RECURSIVE probe AS MATERIALIZED (
            SELECT o.aggregate_type, o.tenant_id, o.aggregate_id, o.id, o.ctid, o.available_at,
                   o.locked_until,
                   o.published_at IS NULL AND o.dead_lettered_at IS NULL
                     AND ($3 OR o.aggregate_type = ANY($4)) AS pending
              FROM outbox o
             WHERE $11 > 0 AND o.id > $11
             ORDER BY o.id
             LIMIT {PROBE_ROWS}
        ), few AS MATERIALIZED (
            SELECT $11 > 0 AND count(*) < {PROBE_ROWS} AS yes FROM probe
        ), walk AS (
            SELECT 0 AS n, $5::text AS aggregate_type, $6::uuid AS tenant_id,
                   $7::text AS aggregate_id, NULL::bigint AS id, NULL::tid AS ctid, false AS head,
                   false AS single,
                   true AS last, false AS short, 0::bigint AS acc, 0::bigint AS keys,
                   0::bigint AS walked, {first_firsts}::bigint AS firsts
          UNION ALL
            SELECT h.n + 1, c.aggregate_type, c.tenant_id, c.aggregate_id, c.id, c.ctid, c.free_head,
                   c.single, c.last, c.short, h.acc + c.c_acc, h.keys + c.c_keys,
                   h.walked + c.c_n, c.c_first
              FROM walk h
             CROSS JOIN LATERAL (
                SELECT w.aggregate_type, w.tenant_id, w.aggregate_id, w.id, w.ctid, w.free_head,
                       w.key_n = 1 AND NOT w.last AS single, w.last, w.short,
                       w.c_acc + sum(CASE WHEN w.last AND NOT w.short AND w.key_free
                                          THEN least($2, {CUT_FACTOR} * w.key_n) - w.key_n
                                          ELSE 0 END) OVER ()::bigint AS c_acc,
                       w.c_keys, w.c_n, w.c_first
                  FROM (SELECT z.*, row_number() OVER () = count(*) OVER () AS last,
                               count(*) OVER () < {chunk} AS short,
                               count(*) FILTER (WHERE z.key_free) OVER () AS c_acc,
                               count(*) FILTER (WHERE z.free_head) OVER () AS c_keys,
                               count(*) OVER () AS c_n,
                               count(*) FILTER (WHERE z.first) OVER () AS c_first
                          FROM (SELECT y.*, bool_or(y.free_head) OVER (PARTITION BY
                                         y.aggregate_type, y.tenant_id, y.aggregate_id) AS key_free
                                  FROM (SELECT x.*,
                                               CASE WHEN x.first AND x.available_at <= now()
                                                         AND (x.locked_until IS NULL
                                                              OR x.locked_until < now())
                                                    THEN NOT {blocked}
                                                     AND ($11 = 0 OR NOT EXISTS (
                                                        SELECT FROM outbox p
                                                         WHERE p.aggregate_type = x.aggregate_type
                                                           AND p.tenant_id = x.tenant_id
                                                           AND p.aggregate_id = x.aggregate_id
                                                           AND p.id <= $11
                                                           AND p.published_at IS NULL
                                                           AND p.dead_lettered_at IS NULL))
                                                    ELSE false END AS free_head
                                          FROM (SELECT e.*,
                                                       row_number() OVER k = 1 AS first,
                                                       count(*) OVER (PARTITION BY e.aggregate_type,
                                                           e.tenant_id, e.aggregate_id) AS key_n
                                                  FROM ({source}) e
                                                WINDOW k AS (PARTITION BY e.aggregate_type,
                                                             e.tenant_id, e.aggregate_id
                                                             ORDER BY e.id)) x) y) z) w
                 WHERE w.first OR w.last
             ) c
             WHERE h.last AND NOT h.short AND h.walked < $8 AND (h.acc < $1 OR h.keys < $9)
        ), lock AS MATERIALIZED (
            SELECT o.id, o.ctid, o.aggregate_type, o.tenant_id, o.aggregate_id, {row_size} AS size
              FROM outbox o
             WHERE o.ctid = ANY(ARRAY(SELECT ctid FROM walk WHERE head))
               AND coalesce(o.published_at, o.dead_lettered_at) IS NULL
               AND o.available_at <= now() AND (o.locked_until IS NULL OR o.locked_until < now())
               FOR UPDATE SKIP LOCKED
        ), locked AS MATERIALIZED (
            SELECT l.*, coalesce(w.single, false) AS single
              FROM lock l LEFT JOIN walk w ON w.id = l.id AND w.head
        ), share AS MATERIALIZED (
            SELECT least($2::bigint, greatest(1, ($1 + count(*) - 1) / greatest(count(*), 1)))
                   AS per
              FROM locked
        ), rows AS MATERIALIZED (
            SELECT h.ctid, h.id, h.id AS head, h.size, true AS ok, 1::bigint AS k, true AS single
              FROM locked h WHERE h.single
            UNION ALL
            SELECT r.*, false FROM locked h CROSS JOIN LATERAL (
                SELECT o.ctid, o.id, h.id AS head, o.size,
                       bool_and(o.id = h.id OR (o.available_at <= now()
                                AND (o.locked_until IS NULL OR o.locked_until < now())))
                         OVER (ORDER BY o.id) AS ok,
                       row_number() OVER (ORDER BY o.id) AS k
                  FROM (SELECT o.ctid, o.id, o.available_at, o.locked_until, {row_size} AS size
                          FROM outbox o
                         WHERE o.aggregate_type = h.aggregate_type AND o.tenant_id = h.tenant_id
                           AND o.aggregate_id = h.aggregate_id AND o.id >= h.id
                           AND o.published_at IS NULL AND o.dead_lettered_at IS NULL
                         ORDER BY o.id
                         LIMIT (SELECT per FROM share)
                           FOR UPDATE) o
            ) r
             WHERE NOT h.single
        ), budget AS MATERIALIZED (
            SELECT ctid, id, row_number() OVER w AS rn, sum(size) OVER w AS run
              FROM rows WHERE ok
            WINDOW w AS (ORDER BY k, head ROWS UNBOUNDED PRECEDING)
        ), taken AS MATERIALIZED (
            SELECT ctid, id FROM budget WHERE rn <= $1 AND (rn = 1 OR run <= $10)
        ), last AS (
            SELECT aggregate_type, tenant_id, aggregate_id,
                   n = 0 OR short OR (walked < $8 AND (acc < $1 OR keys < $9)) AS at_end
              FROM walk WHERE last ORDER BY n DESC LIMIT 1
        ), upd AS (
            UPDATE outbox o
               SET {set}
             WHERE o.ctid = ANY(ARRAY(SELECT ctid FROM taken))
            RETURNING {returning}
        ), moved AS (
            UPDATE outbox o
               SET {set}
             WHERE o.id = ANY(ARRAY(SELECT id FROM taken EXCEPT SELECT id FROM upd))
            RETURNING {returning}
        )
        SELECT *, false AS trailer, NULL::text AS c_type, NULL::uuid AS c_tenant,
               NULL::text AS c_agg, false AS more, NULL::bigint AS walk_min,
               NULL::bigint AS top, NULL::bigint AS xmin, NULL::bigint AS xmax
          FROM upd
        UNION ALL
        SELECT *, false, NULL, NULL, NULL, false, NULL, NULL, NULL, NULL FROM moved
        UNION ALL
        SELECT 0, '00000000-0000-0000-0000-000000000000', '', '', '', '{{}}', '{{}}', '', now(), 0,
               true,
               CASE WHEN l.at_end THEN '' ELSE l.aggregate_type END,
               CASE WHEN l.at_end THEN '00000000-0000-0000-0000-000000000000'::uuid
                    ELSE l.tenant_id END,
               CASE WHEN l.at_end THEN '' ELSE l.aggregate_id END,
               NOT l.at_end
                 OR EXISTS (SELECT FROM budget WHERE rn > $1 OR (rn > 1 AND run > $10))
                 OR EXISTS (SELECT FROM rows WHERE NOT single GROUP BY head
                             HAVING max(k) >= (SELECT per FROM share) AND bool_and(ok)),
               (SELECT min(w.id) FROM walk w
                 WHERE w.n > 0 AND NOT (w.single AND w.id IN (SELECT id FROM taken))),
               (SELECT max(id) FROM outbox),
               pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
               pg_snapshot_xmax(pg_current_snapshot())::text::bigint
          FROM last l"
    )
}

/// Lease mode's ordered claim; `$12` lease in microseconds, `$13` claim token.
pub fn claim_lease_sql(all: bool) -> String {
    claim_sql(
        "locked_until = now() + $12 * interval '1 microsecond',
               attempt_count = o.attempt_count + 1,
               claim_token = $13",
        all,
    )
}

/// Transaction mode's ordered claim: marks the rows published in the caller's transaction.
pub fn claim_tx_sql(all: bool) -> String {
    claim_sql(
        "published_at = now(),
               locked_until = NULL,
               attempt_count = o.attempt_count + 1,
               last_error = NULL",
        all,
    )
}

#[derive(sqlx::FromRow)]
struct OrderedRow {
    #[sqlx(flatten)]
    row: ClaimedRow,
    trailer: bool,
    c_type: Option<String>,
    c_tenant: Option<Uuid>,
    c_agg: Option<String>,
    more: bool,
    walk_min: Option<i64>,
    top: Option<i64>,
    xmin: Option<i64>,
    xmax: Option<i64>,
}

/// Which claim, and its settings.
#[derive(Debug)]
pub enum OrderedMode {
    Lease { lease_micros: i64, token: Uuid },
    Tx,
}

/// The planner settings the ordered claim runs with, set for the claim's transaction in one
/// round trip (returning the values they replace, for tx mode to put back).
///
/// - `enable_sort = off`: its subqueries must read `outbox_key_pending_idx` in key order; on a
///   table not analysed since a bulk insert the planner otherwise prefers `outbox_ready_idx`
///   (same partial predicate) plus a sort, and each step of the walk then reads every pending row
///   (measured: 50 s for a claim over 20k keys, against 30 ms).
/// - `jit = off`: without a sort the key index is the only plan left, whose estimated cost is then
///   huge, so JIT would compile the statement on every run (measured 5 s of a 5.2 s claim).
/// - `plan_cache_mode = force_generic_plan`: the statement is planned once per connection, not at
///   every claim (planning it takes about 2 ms, as much as walking 500 keys; left to itself the
///   plan cache keeps custom plans, the generic one being costed higher). The generic plan has the
///   custom plan's shape (compared with `EXPLAIN`); it is re-planned when the table's statistics
///   change.
const PLANNER_OFF: &str = "SELECT current_setting('enable_sort'), current_setting('jit'),
        current_setting('plan_cache_mode'),
        set_config('enable_sort', 'off', true), set_config('jit', 'off', true),
        set_config('plan_cache_mode', 'force_generic_plan', true)";
const PLANNER_BACK: &str = "SELECT set_config('enable_sort', $1, true),
        set_config('jit', $2, true), set_config('plan_cache_mode', $3, true)";

type Settings = (String, String, String, String, String, String);

async fn planner_off(conn: &mut PgConnection) -> sqlx::Result<Settings> {
    sqlx::query_as(PLANNER_OFF)
        .persistent(true)
        .fetch_one(conn)
        .await
}

/// What an ordered claim asks for: `per_key` rows of a key at most, over `min_keys` keys at least
/// when there are as many, from `from` on.
#[derive(Debug)]
pub struct OrderedAsk<'a> {
    pub mode: OrderedMode,
    pub limit: BatchLimit,
    pub per_key: i64,
    pub min_keys: i64,
    pub ordering: &'a Ordering,
    pub from: &'a WalkStart,
}

/// Claims ordered rows (see [`claim_sql`]). Lease mode: in a transaction of its own (committed
/// before it returns, so no lock outlives it); tx mode: in the caller's, whose later statements
/// get the planner settings back.
pub async fn claim(conn: &mut PgConnection, ask: &OrderedAsk<'_>) -> sqlx::Result<OrderedClaim> {
    use sqlx::Connection;
    match ask.mode {
        OrderedMode::Lease { .. } => {
            let mut tx = conn.begin().await?;
            planner_off(&mut tx).await?;
            let out = claim_on(&mut tx, ask).await?;
            tx.commit().await?;
            Ok(out)
        }
        OrderedMode::Tx => {
            let old = planner_off(conn).await?;
            let out = claim_on(conn, ask).await?;
            sqlx::query(PLANNER_BACK)
                .bind(old.0)
                .bind(old.1)
                .bind(old.2)
                .persistent(true)
                .execute(&mut *conn)
                .await?;
            Ok(out)
        }
    }
}

async fn claim_on(conn: &mut PgConnection, ask: &OrderedAsk<'_>) -> sqlx::Result<OrderedClaim> {
    let OrderedAsk {
        mode,
        limit,
        per_key,
        min_keys,
        ordering,
        from,
    } = ask;
    let sql = match mode {
        OrderedMode::Lease { .. } => claim_lease_sql(ordering.all),
        OrderedMode::Tx => claim_tx_sql(ordering.all),
    };
    let q = sqlx::query_as::<_, OrderedRow>(&sql)
        .bind(limit.rows)
        .bind(per_key)
        .bind(ordering.all)
        .bind(&ordering.types)
        .bind(&from.cursor.aggregate_type)
        .bind(from.cursor.tenant_id)
        .bind(&from.cursor.aggregate_id)
        .bind(limit.rows.saturating_mul(WALK_PER_ROW))
        .bind((*min_keys).clamp(1, limit.rows.max(1)))
        .bind(limit.bytes)
        .bind(from.floor.max(0));
    let q = match mode {
        OrderedMode::Lease {
            lease_micros,
            token,
        } => q.bind(*lease_micros).bind(*token),
        OrderedMode::Tx => q,
    };
    let all = q.persistent(true).fetch_all(conn).await?;
    let mut out = OrderedClaim::default();
    for r in all {
        if r.trailer {
            out.cursor = Cursor {
                aggregate_type: r.c_type.unwrap_or_default(),
                tenant_id: r.c_tenant.unwrap_or_default(),
                aggregate_id: r.c_agg.unwrap_or_default(),
            };
            out.more = r.more;
            out.walk_min = r.walk_min;
            out.top = r.top;
            out.xids = r.xmin.zip(r.xmax);
        } else {
            out.rows.push(r.row);
        }
    }
    out.rows.sort_by(|a, b| {
        (&a.aggregate_type, a.tenant_id, &a.aggregate_id, a.id).cmp(&(
            &b.aggregate_type,
            b.tenant_id,
            &b.aggregate_id,
            b.id,
        ))
    });
    Ok(out)
}

/// The unordered claims' rows exclude the ordered types (the relay does not run them at all when
/// every type is ordered). The list is read by the statement itself (two one-time InitPlans,
/// not a per-row lookup), so a type switched on is never claimed unordered by a claim that
/// starts after the switch committed; `*` excludes every type. The relay's unordered claim
/// (`db::relay::claim_lease_filtered`, `claim_tx_filtered`) takes it as its filter.
pub const NOT_ORDERED: &str =
    "aggregate_type <> ALL (ARRAY(SELECT aggregate_type FROM outbox_ordering))
            AND NOT EXISTS (SELECT FROM outbox_ordering WHERE aggregate_type = '*') AND ";

#[cfg(test)]
mod tests;
