//! The rules of single settings: each turns a given value into the setting's value or says
//! why it cannot, never quoting what may be a secret (a Redis URL can hold a password). The
//! limits they enforce are constants of `config` or of the module that relies on them; a
//! rule only refers to them. Rules between settings are in `Config::from_args`; the bearer
//! token rules are in `token.rs`.

use super::define::{Rule, ShowDefault};
use super::{AllowedHosts, AuthToken};
use crate::delivery::allow::{AllowList, DEFAULT_ALLOW};
use crate::delivery::sign::WebhookSecret;
use std::net::SocketAddr;
use std::path::PathBuf;

/// An integer in `min..=max` that fits the setting's type.
pub(super) struct Between(pub u64, pub u64);

impl<T: TryFrom<u64>> Rule<u64, T> for Between {
    fn apply(&self, n: u64) -> Result<T, String> {
        let Between(min, max) = *self;
        if n < min || n > max {
            return Err(format!("{n} is not between {min} and {max}"));
        }
        T::try_from(n).map_err(|_| format!("{n} is too large"))
    }

    fn limits(&self) -> Option<String> {
        Some(format!("{}–{}", self.0, self.1))
    }
}

/// As [`Between`], for a setting that is unset (derived at use) by default.
pub(super) struct SomeBetween(pub u64, pub u64);

impl<T: TryFrom<u64>> Rule<u64, Option<T>> for SomeBetween {
    fn apply(&self, n: u64) -> Result<Option<T>, String> {
        Between(self.0, self.1).apply(n).map(Some)
    }

    fn limits(&self) -> Option<String> {
        Rule::<u64, T>::limits(&Between(self.0, self.1))
    }
}

/// Any value: the setting is checked against another one, or not at all.
pub(super) struct Any;

impl<T> Rule<T, T> for Any {
    fn apply(&self, given: T) -> Result<T, String> {
        Ok(given)
    }
}

/// An IP address and port.
pub(super) struct Address;

impl Rule<String, SocketAddr> for Address {
    fn apply(&self, text: String) -> Result<SocketAddr, String> {
        text.parse()
            .map_err(|_| format!("{text:?} is not a socket address (IP:PORT, e.g. 127.0.0.1:9277)"))
    }
}

/// The beanstalkd listener: `IP:PORT`, or `unix:` and a path.
pub(super) struct BeanstalkAddress;

impl Rule<String, Option<super::BeanstalkListen>> for BeanstalkAddress {
    fn apply(&self, text: String) -> Result<Option<super::BeanstalkListen>, String> {
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(
                    "`unix:` needs a socket path, e.g. unix:/run/delayq/beanstalk.sock".into(),
                );
            }
            return Ok(Some(super::BeanstalkListen::Unix(PathBuf::from(path))));
        }
        text.parse().map(|a| Some(super::BeanstalkListen::Tcp(a))).map_err(|_| {
            format!("{text:?} is not a socket address (IP:PORT, e.g. 127.0.0.1:11300) nor unix:/path")
        })
    }
}

/// A path that is not empty (an empty one would mean the working directory by accident).
pub(super) struct NonEmptyPath;

impl Rule<PathBuf, PathBuf> for NonEmptyPath {
    fn apply(&self, path: PathBuf) -> Result<PathBuf, String> {
        if path.as_os_str().is_empty() {
            return Err("must not be empty".into());
        }
        Ok(path)
    }
}

/// An optional setting's path, by [`NonEmptyPath`].
impl Rule<PathBuf, Option<PathBuf>> for NonEmptyPath {
    fn apply(&self, path: PathBuf) -> Result<Option<PathBuf>, String> {
        Rule::<PathBuf, PathBuf>::apply(self, path).map(Some)
    }
}

/// A Redis key prefix, by the Redis store's own rule.
pub(super) struct KeyPrefix;

impl Rule<String, String> for KeyPrefix {
    fn apply(&self, prefix: String) -> Result<String, String> {
        crate::store::redis::validate_prefix(&prefix)?;
        Ok(prefix)
    }

    fn limits(&self) -> Option<String> {
        Some("not empty; no `{`, `}`, whitespace or control characters".into())
    }
}

/// The URL of a RabbitMQ broker, as the AMQP client parses it (`amqp://`, `amqps://`).
pub(super) struct AmqpUrl;

impl Rule<String, Option<String>> for AmqpUrl {
    fn apply(&self, url: String) -> Result<Option<String>, String> {
        // The parser's message may quote the URL, which may hold a password: not echoed.
        url.parse::<lapin::uri::AMQPUri>().map_err(|_| {
            "not an AMQP URL: it must look like amqp://user:password@host:5672/vhost (or amqps://)"
                .to_string()
        })?;
        Ok(Some(url))
    }
}

/// A RabbitMQ queue name: 1 to 255 bytes.
pub(super) struct AmqpName;

impl Rule<String, String> for AmqpName {
    fn apply(&self, name: String) -> Result<String, String> {
        if name.is_empty() || name.len() > crate::job::MAX_AMQP_NAME_BYTES {
            return Err(format!(
                "must be 1 to {} bytes, got {}",
                crate::job::MAX_AMQP_NAME_BYTES,
                name.len()
            ));
        }
        Ok(name)
    }
}

/// URL schemes the Redis client understands.
const REDIS_SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "valkey",
    "valkeys",
    "redis+unix",
    "valkey+unix",
    "unix",
];
/// URL schemes a Redis Cluster seed may use (cluster nodes are reached over TCP).
const REDIS_CLUSTER_SCHEMES: &[&str] = &["redis", "rediss", "valkey", "valkeys"];

/// The URL of one Redis server.
pub(super) struct RedisUrl;

impl Rule<String, Option<String>> for RedisUrl {
    fn apply(&self, url: String) -> Result<Option<String>, String> {
        check_scheme(&url, REDIS_SCHEMES)?;
        Ok(Some(url))
    }
}

/// The seed URLs of a Redis Cluster: at least one, none empty, each trimmed.
pub(super) struct ClusterSeeds;

impl Rule<Vec<String>, Option<Vec<String>>> for ClusterSeeds {
    fn apply(&self, urls: Vec<String>) -> Result<Option<Vec<String>>, String> {
        let urls: Vec<String> = urls.iter().map(|u| u.trim().to_string()).collect();
        if urls.iter().all(|u| u.is_empty()) {
            return Err("no seed URL given".into());
        }
        for url in &urls {
            if url.is_empty() {
                return Err("empty seed URL (stray comma?)".into());
            }
            check_scheme(url, REDIS_CLUSTER_SCHEMES)?;
        }
        Ok(Some(urls))
    }
}

/// Checks that `url` starts with one of `schemes`. The URL is not echoed: it may hold a
/// password.
fn check_scheme(url: &str, schemes: &[&str]) -> Result<(), String> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if scheme.is_some_and(|sc| schemes.contains(&sc)) {
        return Ok(());
    }
    Err(format!(
        "not a Redis URL: it must start with one of {}",
        schemes
            .iter()
            .map(|s| format!("{s}://"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// `callback_secret`: each a Standard Webhooks secret; an error says which one (by position)
/// and why, never quoting it.
pub(super) struct WebhookSecrets;

impl Rule<Vec<AuthToken>, Vec<WebhookSecret>> for WebhookSecrets {
    fn apply(&self, given: Vec<AuthToken>) -> Result<Vec<WebhookSecret>, String> {
        given
            .iter()
            .enumerate()
            .map(|(i, s)| {
                WebhookSecret::parse(s.as_str()).map_err(|m| format!("secret {}: {m}", i + 1))
            })
            .collect()
    }

    fn limits(&self) -> Option<String> {
        Some("each `whsec_` followed by base64".into())
    }
}

/// Secrets are never shown, and there are none by default.
impl ShowDefault for Vec<WebhookSecret> {
    fn show(&self) -> Option<String> {
        None
    }
}

/// `callback_allow`: the destinations callbacks may reach.
pub(super) struct Allow;

impl Rule<Vec<String>, AllowList> for Allow {
    fn apply(&self, entries: Vec<String>) -> Result<AllowList, String> {
        AllowList::parse(&entries)
    }
}

impl ShowDefault for AllowList {
    fn show(&self) -> Option<String> {
        (*self == AllowList::default()).then(|| format!("`{DEFAULT_ALLOW}`"))
    }
}

/// `allowed_hosts`: the host names requests may be addressed to.
pub(super) struct Hosts;

impl Rule<Vec<String>, Option<AllowedHosts>> for Hosts {
    fn apply(&self, entries: Vec<String>) -> Result<Option<AllowedHosts>, String> {
        AllowedHosts::parse(&entries).map(Some)
    }
}

impl ShowDefault for AllowedHosts {
    fn show(&self) -> Option<String> {
        Some(format!("`{self}`"))
    }
}

impl ShowDefault for super::BeanstalkListen {
    fn show(&self) -> Option<String> {
        Some(format!("`{self}`"))
    }
}
