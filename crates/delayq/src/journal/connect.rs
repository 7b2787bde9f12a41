//! The journal's database handle, [`Db`]: which dialect a URL names and whether it parses
//! ([`check_url`], without connecting, for the settings' check), the pool (sqlx, PostgreSQL
//! or MySQL/MariaDB), the connection the writer holds ([`Conn`]), and opening: connect, then
//! migrate the schema. Each statement goes to its dialect's module (`postgres.rs`,
//! `mysql.rs`); the restore lock is in `lock.rs`.

use super::row::{JobRow, Op};
use super::sql::Event;
use super::{JournalError, mysql, postgres};
use crate::job::{Topic, UnixMillis};
use crate::redact::redact_url;
use crate::schedule::Schedule;
use crate::store::{Cause, TopicSettings};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{MySqlPool, PgPool};
use std::str::FromStr;
use std::time::Duration;

/// Connections the journal keeps: the writer uses one, pruning one, a restore two (its lock's
/// and its reads).
const POOL_SIZE: u32 = 5;
/// Longest wait for a connection, at start and per batch.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

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
/// (it may hold a password), and sqlx's parse error is not kept: it may quote the URL.
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
    e.to_string().replace(url, &redact_url(url))
}

impl Db {
    /// Connects and migrates the schema to [`super::schema::LATEST`]; refuses a newer schema.
    pub async fn open(url: &str) -> Result<Db, JournalError> {
        check_url(url).map_err(JournalError::Url)?;
        // The message names the URL without its credentials; the typed error is kept.
        let unreachable = |e: sqlx::Error| {
            let message = format!("{}: {}", redact_url(url), redact_error(&e, url));
            JournalError::Unreachable(Cause::with_message(message, e))
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
        match &db {
            Db::Postgres(p) => postgres::migrate(p).await?,
            Db::MySql(p) => mysql::migrate(p).await?,
        }
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

    /// A connection of the pool for [`Db::write`], held across writes.
    pub async fn writer(&self) -> Result<Conn, sqlx::Error> {
        Ok(match self {
            Db::Postgres(p) => Conn::Postgres(p.acquire().await?),
            Db::MySql(p) => Conn::MySql(p.acquire().await?),
        })
    }

    /// Writes `ops` in order, in one transaction, on `conn` (from [`Db::writer`] of the same
    /// database).
    pub async fn write(
        &self,
        conn: &mut Conn,
        ops: &[Op],
        instance: &str,
    ) -> Result<(), sqlx::Error> {
        match conn {
            Conn::Postgres(c) => postgres::write(c, ops, instance).await,
            Conn::MySql(c) => mysql::write(c, ops, instance).await,
        }
    }

    /// Up to `limit` rows with ids after `after`, in id order (`only`: that id's row).
    pub async fn rows(
        &self,
        after: Option<&str>,
        only: Option<&str>,
        limit: usize,
    ) -> Result<Vec<JobRow>, JournalError> {
        match self {
            Db::Postgres(p) => postgres::rows(p, after, only, limit).await,
            Db::MySql(p) => mysql::rows(p, after, only, limit).await,
        }
    }

    /// Up to `limit` live schedules with ids after `after`, in id order.
    pub async fn schedules(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Schedule>, JournalError> {
        match self {
            Db::Postgres(p) => postgres::schedules(p, after, limit).await,
            Db::MySql(p) => mysql::schedules(p, after, limit).await,
        }
    }

    /// Up to `limit` topics' settings with topics after `after`, in topic order.
    pub async fn topic_settings(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(Topic, TopicSettings)>, JournalError> {
        match self {
            Db::Postgres(p) => postgres::topic_settings(p, after, limit).await,
            Db::MySql(p) => mysql::topic_settings(p, after, limit).await,
        }
    }

    /// The events of job `id`, oldest first.
    pub async fn history(&self, id: &str) -> Result<Vec<Event>, JournalError> {
        match self {
            Db::Postgres(p) => postgres::history(p, id).await,
            Db::MySql(p) => mysql::history(p, id).await,
        }
    }

    /// Deletes ended jobs and events older than `before`; returns the rows deleted.
    pub async fn prune(&self, before: UnixMillis) -> Result<u64, sqlx::Error> {
        match self {
            Db::Postgres(p) => postgres::prune(p, before).await,
            Db::MySql(p) => mysql::prune(p, before).await,
        }
    }
}
