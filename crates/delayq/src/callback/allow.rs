//! Where callbacks may go (`--callback-allow`): a list of destinations, checked when a job is
//! pushed (its URL) and again when it is called (the URL, and every address its host name
//! resolves to), so that a producer cannot make delayq call what the operator did not allow,
//! such as a cloud's metadata address (169.254.169.254) or a service on delayq's own host.
//!
//! Entries:
//! - `public`: any host whose addresses are all public (not loopback, private, link-local,
//!   shared, documentation, multicast or otherwise reserved). The default.
//! - an IP network or address: `10.1.0.0/16`, `127.0.0.1`, `::1`.
//! - a host name, `hooks.example.com`, or every name under a domain, `*.example.com`. A name
//!   allowed this way may resolve to any address: the operator named it.
//!
//! Not here: the resolver that applies the call-time check (callback/mod.rs), the setting's
//! parsing from flags and files (config/).

use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use url::{Host, Url};

/// The default of `--callback-allow`.
pub const DEFAULT_ALLOW: &str = "public";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Destination {
    Public,
    Net(IpNet),
    /// A host name, lowercase.
    Name(String),
    /// A domain (lowercase, without the `*.`): every name under it.
    Domain(String),
}

/// The parsed `--callback-allow` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowList(Vec<Destination>);

impl Default for AllowList {
    fn default() -> Self {
        AllowList(vec![Destination::Public])
    }
}

impl AllowList {
    /// Parses the entries (module docs); an empty list allows nothing, which turns callbacks
    /// off.
    pub fn parse(entries: &[String]) -> Result<AllowList, String> {
        let mut out = Vec::with_capacity(entries.len());
        for raw in entries {
            let e = raw.trim().to_ascii_lowercase();
            let d = if e == DEFAULT_ALLOW {
                Destination::Public
            } else if let Ok(net) = e.parse::<IpNet>() {
                Destination::Net(net)
            } else if let Ok(ip) = e.parse::<IpAddr>() {
                Destination::Net(IpNet::from(ip))
            } else if let Some(domain) = e.strip_prefix("*.") {
                Destination::Domain(host_name(domain, raw)?)
            } else {
                Destination::Name(host_name(&e, raw)?)
            };
            out.push(d);
        }
        Ok(AllowList(out))
    }

    /// Checks a callback URL as given at push: an absolute `http` or `https` URL with a host
    /// that this list allows. The error says why, for the producer.
    pub fn check_url(&self, url: &str) -> Result<Url, String> {
        let u = Url::parse(url).map_err(|e| format!("is not an absolute URL ({e})"))?;
        if !matches!(u.scheme(), "http" | "https") {
            return Err(format!(
                "must be an http or https URL, got scheme {:?}",
                u.scheme()
            ));
        }
        let allowed = match u.host() {
            None => return Err("has no host".into()),
            Some(Host::Ipv4(ip)) => self.allows_ip(IpAddr::V4(ip)),
            Some(Host::Ipv6(ip)) => self.allows_ip(IpAddr::V6(ip)),
            Some(Host::Domain(name)) => self.allows_name(name),
        };
        if !allowed {
            return Err(format!(
                "{} is not among the destinations callbacks may reach (--callback-allow)",
                u.host_str().unwrap_or_default()
            ));
        }
        Ok(u)
    }

    /// Whether a call to host `name` may go to `ip`, one of the addresses it resolved to.
    pub fn allows_resolved(&self, name: &str, ip: IpAddr) -> bool {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        self.names(&name) || self.allows_ip(ip)
    }

    /// Whether a host name may be called (at push: its addresses are checked at call time
    /// unless the name is listed itself).
    fn allows_name(&self, name: &str) -> bool {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if self.names(&name) {
            return true;
        }
        // RFC 6761: these names are the local host; no public address answers them.
        let local = name == "localhost" || name.ends_with(".localhost");
        !local && self.0.contains(&Destination::Public)
    }

    /// Whether the list names this (lowercase) host itself.
    fn names(&self, name: &str) -> bool {
        self.0.iter().any(|d| match d {
            Destination::Name(n) => n == name,
            Destination::Domain(d) => name
                .strip_suffix(d.as_str())
                .is_some_and(|head| head.ends_with('.')),
            _ => false,
        })
    }

    fn allows_ip(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|d| match d {
            Destination::Public => is_public(ip),
            Destination::Net(net) => net.contains(&ip),
            _ => false,
        })
    }
}

/// A host name entry, checked enough to catch a typo (a URL or a port given by mistake).
fn host_name(name: &str, raw: &str) -> Result<String, String> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_');
    if !ok {
        return Err(format!(
            "{raw:?} is not `public`, an IP network or address, a host name or `*.domain`"
        ));
    }
    Ok(name.trim_end_matches('.').to_string())
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

/// Whether an address is reachable on the public internet: none of the special-purpose
/// ranges of the IANA registries (RFC 6890 and its updates) that a callback must not reach by
/// default.
pub fn is_public(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0 // "this network"
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local() // 169.254/16: cloud metadata lives here
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || ip.is_documentation()
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || ip.is_multicast()
        || a >= 240) // reserved, and broadcast
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local
        || (s[0] & 0xffc0) == 0xfe80 // link-local
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x64 && s[1] == 0xff9b) // NAT64: would reach IPv4 ranges unchecked
        || (s[0] == 0x2002)) // 6to4: likewise
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> AllowList {
        AllowList::parse(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn the_default_allows_public_hosts_and_refuses_metadata_loopback_and_private_ones() {
        let d = AllowList::default();
        assert!(d.check_url("https://hooks.example.com/x").is_ok());
        assert!(d.check_url("http://93.184.215.14:8080/x").is_ok());
        for refused in [
            "http://169.254.169.254/latest/meta-data/",
            "http://127.0.0.1:9000/",
            "http://10.0.0.5/",
            "http://192.168.1.1/",
            "http://[::1]/",
            "http://[fe80::1]/",
            "http://[::ffff:169.254.169.254]/",
            "http://localhost:8080/",
            "http://api.localhost/",
            "http://0.0.0.0/",
        ] {
            let e = d.check_url(refused).unwrap_err();
            assert!(e.contains("--callback-allow"), "{refused}: {e}");
        }
        // At call time a public name resolving to a private address is refused.
        assert!(!d.allows_resolved("evil.example", "169.254.169.254".parse().unwrap()));
        assert!(d.allows_resolved("ok.example", "93.184.215.14".parse().unwrap()));
    }

    #[test]
    fn networks_names_and_domains_allow_what_they_name() {
        let l = list(&[
            "127.0.0.1",
            "10.0.0.0/8",
            "hooks.internal",
            "*.corp.example",
        ]);
        assert!(l.check_url("http://127.0.0.1:1234/a").is_ok());
        assert!(l.check_url("http://10.9.8.7/a").is_ok());
        assert!(l.check_url("http://hooks.internal/a").is_ok());
        assert!(l.check_url("http://HOOKS.internal./a").is_ok());
        assert!(l.check_url("http://a.b.corp.example/a").is_ok());
        assert!(l.check_url("http://corp.example/a").is_err());
        assert!(l.check_url("http://xcorp.example/a").is_err());
        assert!(l.check_url("http://127.0.0.2/a").is_err());
        assert!(
            l.check_url("https://hooks.example.com/").is_err(),
            "no `public`"
        );
        // A listed name may resolve anywhere; the operator named it.
        assert!(l.allows_resolved("hooks.internal", "10.1.1.1".parse().unwrap()));
        assert!(l.allows_resolved("x.corp.example", "192.168.0.9".parse().unwrap()));
    }

    #[test]
    fn urls_must_be_absolute_http_or_https() {
        let l = list(&["public"]);
        assert!(
            l.check_url("ftp://example.com/")
                .unwrap_err()
                .contains("scheme")
        );
        assert!(l.check_url("/relative").unwrap_err().contains("absolute"));
        assert!(l.check_url("not a url").is_err());
        assert!(l.check_url("file:///etc/passwd").is_err());
        // An empty list allows nothing.
        assert!(list(&[]).check_url("https://example.com/").is_err());
    }

    #[test]
    fn bad_entries_are_refused() {
        for bad in ["http://x.example/", "x.example:80", "10.0.0.0/33", ""] {
            assert!(
                AllowList::parse(&[bad.to_string()]).is_err(),
                "{bad:?} accepted"
            );
        }
    }
}
