//! `kick_topic` on Redis: returns a topic's dead jobs to ready, oldest burial first across
//! shards, in rounds of at most [`KICK_CHUNK`]. With several shards each round peeks at every
//! shard's oldest dead entries of the topic (pipelined), merges them, and asks each shard to
//! kick its share of the oldest; with one shard the function alone does it.
//!
//! It decides nothing about the jobs: `kick_topic.lua` moves a shard's oldest dead jobs.

use super::conn::Call;
use super::record::int;
use super::reserve::peek;
use super::scripts::{Function, Memory};
use super::{Calls, RedisStore};
use crate::job::{Topic, UnixMillis};
use crate::store::StoreResult;
use std::collections::BTreeMap;

/// The function that kicks a shard's oldest dead jobs of a topic (`kick_topic.lua`): it moves
/// jobs, so it runs when Redis is full.
static KICK_TOPIC: Function = Function::new(
    "kick_topic",
    include_str!("kick_topic.lua"),
    Memory::Neutral,
);

/// The functions this file calls, for the library (`scripts.rs`).
pub(super) static FUNCTIONS: [&Function; 1] = [&KICK_TOPIC];

/// Most dead jobs one `kick_topic` round moves.
const KICK_CHUNK: u64 = 1000;

impl Calls {
    pub(in crate::store) async fn kick_topic(
        store: &RedisStore,
        topic: &Topic,
        max: u64,
        now: UnixMillis,
    ) -> StoreResult<u64> {
        let mut total = 0;
        while total < max {
            let chunk = (max - total).min(KICK_CHUNK);
            let (per_shard, available) = if store.inner.shards.len() == 1 {
                (vec![(0usize, chunk)], chunk)
            } else {
                let heads = peek(
                    store,
                    |k| &k.dead,
                    std::slice::from_ref(topic),
                    chunk as usize,
                )
                .await?;
                let mut per: BTreeMap<usize, u64> = BTreeMap::new();
                for (_, _, shard) in &heads {
                    *per.entry(*shard).or_default() += 1;
                }
                (per.into_iter().collect(), heads.len() as u64)
            };
            if per_shard.is_empty() {
                break;
            }
            let calls: Vec<Call> = per_shard
                .iter()
                .map(|&(shard, n)| {
                    store
                        .shard_fcall(&KICK_TOPIC, &store.inner.shards[shard], now)
                        .arg(topic.as_str())
                        .arg(n)
                })
                .collect();
            let mut kicked = 0;
            for reply in store.inner.conn.fcall(&calls).await? {
                kicked += int(&reply)? as u64;
            }
            total += kicked;
            if kicked == 0 || available < chunk || kicked < chunk && store.inner.shards.len() == 1 {
                break;
            }
        }
        Ok(total)
    }
}
