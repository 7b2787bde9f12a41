//! The journal's database: a PostgreSQL or a MySQL/MariaDB pool (sqlx), and the few
//! statements the journal runs, written once per dialect by `dialect!` (the SQL differs in
//! its upsert and placeholders; the rest is the same code). Every statement of a batch runs
//! in one transaction.

use super::JournalError;
use super::row::{JobRow, Op, RowState};
use super::schema;
use crate::job::{JobId, UnixMillis};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{MySqlPool, PgPool, Row};
use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

/// Connections the journal keeps: the writer uses one, pruning one, a restore two (its lock's
/// and its reads).
const POOL_SIZE: u32 = 5;
/// Longest wait for a connection, at start and per batch.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Most rows per INSERT statement (both servers allow 65,535 placeholders; a job row has 15).
const ROWS_PER_STATEMENT: usize = 1_000;

/// A journal database.
#[derive(Clone)]
pub enum Db {
    Postgres(PgPool),
    MySql(MySqlPool),
}

/// Which kind of database a URL names, from its scheme; `None` for any other URL.
pub fn dialect_of(url: &str) -> Option<&'static str> {
    let scheme = url.split_once("://")?.0;
    match scheme {
        "postgres" | "postgresql" => Some("postgres"),
        "mysql" | "mariadb" => Some("mysql"),
        _ => None,
    }
}

/// Checks a journal URL without connecting: its scheme and its form. The URL is not echoed
/// (it may hold a password).
pub fn check_url(url: &str) -> Result<(), String> {
    match dialect_of(url) {
        Some("postgres") => PgConnectOptions::from_str(url)
            .map(|_| ())
            .map_err(|e| format!("not a valid PostgreSQL URL: {}", redact_error(&e, url))),
        Some(_) => MySqlConnectOptions::from_str(&mysql_url(url))
            .map(|_| ())
            .map_err(|e| format!("not a valid MySQL URL: {}", redact_error(&e, url))),
        None => Err("must start with postgres://, postgresql://, mysql:// or mariadb://".into()),
    }
}

/// sqlx's MySQL driver reads `mysql://`; `mariadb://` is the same protocol.
fn mysql_url(url: &str) -> String {
    match url.strip_prefix("mariadb://") {
        Some(rest) => format!("mysql://{rest}"),
        None => url.to_string(),
    }
}

/// An error's text without the URL in it.
fn redact_error(e: &dyn std::fmt::Display, url: &str) -> String {
    e.to_string().replace(url, &crate::server::redact_url(url))
}

/// A database error as the journal reports it.
fn db_err(what: &str, e: sqlx::Error) -> JournalError {
    JournalError::Database(format!("{what}: {e}"))
}

impl Db {
    /// Connects and migrates the schema to [`schema::LATEST`]; refuses a newer schema.
    pub async fn open(url: &str) -> Result<Db, JournalError> {
        check_url(url).map_err(JournalError::Url)?;
        let unreachable = |e: sqlx::Error| {
            JournalError::Unreachable(format!(
                "{}: {}",
                crate::server::redact_url(url),
                redact_error(&e, url)
            ))
        };
        let db = match dialect_of(url) {
            Some("postgres") => {
                let options = PgConnectOptions::from_str(url).map_err(unreachable)?;
                let pool = PgPoolOptions::new()
                    .max_connections(POOL_SIZE)
                    .acquire_timeout(CONNECT_TIMEOUT)
                    .connect_with(options)
                    .await
                    .map_err(unreachable)?;
                Db::Postgres(pool)
            }
            _ => {
                let options =
                    MySqlConnectOptions::from_str(&mysql_url(url)).map_err(unreachable)?;
                let pool = MySqlPoolOptions::new()
                    .max_connections(POOL_SIZE)
                    .acquire_timeout(CONNECT_TIMEOUT)
                    .connect_with(options)
                    .await
                    .map_err(unreachable)?;
                Db::MySql(pool)
            }
        };
        db.migrate().await?;
        Ok(db)
    }

    pub async fn close(&self) {
        match self {
            Db::Postgres(p) => p.close().await,
            Db::MySql(p) => p.close().await,
        }
    }
}

/// The statements of one dialect, as methods of [`Db`] matching on it.
macro_rules! dialect {
    ($($name:ident: $db:ty, $pool:ident, $migrations:expr, $one:path, $bulk:path, $upsert:expr;)*) => {
        $(
        mod $name {
            use super::*;
            type Q<'a> = sqlx::QueryBuilder<'a, $db>;

            pub async fn migrate(pool: &sqlx::Pool<$db>) -> Result<(), JournalError> {
                let create = format!(
                    "CREATE TABLE IF NOT EXISTS {} (version BIGINT NOT NULL)",
                    schema::VERSION_TABLE
                );
                sqlx::query(&create)
                    .execute(pool)
                    .await
                    .map_err(|e| db_err("cannot create the schema table", e))?;
                let read = format!("SELECT MAX(version) AS v FROM {}", schema::VERSION_TABLE);
                let row = sqlx::query(&read)
                    .fetch_one(pool)
                    .await
                    .map_err(|e| db_err("cannot read the schema version", e))?;
                let version: Option<i64> = row
                    .try_get("v")
                    .map_err(|e| db_err("cannot read the schema version", e))?;
                let version = version.unwrap_or(0);
                if version > schema::LATEST {
                    return Err(JournalError::NewerSchema {
                        found: version,
                        supported: schema::LATEST,
                    });
                }
                let migrations: &[&[&str]] = $migrations;
                for (i, statements) in migrations.iter().enumerate() {
                    let target = i as i64 + 1;
                    if target <= version {
                        continue;
                    }
                    for sql in *statements {
                        sqlx::query(sql).execute(pool).await.map_err(|e| {
                            db_err(&format!("migration to schema version {target} failed"), e)
                        })?;
                    }
                    let set = format!("INSERT INTO {} (version) VALUES ({target})", schema::VERSION_TABLE);
                    sqlx::query(&set)
                        .execute(pool)
                        .await
                        .map_err(|e| db_err("cannot record the schema version", e))?;
                    tracing::info!(version = target, "journal schema migrated");
                }
                Ok(())
            }

            /// Writes `ops` in order, in one transaction.
            pub async fn write(
                pool: &sqlx::Pool<$db>,
                ops: &[Op],
                instance: &str,
            ) -> Result<(), sqlx::Error> {
                if $one(pool, ops, instance).await? {
                    return Ok(());
                }
                let mut tx = pool.begin().await?;
                // Runs between kicks of a topic: each is written as its own statements after
                // the ops before it.
                for run in ops.split_inclusive(|op| matches!(op, Op::KickTopic { .. })) {
                    let (last, rest) = match run.split_last() {
                        Some((last @ Op::KickTopic { .. }, rest)) => (Some(last), rest),
                        _ => (None, run),
                    };
                    write_run(&mut tx, rest, instance).await?;
                    if let Some(Op::KickTopic { queue, n, at }) = last {
                        kick_topic(&mut tx, queue.as_str(), *n, *at, instance).await?;
                    }
                }
                tx.commit().await
            }

            /// Ops without kicks of a topic: the last of each job's ops decides its row; every
            /// op is an event.
            async fn write_run(
                tx: &mut sqlx::Transaction<'static, $db>,
                ops: &[Op],
                instance: &str,
            ) -> Result<(), sqlx::Error> {
                if ops.is_empty() {
                    return Ok(());
                }
                let (puts, ends) = last_of(ops);
                if $bulk(tx, &puts, &ends, ops, instance).await? {
                    return Ok(());
                }
                for chunk in puts.chunks(ROWS_PER_STATEMENT) {
                    let mut q = Q::new(
                        "INSERT INTO delayq_jobs (id, topic, queue, body, run_at, ttr_ms, \
                         priority, attempts, max_attempts, backoff_ms, callback_url, \
                         callback_timeout_ms, state, reserved_until, seq, changed_at, publish) ",
                    );
                    q.push_values(chunk, |mut b, row| {
                        let s = &row.spec;
                        b.push_bind(s.id.as_str().to_string())
                            .push_bind(s.topic.as_str().to_string())
                            .push_bind(s.queue().as_str().to_string())
                            .push_bind(s.body.as_bytes().to_vec())
                            .push_bind(i(s.run_at))
                            .push_bind(i(s.ttr_ms))
                            .push_bind(i64::from(s.priority))
                            .push_bind(i64::from(row.attempts))
                            .push_bind(i64::from(s.max_attempts))
                            .push_bind(row.backoff_text())
                            .push_bind(s.callback.as_ref().map(|c| c.url.clone()))
                            .push_bind(s.callback.as_ref().map(|c| i(c.timeout_ms)))
                            .push_bind(row.state.as_str())
                            .push_bind(row.reserved_until.map(i))
                            .push_bind(i(row.seq))
                            .push_bind(i(row.changed_at))
                            .push_bind(s.publish.as_ref().map(|p| p.pack()));
                    });
                    q.push($upsert);
                    q.build().execute(&mut **tx).await?;
                }
                for chunk in ends.chunks(ROWS_PER_STATEMENT) {
                    // One statement per ending state, at the latest time among its jobs.
                    for to in [RowState::Finished, RowState::Deleted, RowState::Skipped] {
                        let ids: Vec<_> = chunk.iter().filter(|e| e.1 == to).collect();
                        let Some(at) = ids.iter().map(|e| e.2).max() else { continue };
                        let mut q = Q::new("UPDATE delayq_jobs SET state = ");
                        q.push_bind(to.as_str()).push(", changed_at = ").push_bind(i(at));
                        q.push(" WHERE id IN (");
                        let mut sep = q.separated(", ");
                        for (id, _, _) in &ids {
                            sep.push_bind(id.as_str().to_string());
                        }
                        q.push(")");
                        q.build().execute(&mut **tx).await?;
                    }
                }
                for chunk in ops.chunks(ROWS_PER_STATEMENT) {
                    let mut q = Q::new(
                        "INSERT INTO delayq_job_events (job_id, from_state, to_state, at, instance) ",
                    );
                    q.push_values(chunk.iter().filter_map(event_of), |mut b, (id, from, to, at)| {
                        b.push_bind(id.as_str().to_string())
                            .push_bind(from.map(|s| s.as_str()))
                            .push_bind(to.as_str())
                            .push_bind(i(at))
                            .push_bind(instance.to_string());
                    });
                    q.build().execute(&mut **tx).await?;
                }
                Ok(())
            }

            /// Kicks the `n` oldest dead rows of `queue`, by burial time and then the store's burial
            /// stamp (the store kicks its oldest burials).
            async fn kick_topic(
                tx: &mut sqlx::Transaction<'static, $db>,
                queue: &str,
                n: u64,
                at: UnixMillis,
                instance: &str,
            ) -> Result<(), sqlx::Error> {
                let mut q = Q::new("SELECT id FROM delayq_jobs WHERE queue = ");
                q.push_bind(queue.to_string())
                    .push(" AND state = 'dead' ORDER BY changed_at, seq, id LIMIT ")
                    .push_bind(i(n));
                let ids: Vec<String> = q
                    .build()
                    .fetch_all(&mut **tx)
                    .await?
                    .iter()
                    .map(|r| text(r, "id"))
                    .collect::<Result<_, _>>()?;
                for chunk in ids.chunks(ROWS_PER_STATEMENT) {
                    let mut q = Q::new(
                        "UPDATE delayq_jobs SET state = 'ready', attempts = 0, changed_at = ",
                    );
                    q.push_bind(i(at)).push(", run_at = ").push_bind(i(at));
                    q.push(" WHERE id IN (");
                    let mut sep = q.separated(", ");
                    for id in chunk {
                        sep.push_bind(id.clone());
                    }
                    q.push(")");
                    q.build().execute(&mut **tx).await?;
                    let mut q = Q::new(
                        "INSERT INTO delayq_job_events (job_id, from_state, to_state, at, instance) ",
                    );
                    q.push_values(chunk, |mut b, id| {
                        b.push_bind(id.clone())
                            .push_bind("dead")
                            .push_bind("ready")
                            .push_bind(i(at))
                            .push_bind(instance.to_string());
                    });
                    q.build().execute(&mut **tx).await?;
                }
                Ok(())
            }

            const COLUMNS: &str = "id, topic, body, run_at, ttr_ms, priority, attempts, \
                max_attempts, backoff_ms, callback_url, callback_timeout_ms, state, \
                reserved_until, changed_at, publish";

            /// A text column: MySQL reports a binary-collated one as VARBINARY.
            fn text(r: &<$db as sqlx::Database>::Row, col: &str) -> Result<String, sqlx::Error> {
                r.try_get::<String, _>(col).or_else(|_| {
                    let bytes: Vec<u8> = r.try_get(col)?;
                    String::from_utf8(bytes).map_err(|e| sqlx::Error::Decode(Box::new(e)))
                })
            }

            fn opt_text(
                r: &<$db as sqlx::Database>::Row,
                col: &str,
            ) -> Result<Option<String>, sqlx::Error> {
                r.try_get::<Option<String>, _>(col).or_else(|_| {
                    let bytes: Option<Vec<u8>> = r.try_get(col)?;
                    bytes
                        .map(String::from_utf8)
                        .transpose()
                        .map_err(|e| sqlx::Error::Decode(Box::new(e)))
                })
            }

            fn decode(r: &<$db as sqlx::Database>::Row) -> Result<JobRow, String> {
                let e = |e: sqlx::Error| e.to_string();
                JobRow::from_columns(
                    text(r, "id").map_err(e)?,
                    text(r, "topic").map_err(e)?,
                    r.try_get("body").map_err(e)?,
                    r.try_get("run_at").map_err(e)?,
                    r.try_get("ttr_ms").map_err(e)?,
                    r.try_get("priority").map_err(e)?,
                    r.try_get("attempts").map_err(e)?,
                    r.try_get("max_attempts").map_err(e)?,
                    text(r, "backoff_ms").map_err(e)?,
                    opt_text(r, "callback_url").map_err(e)?,
                    r.try_get("callback_timeout_ms").map_err(e)?,
                    text(r, "state").map_err(e)?,
                    r.try_get("reserved_until").map_err(e)?,
                    r.try_get("changed_at").map_err(e)?,
                    opt_text(r, "publish").map_err(e)?,
                )
            }

            /// Up to `limit` rows with ids after `after`, in id order; or the row of `id`.
            pub async fn rows(
                pool: &sqlx::Pool<$db>,
                after: Option<&str>,
                only: Option<&str>,
                limit: usize,
            ) -> Result<Vec<JobRow>, JournalError> {
                let mut q = Q::new(format!("SELECT {COLUMNS} FROM delayq_jobs WHERE 1 = 1"));
                if let Some(after) = after {
                    q.push(" AND id > ").push_bind(after.to_string());
                }
                if let Some(only) = only {
                    q.push(" AND id = ").push_bind(only.to_string());
                }
                q.push(" ORDER BY id LIMIT ").push_bind(limit as i64);
                let rows = q
                    .build()
                    .fetch_all(pool)
                    .await
                    .map_err(|e| db_err("cannot read the journal", e))?;
                rows.iter()
                    .map(|r| decode(r).map_err(JournalError::Corrupt))
                    .collect()
            }

            /// Deletes ended jobs and events older than `before`; returns the rows deleted.
            pub async fn prune(pool: &sqlx::Pool<$db>, before: UnixMillis) -> Result<u64, sqlx::Error> {
                let mut q = Q::new("DELETE FROM delayq_jobs WHERE changed_at < ");
                q.push_bind(i(before)).push(" AND state IN (");
                let mut sep = q.separated(", ");
                for s in RowState::ENDED {
                    sep.push_bind(s);
                }
                q.push(")");
                let jobs = q.build().execute(pool).await?.rows_affected();
                let mut q = Q::new("DELETE FROM delayq_job_events WHERE at < ");
                q.push_bind(i(before));
                let events = q.build().execute(pool).await?.rows_affected();
                Ok(jobs + events)
            }
        }
        )*

        impl Db {
            async fn migrate(&self) -> Result<(), JournalError> {
                match self { $( Db::$pool(p) => $name::migrate(p).await, )* }
            }

            /// Writes `ops` in order, in one transaction.
            pub async fn write(&self, ops: &[Op], instance: &str) -> Result<(), sqlx::Error> {
                match self { $( Db::$pool(p) => $name::write(p, ops, instance).await, )* }
            }

            /// Up to `limit` rows with ids after `after`, in id order (`only`: that id's row).
            pub async fn rows(
                &self,
                after: Option<&str>,
                only: Option<&str>,
                limit: usize,
            ) -> Result<Vec<JobRow>, JournalError> {
                match self { $( Db::$pool(p) => $name::rows(p, after, only, limit).await, )* }
            }

            /// Deletes ended jobs and events older than `before`; returns the rows deleted.
            pub async fn prune(&self, before: UnixMillis) -> Result<u64, sqlx::Error> {
                match self { $( Db::$pool(p) => $name::prune(p, before).await, )* }
            }
        }
    };
}

dialect! {
    pg: sqlx::Postgres, Postgres, schema::POSTGRES, pg_one, pg_bulk,
        " ON CONFLICT (id) DO UPDATE SET topic = EXCLUDED.topic, queue = EXCLUDED.queue, \
         body = EXCLUDED.body, run_at = EXCLUDED.run_at, ttr_ms = EXCLUDED.ttr_ms, \
         priority = EXCLUDED.priority, attempts = EXCLUDED.attempts, \
         max_attempts = EXCLUDED.max_attempts, backoff_ms = EXCLUDED.backoff_ms, \
         callback_url = EXCLUDED.callback_url, callback_timeout_ms = EXCLUDED.callback_timeout_ms, \
         state = EXCLUDED.state, reserved_until = EXCLUDED.reserved_until, seq = EXCLUDED.seq, \
         changed_at = EXCLUDED.changed_at, publish = EXCLUDED.publish";
    my: sqlx::MySql, MySql, schema::MYSQL, no_one, no_bulk,
        " ON DUPLICATE KEY UPDATE topic = VALUES(topic), queue = VALUES(queue), \
         body = VALUES(body), run_at = VALUES(run_at), ttr_ms = VALUES(ttr_ms), \
         priority = VALUES(priority), attempts = VALUES(attempts), \
         max_attempts = VALUES(max_attempts), backoff_ms = VALUES(backoff_ms), \
         callback_url = VALUES(callback_url), callback_timeout_ms = VALUES(callback_timeout_ms), \
         state = VALUES(state), reserved_until = VALUES(reserved_until), seq = VALUES(seq), \
         changed_at = VALUES(changed_at), publish = VALUES(publish)";
}

/// The ends of a run: job, the state it ended in, when.
type Ends<'a> = [(&'a JobId, RowState, UnixMillis)];

/// The rows a run of ops (no kick of a topic among them) leaves: each job's last op decides,
/// a put (its row) or an end.
fn last_of(ops: &[Op]) -> (Vec<&JobRow>, Vec<(&JobId, RowState, UnixMillis)>) {
    let mut last: HashMap<&JobId, &Op> = HashMap::new();
    for op in ops {
        if let Some(id) = op.id() {
            last.insert(id, op);
        }
    }
    let mut puts: Vec<&JobRow> = Vec::new();
    let mut ends: Vec<(&JobId, RowState, UnixMillis)> = Vec::new();
    for op in ops {
        let Some(id) = op.id() else { continue };
        if !std::ptr::eq(last[id], op) {
            continue;
        }
        match op {
            Op::Put { row, .. } => puts.push(row),
            Op::End { id, to, at, .. } => ends.push((id, *to, *at)),
            Op::KickTopic { .. } => {}
        }
    }
    (puts, ends)
}

/// MySQL writes every batch in an explicit transaction (`write`).
async fn no_one(_: &MySqlPool, _: &[Op], _: &str) -> Result<bool, sqlx::Error> {
    Ok(false)
}

/// PostgreSQL writes a batch without a kick of a topic as one statement (data-modifying
/// `WITH` clauses over arrays, atomic as any statement): one round trip per commit. A batch
/// with a kick goes through the transaction of `write`.
async fn pg_one(pool: &PgPool, ops: &[Op], instance: &str) -> Result<bool, sqlx::Error> {
    if ops.iter().any(|op| matches!(op, Op::KickTopic { .. })) {
        return Ok(false);
    }
    let (puts, ends) = last_of(ops);
    let events: Vec<_> = ops.iter().filter_map(event_of).collect();
    let query = sqlx::query(PG_ONE);
    bind_events(bind_ends(bind_puts(query, &puts), &ends), &events)
        .bind(instance)
        .execute(pool)
        .await?;
    Ok(true)
}

type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// A state change: job, from (none for a new job), to, when.
type Event<'a> = (&'a JobId, Option<RowState>, RowState, UnixMillis);

/// Binds the 3 column arrays of `ends` (id, state, at) after what `query` has bound.
fn bind_ends<'q>(query: PgQuery<'q>, ends: &Ends<'_>) -> PgQuery<'q> {
    query
        .bind(
            ends.iter()
                .map(|e| e.0.as_str().to_string())
                .collect::<Vec<_>>(),
        )
        .bind(
            ends.iter()
                .map(|e| e.1.as_str().to_string())
                .collect::<Vec<_>>(),
        )
        .bind(ends.iter().map(|e| i(e.2)).collect::<Vec<_>>())
}

/// Binds the 4 column arrays of `events` (id, from, to, at) after what `query` has bound.
fn bind_events<'q>(query: PgQuery<'q>, events: &[Event<'_>]) -> PgQuery<'q> {
    query
        .bind(
            events
                .iter()
                .map(|e| e.0.as_str().to_string())
                .collect::<Vec<_>>(),
        )
        .bind(
            events
                .iter()
                .map(|e| e.1.map(|s| s.as_str().to_string()))
                .collect::<Vec<_>>(),
        )
        .bind(
            events
                .iter()
                .map(|e| e.2.as_str().to_string())
                .collect::<Vec<_>>(),
        )
        .bind(events.iter().map(|e| i(e.3)).collect::<Vec<_>>())
}

/// Binds the 16 column arrays of `puts` ($1 to $16).
fn bind_puts<'q>(query: PgQuery<'q>, puts: &[&JobRow]) -> PgQuery<'q> {
    let s = |f: fn(&JobRow) -> String| puts.iter().map(|r| f(r)).collect::<Vec<String>>();
    let n = |f: fn(&JobRow) -> i64| puts.iter().map(|r| f(r)).collect::<Vec<i64>>();
    query
        .bind(s(|r| r.spec.id.as_str().to_string()))
        .bind(s(|r| r.spec.topic.as_str().to_string()))
        .bind(s(|r| r.spec.queue().as_str().to_string()))
        .bind(
            puts.iter()
                .map(|r| r.spec.body.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        )
        .bind(n(|r| i(r.spec.run_at)))
        .bind(n(|r| i(r.spec.ttr_ms)))
        .bind(n(|r| i64::from(r.spec.priority)))
        .bind(n(|r| i64::from(r.attempts)))
        .bind(n(|r| i64::from(r.spec.max_attempts)))
        .bind(s(|r| r.backoff_text()))
        .bind(
            puts.iter()
                .map(|r| r.spec.callback.as_ref().map(|c| c.url.clone()))
                .collect::<Vec<_>>(),
        )
        .bind(
            puts.iter()
                .map(|r| r.spec.callback.as_ref().map(|c| i(c.timeout_ms)))
                .collect::<Vec<_>>(),
        )
        .bind(s(|r| r.state.as_str().to_string()))
        .bind(
            puts.iter()
                .map(|r| r.reserved_until.map(i))
                .collect::<Vec<_>>(),
        )
        .bind(n(|r| i(r.seq)))
        .bind(n(|r| i(r.changed_at)))
        .bind(
            puts.iter()
                .map(|r| r.spec.publish.as_ref().map(|p| p.pack()))
                .collect::<Vec<_>>(),
        )
}

/// MySQL has no arrays: its rows go in multi-row statements (`write_run`).
async fn no_bulk(
    _: &mut sqlx::Transaction<'static, sqlx::MySql>,
    _: &[&JobRow],
    _: &Ends<'_>,
    _: &[Op],
    _: &str,
) -> Result<bool, sqlx::Error> {
    Ok(false)
}

/// PostgreSQL: every row of a run in three statements of fixed text, each column bound as one
/// array (`UNNEST`), so each statement is prepared once per connection and planned once,
/// whatever the batch's size.
async fn pg_bulk(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    puts: &[&JobRow],
    ends: &Ends<'_>,
    ops: &[Op],
    instance: &str,
) -> Result<bool, sqlx::Error> {
    if !puts.is_empty() {
        bind_puts(sqlx::query(PG_UPSERT), puts)
            .execute(&mut **tx)
            .await?;
    }
    if !ends.is_empty() {
        let update = sqlx::query(
            "UPDATE delayq_jobs AS j SET state = e.state, changed_at = e.at \
             FROM UNNEST($1::varchar[], $2::varchar[], $3::int8[]) AS e(id, state, at) \
             WHERE j.id = e.id",
        );
        bind_ends(update, ends).execute(&mut **tx).await?;
    }
    let events: Vec<_> = ops.iter().filter_map(event_of).collect();
    if !events.is_empty() {
        let insert = sqlx::query(
            "INSERT INTO delayq_job_events (job_id, from_state, to_state, at, instance) \
             SELECT e.id, e.from_state, e.to_state, e.at, $5 \
             FROM UNNEST($1::varchar[], $2::varchar[], $3::varchar[], $4::int8[]) \
             AS e(id, from_state, to_state, at)",
        );
        bind_events(insert, &events)
            .bind(instance)
            .execute(&mut **tx)
            .await?;
    }
    Ok(true)
}

/// PostgreSQL's upsert of job rows, one array per column ($1–$17). A macro, so that
/// [`PG_ONE`] can contain it.
macro_rules! pg_upsert {
    () => {
        "INSERT INTO delayq_jobs (id, topic, queue, body, run_at, ttr_ms, \
    priority, attempts, max_attempts, backoff_ms, callback_url, callback_timeout_ms, state, \
    reserved_until, seq, changed_at, publish) \
    SELECT * FROM UNNEST($1::varchar[], $2::varchar[], $3::varchar[], $4::bytea[], \
    $5::int8[], $6::int8[], $7::int8[], $8::int8[], $9::int8[], $10::text[], $11::text[], \
    $12::int8[], $13::varchar[], $14::int8[], $15::int8[], $16::int8[], $17::text[]) \
    ON CONFLICT (id) DO UPDATE SET topic = EXCLUDED.topic, queue = EXCLUDED.queue, \
    body = EXCLUDED.body, run_at = EXCLUDED.run_at, ttr_ms = EXCLUDED.ttr_ms, \
    priority = EXCLUDED.priority, attempts = EXCLUDED.attempts, \
    max_attempts = EXCLUDED.max_attempts, backoff_ms = EXCLUDED.backoff_ms, \
    callback_url = EXCLUDED.callback_url, callback_timeout_ms = EXCLUDED.callback_timeout_ms, \
    state = EXCLUDED.state, reserved_until = EXCLUDED.reserved_until, seq = EXCLUDED.seq, \
    changed_at = EXCLUDED.changed_at, publish = EXCLUDED.publish"
    };
}

/// PostgreSQL's upsert of job rows, one array per column.
const PG_UPSERT: &str = pg_upsert!();

/// PostgreSQL's whole batch in one statement: the job rows ($1–$17, as [`PG_UPSERT`]), the
/// ends ($18–$20) and the events ($21–$24, instance $25).
const PG_ONE: &str = concat!(
    "WITH puts AS (",
    pg_upsert!(),
    "), ends AS (UPDATE delayq_jobs AS j SET state = e.state, changed_at = e.at \
    FROM UNNEST($18::varchar[], $19::varchar[], $20::int8[]) AS e(id, state, at) \
    WHERE j.id = e.id) \
    INSERT INTO delayq_job_events (job_id, from_state, to_state, at, instance) \
    SELECT e.id, e.from_state, e.to_state, e.at, $25 \
    FROM UNNEST($21::varchar[], $22::varchar[], $23::varchar[], $24::int8[]) \
    AS e(id, from_state, to_state, at)"
);

/// The database-wide lock of a restore, held by one connection of the pool for the restore's
/// duration: a restore on another delayq sharing the journal is refused while it is held. The
/// database releases it when that connection ends: [`RestoreLock::release`] unlocks and hands
/// the connection back; dropped without it (a restore cut short), the connection is taken out
/// of the pool and closed, never handed back still holding the lock.
pub struct RestoreLock(Option<Held>);

enum Held {
    Postgres(sqlx::pool::PoolConnection<sqlx::Postgres>),
    MySql(sqlx::pool::PoolConnection<sqlx::MySql>),
}

/// The name of the lock: PostgreSQL's advisory lock key (advisory locks are per database);
/// MySQL's `GET_LOCK` name, whose locks are per server, so the name holds a hash of the
/// database's (names are at most 64 characters).
const RESTORE_LOCK_KEY: i64 = 0x6465_6c61_7971;
const RESTORE_LOCK_NAME: &str = "delayq_restore:";
const MYSQL_GET_LOCK: &str = "SELECT GET_LOCK(CONCAT(?, SHA1(IFNULL(DATABASE(), ''))), 0)";
const MYSQL_RELEASE_LOCK: &str = "SELECT RELEASE_LOCK(CONCAT(?, SHA1(IFNULL(DATABASE(), ''))))";

impl Db {
    /// Takes the restore lock, or `None` when another connection holds it.
    pub async fn try_restore_lock(&self) -> Result<Option<RestoreLock>, JournalError> {
        let err = |e| db_err("cannot take the restore lock", e);
        let held = match self {
            Db::Postgres(p) => {
                let mut c = p.acquire().await.map_err(err)?;
                let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                    .bind(RESTORE_LOCK_KEY)
                    .fetch_one(&mut *c)
                    .await
                    .map_err(err)?;
                got.then_some(Held::Postgres(c))
            }
            Db::MySql(p) => {
                let mut c = p.acquire().await.map_err(err)?;
                let got: Option<i64> = sqlx::query_scalar(MYSQL_GET_LOCK)
                    .bind(RESTORE_LOCK_NAME)
                    .fetch_one(&mut *c)
                    .await
                    .map_err(err)?;
                (got == Some(1)).then_some(Held::MySql(c))
            }
        };
        Ok(held.map(|h| RestoreLock(Some(h))))
    }
}

impl RestoreLock {
    /// Releases the lock; the connection goes back to the pool.
    pub async fn release(mut self) {
        let released = match self.0.as_mut() {
            Some(Held::Postgres(c)) => sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(RESTORE_LOCK_KEY)
                .execute(&mut **c)
                .await
                .map(drop),
            Some(Held::MySql(c)) => sqlx::query(MYSQL_RELEASE_LOCK)
                .bind(RESTORE_LOCK_NAME)
                .execute(&mut **c)
                .await
                .map(drop),
            None => Ok(()),
        };
        match released {
            // Back to the pool, unlocked.
            Ok(()) => drop(self.0.take()),
            Err(e) => tracing::warn!(error = %e, "journal: cannot release the restore lock"),
        }
    }
}

impl Drop for RestoreLock {
    fn drop(&mut self) {
        // Still held: out of the pool, and closed with it, which ends the lock.
        match self.0.take() {
            Some(Held::Postgres(c)) => drop(c.detach()),
            Some(Held::MySql(c)) => drop(c.detach()),
            None => {}
        }
    }
}

/// A time or duration as the BIGINT columns hold it (every value delayq accepts fits).
fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The event row of an op: job id, from, to, time.
fn event_of(op: &Op) -> Option<Event<'_>> {
    match op {
        Op::Put { row, from } => Some((
            &row.spec.id,
            from.map(RowState::Live),
            row.state,
            row.changed_at,
        )),
        Op::End { id, from, to, at } => Some((id, from.map(RowState::Live), *to, *at)),
        Op::KickTopic { .. } => None,
    }
}
