//! Standard Webhooks signatures (<https://www.standardwebhooks.com/>): each call carries
//! `webhook-id`, `webhook-timestamp` (Unix seconds) and `webhook-signature`, which is
//! `v1,<base64 of HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`, once per configured secret,
//! space-separated, so a receiver that knows any one of the keys verifies the call (rotation).
//! The `{id}` signed is the header as sent: [`header_value`] of the job id, which a receiver
//! sees unaltered whatever characters the id has.
//!
//! Not here: which headers a call carries besides these (delivery/callback.rs), the secrets'
//! configuration (config/).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use sha2::Sha256;
use std::borrow::Cow;
use std::fmt;

/// The bytes [`header_value`] percent-encodes: controls, space and `%` (non-ASCII bytes always
/// are).
const NOT_IN_HEADER: &AsciiSet = &CONTROLS.add(b' ').add(b'%');

/// A job id or topic as a header value: every byte of its UTF-8 that is not visible ASCII
/// (`!` to `~`), and `%` itself, percent-encoded (`café 1` is `caf%C3%A9%201`, `50%` is
/// `50%25`); an id of visible ASCII without `%` is unchanged. Reversible (percent-decoding
/// gives the id back), and safe in a header: receivers decode header bytes past ASCII as
/// Latin-1 and strip spaces at either end, which would change what the signature covers.
pub fn header_value(text: &str) -> Cow<'_, str> {
    utf8_percent_encode(text, NOT_IN_HEADER).into()
}

/// The prefix of a Standard Webhooks secret; the rest is the key in base64.
pub const SECRET_PREFIX: &str = "whsec_";

/// A signing secret as configured (`whsec_<base64 key>`). Never shown: its `Debug` is
/// redacted, and errors about it do not quote it.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret {
    key: Vec<u8>,
    text: String,
}

impl WebhookSecret {
    /// Parses `whsec_<base64>`. The error says what is wrong without quoting the secret.
    pub fn parse(text: &str) -> Result<WebhookSecret, String> {
        let Some(b64) = text.strip_prefix(SECRET_PREFIX) else {
            return Err(format!("a secret must start with {SECRET_PREFIX:?}"));
        };
        let key = BASE64
            .decode(b64)
            .map_err(|_| format!("the part after {SECRET_PREFIX:?} is not base64"))?;
        if key.is_empty() {
            return Err("the key is empty".into());
        }
        Ok(WebhookSecret {
            key,
            text: text.to_string(),
        })
    }

    /// The secret as configured.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// `v1,<signature>` of one call.
    fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        // HMAC takes a key of any length.
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC accepts any key");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(***)")
    }
}

/// The `webhook-signature` value of one call: one `v1,<signature>` per secret, space-separated;
/// `None` without secrets (the call is then unsigned).
pub fn signature(
    secrets: &[WebhookSecret],
    id: &str,
    timestamp: u64,
    body: &[u8],
) -> Option<String> {
    if secrets.is_empty() {
        return None;
    }
    let sigs: Vec<String> = secrets
        .iter()
        .map(|s| s.sign(id, timestamp, body))
        .collect();
    Some(sigs.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification's reference libraries
    /// (standard-webhooks, `libraries/javascript/src/index.test.ts` and the other languages'):
    /// this secret, id, timestamp and payload sign to this signature.
    #[test]
    fn signs_as_the_standard_webhooks_reference_does() {
        let secret = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = signature(
            &[secret],
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(
            sig.as_deref(),
            Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        );
    }

    #[test]
    fn several_secrets_give_one_signature_each_and_none_give_none() {
        let a = WebhookSecret::parse("whsec_YWFhYQ==").unwrap();
        let b = WebhookSecret::parse("whsec_YmJiYg==").unwrap();
        let both = signature(&[a.clone(), b.clone()], "id", 1, b"x").unwrap();
        let parts: Vec<&str> = both.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(Some(parts[0].to_string()), signature(&[a], "id", 1, b"x"));
        assert_eq!(Some(parts[1].to_string()), signature(&[b], "id", 1, b"x"));
        assert_eq!(signature(&[], "id", 1, b"x"), None);
    }

    #[test]
    fn ids_are_sent_as_visible_ascii_that_percent_decodes_to_the_id() {
        for (id, sent) in [
            ("order-42", "order-42"),
            (
                "a/b?c=d&e#f:g@h!'()*+,;=[]{}|^`~\"<>\\",
                "a/b?c=d&e#f:g@h!'()*+,;=[]{}|^`~\"<>\\",
            ),
            ("café-ü-😀", "caf%C3%A9-%C3%BC-%F0%9F%98%80"),
            ("  padded  ", "%20%20padded%20%20"),
            ("order 42", "order%2042"),
            ("50%off", "50%25off"),
            ("%C3%A9", "%25C3%25A9"),
            ("del\u{7f}", "del%7F"),
        ] {
            assert_eq!(header_value(id), sent, "{id:?}");
            let back = percent_encoding::percent_decode_str(sent)
                .decode_utf8()
                .unwrap();
            assert_eq!(back, id);
            assert!(sent.bytes().all(|b| b.is_ascii_graphic()), "{sent}");
        }
        assert!(matches!(header_value("order-42"), Cow::Borrowed(_)));
    }

    #[test]
    fn bad_secrets_are_refused_without_being_quoted() {
        for bad in ["MfKQ9r8G", "whsec_!!!", "whsec_"] {
            let e = WebhookSecret::parse(bad).unwrap_err();
            assert!(!e.contains(bad), "{e}");
        }
        let s = WebhookSecret::parse("whsec_YWFhYQ==").unwrap();
        assert_eq!(format!("{s:?}"), "WebhookSecret(***)");
    }
}
