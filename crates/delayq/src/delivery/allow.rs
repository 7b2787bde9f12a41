//! Where callbacks may go (`--callback-allow`): a list of destinations, checked when a job is
//! pushed (its URL) and again when it is called (the URL, and every address its host name
//! resolves to), so that a producer cannot make delayq call what the operator did not allow,
//! such as a cloud's metadata address (169.254.169.254) or a service on delayq's own host.
//!
//! Entries:
//! - `public`: any host whose addresses are all public: not in a block that the IANA
//!   special-purpose address registries (IPv4 and IPv6) call not globally reachable, such as
//!   loopback, private, link-local, shared, documentation, benchmarking or reserved ranges; not
//!   multicast; for IPv6, global unicast (`2000::/3`); an IPv6 address carrying an IPv4 address
//!   (`::ffff:a.b.c.d`, `::a.b.c.d`, `64:ff9b::a.b.c.d`) judged as that address ([`not_public`]).
//!   The default.
//! - an IP network or address: `10.1.0.0/16`, `127.0.0.1`, `::1`.
//! - a host name, `hooks.example.com`, or every name under a domain, `*.example.com`. A name
//!   allowed this way may resolve to any address: the operator named it.
//!
//! Not here: the resolver that applies the call-time check (delivery/callback.rs), the setting's
//! parsing from flags and files (config/).

use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;
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
            let special = match u.host() {
                Some(Host::Ipv4(ip)) => not_public(IpAddr::V4(ip)),
                Some(Host::Ipv6(ip)) => not_public(IpAddr::V6(ip)),
                _ => None,
            }
            .filter(|_| self.0.contains(&Destination::Public))
            .map(|name| format!(" (not a public address: {name})"))
            .unwrap_or_default();
            return Err(format!(
                "{} is not among the destinations callbacks may reach (--callback-allow){special}",
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

/// An IPv4-mapped IPv6 address as the IPv4 address it is: a dual-stack socket connecting to
/// `::ffff:a.b.c.d` reaches `a.b.c.d`, so an entry `10.0.0.0/8` covers `::ffff:10.0.0.1` too.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

/// Whether an address is reachable on the public internet: [`not_public`] finds no reason it
/// is not.
pub fn is_public(ip: IpAddr) -> bool {
    not_public(ip).is_none()
}

/// Why an address is not reachable on the public internet, by the IANA registries, or `None`
/// when it is:
///
/// - an IPv6 address that carries an IPv4 address is judged as that IPv4 address: IPv4-mapped
///   (`::ffff:0:0/96`), IPv4-compatible (`::/96`, deprecated by RFC 4291) and the NAT64
///   well-known prefix (`64:ff9b::/96`, RFC 6052), so `::127.0.0.1` is loopback and
///   `::a9fe:a9fe` (169.254.169.254) link-local;
/// - other IPv6 addresses must be global unicast (`2000::/3`; in the IANA IPv6 Address Space
///   registry everything else is reserved by the IETF, unique-local, link-local or multicast:
///   `100::/64`, `fec0::/10`, `5f00::/16`, `::ffff:0:0:0/96`, ...);
/// - IPv4 multicast (`224.0.0.0/4`, the IANA multicast registry) is not a unicast destination;
/// - the most specific entry of a special-purpose registry ([`SPECIAL`]) that contains the
///   address, if any, must say "Globally Reachable: True"; False and N/A are
///   not public.
pub fn not_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => not_public_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => not_public_v4(v4),
            None => not_public_v6(v6),
        },
    }
}

/// The IPv4 address an IPv6 address stands for, in the forms whose meaning is that IPv4
/// address: IPv4-mapped, IPv4-compatible (but not `::` and `::1`, IPv6's own unspecified and
/// loopback addresses) and the NAT64 well-known prefix.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(ip);
    let high = bits >> 32;
    let mapped = high == 0xffff;
    let compatible = high == 0 && bits > 1;
    let nat64 = high == u128::from(NAT64_PREFIX) >> 32;
    (mapped || compatible || nat64).then_some(Ipv4Addr::from(bits as u32))
}

/// The NAT64 well-known prefix, `64:ff9b::/96`.
const NAT64_PREFIX: Ipv6Addr = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0);

fn not_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    if ip.is_multicast() {
        return Some("Multicast");
    }
    special(IpAddr::V4(ip))
}

fn not_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let global_unicast = u128::from(ip) >> 125 == 1; // 2000::/3
    special(IpAddr::V6(ip)).or((!global_unicast).then_some("not global unicast (2000::/3)"))
}

/// The name of the most specific registry block holding `ip` when that block is not globally
/// reachable.
fn special(ip: IpAddr) -> Option<&'static str> {
    let (_, global, name) = SPECIAL_NETS
        .iter()
        .filter(|(net, _, _)| net.contains(&ip))
        .max_by_key(|(net, _, _)| net.prefix_len())?;
    (!global).then_some(*name)
}

/// [`SPECIAL`], parsed.
static SPECIAL_NETS: LazyLock<Vec<(IpNet, bool, &'static str)>> = LazyLock::new(|| {
    SPECIAL
        .iter()
        .map(|&(block, global, name)| (block.parse().expect("a registry block"), global, name))
        .collect()
});

/// The IANA IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890 and its updates), every
/// entry: its address block, whether the registry says it is "Globally Reachable" (only True
/// is; False and N/A are not), and its name, shown in a refusal. The IPv4-mapped and NAT64
/// blocks are here for completeness: [`not_public`] judges their addresses by the IPv4 address
/// inside before it looks here.
const SPECIAL: [(&str, bool, &str); 51] = [
    ("0.0.0.0/8", false, "\"This network\""),
    ("0.0.0.0/32", false, "\"This host on this network\""),
    ("10.0.0.0/8", false, "Private-Use"),
    ("100.64.0.0/10", false, "Shared Address Space"),
    ("127.0.0.0/8", false, "Loopback"),
    ("169.254.0.0/16", false, "Link Local"),
    ("172.16.0.0/12", false, "Private-Use"),
    ("192.0.0.0/24", false, "IETF Protocol Assignments"),
    ("192.0.0.0/29", false, "IPv4 Service Continuity Prefix"),
    ("192.0.0.8/32", false, "IPv4 dummy address"),
    ("192.0.0.9/32", true, "Port Control Protocol Anycast"),
    (
        "192.0.0.10/32",
        true,
        "Traversal Using Relays around NAT Anycast",
    ),
    ("192.0.0.170/32", false, "NAT64/DNS64 Discovery"),
    ("192.0.0.171/32", false, "NAT64/DNS64 Discovery"),
    ("192.0.2.0/24", false, "Documentation (TEST-NET-1)"),
    ("192.31.196.0/24", true, "AS112-v4"),
    ("192.52.193.0/24", true, "AMT"),
    // RFC 7526 removed this block's Boolean values: N/A.
    ("192.88.99.0/24", false, "Deprecated (6to4 Relay Anycast)"),
    ("192.88.99.2/32", false, "6a44-relay anycast address"),
    ("192.168.0.0/16", false, "Private-Use"),
    ("192.175.48.0/24", true, "Direct Delegation AS112 Service"),
    ("198.18.0.0/15", false, "Benchmarking"),
    ("198.51.100.0/24", false, "Documentation (TEST-NET-2)"),
    ("203.0.113.0/24", false, "Documentation (TEST-NET-3)"),
    ("240.0.0.0/4", false, "Reserved"),
    ("255.255.255.255/32", false, "Limited Broadcast"),
    ("::1/128", false, "Loopback Address"),
    ("::/128", false, "Unspecified Address"),
    ("::ffff:0:0/96", false, "IPv4-mapped Address"),
    ("64:ff9b::/96", true, "IPv4-IPv6 Translat."),
    ("64:ff9b:1::/48", false, "IPv4-IPv6 Translat."),
    ("100::/64", false, "Discard-Only Address Block"),
    ("100:0:0:1::/64", false, "Dummy IPv6 Prefix"),
    ("2001::/23", false, "IETF Protocol Assignments"),
    ("2001::/32", false, "TEREDO"),
    ("2001:1::1/128", true, "Port Control Protocol Anycast"),
    (
        "2001:1::2/128",
        true,
        "Traversal Using Relays around NAT Anycast",
    ),
    (
        "2001:1::3/128",
        true,
        "DNS-SD Service Registration Protocol Anycast",
    ),
    ("2001:2::/48", false, "Benchmarking"),
    ("2001:3::/32", true, "AMT"),
    ("2001:4:112::/48", true, "AS112-v6"),
    ("2001:10::/28", false, "Deprecated (previously ORCHID)"),
    ("2001:20::/28", true, "ORCHIDv2"),
    (
        "2001:30::/28",
        true,
        "Drone Remote ID Protocol Entity Tags (DETs) Prefix",
    ),
    ("2001:db8::/32", false, "Documentation"),
    ("2002::/16", false, "6to4"),
    ("2620:4f:8000::/48", true, "Direct Delegation AS112 Service"),
    ("3fff::/20", false, "Documentation"),
    ("5f00::/16", false, "Segment Routing (SRv6) SIDs"),
    ("fc00::/7", false, "Unique-Local"),
    ("fe80::/10", false, "Link-Local Unicast"),
];

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

    /// The ranges an outside probe found accepted as public, each refused, and each special
    /// IPv4 block reached through every IPv6 form that carries it.
    #[test]
    fn ipv6_special_purpose_and_ipv4_carrying_addresses_are_not_public() {
        let d = AllowList::default();
        for (range, host) in [
            ("::/96 IPv4-compatible loopback", "[::127.0.0.1]"),
            ("::/96 IPv4-compatible metadata", "[::a9fe:a9fe]"),
            ("::/96 IPv4-compatible private", "[::10.0.0.1]"),
            ("::ffff:0:0/96 IPv4-mapped loopback", "[::ffff:127.0.0.1]"),
            (
                "::ffff:0:0:0/96 IPv4-translated (SIIT)",
                "[::ffff:0:7f00:1]",
            ),
            ("64:ff9b::/96 NAT64 of loopback", "[64:ff9b::127.0.0.1]"),
            ("64:ff9b::/96 NAT64 of metadata", "[64:ff9b::a9fe:a9fe]"),
            ("64:ff9b:1::/48 local-use NAT64", "[64:ff9b:1::808:808]"),
            ("2001::/32 Teredo", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]"),
            ("2001::/23 IETF protocol assignments", "[2001:1ff::1]"),
            ("100::/64 discard-only", "[100::1]"),
            ("100:0:0:1::/64 dummy prefix", "[100:0:0:1::1]"),
            ("fec0::/10 site-local (deprecated)", "[fec0::1]"),
            ("3fff::/20 documentation", "[3fff::1]"),
            ("5f00::/16 SRv6 SIDs", "[5f00::1]"),
            ("2001:2::/48 benchmarking", "[2001:2::1]"),
            ("2001:10::/28 deprecated ORCHID", "[2001:10::1]"),
            ("2001:db8::/32 documentation", "[2001:db8::1]"),
            ("2002::/16 6to4", "[2002:7f00:1::1]"),
            ("fc00::/7 unique-local", "[fd00::1]"),
            ("fe80::/10 link-local", "[fe80::1]"),
            ("ff00::/8 multicast", "[ff02::1]"),
            ("::/128 unspecified", "[::]"),
            ("::1/128 loopback", "[::1]"),
            ("4000::/3 reserved by the IETF", "[4000::1]"),
        ] {
            let url = format!("http://{host}:8080/hook");
            let e = d.check_url(&url).expect_err(range);
            assert!(e.contains("not a public address"), "{range}: {e}");
            let ip: IpAddr = host.trim_matches(['[', ']']).parse().unwrap();
            assert!(
                !d.allows_resolved("public.example", ip),
                "{range} at call time"
            );
        }
        // The same forms carrying a public IPv4 address, and public IPv6 addresses, pass.
        for host in [
            "[::ffff:93.184.215.14]",
            "[64:ff9b::93.184.215.14]",
            "[2606:4700:4700::1111]",
            "[2001:4860:4860::8888]",
            "[2001:1::1]",
            "[2001:20::1]",
        ] {
            assert!(
                d.check_url(&format!("http://{host}/")).is_ok(),
                "{host} refused"
            );
        }
    }

    /// Every entry of both registries: a block not globally reachable is refused at its first
    /// and last addresses; a globally reachable block's first address is public. Blocks judged
    /// by the IPv4 address inside (IPv4-mapped, NAT64) are left to the test above.
    #[test]
    fn every_special_purpose_block_is_judged_by_its_globally_reachable_entry() {
        for (net, global, name) in SPECIAL_NETS.iter() {
            let (first, last) = (net.network(), net.broadcast());
            if let IpAddr::V6(v6) = first
                && embedded_v4(v6).is_some()
            {
                continue;
            }
            if *global {
                assert!(is_public(first), "{name} {net}: {first} refused");
            } else {
                assert!(!is_public(first), "{name} {net}: {first} allowed");
                assert!(!is_public(last), "{name} {net}: {last} allowed");
            }
        }
        // The refusal names the block.
        let e = AllowList::default()
            .check_url("http://[2001:2::5]/")
            .unwrap_err();
        assert!(e.contains("Benchmarking"), "{e}");
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
