//! Flow control on Redis: `set_settings` and `settings`, and the settings' part of `stats`.
//!
//! Every shard keeps the settings of every topic that has some, in its `flow` HASH (keys.rs),
//! so that `reserve.lua` reads them in the same atomic call that hands jobs out, on every
//! instance at once. The first shard holds the version of record: a change is merged there
//! (`flow_set.lua`, 'merge'), then the result is written to the other shards ('put', which
//! keeps the later version when two changes race). Each shard applies its share of the
//! limits to its own jobs (exact with one shard, the default on one Redis server; with
//! several, the sum of the shares, docs/flow-control.md).

use super::record::{array, bytes, int, string, unexpected};
use super::scripts::{Function, Memory};
use super::{Calls, RedisStore, reserve};
use crate::job::{Topic, UnixMillis};
use crate::store::{HeldBack, SettingsChange, Stats, StoreError, StoreResult, TopicSettings};
use redis::Value;

/// Writes a topic's settings on one shard (`flow_set.lua`): adds a little memory.
static FLOW_SET: Function = Function::new("flow_set", include_str!("flow_set.lua"), Memory::Adds);

/// The functions this file calls, for the library (`scripts.rs`).
pub(super) static FUNCTIONS: [&Function; 1] = [&FLOW_SET];

/// `Some(None)` as '-', `Some(Some(n))` as n, `None` as ''.
fn arg<T: ToString>(change: Option<Option<T>>) -> String {
    match change {
        None => String::new(),
        Some(None) => "-".into(),
        Some(Some(n)) => n.to_string(),
    }
}

/// Settings from `{version, paused, rate, burst, max_in_flight}` (0: none).
fn settings_of(fields: &[u64]) -> StoreResult<TopicSettings> {
    let [_, paused, rate, burst, limit, ..] = fields else {
        return Err(StoreError::Corrupt(
            format!("flow settings {fields:?} too short").into(),
        ));
    };
    let some = |n: u64| (n > 0).then_some(n);
    Ok(TopicSettings {
        paused: *paused == 1,
        rate_micros: some(*rate),
        burst: some(*burst).map(|b| u32::try_from(b).unwrap_or(u32::MAX)),
        max_in_flight: some(*limit).map(|m| u32::try_from(m).unwrap_or(u32::MAX)),
    })
}

/// A `s<topic>` field's value, packed by `flow_set.lua`.
fn unpack(raw: &[u8]) -> StoreResult<TopicSettings> {
    let fields: Vec<u64> = rmp_serde::from_slice(raw)
        .map_err(|e| StoreError::corrupt("flow settings do not decode", e))?;
    settings_of(&fields)
}

fn reply_settings(v: &Value) -> StoreResult<(u64, TopicSettings)> {
    let fields = array(v)?
        .iter()
        .map(|f| int(f).map(|n| n.max(0) as u64))
        .collect::<StoreResult<Vec<u64>>>()?;
    Ok((fields.first().copied().unwrap_or(0), settings_of(&fields)?))
}

impl Calls {
    pub(in crate::store) async fn set_settings(
        store: &RedisStore,
        topic: &Topic,
        change: SettingsChange,
        now: UnixMillis,
    ) -> StoreResult<TopicSettings> {
        let shards = store.inner.shards.len();
        let paused = change
            .paused
            .map(|p| if p { "1" } else { "0" })
            .unwrap_or("");
        let call = store
            .shard_fcall(&FLOW_SET, &store.inner.shards[0], now)
            .arg(topic.as_str())
            .arg("merge")
            .arg(0)
            .arg(shards)
            .arg(paused)
            .arg(arg(change.rate_micros))
            .arg(arg(change.burst))
            .arg(arg(change.max_in_flight));
        let (version, s) = reply_settings(&store.fcall_one(call).await?)?;
        if shards > 1 {
            let calls: Vec<_> = (1..shards)
                .map(|i| {
                    store
                        .shard_fcall(&FLOW_SET, &store.inner.shards[i], now)
                        .arg(topic.as_str())
                        .arg("put")
                        .arg(i)
                        .arg(shards)
                        .arg(u8::from(s.paused))
                        .arg(s.rate_micros.unwrap_or(0))
                        .arg(s.burst.unwrap_or(0))
                        .arg(s.max_in_flight.unwrap_or(0))
                        .arg(version)
                })
                .collect();
            store.inner.conn.fcall(&calls).await?;
        }
        // Jobs of the topic held by the read-ahead (`read_ahead.rs`) go back, to be handed
        // out under the new settings.
        let held = store.inner.read_ahead.forget_topic(topic);
        reserve::give_back(store, held).await;
        Ok(s)
    }

    pub(in crate::store) async fn settings(
        store: &RedisStore,
        topic: &Topic,
    ) -> StoreResult<TopicSettings> {
        let mut pipe = redis::pipe();
        pipe.cmd("HGET")
            .arg(&store.inner.shards[0].flow)
            .arg(format!("s{topic}"));
        let replies = store.inner.conn.query(&pipe).await?;
        match replies.first() {
            None | Some(Value::Nil) => Ok(TopicSettings::default()),
            Some(v) => unpack(bytes(v)?),
        }
    }
}

/// Adds a shard's `flow` HASH (HGETALL) to `stats`: the settings from the first shard
/// (`first`), the hand-outs held back summed over every shard.
pub(super) fn add_to_stats(stats: &mut Stats, flow: &Value, first: bool) -> StoreResult<()> {
    for kv in array(flow)?.chunks(2) {
        let [field, value] = kv else {
            return Err(unexpected(flow));
        };
        let field = bytes(field)?;
        let name = |skip: usize| {
            let name = std::str::from_utf8(&field[skip..]).map_err(|_| unexpected(flow))?;
            Topic::parse(name).map_err(|e| StoreError::corrupt(format!("flow field {name:?}"), e))
        };
        match field {
            [b's', ..] if first => {
                let s = unpack(bytes(value)?)?;
                stats.settings.insert(name(1)?, s);
            }
            [b'h', kind @ (b'p' | b'r' | b'm'), ..] => {
                let n = string(value)?.parse::<u64>().unwrap_or(0);
                let held: &mut HeldBack = stats.held.entry(name(2)?).or_default();
                match kind {
                    b'p' => held.paused += n,
                    b'r' => held.rate += n,
                    _ => held.max_in_flight += n,
                }
            }
            _ => {}
        }
    }
    Ok(())
}
