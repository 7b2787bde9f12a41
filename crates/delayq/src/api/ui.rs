//! The web dashboard (docs/dashboard.md): a page, a script and a style sheet, hand-written in
//! `crates/delayq/ui/` and embedded in the binary, served at `/ui/` (`/ui` redirects there).
//!
//! The assets carry no data, so they are served without a token (`auth.rs` exempts
//! [`is_public`] paths); the page reads and changes everything through the /v1 API and
//! `/metrics`, sending the bearer token the user gives it. Each asset has a strong `ETag` (a
//! hash of its bytes) and `Cache-Control: no-cache`: browsers keep a copy and revalidate it, so a
//! new binary's assets are picked up at once and an unchanged one costs a 304. The page is
//! served with a Content-Security-Policy allowing only its own script, style and API calls.

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

/// An embedded file and how it is served.
struct Asset {
    bytes: &'static [u8],
    content_type: &'static str,
    etag: OnceLock<HeaderValue>,
}

impl Asset {
    const fn new(bytes: &'static [u8], content_type: &'static str) -> Asset {
        Asset {
            bytes,
            content_type,
            etag: OnceLock::new(),
        }
    }

    /// `"<first 16 bytes of SHA-256, hex>"`, computed once.
    fn etag(&self) -> &HeaderValue {
        self.etag.get_or_init(|| {
            let digest = Sha256::digest(self.bytes);
            let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
            HeaderValue::from_str(&format!("\"{hex}\"")).expect("hex is a valid header value")
        })
    }

    /// 200 with the bytes, or 304 when `If-None-Match` names the current ETag.
    fn serve(&self, request: &HeaderMap) -> Response {
        let etag = self.etag();
        let fresh = request
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|tag| tag.trim().trim_start_matches("W/"))
            .any(|tag| tag == "*" || tag.as_bytes() == etag.as_bytes());
        let mut resp = if fresh {
            StatusCode::NOT_MODIFIED.into_response()
        } else {
            (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(self.content_type),
                )],
                self.bytes,
            )
                .into_response()
        };
        let headers = resp.headers_mut();
        headers.insert(header::ETAG, etag.clone());
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        headers.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        if self.content_type.starts_with("text/html") {
            headers.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CSP),
            );
        }
        resp
    }
}

/// The page may load only its own script and style, call only its own origin, and not be
/// framed. Data is put in the DOM as text, never as markup; this is the second line.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
                   form-action 'none'; frame-ancestors 'none'";

static INDEX: Asset = Asset::new(
    include_bytes!("../../ui/index.html"),
    "text/html; charset=utf-8",
);
static SCRIPT: Asset = Asset::new(
    include_bytes!("../../ui/app.js"),
    "text/javascript; charset=utf-8",
);
static STYLE: Asset = Asset::new(
    include_bytes!("../../ui/app.css"),
    "text/css; charset=utf-8",
);

/// Whether `path` is one of the dashboard's static paths, served without a token (GET and HEAD).
pub fn is_public(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// The dashboard's routes.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        // Relative URLs in the page (its assets, the API) resolve against `/ui/`.
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|h: HeaderMap| async move { INDEX.serve(&h) }))
        .route(
            "/ui/app.js",
            get(|h: HeaderMap| async move { SCRIPT.serve(&h) }),
        )
        .route(
            "/ui/app.css",
            get(|h: HeaderMap| async move { STYLE.serve(&h) }),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_asset_is_not_sent_again_while_its_etag_matches() {
        let etag = SCRIPT.etag().clone();
        assert_eq!(etag.len(), 34, "{etag:?}");
        let mut h = HeaderMap::new();
        assert_eq!(SCRIPT.serve(&h).status(), StatusCode::OK);
        h.insert(header::IF_NONE_MATCH, etag.clone());
        assert_eq!(SCRIPT.serve(&h).status(), StatusCode::NOT_MODIFIED);
        h.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_static("\"0000\", W/\"1111\""),
        );
        assert_eq!(SCRIPT.serve(&h).status(), StatusCode::OK);
        assert_ne!(INDEX.etag(), SCRIPT.etag());
    }

    #[test]
    fn only_the_dashboard_paths_are_public() {
        for p in ["/ui", "/ui/", "/ui/app.js"] {
            assert!(is_public(p), "{p}");
        }
        for p in ["/uix", "/v1/ui", "/", "/u"] {
            assert!(!is_public(p), "{p}");
        }
    }
}
