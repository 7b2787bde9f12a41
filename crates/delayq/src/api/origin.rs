//! Which requests a browser may make: the host check against DNS rebinding, and the refusal of
//! cross-site changes. [`Guard::screen`] runs before every route (front.rs), outside
//! authentication, so that a page on another site cannot use a server without tokens (the
//! default) through its visitor's browser.
//!
//! - **Host** (`allowed_hosts`, [`AllowedHosts`]): a request whose `Host` header (or HTTP/2
//!   `:authority`, or the authority of an absolute request target) names a host this server does
//!   not answer to is refused with 421 `host_not_allowed`. A rebinding page reaches the server
//!   under its own name (`evil.example` resolved to 127.0.0.1), which its browser sends as
//!   `Host`, so it is refused before anything is read or changed. Always allowed: IP addresses
//!   (a page under an IP address is that address's own, so no rebinding) and `localhost`; other
//!   names only when listed. Without the setting, a server listening on every interface
//!   (`0.0.0.0`, `[::]`) allows any host, since it is usually reached under names of its
//!   deployment (containers, service names) that it cannot know. Ports are not compared. A
//!   request without any host (HTTP/1.0) passes: browsers always send one.
//! - **Cross-site changes**: a request that can change something (any method but `GET`,
//!   `HEAD` and `OPTIONS`, and any method on the compat API's `/push`, `/pop`, `/finish`,
//!   `/delete` and `/reStore`, which take any) is refused with 403
//!   `cross_site` when a browser marks it as coming from another origin: `Sec-Fetch-Site` other
//!   than `same-origin` or `none` (`same-site` too: another port of the same host is another
//!   program), or, from browsers that do not send that header, an `Origin` that is not this
//!   server's own (`scheme://` + the request's `Host`). A request with neither header is not a
//!   browser's (curl, the CLI, the client crate, the bench) and passes. The same rule as Go's
//!   `net/http.CrossOriginProtection`. Reads are not refused here: without CORS headers
//!   (delayq sends none) a page on another origin cannot read the answer.
//!
//! What this module does not do: authenticate (`auth.rs`), or serve CORS (no origin is
//! trusted beyond the server's own).

use super::refusal;
use crate::config::{AllowedHosts, Config};
use axum::extract::Request;
use axum::http::HeaderName;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;
use std::borrow::Cow;
use std::sync::Arc;

/// Looked up by a name made once: a lookup by `&str` parses the name on every request.
static SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");

/// The host of an authority (`host[:port]`, `[v6][:port]`): lowercase, without the port and a
/// trailing dot. `None` when it is not one (user info, an unbracketed colon, a bad port).
fn host_of(authority: &str) -> Option<Cow<'_, str>> {
    if authority.contains('@') {
        return None;
    }
    let (host, port) = if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (host, rest) = authority.split_at(end + 1);
        (
            host,
            rest.strip_prefix(':').or(rest.is_empty().then_some("")),
        )
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, Some("")),
        }
    };
    let port_ok = port.is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()));
    let host = host.trim_end_matches('.');
    // Lowercased only when it has capitals: most clients send it lowercase.
    let host = if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    };
    (port_ok && !host.is_empty()).then_some(host)
}

/// What [`Guard::screen`] checks against. Cheap to clone.
#[derive(Clone)]
pub struct Guard {
    hosts: Arc<Hosts>,
}

impl Guard {
    /// `allowed_hosts`, or when not set: any host on a server listening on every interface,
    /// else only the hosts always allowed.
    pub fn new(config: &Config) -> Guard {
        let hosts = match &config.allowed_hosts {
            Some(hosts) => hosts.clone(),
            None if config.listen.ip().is_unspecified() => AllowedHosts::any(),
            None => AllowedHosts::default(),
        };
        let own = [
            config.listen.to_string(),
            format!("localhost:{}", config.listen.port()),
        ];
        Guard {
            hosts: Arc::new(Hosts::new(hosts, own)),
        }
    }
}

/// The hosts allowed, and the authorities most requests name, known allowed.
struct Hosts {
    allowed: AllowedHosts,
    /// Authorities, as sent, that [`host_of`] and `allowed` accept: the listen address and
    /// `localhost` with its port, which nearly every client sends. A `Host` header equal to
    /// one passes without being parsed, which every request would otherwise pay for.
    known: Vec<String>,
}

impl Hosts {
    /// Keeps of `candidates` the authorities the full check allows, so that the shortcut
    /// never lets through one it would refuse.
    fn new(allowed: AllowedHosts, candidates: impl IntoIterator<Item = String>) -> Hosts {
        let known = candidates
            .into_iter()
            .filter(|a| allows(&allowed, a))
            .collect();
        Hosts { allowed, known }
    }

    /// Whether a request may name `authority` (`host[:port]`).
    fn allow(&self, authority: &str) -> bool {
        self.known.iter().any(|k| k == authority) || allows(&self.allowed, authority)
    }
}

/// The full check: whether `hosts` allow the host of `authority` (`host[:port]`).
fn allows(hosts: &AllowedHosts, authority: &str) -> bool {
    host_of(authority).is_some_and(|h| hosts.allows(&h))
}

/// Why a request is refused.
enum Refused {
    /// Addressed to a host not allowed (the authority as sent, for the message).
    Host(String),
    /// A browser's change from another origin.
    CrossSite,
}

impl Guard {
    /// The refusal of a request addressed to a host not allowed (421) or of a cross-site
    /// change (403), as the module docs say; `None` for the rest, which pass.
    pub fn screen<B>(&self, req: &Request<B>) -> Option<Response> {
        let verdict = check(&self.hosts, req.method(), req.uri(), req.headers());
        let path = req.uri().path();
        match verdict {
            Ok(()) => None,
            Err(Refused::Host(host)) => {
                tracing::debug!(method = %req.method(), %path, %host, "refused: host not allowed");
                let shown: String = host.chars().take(255).collect();
                let message = format!(
                    "this server does not answer to the host {shown:?}; if clients reach it \
                     under that name, add it to allowed_hosts (--allowed-hosts)"
                );
                Some(refusal(
                    path,
                    StatusCode::MISDIRECTED_REQUEST,
                    "host_not_allowed",
                    &message,
                ))
            }
            Err(Refused::CrossSite) => {
                tracing::debug!(method = %req.method(), %path, "refused: cross-site request");
                Some(refusal(
                    path,
                    StatusCode::FORBIDDEN,
                    "cross_site",
                    "a request from a page of another site cannot change anything here; only \
                     this server's own pages and clients that are not browsers can",
                ))
            }
        }
    }
}

/// The module's two checks, host first.
fn check(hosts: &Hosts, method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<(), Refused> {
    let mut host_headers = headers.get_all(header::HOST).iter();
    let host_header = match (host_headers.next(), host_headers.next()) {
        (None, _) => None,
        (Some(v), None) => Some(
            v.to_str()
                .map_err(|_| Refused::Host(String::from_utf8_lossy(v.as_bytes()).into_owned()))?,
        ),
        (Some(_), Some(_)) => {
            let all: Vec<_> = headers
                .get_all(header::HOST)
                .iter()
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .collect();
            return Err(Refused::Host(all.join(", ")));
        }
    };
    let uri_authority = uri.authority().map(|a| a.as_str());
    for authority in [uri_authority, host_header].into_iter().flatten() {
        if !hosts.allow(authority) {
            return Err(Refused::Host(authority.to_string()));
        }
    }
    if !changes_state(method, uri.path()) {
        return Ok(());
    }
    let fetch_site = headers
        .get(&SEC_FETCH_SITE)
        .map(|v| v.as_bytes().to_ascii_lowercase());
    match fetch_site.as_deref() {
        Some(b"same-origin") | Some(b"none") => Ok(()),
        Some(_) => Err(Refused::CrossSite),
        None => match headers.get(header::ORIGIN) {
            None => Ok(()),
            Some(origin) => {
                let own = uri_authority.or(host_header);
                let origin_authority = origin
                    .to_str()
                    .ok()
                    .and_then(|o| o.split_once("://"))
                    .map(|(_, authority)| authority);
                match (origin_authority, own) {
                    (Some(o), Some(own)) if o.eq_ignore_ascii_case(own) => Ok(()),
                    _ => Err(Refused::CrossSite),
                }
            }
        },
    }
}

/// The compat API's paths that change something whatever the method: they accept any (a body
/// on `GET` included), and the restore restores on `GET`.
const COMPAT_CHANGES: &[&str] = &["/push", "/pop", "/finish", "/delete", "/reStore"];

/// Whether a request can change something: every method but the safe ones, and any method on
/// [`COMPAT_CHANGES`].
fn changes_state(method: &Method, path: &str) -> bool {
    let safe = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    !safe || COMPAT_CHANGES.contains(&path) || path.starts_with("/reStore/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn hosts(entries: &[&str]) -> AllowedHosts {
        AllowedHosts::parse(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn ip_addresses_and_localhost_are_always_allowed_with_any_port() {
        let none = AllowedHosts::default();
        for ok in [
            "localhost",
            "LOCALHOST:9277",
            "localhost.",
            "127.0.0.1",
            "127.0.0.1:9277",
            "[::1]",
            "[::1]:9277",
            "10.1.2.3:80",
            "[2001:db8::1]:8080",
        ] {
            assert!(allows(&none, ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:9277",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "::1",
            "[::1",
            "user@localhost",
            "localhost:port",
            "",
            ":9277",
            "0x7f.1",
        ] {
            assert!(!allows(&none, bad), "{bad}");
        }
    }

    #[test]
    fn the_known_authorities_change_no_verdict() {
        let authorities = [
            "127.0.0.1:9277",
            "localhost:9277",
            "[::1]:9277",
            "queue.example:9277",
            "evil.example:9277",
            "127.0.0.1:9277@evil.example",
        ];
        for allowed in [AllowedHosts::default(), hosts(&["queue.example"])] {
            // Every candidate offered, those the full check refuses among them.
            let with = Hosts::new(allowed.clone(), authorities.map(String::from));
            let without = Hosts::new(allowed, []);
            assert!(
                !with
                    .known
                    .iter()
                    .any(|k| k.starts_with("evil") || k.contains('@')),
                "a refused authority is kept: {:?}",
                with.known
            );
            for a in authorities {
                assert_eq!(with.allow(a), without.allow(a), "{a}");
            }
            assert!(with.allow("127.0.0.1:9277") && !with.allow("evil.example:9277"));
        }
    }

    #[test]
    fn listed_names_domains_and_the_wildcard_are_allowed() {
        let list = hosts(&["Queue.Example.com", "*.corp.example", "10.0.0.1"]);
        assert!(allows(&list, "queue.example.com:9277"));
        assert!(allows(&list, "QUEUE.example.com."));
        assert!(allows(&list, "a.corp.example"));
        assert!(allows(&list, "a.b.corp.example:1"));
        assert!(!allows(&list, "corp.example"));
        assert!(!allows(&list, "xcorp.example"));
        assert!(!allows(&list, "example.com"));
        assert!(allows(&hosts(&["*"]), "anything.example:1"));
        assert_eq!(list.to_string(), "queue.example.com,*.corp.example");
    }

    #[test]
    fn bad_entries_are_refused_with_a_reason() {
        for bad in ["", "localhost:9277", "http://queue.example", "a b", "*."] {
            let err = AllowedHosts::parse(&[bad.to_string()]).unwrap_err();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
        let err = AllowedHosts::parse(&["localhost:9277".into()]).unwrap_err();
        assert!(err.contains("port"), "{err}");
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn verdict(method: Method, path: &str, pairs: &[(&str, &str)]) -> &'static str {
        let uri: Uri = path.parse().unwrap();
        let hosts = Hosts::new(AllowedHosts::default(), ["127.0.0.1:9277".to_string()]);
        match check(&hosts, &method, &uri, &headers(pairs)) {
            Ok(()) => "ok",
            Err(Refused::Host(_)) => "host",
            Err(Refused::CrossSite) => "cross-site",
        }
    }

    #[test]
    fn changes_from_another_origin_are_refused_and_reads_are_not() {
        let host = ("host", "127.0.0.1:9277");
        let post = |extra: &[(&str, &str)]| {
            let mut all = vec![host];
            all.extend_from_slice(extra);
            verdict(Method::POST, "/push", &all)
        };
        assert_eq!(post(&[]), "ok");
        assert_eq!(post(&[("sec-fetch-site", "same-origin")]), "ok");
        assert_eq!(post(&[("sec-fetch-site", "none")]), "ok");
        assert_eq!(post(&[("sec-fetch-site", "same-site")]), "cross-site");
        assert_eq!(post(&[("sec-fetch-site", "cross-site")]), "cross-site");
        assert_eq!(post(&[("sec-fetch-site", "bogus")]), "cross-site");
        assert_eq!(post(&[("origin", "http://127.0.0.1:9277")]), "ok");
        assert_eq!(post(&[("origin", "http://127.0.0.1:9278")]), "cross-site");
        assert_eq!(post(&[("origin", "http://localhost:9277")]), "cross-site");
        assert_eq!(post(&[("origin", "null")]), "cross-site");
        // Sec-Fetch-Site decides when both are sent (a proxy may rewrite Host).
        let proxied = [
            ("sec-fetch-site", "same-origin"),
            ("origin", "https://q.example"),
        ];
        assert_eq!(post(&proxied), "ok");
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            let cross = [host, ("sec-fetch-site", "cross-site")];
            assert_eq!(verdict(method, "/v1/jobs/x", &cross), "ok");
        }
        let cross = [host, ("origin", "http://evil.example")];
        assert_eq!(
            verdict(Method::GET, "/reStore?expire=true", &cross),
            "cross-site"
        );
        assert_eq!(verdict(Method::GET, "/delete", &cross), "cross-site");
        assert_eq!(verdict(Method::GET, "/get", &cross), "ok");
        assert_eq!(verdict(Method::GET, "/reStore/x", &cross), "cross-site");
        assert_eq!(verdict(Method::DELETE, "/v1/jobs/x", &cross), "cross-site");
    }

    #[test]
    fn the_host_is_checked_in_every_place_a_request_names_it() {
        assert_eq!(verdict(Method::GET, "/healthz", &[]), "ok");
        assert_eq!(
            verdict(Method::GET, "/healthz", &[("host", "evil.example")]),
            "host"
        );
        assert_eq!(
            verdict(Method::GET, "http://evil.example/healthz", &[]),
            "host"
        );
        let both = [("host", "127.0.0.1")];
        assert_eq!(
            verdict(Method::GET, "http://evil.example/healthz", &both),
            "host"
        );
        let two = [("host", "127.0.0.1"), ("host", "127.0.0.1")];
        assert_eq!(verdict(Method::GET, "/healthz", &two), "host");
        // The host check comes first: a rebinding page's same-origin change is refused too.
        let rebound = [
            ("host", "evil.example:9277"),
            ("sec-fetch-site", "same-origin"),
        ];
        assert_eq!(verdict(Method::POST, "/v1/jobs", &rebound), "host");
        // HTTP/2 (:authority in the URI) compares the Origin with it.
        let h2 = [("origin", "http://127.0.0.1:9277")];
        assert_eq!(
            verdict(Method::POST, "http://127.0.0.1:9277/push", &h2),
            "ok"
        );
    }
}
