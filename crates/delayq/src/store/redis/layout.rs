//! The start-up check that this instance lays jobs out as the data under its prefix already
//! is: the same shard count and the same deployment kind (server or cluster tags). Starting
//! with another layout would strand the jobs laid out the other way, so a mismatch refuses
//! the start with [`StoreError::Unavailable`] and says what to change.
//!
//! It reads and writes only the layout key and, on one server, probes the jobs HASHes of
//! shards beyond this instance's count; it never touches jobs.

use super::conn::Conn;
use super::keys::{self, MAX_SHARDS, ShardKeys};
use super::record::{int, string};
use crate::store::{StoreError, StoreResult};
use redis::Value;

/// Records this instance's layout `mine` under the prefix if none is, and fails if a
/// different one is.
///
/// Data written without a recorded layout (no layout key) is checked too, on one server:
/// jobs in a shard at or beyond this instance's count mean the data was written with more
/// shards, and starting would strand them.
pub(super) async fn check_layout(
    conn: &Conn,
    prefix: &str,
    mine: &str,
    shards: u16,
    cluster: bool,
) -> StoreResult<()> {
    let key = keys::layout_key(prefix);
    let mut get = redis::pipe();
    get.cmd("GET").arg(&key);
    let recorded = match conn.query(&get).await?.first() {
        Some(v) if *v != Value::Nil => string(v)?.to_string(),
        _ => {
            if !cluster {
                refuse_unrecorded_shards(conn, prefix, shards).await?;
            }
            // Another instance may record its layout at the same moment: the first SET wins,
            // and the re-read tells which.
            let mut set = redis::pipe();
            set.cmd("SET").arg(&key).arg(mine).arg("NX");
            conn.query(&set).await?;
            let replies = conn.query(&get).await?;
            replies
                .first()
                .map(string)
                .transpose()?
                .unwrap_or(mine)
                .to_string()
        }
    };
    if recorded == mine {
        return Ok(());
    }
    Err(StoreError::Unavailable(
        format!(
            "Redis already holds delayq data under prefix {prefix:?} laid out as {recorded:?}, \
         not {mine:?}: start every instance with the same --shards (and server or cluster \
         mode), or use another --prefix"
        )
        .into(),
    ))
}

/// On one server without a recorded layout: fails if jobs sit in a shard at or beyond
/// `shards` (so they were written with more shards).
async fn refuse_unrecorded_shards(conn: &Conn, prefix: &str, shards: u16) -> StoreResult<()> {
    let mut probe = redis::pipe();
    let exists = probe.cmd("EXISTS");
    for s in shards..MAX_SHARDS {
        exists.arg(ShardKeys::new(prefix, s).jobs);
    }
    let found = conn.query(&probe).await?;
    if found.first().map(int).transpose()?.unwrap_or(0) > 0 {
        return Err(StoreError::Unavailable(
            format!(
                "Redis holds delayq jobs under prefix {prefix:?} in shards beyond the {shards} \
             configured: they were written with more shards (before delayq recorded its \
             layout the default was 8); start with the --shards they were written with"
            )
            .into(),
        ));
    }
    Ok(())
}
