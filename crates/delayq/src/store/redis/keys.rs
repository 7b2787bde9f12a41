//! Key layout and shard choice: which Redis keys hold a namespace's jobs and which shard a job
//! id belongs to. Pure functions, no I/O; the Lua side of the layout is documented in
//! `lib.lua`.
//!
//! Every key of shard `s` starts with the hash tag `{<prefix>:<s>}`, so one shard is one
//! Redis Cluster slot and each script touches a single slot:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{p:s}:jobs` | HASH | job id → cmsgpack record (one field per job, no key per job) |
//! | `{p:s}:timeline` | ZSET | delayed and reserved job ids, scored by timer deadline |
//! | `{p:s}:ready` | ZSET | ready jobs, lexicographic `topic \0 priority run_at seq id` |
//! | `{p:s}:dead` | ZSET | dead jobs, lexicographic `topic \0 seq id` |
//! | `{p:s}:counts` | HASH | `<state code><topic>` → count, for cheap stats |
//!
//! Pub/sub events go to the channel `<prefix>:events` (a channel, not a key).
//!
//! Decision: ready and dead jobs of all topics share one zset per shard (ordered by topic
//! first) instead of one key per topic. A by-id transition (delete, release, bury, the timer)
//! does not know the job's topic before it reads the record, and scripts must only touch keys
//! passed in KEYS: with per-topic keys every such call would need a second round trip to learn
//! the topic. Job ids are only ever hash fields and zset members, never part of a key name, so
//! no id can collide with an internal key.

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

/// The keys of one shard, in the order every transition script takes them (`lib.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardKeys {
    pub jobs: String,
    pub timeline: String,
    pub ready: String,
    pub dead: String,
    pub counts: String,
}

impl ShardKeys {
    pub fn new(prefix: &str, shard: u16) -> ShardKeys {
        let tag = format!("{{{prefix}:{shard}}}");
        ShardKeys {
            jobs: format!("{tag}:jobs"),
            timeline: format!("{tag}:timeline"),
            ready: format!("{tag}:ready"),
            dead: format!("{tag}:dead"),
            counts: format!("{tag}:counts"),
        }
    }

    /// KEYS[1..5] of a transition script.
    pub fn all(&self) -> [&str; 5] {
        [
            &self.jobs,
            &self.timeline,
            &self.ready,
            &self.dead,
            &self.counts,
        ]
    }
}

/// The pub/sub channel every instance sharing `prefix` publishes its events on.
pub fn event_channel(prefix: &str) -> String {
    format!("{prefix}:events")
}

/// Checks that a prefix keeps the hash tag intact: braces inside it would end the tag early
/// and scatter a shard's keys over several cluster slots.
pub fn validate_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() {
        return Err("Redis key prefix must not be empty".into());
    }
    if prefix.contains(['{', '}']) {
        return Err(format!(
            "Redis key prefix {prefix:?} must not contain '{{' or '}}'"
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
    }

    #[test]
    fn braces_in_the_prefix_are_refused() {
        assert!(validate_prefix("delayq").is_ok());
        assert!(validate_prefix("a{b").is_err());
        assert!(validate_prefix("").is_err());
    }
}
