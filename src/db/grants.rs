//! Least privilege: what each use of outboxctl needs on the outbox's schema, as GRANT statements.
//!
//! The table below is the one place this is written: `outboxctl grants` prints (or applies) it,
//! docs/least-privilege.md describes it, and tests/it/database/grants.rs runs each use's commands
//! as a role that has only these grants. `migrate`, `ordering enable/disable` and `log
//! enable/disable` (which build and drop an index) need the schema's owner; `demo` and `bench` make schemas of their own.

use sqlx::PgConnection;

use crate::config::Schema;

/// A use of outboxctl, and the commands it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// The application and `publish`: inserts events.
    Producer,
    /// `relay` (every mode and sink): claims, marks, retries and dead-letters events.
    Relay,
    /// `dead`, `requeue`, `replay`, `events` (list, show, edit, cancel, reschedule), `ordering
    /// skip`, `prune`: reads and repairs events, with an audit row per change.
    Operator,
    /// `stats`, `doctor`, `events list/show`, `dead list/show/export`, `migrate --check`: reads.
    Monitor,
}

impl Use {
    /// Its name on the command line (`grants --for`).
    pub fn name(self) -> &'static str {
        match self {
            Use::Producer => "producer",
            Use::Relay => "relay",
            Use::Operator => "operator",
            Use::Monitor => "monitor",
        }
    }
}

/// Every use, in the order of the documentation.
pub const USES: [Use; 4] = [Use::Producer, Use::Relay, Use::Operator, Use::Monitor];

/// (privileges, object, why) per use; the object is in the outbox's schema. Every use also gets
/// `USAGE` on the schema, and every command reads `_sqlx_migrations` (it checks the schema is
/// migrated before it acts).
pub fn privileges(u: Use) -> &'static [(&'static str, &'static str, &'static str)] {
    const MIGRATIONS: (&str, &str, &str) = (
        "SELECT",
        "TABLE _sqlx_migrations",
        "every command checks that the schema is migrated",
    );
    match u {
        Use::Producer => &[
            ("INSERT", "TABLE outbox", "the event's row"),
            (
                "SELECT (id, idempotency_key)",
                "TABLE outbox",
                "`publish` reads back the new id and skips a known idempotency key",
            ),
            ("USAGE", "SEQUENCE outbox_id_seq", "the event's id"),
            MIGRATIONS,
        ],
        Use::Relay => &[
            (
                "SELECT, UPDATE",
                "TABLE outbox",
                "claims, marks published, retries and dead-letters",
            ),
            (
                "SELECT",
                "TABLE outbox_ordering",
                "which aggregate types are ordered",
            ),
            (
                "SELECT, INSERT, UPDATE",
                "TABLE outbox_relay_floor",
                "where `relay --once` runs start (one row)",
            ),
            (
                "SELECT, UPDATE",
                "TABLE outbox_log",
                "whether log mode is on; in log mode, the reader's lease and position",
            ),
            (
                "SELECT, INSERT, UPDATE, DELETE",
                "TABLE outbox_log_retry",
                "log mode's retry set (failed, delayed and handed-over events)",
            ),
            MIGRATIONS,
        ],
        Use::Operator => &[
            (
                "SELECT, UPDATE, DELETE",
                "TABLE outbox",
                "edits, requeues, cancels, discards and prunes events",
            ),
            (
                "SELECT, INSERT, UPDATE, DELETE",
                "TABLE outbox_audit",
                "an audit row per change (prune's is updated as it goes); `prune --audit-older-than`",
            ),
            (
                "USAGE",
                "SEQUENCE outbox_audit_id_seq",
                "the audit row's id",
            ),
            (
                "SELECT, INSERT, UPDATE, DELETE",
                "TABLE outbox_locks",
                "`prune`'s lock against an overlapping run",
            ),
            (
                "SELECT, DELETE",
                "TABLE processed_messages",
                "`prune --processed-older-than`",
            ),
            (
                "SELECT",
                "TABLE outbox_ordering",
                "which keys a dead letter blocks",
            ),
            (
                "UPDATE (key_floor)",
                "TABLE outbox_relay_floor",
                "a requeue makes the next `relay --once` look below the ordered walk's floor",
            ),
            (
                "SELECT",
                "TABLE outbox_log",
                "in log mode, which events the log has passed (`prune`, a requeue)",
            ),
            (
                "SELECT, INSERT, UPDATE",
                "TABLE outbox_log_retry",
                "in log mode, a requeued or rescheduled event joins the retry set",
            ),
            MIGRATIONS,
        ],
        Use::Monitor => &[
            (
                "SELECT",
                "TABLE outbox",
                "backlog, lag, events and dead letters",
            ),
            ("SELECT", "TABLE outbox_audit", "`doctor`'s last prune"),
            ("SELECT", "TABLE outbox_locks", "`doctor`'s prune lock"),
            ("SELECT", "TABLE outbox_ordering", "blocked keys"),
            ("SELECT", "TABLE outbox_log", "log mode's switch and position"),
            ("SELECT", "TABLE outbox_log_retry", "log mode's retry set"),
            (
                "SELECT",
                "TABLE processed_messages",
                "`doctor`'s table sizes",
            ),
            MIGRATIONS,
        ],
    }
}

/// The GRANT statements of `u` for `role` on `schema`, one per line, each ending in `;`.
/// `role` is quoted as an identifier (any name, never pasted raw into SQL).
pub fn statements(schema: &Schema, role: &str, u: Use) -> Vec<String> {
    let role = format!("\"{}\"", role.replace('"', "\"\""));
    let s = schema.quoted();
    let mut out = vec![format!("GRANT USAGE ON SCHEMA {s} TO {role};")];
    for (privileges, object, _) in privileges(u) {
        let (kind, name) = object.split_once(' ').expect("KIND name");
        out.push(format!(
            "GRANT {privileges} ON {kind} {s}.{name} TO {role};"
        ));
    }
    out
}

/// Runs `statements` in one transaction: all or none.
pub async fn apply(conn: &mut PgConnection, statements: &[String]) -> sqlx::Result<()> {
    use sqlx::Connection;
    let mut tx = conn.begin().await?;
    for sql in statements {
        sqlx::raw_sql(sql).execute(&mut *tx).await?;
    }
    tx.commit().await
}

/// Whether `role` exists (asked before applying, so the error names it).
pub async fn role_exists(conn: &mut PgConnection, role: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)")
        .bind(role)
        .fetch_one(conn)
        .await
}

/// What the session's role lacks of `u`'s privileges on `schema`, as (privilege, object) in the
/// table's order, e.g. `("UPDATE", "table outbox")`: the server's `has_*_privilege` functions,
/// one statement.
pub async fn missing(
    conn: &mut PgConnection,
    schema: &Schema,
    u: Use,
) -> sqlx::Result<Vec<(String, String)>> {
    // (kind, object, column or "", privilege) per privilege.
    let mut rows: Vec<(String, String, String, String)> = vec![(
        "SCHEMA".into(),
        schema.name().to_owned(),
        String::new(),
        "USAGE".into(),
    )];
    for (privileges, object, _) in privileges(u) {
        let (kind, name) = object.split_once(' ').expect("KIND name");
        let qualified = format!("{}.{name}", schema.quoted());
        // "SELECT (id, idempotency_key)": a privilege on columns.
        match privileges.split_once(" (") {
            Some((privilege, columns)) => {
                for column in columns.trim_end_matches(')').split(", ") {
                    rows.push((
                        "COLUMN".into(),
                        qualified.clone(),
                        column.into(),
                        privilege.into(),
                    ));
                }
            }
            None => {
                for privilege in privileges.split(", ") {
                    rows.push((
                        kind.into(),
                        qualified.clone(),
                        String::new(),
                        privilege.into(),
                    ));
                }
            }
        }
    }
    let (kinds, objects, columns, privs): (Vec<_>, Vec<_>, Vec<_>, Vec<_>) = rows.into_iter().fold(
        Default::default(),
        |(mut k, mut o, mut c, mut p), (a, b, cc, d)| {
            k.push(a);
            o.push(b);
            c.push(cc);
            p.push(d);
            (k, o, c, p)
        },
    );
    sqlx::query_as(
        "SELECT p, CASE k WHEN 'COLUMN' THEN 'column ' || c || ' of table ' || o
                         ELSE lower(k) || ' ' || o END
           FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY
                AS t(k, o, c, p, n)
          WHERE NOT CASE k
                    WHEN 'SCHEMA' THEN has_schema_privilege(o, p)
                    WHEN 'TABLE' THEN has_table_privilege(o, p)
                    WHEN 'SEQUENCE' THEN has_sequence_privilege(o, p)
                    ELSE has_column_privilege(o, c, p)
                    END
          ORDER BY n",
    )
    .bind(&kinds)
    .bind(&objects)
    .bind(&columns)
    .bind(&privs)
    .fetch_all(conn)
    .await
}
