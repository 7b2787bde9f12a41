//! The restore lock: one restore at a time across every delayq sharing a journal database.
//! PostgreSQL's advisory lock, MySQL's `GET_LOCK`, each held by one pooled connection for the
//! restore's duration and ended with it.

use super::JournalError;
use super::connect::Db;
use super::sql::db_err;

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
