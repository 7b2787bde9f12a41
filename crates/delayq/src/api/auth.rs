//! Bearer-token authentication. When `Config::auth_tokens` is not empty, [`Tokens::screen`]
//! runs before every route (front.rs, after the host and cross-site guard): a request without `Authorization: Bearer <token>` naming one of the
//! configured tokens is answered 401 with `WWW-Authenticate: Bearer` before any handler runs
//! (its body is never read). `GET /healthz` (and `HEAD`) is exempt, so liveness probes need no
//! secret; `/readyz` is not, since it reports on the store. So are the dashboard's static assets
//! (`GET /ui/...`, `ui.rs`), which hold no data: the page asks for a token and sends it on its
//! own /v1 calls.
//!
//! The presented token is compared with every configured token, each with
//! `subtle::ConstantTimeEq` and without stopping at a match, so the time taken does not reveal
//! how much of a token was right, nor which token matched. It can reveal the tokens' lengths
//! (a comparison of unequal lengths is cut short), which tells a guesser little about a token
//! of 16 or more random characters.
//!
//! What this module does not do: log tokens or headers (a refusal is logged at debug level with
//! method and path, like `TraceLayer`'s per-request lines, so a guessing client cannot flood
//! the log), slow down or lock out guessers, or encrypt anything: a token crosses the network
//! in clear unless a TLS proxy sits in front.

use super::refusal;
use crate::config::AuthToken;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use std::sync::Arc;
use subtle::{Choice, ConstantTimeEq};

/// The message of every 401.
const UNAUTHORIZED_MESSAGE: &str = "missing or invalid bearer token";

/// The tokens a request may present. Cheap to clone.
#[derive(Clone)]
pub struct Tokens(Arc<[AuthToken]>);

impl Tokens {
    /// `None` when there is no token: authentication is off.
    pub fn new(tokens: &[AuthToken]) -> Option<Tokens> {
        (!tokens.is_empty()).then(|| Tokens(tokens.into()))
    }

    /// Whether `presented` is one of the tokens, in time independent of which one and of
    /// where a mismatch is.
    fn accepts(&self, presented: &[u8]) -> bool {
        let mut any = Choice::from(0);
        for token in self.0.iter() {
            any |= token.as_bytes().ct_eq(presented);
        }
        any.into()
    }
}

impl Tokens {
    /// The 401 of a request that is neither exempt nor carries a valid token; `None` for the
    /// rest, which pass.
    pub fn screen<B>(&self, req: &Request<B>) -> Option<Response> {
        let path = req.uri().path();
        let exempt = matches!(*req.method(), Method::GET | Method::HEAD)
            && (path == "/healthz" || super::ui::is_public(path));
        if exempt || bearer(req.headers()).is_some_and(|t| self.accepts(t)) {
            return None;
        }
        tracing::debug!(method = %req.method(), %path, "refused: {UNAUTHORIZED_MESSAGE}");
        let mut resp = refusal(
            path,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            UNAUTHORIZED_MESSAGE,
        );
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        Some(resp)
    }
}

/// The token of the request's one `Authorization` header if its scheme is `Bearer` (any case,
/// RFC 7235). Several `Authorization` headers count as none.
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let value = value.as_bytes();
    let space = value.iter().position(|b| *b == b' ')?;
    let (scheme, token) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = token.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn bearer_token_is_read_from_one_authorization_header() {
        assert_eq!(bearer(&headers(&["Bearer abc"])), Some(&b"abc"[..]));
        assert_eq!(bearer(&headers(&["bearer  abc "])), Some(&b"abc"[..]));
        assert_eq!(bearer(&headers(&["BEARER abc"])), Some(&b"abc"[..]));
        for bad in [
            &[][..],
            &["Basic YWxhZGRpbjpvcGVuc2VzYW1l"],
            &["Bearer"],
            &["Bearer "],
            &["Bearerabc"],
            &["Bearer abc", "Bearer abc"],
        ] {
            assert_eq!(bearer(&headers(bad)), None, "{bad:?}");
        }
    }

    #[test]
    fn any_configured_token_is_accepted_and_nothing_else() {
        let tokens = Tokens::new(&[
            AuthToken::from("0123456789abcdef"),
            AuthToken::from("fedcba9876543210"),
        ])
        .unwrap();
        assert!(tokens.accepts(b"0123456789abcdef"));
        assert!(tokens.accepts(b"fedcba9876543210"));
        for bad in [
            &b""[..],
            b"0123456789abcde",
            b"0123456789abcdeF",
            b"0123456789abcdef0",
        ] {
            assert!(!tokens.accepts(bad), "{bad:?}");
        }
        assert!(Tokens::new(&[]).is_none());
    }
}
