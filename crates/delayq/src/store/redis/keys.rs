//! Key layout and shard choice: which Redis keys hold a namespace's jobs and which shard a job
//! id belongs to. Pure functions, no I/O; the Lua side of the layout is documented in
//! `lib.lua`.
//!
//! Every key of shard `s` starts with the shard's hash tag, so one shard is one Redis Cluster
//! slot and each script touches a single slot. On one server the tag is `{<prefix>:<s>}`; on a
//! cluster it is `{<prefix>:<s>:<k>}` (see [`cluster_tag`]), which places the shards evenly
//! over the slot space and so over the masters. Both formats are part of the storage format:
//! never change them (jobs under the old names would be stranded).
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{p:s}:jobs` | HASH | job id → cmsgpack record (one field per job, no key per job) |
//! | `{p:s}:timeline` | ZSET | delayed and reserved job ids, and the [`group`]s waiting, scored by timer deadline |
//! | `{p:s}:ready` | ZSET | ready jobs and jobs placed ahead, lexicographic `topic \0 priority run_at seq id` |
//! | `{p:s}:dead` | ZSET | dead jobs, lexicographic `topic \0 seq id` |
//! | `{p:s}:counts` | HASH | `<state code><topic>` → count, for cheap stats |
//! | `{p:s}:due` | HASH | `topic \0 minute` → count of delayed jobs due in that minute (topic `''`: every topic's); and [`group`] → how many jobs placed ahead wait in that group |
//! | `{p:s}:dueidx` | ZSET | the `due` fields, lexicographic: a topic's minutes with delayed jobs, in order |
//! | `{p:s}:windows` | ZSET | window numbers of the far-future lists below, scored by the earliest run_at pushed into each |
//! | `{p:s}:flow` | HASH | flow control of the topics that have settings: `s<topic>` the settings (and this shard's share of the limits), `v<topic>` their version, `b<topic>` the shard's token bucket, `hp`/`hr`/`hm<topic>` hand-outs held back by pause, rate, max_in_flight |
//! | `{p:s}:w:<n>` | LIST | ids of delayed jobs due in window `n` (`run_at / WINDOW_MS`), pushed while `n` was far |
//!
//! Pub/sub events go to the channel `<prefix>:events` (a channel, not a key).
//!
//! Memory: a pending far job costs its jobs HASH field (dict entry, its share of the bucket
//! array, the id's sds, the packed record) plus a window list entry (the id's length + 2); a
//! job within two windows of its time costs a timeline entry more. Deleted or rescheduled far
//! jobs leave their id in the old list until that window is drained. `tests/store/redis_store/memory.rs`
//! `memory_per_pending_job_is_at_most_200_bytes` holds the total to its bound. Going lower
//! would take listpack-sized buckets for the jobs HASH (the dict entry and sds headers are
//! most of what is left).
//!
//! Decision: ready and dead jobs of all topics share one zset per shard (ordered by topic
//! first) instead of one key per topic. A by-id transition (delete, release, bury, the timer)
//! does not know the job's topic before it reads the record, and scripts must only touch keys
//! passed in KEYS: with per-topic keys every such call would need a second round trip to learn
//! the topic. Job ids are only ever hash fields and zset members, never part of a key name, so
//! no id can collide with an internal key.

use crate::job::Topic;

/// Width of a timeline window. Part of the storage format (window keys are named by
/// `run_at / WINDOW_MS`): never change it.
pub const WINDOW_MS: u64 = 60_000;

/// The window a time falls in.
pub fn window_of(t: u64) -> u64 {
    t / WINDOW_MS
}

/// The window list a job due at `run_at`, scheduled at `now`, goes to: `Some` when that
/// window starts two or more windows after `now`'s (so it is more than one window away and
/// the timer drains it, one window ahead, only later); `None` for the exact timeline.
pub fn far_window(run_at: u64, now: u64) -> Option<u64> {
    let w = window_of(run_at);
    (w >= window_of(now) + 2).then_some(w)
}

/// FNV-1a, 64 bit. Hand-rolled so the shard of an id is the same on every instance, version
/// and platform (a `std` hasher makes no such promise). Never change it: shards of existing
/// jobs would move.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The shard holding job `id` when jobs are spread over `shards` shards.
pub fn shard_of(id: &str, shards: u16) -> u16 {
    (fnv1a64(id.as_bytes()) % u64::from(shards.max(1))) as u16
}

/// Number of Redis Cluster hash slots.
pub const CLUSTER_SLOTS: u16 = 16384;

/// CRC16/XMODEM, the checksum Redis Cluster maps keys to slots with.
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The cluster slot of `key`, as `CLUSTER KEYSLOT` computes it: the hash tag (the text
/// between the first `{` and the next `}`, if not empty) or else the whole key.
pub fn key_slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let hashed = b
        .iter()
        .position(|&c| c == b'{')
        .and_then(|open| {
            let rest = &b[open + 1..];
            let close = rest.iter().position(|&c| c == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(b);
    crc16(hashed) % CLUSTER_SLOTS
}

/// Most candidates [`cluster_tag`] tries before settling for the first one.
const TAG_SEARCH_LIMIT: u32 = 1 << 20;

/// The hash tag of shard `shard` of `shards` on a Redis Cluster: `{<prefix>:<shard>:<k>}` with
/// the smallest `k >= 0` whose slot lies in the shard's equal share of the slot space,
/// `[shard·16384/shards, (shard+1)·16384/shards)`.
///
/// Decision: `{<prefix>:<s>}` would put the shards on CRC16-random slots, and with 8 shards
/// over 3 masters one master gets none about one time in nine (per prefix); a busy topic
/// would then use two thirds of the cluster. `redis-cli --cluster create` gives each master a
/// contiguous, equal range, so evenly spread slots mean every master holds
/// `shards / masters` shards, give or take one. The search is deterministic (same tags on
/// every instance and version) and costs about `shards` CRCs per shard, once at connect.
pub fn cluster_tag(prefix: &str, shard: u16, shards: u16) -> String {
    let n = u32::from(shards.max(1));
    let s = u32::from(shard);
    let slots = u32::from(CLUSTER_SLOTS);
    let (lo, hi) = (s * slots / n, (s + 1) * slots / n);
    let k = (0..TAG_SEARCH_LIMIT)
        .find(|k| {
            let slot = u32::from(crc16(format!("{prefix}:{shard}:{k}").as_bytes()) % CLUSTER_SLOTS);
            (lo..hi).contains(&slot)
        })
        .unwrap_or(0);
    format!("{{{prefix}:{shard}:{k}}}")
}

/// The keys of one shard, in the order every transition script takes them (`lib.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardKeys {
    pub jobs: String,
    pub timeline: String,
    pub ready: String,
    pub dead: String,
    pub counts: String,
    pub windows: String,
    pub due: String,
    pub dueidx: String,
    pub flow: String,
    /// The shard's hash tag, braces included: window list keys are `<tag>:w:<n>`.
    pub tag: String,
}

impl ShardKeys {
    /// Shard `shard`'s keys on one Redis server: tag `{<prefix>:<shard>}`.
    pub fn new(prefix: &str, shard: u16) -> ShardKeys {
        ShardKeys::with_tag(&format!("{{{prefix}:{shard}}}"))
    }

    /// Shard `shard` of `shards`'s keys on a Redis Cluster: tag [`cluster_tag`].
    pub fn cluster(prefix: &str, shard: u16, shards: u16) -> ShardKeys {
        ShardKeys::with_tag(&cluster_tag(prefix, shard, shards))
    }

    fn with_tag(tag: &str) -> ShardKeys {
        ShardKeys {
            jobs: format!("{tag}:jobs"),
            timeline: format!("{tag}:timeline"),
            ready: format!("{tag}:ready"),
            dead: format!("{tag}:dead"),
            counts: format!("{tag}:counts"),
            windows: format!("{tag}:windows"),
            due: format!("{tag}:due"),
            dueidx: format!("{tag}:dueidx"),
            flow: format!("{tag}:flow"),
            tag: tag.to_string(),
        }
    }

    /// KEYS[1..9] of a transition script.
    pub fn all(&self) -> [&str; 9] {
        [
            &self.jobs,
            &self.timeline,
            &self.ready,
            &self.dead,
            &self.counts,
            &self.windows,
            &self.due,
            &self.dueidx,
            &self.flow,
        ]
    }

    /// The list of the shard's far-future jobs due in window `w`.
    pub fn window(&self, w: u64) -> String {
        format!("{}:w:{w}", self.tag)
    }
}

/// A topic's range in a ready or dead zset (ZRANGEBYLEX bounds, as `lib.lua`'s `topic_min`
/// and `topic_max`): `[topic\0` to `(topic\1`. Topics hold no control characters, so `\0`
/// ends the topic in every member.
pub fn topic_range(topic: &Topic) -> (Vec<u8>, Vec<u8>) {
    let t = topic.as_str().as_bytes();
    ([b"[", t, b"\0"].concat(), [b"(", t, b"\x01"].concat())
}

/// Where a listing of a ready zset resumes: the member of the key `(prio, run_at, seq, id)`
/// (`store::ListKey`) in `queue`'s range, as `lib.lua`'s `ready_member` writes it, or `None`
/// when a number does not fit its width (no member sorts after such a key).
pub fn ready_member(queue: &Topic, prio: u64, run_at: u64, seq: u64, id: &str) -> Option<Vec<u8>> {
    let mut m = [queue.as_str().as_bytes(), b"\0"].concat();
    push_be(&mut m, prio, 4)?;
    push_be(&mut m, run_at, 6)?;
    push_be(&mut m, seq, 7)?;
    m.extend_from_slice(id.as_bytes());
    Some(m)
}

/// The group of a job placed ahead (`lib.lua`, format version 2): `\x01 queue \0
/// priority(4) run_at(6)`, as `lib.lua`'s `group_of` writes it; its field in the shard's `due`
/// HASH exists while the group waits for its tick (its jobs are delayed, then ready).
pub fn group(queue: &Topic, prio: u32, run_at: u64) -> Option<Vec<u8>> {
    let mut g = [b"\x01", queue.as_str().as_bytes(), b"\0"].concat();
    push_be(&mut g, u64::from(prio), 4)?;
    push_be(&mut g, run_at, 6)?;
    Some(g)
}

/// [`ready_member`] for a dead zset: `(seq, id)`, as `lib.lua`'s `dead_member`.
pub fn dead_member(queue: &Topic, seq: u64, id: &str) -> Option<Vec<u8>> {
    let mut m = [queue.as_str().as_bytes(), b"\0"].concat();
    push_be(&mut m, seq, 7)?;
    m.extend_from_slice(id.as_bytes());
    Some(m)
}

/// Appends the last `width` bytes of `n`, big-endian, if `n` fits in them.
fn push_be(out: &mut Vec<u8>, n: u64, width: usize) -> Option<()> {
    if width < 8 && n >> (8 * width) != 0 {
        return None;
    }
    out.extend_from_slice(&n.to_be_bytes()[8 - width..]);
    Some(())
}

/// The pub/sub channel every instance sharing `prefix` publishes its events on.
pub fn event_channel(prefix: &str) -> String {
    format!("{prefix}:events")
}

/// The key recording how a prefix's data is laid out (see [`layout`]): a hash tag of its own,
/// outside every shard, and still matched by an ACL key pattern `~{<prefix>:*`.
pub fn layout_key(prefix: &str) -> String {
    format!("{{{prefix}:layout}}")
}

/// The key recording the version of the key layout and record format a prefix's data is in
/// ([`super::layout::FORMAT_VERSION`]): a hash tag of its own, beside [`layout_key`].
pub fn format_key(prefix: &str) -> String {
    format!("{{{prefix}:format}}")
}

/// What [`layout_key`] holds: the shard count and the tag format (server or cluster), the two
/// settings that decide which keys a job lives under. Instances that disagree on either would
/// each see part of the jobs, so the first instance records them and the others must match.
pub fn layout(shards: u16, cluster: bool) -> String {
    let tags = if cluster { "cluster" } else { "server" };
    format!("shards={shards} tags={tags}")
}

/// Most shards a prefix can have (the `shards` setting's upper bound).
pub const MAX_SHARDS: u16 = 1024;

/// Checks a key prefix: not empty, and none of `{`, `}` (they would end the hash tag early and
/// scatter a shard's keys over several cluster slots), whitespace or control characters (they
/// make keys that are hard to type in `redis-cli` and to match in ACL rules). The error says
/// what is wrong, without naming the setting.
pub fn validate_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() {
        return Err("must not be empty".into());
    }
    if let Some(c) = prefix
        .chars()
        .find(|c| *c == '{' || *c == '}' || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "{prefix:?} contains {c:?}; braces, whitespace and control characters are not allowed"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        // From the FNV reference test suite (isthe.com/chongo/tech/comp/fnv).
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn shard_of_is_stable_and_in_range() {
        assert_eq!(shard_of("a", 8), (0xaf63_dc4c_8601_ec8c_u64 % 8) as u16);
        assert_eq!(shard_of("anything", 1), 0);
        assert_eq!(shard_of("anything", 0), 0);
        for i in 0..1000 {
            assert!(shard_of(&format!("job-{i}"), 7) < 7);
        }
    }

    #[test]
    fn every_key_of_a_shard_shares_its_hash_tag() {
        let k = ShardKeys::new("delayq", 3);
        for key in k.all() {
            assert!(key.starts_with("{delayq:3}:"), "{key}");
        }
        assert_eq!(k.window(29_000_000), "{delayq:3}:w:29000000");
    }

    #[test]
    fn only_jobs_two_windows_ahead_or_more_go_to_a_window_list() {
        let now = 100 * WINDOW_MS + 59_999;
        assert_eq!(far_window(now, now), None);
        assert_eq!(far_window(101 * WINDOW_MS + 59_999, now), None);
        assert_eq!(far_window(102 * WINDOW_MS, now), Some(102));
        assert_eq!(far_window(102 * WINDOW_MS, 100 * WINDOW_MS), Some(102));
        assert_eq!(far_window(u64::MAX, 0), Some(u64::MAX / WINDOW_MS));
    }

    #[test]
    fn crc16_and_key_slot_match_redis() {
        // The reference value of CRC16/XMODEM, and slots from the Redis Cluster spec.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        // An empty tag does not count: the whole key is hashed.
        assert_eq!(key_slot("foo{}{bar}"), crc16(b"foo{}{bar}") % CLUSTER_SLOTS);
        assert_eq!(key_slot("foo{{bar}}zap"), crc16(b"{bar") % CLUSTER_SLOTS);
    }

    #[test]
    fn cluster_tags_spread_shards_evenly_over_the_slot_space() {
        for shards in [1u16, 3, 8, 64, 1024] {
            for s in 0..shards {
                let k = ShardKeys::cluster("delayq", s, shards);
                let slot = u32::from(key_slot(&k.jobs));
                let (lo, hi) = (u32::from(s) * 16384, (u32::from(s) + 1) * 16384);
                assert!(
                    (lo..hi).contains(&(slot * u32::from(shards))),
                    "shard {s}/{shards}: slot {slot}"
                );
                for key in k.all() {
                    assert_eq!(key_slot(key), key_slot(&k.jobs));
                }
                assert_eq!(key_slot(&k.window(7)), key_slot(&k.jobs));
            }
        }
        // Stable: part of the storage format.
        assert_eq!(cluster_tag("delayq", 0, 8), cluster_tag("delayq", 0, 8));
    }

    #[test]
    fn braces_in_the_prefix_are_refused() {
        assert!(validate_prefix("delayq").is_ok());
        assert!(validate_prefix("a{b").is_err());
        assert!(validate_prefix("").is_err());
        assert!(validate_prefix("a b").is_err());
        assert!(validate_prefix("a\tb").is_err());
    }
}
