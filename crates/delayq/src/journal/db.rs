//! The journal's database: a PostgreSQL or a MySQL/MariaDB pool (sqlx), and the few
//! statements the journal runs, written once per dialect by `dialect!` (the SQL differs in
//! its upsert and placeholders; the rest is the same code). Every statement of a batch runs
//! in one transaction.

use super::JournalError;
use super::row::{JobRow, Moved, Op, RowState};
use super::schema;
use crate::job::{JobId, UnixMillis};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{MySqlPool, PgPool, Row};
use std::borrow::Cow;
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

/// A connection the journal's writer holds: each batch is then one round trip (a pooled
/// connection is pinged when taken and when given back).
pub enum Conn {
    Postgres(sqlx::pool::PoolConnection<sqlx::Postgres>),
    MySql(sqlx::pool::PoolConnection<sqlx::MySql>),
}

impl Conn {
    /// Closes the connection when it is dropped instead of returning it to the pool (after a
    /// failed write, whose connection may be broken).
    pub fn discard(mut self) {
        match &mut self {
            Conn::Postgres(c) => c.close_on_drop(),
            Conn::MySql(c) => c.close_on_drop(),
        }
    }
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

/// Most events [`Db::history`] answers (the latest ones).
pub const HISTORY_LIMIT: usize = 1_000;

/// A state change of a job, as `delayq_job_events` holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `None` for a new job (or one the journal did not know).
    pub from: Option<RowState>,
    pub to: RowState,
    pub at: UnixMillis,
    /// The delayq that made the change (`host:pid`).
    pub instance: String,
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
                // Every statement finds its rows by key. Without this, the plan PostgreSQL
                // caches for a prepared write, made while the table was still empty, scans the
                // whole table for every write from then on (until autovacuum analyzes it).
                // And every batch runs the same few statements with arrays of any length:
                // a generic plan, made once per connection, instead of planning each call anew.
                let options = PgConnectOptions::from_str(url)
                    .map_err(unreachable)?
                    .options([
                        ("enable_seqscan", "off"),
                        ("plan_cache_mode", "force_generic_plan"),
                    ]);
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

    /// Closes the pool: waits until every connection is given back (the writer gives its
    /// own back when it sees the pool closing: [`Db::closing`]).
    pub async fn close(&self) {
        match self {
            Db::Postgres(p) => p.close().await,
            Db::MySql(p) => p.close().await,
        }
    }

    /// Whether [`Db::close`] was called.
    pub fn is_closed(&self) -> bool {
        match self {
            Db::Postgres(p) => p.is_closed(),
            Db::MySql(p) => p.is_closed(),
        }
    }

    /// Completes when [`Db::close`] is called.
    pub fn closing(&self) -> sqlx::pool::CloseEvent {
        match self {
            Db::Postgres(p) => p.close_event(),
            Db::MySql(p) => p.close_event(),
        }
    }
}

/// The statements of one dialect, as methods of [`Db`] matching on it.
macro_rules! dialect {
    ($($name:ident: $db:ty, $pool:ident, $migrations:expr, $one:path, $bulk:path, $prune_jobs:expr, $upsert:expr;)*) => {
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
                conn: &mut sqlx::pool::PoolConnection<$db>,
                ops: &[Op],
                instance: &str,
            ) -> Result<(), sqlx::Error> {
                if $one(conn, ops, instance).await? {
                    return Ok(());
                }
                let mut tx = sqlx::Connection::begin(&mut **conn).await?;
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
                tx: &mut sqlx::Transaction<'_, $db>,
                ops: &[Op],
                instance: &str,
            ) -> Result<(), sqlx::Error> {
                if ops.is_empty() {
                    return Ok(());
                }
                let last = last_of(ops);
                if $bulk(tx, &last, ops, instance).await? {
                    return Ok(());
                }
                let Last { puts, moves, ends } = &last;
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
                for chunk in moves.chunks(ROWS_PER_STATEMENT) {
                    // No arrays in MySQL: the moves as a derived table of one row each.
                    let mut q = Q::new("UPDATE delayq_jobs AS j JOIN (");
                    for (k, m) in chunk.iter().enumerate() {
                        q.push(if k == 0 { "SELECT " } else { " UNION ALL SELECT " });
                        q.push_bind(m.id.as_str().to_string())
                            .push(" AS id, ")
                            .push_bind(m.state.as_str())
                            .push(" AS state, CAST(")
                            .push_bind(i(m.run_at))
                            .push(" AS SIGNED) AS run_at, CAST(")
                            .push_bind(i64::from(m.attempts))
                            .push(" AS SIGNED) AS attempts, CAST(")
                            .push_bind(m.reserved_until.map(i))
                            .push(" AS SIGNED) AS reserved_until, CAST(")
                            .push_bind(i(m.seq))
                            .push(" AS SIGNED) AS seq, CAST(")
                            .push_bind(i(m.at))
                            .push(" AS SIGNED) AS changed_at");
                    }
                    q.push(
                        ") AS m ON j.id = m.id SET j.state = m.state, j.run_at = m.run_at, \
                         j.attempts = m.attempts, j.reserved_until = m.reserved_until, \
                         j.seq = m.seq, j.changed_at = m.changed_at",
                    );
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
                tx: &mut sqlx::Transaction<'_, $db>,
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

            /// The events of job `id`, oldest first (at most [`HISTORY_LIMIT`], the latest).
            pub async fn history(pool: &sqlx::Pool<$db>, id: &str) -> Result<Vec<Event>, JournalError> {
                let mut q = Q::new(
                    "SELECT from_state, to_state, at, instance FROM delayq_job_events WHERE job_id = ",
                );
                q.push_bind(id.to_string())
                    .push(" ORDER BY at DESC, seq DESC LIMIT ")
                    .push_bind(HISTORY_LIMIT as i64);
                let rows = q
                    .build()
                    .fetch_all(pool)
                    .await
                    .map_err(|e| db_err("cannot read the journal", e))?;
                let mut events = rows
                    .iter()
                    .map(|r| {
                        let e = |e: sqlx::Error| JournalError::Corrupt(e.to_string());
                        let state = |s: String| {
                            RowState::parse(&s)
                                .ok_or_else(|| JournalError::Corrupt(format!("job {id}: state {s}")))
                        };
                        Ok(Event {
                            from: opt_text(r, "from_state").map_err(e)?.map(state).transpose()?,
                            to: state(text(r, "to_state").map_err(e)?)?,
                            at: u64::try_from(r.try_get::<i64, _>("at").map_err(e)?).unwrap_or(0),
                            instance: text(r, "instance").map_err(e)?,
                        })
                    })
                    .collect::<Result<Vec<_>, JournalError>>()?;
                events.reverse();
                Ok(events)
            }

            /// Deletes ended jobs and events older than `before`; returns the rows deleted.
            /// Ended jobs are found through their ending events (`$prune_jobs`), so the cost
            /// follows what is pruned, not the table's size; events go after the jobs they end.
            pub async fn prune(pool: &sqlx::Pool<$db>, before: UnixMillis) -> Result<u64, sqlx::Error> {
                let mut q = Q::new($prune_jobs);
                q.push_bind(i(before)).push(" AND e.to_state IN (");
                let mut sep = q.separated(", ");
                for s in RowState::ENDED {
                    sep.push_bind(s);
                }
                q.push(") AND j.state = e.to_state AND j.changed_at < ").push_bind(i(before));
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

            /// A connection of the pool for [`Db::write`], held across writes.
            pub async fn writer(&self) -> Result<Conn, sqlx::Error> {
                Ok(match self { $( Db::$pool(p) => Conn::$pool(p.acquire().await?), )* })
            }

            /// Writes `ops` in order, in one transaction, on `conn` (from [`Db::writer`] of
            /// the same database).
            pub async fn write(&self, conn: &mut Conn, ops: &[Op], instance: &str) -> Result<(), sqlx::Error> {
                match conn {
                    $( Conn::$pool(c) => $name::write(c, ops, instance).await, )*
                }
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

            /// The events of job `id`, oldest first.
            pub async fn history(&self, id: &str) -> Result<Vec<Event>, JournalError> {
                match self { $( Db::$pool(p) => $name::history(p, id).await, )* }
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
        "DELETE FROM delayq_jobs AS j USING delayq_job_events AS e WHERE j.id = e.job_id \
         AND e.at < ",
        " ON CONFLICT (id) DO UPDATE SET topic = EXCLUDED.topic, queue = EXCLUDED.queue, \
         body = EXCLUDED.body, run_at = EXCLUDED.run_at, ttr_ms = EXCLUDED.ttr_ms, \
         priority = EXCLUDED.priority, attempts = EXCLUDED.attempts, \
         max_attempts = EXCLUDED.max_attempts, backoff_ms = EXCLUDED.backoff_ms, \
         callback_url = EXCLUDED.callback_url, callback_timeout_ms = EXCLUDED.callback_timeout_ms, \
         state = EXCLUDED.state, reserved_until = EXCLUDED.reserved_until, seq = EXCLUDED.seq, \
         changed_at = EXCLUDED.changed_at, publish = EXCLUDED.publish";
    my: sqlx::MySql, MySql, schema::MYSQL, no_one, no_bulk,
        "DELETE j FROM delayq_jobs AS j JOIN delayq_job_events AS e ON j.id = e.job_id \
         WHERE e.at < ",
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

/// What a run of ops (no kick of a topic among them) leaves of each job, each job in one of
/// the three: its whole row (a put, with the moves after it in the run applied), its changed
/// columns (moves only), or its end.
#[derive(Default)]
struct Last<'a> {
    puts: Vec<Cow<'a, JobRow>>,
    moves: Vec<&'a Moved>,
    ends: Vec<(&'a JobId, RowState, UnixMillis)>,
}

fn last_of(ops: &[Op]) -> Last<'_> {
    enum Left<'a> {
        Put(Cow<'a, JobRow>),
        Move(&'a Moved),
        End(RowState, UnixMillis),
    }
    // Jobs in the order first seen, so the statements' rows follow the ops.
    let mut order: Vec<&JobId> = Vec::new();
    let mut left: HashMap<&JobId, Left<'_>> = HashMap::new();
    for op in ops {
        let Some(id) = op.id() else { continue };
        let next = match op {
            Op::Put { row, .. } => Left::Put(Cow::Borrowed(row)),
            Op::Move { moved, .. } => match left.get_mut(id) {
                Some(Left::Put(row)) => {
                    moved.apply(row.to_mut());
                    continue;
                }
                _ => Left::Move(moved),
            },
            Op::End { to, at, .. } => Left::End(*to, *at),
            Op::KickTopic { .. } => continue,
        };
        if left.insert(id, next).is_none() {
            order.push(id);
        }
    }
    let mut last = Last::default();
    for id in order {
        match left.remove(id) {
            Some(Left::Put(row)) => last.puts.push(row),
            Some(Left::Move(m)) => last.moves.push(m),
            Some(Left::End(to, at)) => last.ends.push((id, to, at)),
            None => {}
        }
    }
    last
}

/// MySQL writes every batch in an explicit transaction (`write`).
async fn no_one(
    _: &mut sqlx::pool::PoolConnection<sqlx::MySql>,
    _: &[Op],
    _: &str,
) -> Result<bool, sqlx::Error> {
    Ok(false)
}

/// PostgreSQL writes a batch without a kick of a topic as one statement (data-modifying
/// `WITH` clauses over arrays, atomic as any statement): one round trip per commit. A batch
/// with a kick goes through the transaction of `write`.
async fn pg_one(
    conn: &mut sqlx::pool::PoolConnection<sqlx::Postgres>,
    ops: &[Op],
    instance: &str,
) -> Result<bool, sqlx::Error> {
    if ops.iter().any(|op| matches!(op, Op::KickTopic { .. })) {
        return Ok(false);
    }
    let last = last_of(ops);
    let events: Vec<_> = ops.iter().filter_map(event_of).collect();
    let query = sqlx::query(PG_ONE);
    let query = bind_moves(
        bind_ends(bind_puts(query, &last.puts), &last.ends),
        &last.moves,
    );
    bind_events(query, &events)
        .bind(instance)
        .execute(&mut **conn)
        .await?;
    Ok(true)
}

type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// A state change: job, from (none for a new job), to, when.
type EventRow<'a> = (&'a JobId, Option<RowState>, RowState, UnixMillis);

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

/// Binds the 7 column arrays of `moves` (id, state, run_at, attempts, reserved_until, seq,
/// at) after what `query` has bound.
fn bind_moves<'q>(query: PgQuery<'q>, moves: &[&Moved]) -> PgQuery<'q> {
    let n = |f: fn(&Moved) -> i64| moves.iter().map(|m| f(m)).collect::<Vec<i64>>();
    query
        .bind(
            moves
                .iter()
                .map(|m| m.id.as_str().to_string())
                .collect::<Vec<_>>(),
        )
        .bind(
            moves
                .iter()
                .map(|m| m.state.as_str().to_string())
                .collect::<Vec<_>>(),
        )
        .bind(n(|m| i(m.run_at)))
        .bind(n(|m| i64::from(m.attempts)))
        .bind(
            moves
                .iter()
                .map(|m| m.reserved_until.map(i))
                .collect::<Vec<_>>(),
        )
        .bind(n(|m| i(m.seq)))
        .bind(n(|m| i(m.at)))
}

/// Binds the 4 column arrays of `events` (id, from, to, at) after what `query` has bound.
fn bind_events<'q>(query: PgQuery<'q>, events: &[EventRow<'_>]) -> PgQuery<'q> {
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
fn bind_puts<'q>(query: PgQuery<'q>, puts: &[Cow<'_, JobRow>]) -> PgQuery<'q> {
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
    _: &mut sqlx::Transaction<'_, sqlx::MySql>,
    _: &Last<'_>,
    _: &[Op],
    _: &str,
) -> Result<bool, sqlx::Error> {
    Ok(false)
}

/// PostgreSQL: every row of a run in three statements of fixed text, each column bound as one
/// array (`UNNEST`), so each statement is prepared once per connection and planned once,
/// whatever the batch's size.
async fn pg_bulk(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    last: &Last<'_>,
    ops: &[Op],
    instance: &str,
) -> Result<bool, sqlx::Error> {
    let Last { puts, moves, ends } = last;
    if !puts.is_empty() {
        bind_puts(sqlx::query(PG_UPSERT), puts)
            .execute(&mut **tx)
            .await?;
    }
    if !moves.is_empty() {
        bind_moves(sqlx::query(PG_MOVE), moves)
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

/// PostgreSQL's update of the changing columns of moved jobs, one array per column from
/// `$first` on (7 arrays). A macro, so that [`PG_ONE`] can contain it. Neither `state` nor
/// any other column it sets is indexed, so PostgreSQL can make each a heap-only update (no
/// index entry written; schema.rs).
macro_rules! pg_move {
    ($a:literal, $b:literal, $c:literal, $d:literal, $e:literal, $f:literal, $g:literal) => {
        concat!(
            "UPDATE delayq_jobs AS j SET state = m.state, run_at = m.run_at, \
            attempts = m.attempts, reserved_until = m.reserved_until, seq = m.seq, \
            changed_at = m.at FROM UNNEST(",
            $a,
            "::varchar[], ",
            $b,
            "::varchar[], ",
            $c,
            "::int8[], ",
            $d,
            "::int8[], ",
            $e,
            "::int8[], ",
            $f,
            "::int8[], ",
            $g,
            "::int8[]) AS m(id, state, run_at, attempts, reserved_until, seq, at) \
            WHERE j.id = m.id"
        )
    };
}

/// PostgreSQL's update of moved jobs alone ($1–$7).
const PG_MOVE: &str = pg_move!("$1", "$2", "$3", "$4", "$5", "$6", "$7");

/// PostgreSQL's whole batch in one statement: the job rows ($1–$17, as [`PG_UPSERT`]), the
/// ends ($18–$20), the moves ($21–$27) and the events ($28–$31, instance $32). Each job is
/// in one of puts, ends and moves ([`last_of`]), so no row is changed twice.
const PG_ONE: &str = concat!(
    "WITH puts AS (",
    pg_upsert!(),
    "), ends AS (UPDATE delayq_jobs AS j SET state = e.state, changed_at = e.at \
    FROM UNNEST($18::varchar[], $19::varchar[], $20::int8[]) AS e(id, state, at) \
    WHERE j.id = e.id), moves AS (",
    pg_move!("$21", "$22", "$23", "$24", "$25", "$26", "$27"),
    ") INSERT INTO delayq_job_events (job_id, from_state, to_state, at, instance) \
    SELECT e.id, e.from_state, e.to_state, e.at, $32 \
    FROM UNNEST($28::varchar[], $29::varchar[], $30::varchar[], $31::int8[]) \
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
fn event_of(op: &Op) -> Option<EventRow<'_>> {
    match op {
        Op::Put { row, from } => Some((
            &row.spec.id,
            from.map(RowState::Live),
            row.state,
            row.changed_at,
        )),
        Op::Move { moved, from } => Some((
            &moved.id,
            from.map(RowState::Live),
            RowState::Live(moved.state),
            moved.at,
        )),
        Op::End { id, from, to, at } => Some((id, from.map(RowState::Live), *to, *at)),
        Op::KickTopic { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobSpec, JobState, Topic};

    fn pushed(id: &str) -> Op {
        let spec = JobSpec::new(
            Topic::parse("t").unwrap(),
            JobId::parse(id).unwrap(),
            "b",
            10,
        );
        Op::Put {
            row: JobRow::of_push(&spec, 5),
            from: None,
        }
    }

    fn reserved(id: &str, at: UnixMillis) -> Op {
        Op::Move {
            moved: Moved {
                id: JobId::parse(id).unwrap(),
                state: JobState::Reserved,
                run_at: 10,
                attempts: 1,
                reserved_until: Some(at + 1_000),
                seq: 7,
                at,
            },
            from: Some(JobState::Ready),
        }
    }

    #[test]
    fn each_job_leaves_one_row_change_and_a_move_after_a_put_is_folded_into_it() {
        let end = Op::End {
            id: JobId::parse("c").unwrap(),
            from: Some(JobState::Reserved),
            to: RowState::Finished,
            at: 30,
        };
        let ops = vec![
            pushed("a"),
            reserved("b", 11),
            reserved("a", 12),
            reserved("c", 13),
            end,
        ];
        let last = last_of(&ops);
        assert_eq!(last.puts.len(), 1);
        let a = &last.puts[0];
        assert_eq!(a.spec.id.as_str(), "a");
        assert_eq!(a.state, RowState::Live(JobState::Reserved));
        assert_eq!(
            (a.attempts, a.reserved_until, a.changed_at),
            (1, Some(1_012), 12)
        );
        assert_eq!(a.spec.body, "b", "the pushed row keeps its spec");
        let moved: Vec<&str> = last.moves.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(moved, ["b"]);
        assert_eq!(last.ends.len(), 1);
        assert_eq!(
            (last.ends[0].0.as_str(), last.ends[0].1),
            ("c", RowState::Finished)
        );
        // Every op is still an event.
        assert_eq!(ops.iter().filter_map(event_of).count(), 5);
    }
}
