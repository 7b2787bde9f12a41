//! The start-up checks that this instance reads the data under its prefix as it was written:
//! the format version ([`check_format`]: the key layout and record format, which a newer
//! delayq may change) and the layout ([`check_layout`]: the same shard count and the same
//! deployment kind, server or cluster tags). Starting with another layout would strand the
//! jobs laid out the other way, and a newer format would be misread, so a mismatch refuses the
//! start with [`StoreError::Unavailable`] and says what to change.
//!
//! It reads and writes only the format and layout keys and, on one server, probes the jobs
//! HASHes of shards beyond this instance's count; it never touches jobs.

use super::conn::Conn;
use super::keys::{self, MAX_SHARDS, ShardKeys};
use super::record::{int, string};
use crate::store::{StoreError, StoreResult};
use redis::Value;

/// The version of the key layout and record format this build writes, kept under
/// [`keys::format_key`]; docs/upgrading.md lists each release's. Every instance checks it at
/// start: a newer one is refused, untouched. A change that older builds would misread bumps
/// it; the build that bumps it migrates the previous version (or refuses it, saying how to
/// migrate) in [`check_format`].
///
/// Version 2 added jobs placed ahead (state `p` in records, groups in the timeline and the
/// `due` HASH: `lib.lua`), which a version 1 build would misread. Version 1 data has none of
/// them and is valid version 2 data: its migration only records the new version.
pub const FORMAT_VERSION: u64 = 2;

/// Records [`FORMAT_VERSION`] under the prefix if no version is, migrates version 1, and
/// fails if a newer one is. Data written before the version was recorded has the layout of
/// version 1 (the first), so it is given that version, then migrated.
pub(super) async fn check_format(conn: &Conn, prefix: &str) -> StoreResult<()> {
    let key = keys::format_key(prefix);
    let mut get = redis::pipe();
    get.cmd("GET").arg(&key);
    let mut recorded = conn.query(&get).await?.first().cloned();
    if matches!(recorded, None | Some(Value::Nil)) {
        // Another instance may record it at the same moment: the first SET wins.
        let mut set = redis::pipe();
        set.cmd("SET").arg(&key).arg(FORMAT_VERSION).arg("NX");
        conn.query(&set).await?;
        recorded = conn.query(&get).await?.first().cloned();
    }
    let text = match &recorded {
        Some(v @ (Value::BulkString(_) | Value::SimpleString(_))) => string(v)?.to_string(),
        other => format!("{other:?}"),
    };
    match text.parse::<u64>() {
        Ok(FORMAT_VERSION) => Ok(()),
        Ok(1) => {
            let mut set = redis::pipe();
            set.cmd("SET").arg(&key).arg(FORMAT_VERSION);
            conn.query(&set).await?;
            tracing::info!(
                prefix,
                from = 1,
                to = FORMAT_VERSION,
                "Redis data format migrated (nothing to rewrite: the version is raised)"
            );
            Ok(())
        }
        Ok(v) if v > FORMAT_VERSION => Err(StoreError::Unavailable(
            format!(
                "Redis holds delayq data under prefix {prefix:?} in format version {v}, written \
                 by a newer delayq; this delayq ({}) reads version {FORMAT_VERSION} and left it \
                 untouched: run the newer delayq on every instance of this prefix, or, to go \
                 back to this one, restore a Redis backup taken before the upgrade \
                 (docs/upgrading.md)",
                env!("CARGO_PKG_VERSION")
            )
            .into(),
        )),
        _ => Err(StoreError::Corrupt(
            format!(
                "Redis key {key} holds {text:?}, not a delayq format version: it was not \
                 written by delayq; use another --prefix"
            )
            .into(),
        )),
    }
}

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
