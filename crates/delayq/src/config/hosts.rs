//! `allowed_hosts`: the host names requests may be addressed to, parsed from the setting.
//! `api/origin.rs` checks each request's host against it; this file only says what an entry
//! is and which hosts a list allows.

use std::fmt;
use std::net::IpAddr;

/// One entry of `allowed_hosts`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// `*`: any host.
    Any,
    /// A host name, lowercase, without a trailing dot.
    Name(String),
    /// `*.domain`: every name under the domain (lowercase, without the `*.`).
    Domain(String),
}

/// The parsed `allowed_hosts` list: the host names requests may be addressed to besides IP
/// addresses and `localhost`, which are always allowed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AllowedHosts(Vec<HostPattern>);

impl AllowedHosts {
    /// Every host: `*`.
    pub fn any() -> AllowedHosts {
        AllowedHosts(vec![HostPattern::Any])
    }

    /// Parses the entries: `*`, host names (`queue.example.com`) and `*.domain`; IP addresses
    /// are accepted (and always allowed anyway). Ports are refused: they are not compared.
    pub fn parse(entries: &[String]) -> Result<AllowedHosts, String> {
        let mut out = Vec::with_capacity(entries.len());
        for raw in entries {
            let e = raw.trim().to_ascii_lowercase();
            let pattern = if e == "*" {
                HostPattern::Any
            } else if let Some(domain) = e.strip_prefix("*.") {
                HostPattern::Domain(entry_name(domain, raw)?)
            } else if ip_literal(&e).is_some() {
                continue;
            } else {
                HostPattern::Name(entry_name(&e, raw)?)
            };
            out.push(pattern);
        }
        Ok(AllowedHosts(out))
    }

    /// Whether a request may be addressed to `host` (lowercase, no port, no trailing dot;
    /// IPv6 in brackets).
    pub fn allows(&self, host: &str) -> bool {
        if host == "localhost" || ip_literal(host).is_some() {
            return true;
        }
        self.0.iter().any(|p| match p {
            HostPattern::Any => true,
            HostPattern::Name(n) => n == host,
            HostPattern::Domain(d) => host
                .strip_suffix(d.as_str())
                .is_some_and(|head| head.ends_with('.')),
        })
    }
}

impl fmt::Display for AllowedHosts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries: Vec<String> = self
            .0
            .iter()
            .map(|p| match p {
                HostPattern::Any => "*".to_string(),
                HostPattern::Name(n) => n.clone(),
                HostPattern::Domain(d) => format!("*.{d}"),
            })
            .collect();
        f.write_str(&entries.join(","))
    }
}

/// A host name entry, checked enough to catch a typo (a URL or a port given by mistake).
fn entry_name(name: &str, raw: &str) -> Result<String, String> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_');
    if !ok {
        let hint = if name.contains(':') {
            " (without a port: ports are not compared)"
        } else {
            ""
        };
        return Err(format!(
            "{raw:?} is not `*`, a host name or `*.domain`{hint}"
        ));
    }
    Ok(name.trim_end_matches('.').to_string())
}

/// The address a host is, if it is an IP literal: dotted IPv4, or IPv6 in brackets (as in a
/// `Host` header) or bare (as in the setting).
fn ip_literal(host: &str) -> Option<IpAddr> {
    let inner = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    inner.parse().ok()
}
