//! `stats` on Redis: one pipeline reads every shard's counts HASH, timeline head, first far
//! window, flow HASH (settings and hand-outs held back, `flow.rs`) and number of recurring
//! schedules, and the replies are summed into [`Stats`]. Read-only.

use super::record::{array, int, score_ms, state_from_code, string, unexpected};
use super::{Calls, RedisStore};
use crate::job::{JobState, Topic};
use crate::store::{Stats, StoreError, StoreResult};

impl Calls {
    /// `next_due` is exact while the earliest deadline is in a timeline; when a far window comes
    /// first it is that window's score, the earliest run_at ever pushed into it: exact unless that
    /// job has since been deleted or moved, then a lower bound (lib.lua).
    pub(in crate::store) async fn stats(store: &RedisStore) -> StoreResult<Stats> {
        // Finishes this instance answered have run (`finishing.rs`).
        store.inner.finishing.settle_all().await;
        let mut pipe = redis::pipe();
        for k in &store.inner.shards {
            pipe.cmd("HGETALL").arg(&k.counts);
            pipe.cmd("ZRANGE")
                .arg(&k.timeline)
                .arg(0)
                .arg(0)
                .arg("WITHSCORES");
            pipe.cmd("ZRANGE")
                .arg(&k.windows)
                .arg(0)
                .arg(0)
                .arg("WITHSCORES");
            pipe.cmd("HGETALL").arg(&k.flow);
            pipe.cmd("ZCARD").arg(super::schedules::ids_key(k));
        }
        let replies = store.inner.conn.query(&pipe).await?;
        let mut stats = Stats::default();
        for (shard, five) in replies.chunks(5).enumerate() {
            let [counts, head, window, flow, schedules] = five else {
                return Err(StoreError::Corrupt("short stats reply".into()));
            };
            for kv in array(counts)?.chunks(2) {
                let [field, n] = kv else {
                    return Err(unexpected(counts));
                };
                let field = string(field)?;
                let (code, topic) = field
                    .split_at_checked(1)
                    .ok_or_else(|| unexpected(counts))?;
                let queue = Topic::parse_queue(topic)
                    .map_err(|e| StoreError::corrupt(format!("counts field {field:?}"), e))?;
                let n = int(n)?.max(0) as u64;
                let c = stats.counts_of(queue);
                match state_from_code(code)? {
                    JobState::Delayed => c.delayed += n,
                    JobState::Ready => c.ready += n,
                    JobState::Reserved => c.reserved += n,
                    JobState::Dead => c.dead += n,
                }
            }
            super::flow::add_to_stats(&mut stats, flow, shard == 0)?;
            stats.schedules += int(schedules)?.max(0) as u64;
            for first in [head, window] {
                if let [_, score] = array(first)? {
                    let t = score_ms(score)?;
                    stats.next_due = Some(stats.next_due.map_or(t, |d| d.min(t)));
                }
            }
        }
        stats.topics.retain(|_, c| c.total() > 0);
        Ok(stats)
    }
}
