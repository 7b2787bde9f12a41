//! Recurring schedules on Redis: each schedule lives on the shard of its id, in four keys of
//! that shard's hash tag (`schedule_put.lua` lists them). The record is the embedded store's
//! encoding (`embedded/record.rs`), opaque to Lua; its version is kept beside it, and the Lua
//! side only compares and bumps that version, so every change is a compare-and-set.
//!
//! A fire checks the schedule's version, stores its ticks' jobs (one call per jobs' shard,
//! `schedule_push.lua`, which keeps the latest tick of each schedule it stored and stores no
//! tick at or before it again), then claims the ticks with a compare-and-set of the schedule at
//! the version it was planned from. A batch of fires (`fire_schedules`) does the same in three
//! rounds whatever its size: one read of the versions, one push per jobs' shard, one claim call
//! per schedules' shard. Instances racing on one tick store its job once (the marks)
//! and one of them moves the schedule on (the claim), however fast the job is finished; a fire
//! cut short between the two calls (a kill) is completed by the next one, which plans the same
//! version and finds the ticks stored. The price: a change (a pause) that lands between the
//! version check and the push lets the ticks being pushed fire (due before it, or fired ahead).
//!
//! A change of a schedule that drops a tick it fired ahead (`Schedule::withdraws`) first
//! withdraws that tick's job on the job's shard (`schedule_unfire.lua`, which also moves the
//! shard's mark back before the tick), then changes the schedule: a change that fails in
//! between leaves the tick without its job, never its job delivered for a changed schedule.

use super::keys::ShardKeys;
use super::push::stored_spec;
use super::record::encode_new;
use super::record::{array, bytes, int, score_ms, string, unexpected};
use super::scripts::{Function, Memory};
use super::{Calls, RedisStore, shard_of};
use crate::job::JobSpec;
use crate::job::UnixMillis;
use crate::schedule::{Schedule, ScheduleFire, ScheduleId};
use crate::store::embedded::record::{decode_schedule, encode_schedule};
use crate::store::{DueSchedules, FireOutcome, StoreError, StoreResult};
use redis::Value;
use std::collections::{BTreeMap, HashMap};

static SCHEDULE_PUT: Function = Function::new(
    "schedule_put",
    include_str!("schedule_put.lua"),
    Memory::Adds,
);
static SCHEDULE_DELETE: Function = Function::new(
    "schedule_delete",
    include_str!("schedule_delete.lua"),
    Memory::Neutral,
);
static SCHEDULE_PUSH: Function = Function::new(
    "schedule_push",
    include_str!("schedule_push.lua"),
    Memory::Adds,
);

static SCHEDULE_UNFIRE: Function = Function::new(
    "schedule_unfire",
    include_str!("schedule_unfire.lua"),
    Memory::Neutral,
);

/// The functions this file calls, for the library (`scripts.rs`).
pub(super) static FUNCTIONS: [&Function; 4] = [
    &SCHEDULE_PUT,
    &SCHEDULE_DELETE,
    &SCHEDULE_PUSH,
    &SCHEDULE_UNFIRE,
];

/// A shard's schedule keys: record, version, due index, listing.
fn keys(k: &ShardKeys) -> [String; 4] {
    let t = &k.tag;
    [
        format!("{t}:sched"),
        format!("{t}:schedver"),
        format!("{t}:schednext"),
        format!("{t}:schedids"),
    ]
}

/// A shard's listing of schedule ids (its size is the shard's number of schedules).
pub(super) fn ids_key(k: &ShardKeys) -> String {
    format!("{}:schedids", k.tag)
}

impl RedisStore {
    fn schedule_shard(&self, id: &ScheduleId) -> &ShardKeys {
        &self.inner.shards[usize::from(shard_of(id.as_str(), self.shard_count()))]
    }

    /// Stores `sc` if its version is `expect` (any when `None`): the new version, or the
    /// refusal (`NotFound`, `Exists`).
    async fn schedule_cas(
        &self,
        sc: &Schedule,
        expect: Option<u64>,
        now: UnixMillis,
    ) -> StoreResult<u64> {
        let ks = keys(self.schedule_shard(&sc.spec.id));
        let key_refs: Vec<&str> = ks.iter().map(String::as_str).collect();
        let call = put_args(
            super::conn::Call::new(SCHEDULE_PUT.registered(), &key_refs)
                .arg(&self.inner.channel)
                .arg(now),
            sc,
            expect,
        );
        let v = self.fcall_one(call).await?;
        match array(&v)? {
            [one] => put_reply(one),
            _ => Err(unexpected(&v)),
        }
    }
}

/// Before a change of `old` (the stored schedule) into `new` (`None`: its deletion): withdraws
/// the job of the tick `old` fired ahead if the change does not keep it and it still waits for
/// its tick (`Schedule::withdraws`), on the job's shard, with the shard's mark of the
/// schedule moved back before the tick (`schedule_unfire.lua`). The job and the schedule may
/// be on different shards, so this is a call of its own, made first: a change that fails after
/// it leaves the tick without its job (and the change to be made again), never a job delivered
/// for a schedule paused, deleted or changed.
async fn withdraw(store: &RedisStore, old: &Schedule, new: Option<&Schedule>) -> StoreResult<()> {
    let Some(tick) = old.withdraws(new) else {
        return Ok(());
    };
    let job = old.spec.id.job_id(tick);
    let keys = &store.inner.shards[usize::from(shard_of(job.as_str(), store.shard_count()))];
    let mark = format!("{}:schedmark", keys.tag);
    let mut all_keys: Vec<&str> = keys.all().to_vec();
    all_keys.push(&mark);
    let call = super::conn::Call::new(SCHEDULE_UNFIRE.registered(), &all_keys)
        .arg(&store.inner.channel)
        .arg(0)
        .arg(old.spec.id.as_str())
        .arg(job.as_str())
        .arg(tick);
    store.fcall_one(call).await.map(drop)
}

/// `call` with `sc`'s four arguments of `schedule_put.lua` added.
fn put_args(call: super::conn::Call, sc: &Schedule, expect: Option<u64>) -> super::conn::Call {
    let next = sc
        .next_tick
        .filter(|_| !sc.spec.paused)
        .map(|t| t.to_string())
        .unwrap_or_default();
    call.arg(sc.spec.id.as_str())
        .arg(encode_schedule(sc))
        .arg(expect.map(|v| v.to_string()).unwrap_or_default())
        .arg(next)
}

/// One schedule's reply of `schedule_put.lua`: its new version, or the refusal.
fn put_reply(v: &Value) -> StoreResult<u64> {
    match array(v)? {
        [status, version] if string(status)? == "ok" => Ok(int(version)?.max(0) as u64),
        [status] if string(status)? == "nf" => Err(StoreError::NotFound),
        [status] if string(status)? == "ex" => Err(StoreError::Exists),
        _ => Err(unexpected(v)),
    }
}

/// A schedule from its record and version replies.
fn decode(id: &str, rec: &Value, version: &Value) -> StoreResult<Option<Schedule>> {
    if matches!(rec, Value::Nil) {
        return Ok(None);
    }
    let mut sc = decode_schedule(id, bytes(rec)?)
        .map_err(|e| StoreError::Corrupt(format!("schedule {id:?}: {e}").into()))?;
    sc.version = int(version)?.max(0) as u64;
    Ok(Some(sc))
}

/// Ids found on several shards (id, shard), grouped by shard for [`read_many`].
fn by_shard<'a>(
    store: &'a RedisStore,
    ids: &[(String, usize)],
) -> Vec<(&'a ShardKeys, Vec<String>)> {
    store
        .inner
        .shards
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let mine = ids.iter().filter(|(_, s)| *s == i);
            (k, mine.map(|(id, _)| id.clone()).collect())
        })
        .collect()
}

/// The schedules of `ids` on shard `k`, read in one round trip (those deleted meanwhile left
/// out).
async fn read_many(
    store: &RedisStore,
    per_shard: &[(&ShardKeys, Vec<String>)],
) -> StoreResult<Vec<Schedule>> {
    let mut pipe = redis::pipe();
    let mut asked = 0;
    for (k, ids) in per_shard {
        if ids.is_empty() {
            continue;
        }
        let [rec, ver, _, _] = keys(k);
        pipe.cmd("HMGET").arg(&rec).arg(ids);
        pipe.cmd("HMGET").arg(&ver).arg(ids);
        asked += 1;
    }
    if asked == 0 {
        return Ok(Vec::new());
    }
    let replies = store.inner.conn.query(&pipe).await?;
    let mut out = Vec::new();
    let mut replies = replies.chunks(2);
    for (_, ids) in per_shard.iter().filter(|(_, ids)| !ids.is_empty()) {
        let [recs, vers] = replies.next().ok_or_else(|| unexpected(&Value::Nil))? else {
            return Err(unexpected(&Value::Nil));
        };
        let (recs, vers) = (array(recs)?, array(vers)?);
        for (i, id) in ids.iter().enumerate() {
            let (Some(r), Some(v)) = (recs.get(i), vers.get(i)) else {
                return Err(unexpected(&Value::Nil));
            };
            out.extend(decode(id, r, v)?);
        }
    }
    Ok(out)
}

/// Pushes the jobs of `fires`, one `schedule_push` call per jobs' shard (all in one
/// pipeline), each tick at most once per shard ever (the shard's mark): one status per job of
/// each fire, in the fires' order.
async fn push_ticks(
    store: &RedisStore,
    fires: &[&ScheduleFire],
    now: UnixMillis,
) -> StoreResult<Vec<Vec<String>>> {
    // Per shard: (fire index, the fire's job) in order, so a schedule's ticks stay in order.
    let mut by_shard: BTreeMap<u16, Vec<(usize, &JobSpec)>> = BTreeMap::new();
    for (f, fire) in fires.iter().enumerate() {
        for j in &fire.jobs {
            by_shard
                .entry(shard_of(j.id.as_str(), store.shard_count()))
                .or_default()
                .push((f, j));
        }
    }
    let mut out: Vec<Vec<String>> = fires
        .iter()
        .map(|f| Vec::with_capacity(f.jobs.len()))
        .collect();
    if by_shard.is_empty() {
        // Fires that only move their schedules on (their ticks skipped).
        return Ok(out);
    }
    let mut calls = Vec::new();
    for (shard, jobs) in &by_shard {
        let keys = &store.inner.shards[usize::from(*shard)];
        let mark = format!("{}:schedmark", keys.tag);
        let mut all_keys: Vec<&str> = keys.all().to_vec();
        all_keys.push(&mark);
        let seq = store.stamp(now, jobs.len() as u64);
        let mut call = super::conn::Call::new(SCHEDULE_PUSH.registered(), &all_keys)
            .arg(&store.inner.channel)
            .arg(now);
        for (k, (f, j)) in jobs.iter().enumerate() {
            let stored = stored_spec(j);
            let state = stored.initial_state(now);
            call = call
                .arg(fires[*f].id.as_str())
                .arg(j.id.as_str())
                .arg(encode_new(&stored, state, seq + k as u64, 0))
                .arg(j.queue().as_str())
                .arg(stored.run_at)
                .arg(j.priority)
                .arg(seq + k as u64)
                .arg(stored.run_at);
        }
        calls.push(call);
    }
    for (reply, (_, jobs)) in store.inner.conn.fcall(&calls).await?.iter().zip(&by_shard) {
        let statuses = array(reply)?;
        if statuses.len() != jobs.len() {
            return Err(unexpected(reply));
        }
        for (s, (f, _)) in statuses.iter().zip(jobs) {
            out[*f].push(string(s)?.to_string());
        }
    }
    Ok(out)
}

/// Claims each of `claims` (a schedule moved on, and the version its fire was planned from)
/// with `schedule_put`'s compare-and-set, one call per schedules' shard, all in one pipeline:
/// whether each one moved on (`false`: deleted, or moved on by someone else meanwhile).
async fn claim(
    store: &RedisStore,
    claims: &[(Schedule, u64)],
    now: UnixMillis,
) -> StoreResult<Vec<bool>> {
    let mut by_shard: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (i, (sc, _)) in claims.iter().enumerate() {
        by_shard
            .entry(shard_of(sc.spec.id.as_str(), store.shard_count()))
            .or_default()
            .push(i);
    }
    let mut calls = Vec::new();
    for (shard, mine) in &by_shard {
        let ks = keys(&store.inner.shards[usize::from(*shard)]);
        let key_refs: Vec<&str> = ks.iter().map(String::as_str).collect();
        let mut call = super::conn::Call::new(SCHEDULE_PUT.registered(), &key_refs)
            .arg(&store.inner.channel)
            .arg(now);
        for &i in mine {
            let (sc, version) = &claims[i];
            call = put_args(call, sc, Some(*version));
        }
        calls.push(call);
    }
    let mut out = vec![false; claims.len()];
    for (reply, (_, mine)) in store.inner.conn.fcall(&calls).await?.iter().zip(&by_shard) {
        let replies = array(reply)?;
        if replies.len() != mine.len() {
            return Err(unexpected(reply));
        }
        for (r, &i) in replies.iter().zip(mine) {
            out[i] = match put_reply(r) {
                Ok(_) => true,
                Err(StoreError::NotFound | StoreError::Exists) => false,
                Err(e) => return Err(e),
            };
        }
    }
    Ok(out)
}

impl Calls {
    pub(in crate::store) async fn put_schedule(
        store: &RedisStore,
        schedule: &Schedule,
        expect: Option<u64>,
    ) -> StoreResult<Schedule> {
        // A replace first withdraws a tick fired ahead that it does not keep (a creation,
        // `Some(0)`, has nothing to withdraw and stays one call).
        if expect != Some(0) {
            match Calls::get_schedule(store, &schedule.spec.id).await {
                Ok(old) if expect.is_none_or(|v| v == old.version) => {
                    withdraw(store, &old, Some(schedule)).await?;
                }
                Ok(_) | Err(StoreError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        let version = store.schedule_cas(schedule, expect, 0).await?;
        let mut sc = schedule.clone();
        sc.version = version;
        Ok(sc)
    }

    pub(in crate::store) async fn get_schedule(
        store: &RedisStore,
        id: &ScheduleId,
    ) -> StoreResult<Schedule> {
        let k = store.schedule_shard(id);
        read_many(store, &[(k, vec![id.as_str().to_string()])])
            .await?
            .pop()
            .ok_or(StoreError::NotFound)
    }

    pub(in crate::store) async fn list_schedules(
        store: &RedisStore,
        after: Option<&ScheduleId>,
        limit: usize,
    ) -> StoreResult<Vec<Schedule>> {
        let limit = limit.max(1);
        let from = match after {
            Some(a) => {
                let mut f = b"(".to_vec();
                f.extend_from_slice(a.as_str().as_bytes());
                f
            }
            None => b"-".to_vec(),
        };
        let mut pipe = redis::pipe();
        for k in &store.inner.shards {
            pipe.cmd("ZRANGEBYLEX")
                .arg(&keys(k)[3])
                .arg(&from)
                .arg("+")
                .arg("LIMIT")
                .arg(0)
                .arg(limit);
        }
        let replies = store.inner.conn.query(&pipe).await?;
        let mut ids: Vec<(String, usize)> = Vec::new();
        for (shard, r) in replies.iter().enumerate() {
            for id in array(r)? {
                ids.push((string(id)?.to_string(), shard));
            }
        }
        ids.sort();
        ids.truncate(limit);
        let mut out = read_many(store, &by_shard(store, &ids)).await?;
        out.sort_by(|a, b| a.spec.id.cmp(&b.spec.id));
        Ok(out)
    }

    pub(in crate::store) async fn delete_schedule(
        store: &RedisStore,
        id: &ScheduleId,
    ) -> StoreResult<()> {
        // The tick fired ahead first, then the schedule: see `withdraw`.
        let old = Calls::get_schedule(store, id).await?;
        withdraw(store, &old, None).await?;
        let ks = keys(store.schedule_shard(id));
        let key_refs: Vec<&str> = ks.iter().map(String::as_str).collect();
        let call = super::conn::Call::new(SCHEDULE_DELETE.registered(), &key_refs)
            .arg(&store.inner.channel)
            .arg(0)
            .arg(id.as_str());
        match int(&store.fcall_one(call).await?)? {
            1 => Ok(()),
            _ => Err(StoreError::NotFound),
        }
    }

    pub(in crate::store) async fn due_schedules(
        store: &RedisStore,
        now: UnixMillis,
        limit: usize,
    ) -> StoreResult<DueSchedules> {
        let limit = limit.max(1);
        let mut pipe = redis::pipe();
        for k in &store.inner.shards {
            // The shard's earliest `limit + 1` due ones, and its first after now: not the
            // shard's whole head when little is due (every pass when nothing is).
            pipe.cmd("ZRANGE")
                .arg(&keys(k)[2])
                .arg("-inf")
                .arg(now)
                .arg("BYSCORE")
                .arg("LIMIT")
                .arg(0)
                .arg(limit + 1)
                .arg("WITHSCORES");
            pipe.cmd("ZRANGE")
                .arg(&keys(k)[2])
                .arg(format!("({now}"))
                .arg("+inf")
                .arg("BYSCORE")
                .arg("LIMIT")
                .arg(0)
                .arg(1)
                .arg("WITHSCORES");
        }
        let replies = store.inner.conn.query(&pipe).await?;
        let mut entries: Vec<(UnixMillis, String, usize)> = Vec::new();
        for (i, r) in replies.iter().enumerate() {
            let shard = i / 2;
            for pair in array(r)?.chunks(2) {
                let [id, score] = pair else {
                    return Err(unexpected(r));
                };
                entries.push((score_ms(score)?, string(id)?.to_string(), shard));
            }
        }
        entries.sort();
        let mut out = DueSchedules::default();
        let mut due: Vec<(String, usize)> = Vec::new();
        for (t, id, shard) in entries {
            if t > now || due.len() >= limit {
                out.next = Some(t);
                break;
            }
            due.push((id, shard));
        }
        let mut schedules = read_many(store, &by_shard(store, &due)).await?;
        schedules.retain(|s| s.is_due(now));
        schedules.sort_by_key(|s| s.next_tick);
        out.due = schedules;
        Ok(out)
    }

    pub(in crate::store) async fn fire_schedule(
        store: &RedisStore,
        fire: &ScheduleFire,
        now: UnixMillis,
    ) -> StoreResult<FireOutcome> {
        let mut out = Calls::fire_schedules(store, std::slice::from_ref(fire), now).await?;
        out.pop().ok_or_else(|| unexpected(&Value::Nil))
    }

    /// Three rounds for all the fires, however many: the version check (the schedules read in
    /// one pipeline), the ticks' jobs (one `schedule_push` per jobs' shard), then the claims
    /// (one `schedule_put` per schedules' shard), each fire with the guarantees of one.
    pub(in crate::store) async fn fire_schedules(
        store: &RedisStore,
        fires: &[ScheduleFire],
        now: UnixMillis,
    ) -> StoreResult<Vec<FireOutcome>> {
        let ids: Vec<(String, usize)> = fires
            .iter()
            .map(|f| {
                let shard = shard_of(f.id.as_str(), store.shard_count());
                (f.id.as_str().to_string(), usize::from(shard))
            })
            .collect();
        let read = read_many(store, &by_shard(store, &ids)).await?;
        let mut current: HashMap<ScheduleId, Schedule> = read
            .into_iter()
            .map(|sc| (sc.spec.id.clone(), sc))
            .collect();
        // The fires still at their version, each with its schedule moved on.
        let mut live: Vec<&ScheduleFire> = Vec::new();
        let mut claims: Vec<(Schedule, u64)> = Vec::new();
        let mut live_of: Vec<Option<usize>> = Vec::with_capacity(fires.len());
        for fire in fires {
            match current.remove(&fire.id) {
                Some(mut sc) if sc.version == fire.version => {
                    sc.next_tick = fire.next_tick;
                    sc.last_tick = fire.last_tick;
                    live_of.push(Some(live.len()));
                    live.push(fire);
                    claims.push((sc, fire.version));
                }
                _ => live_of.push(None),
            }
        }
        if live.is_empty() {
            return Ok(vec![FireOutcome::Stale; fires.len()]);
        }
        // The ticks' jobs first, each stored at most once ever (the shards' marks), then the
        // claims: a fire cut short between the two (a kill) is done again by the next one from
        // the same version, which finds its ticks stored and only moves the schedule on.
        let statuses = push_ticks(store, &live, now).await?;
        let claimed = claim(store, &claims, now).await?;
        Ok(live_of
            .into_iter()
            .map(|l| match l {
                Some(i) if claimed[i] => {
                    let existed = statuses[i].iter().filter(|s| *s == "e").count() as u64;
                    // 'c', or 'd': stored by a push of this same fire cut short, or by a
                    // racing instance that will lose the claim: this fire's tick either way.
                    FireOutcome::Fired {
                        pushed: statuses[i].len() as u64 - existed,
                        existed,
                    }
                }
                // The claim lost: another instance (or a change) moved it on meanwhile.
                _ => FireOutcome::Stale,
            })
            .collect())
    }
}
