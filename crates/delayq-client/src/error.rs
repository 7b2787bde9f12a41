//! [`ClientError`]: what can go wrong talking to a delayq server, and how a refusal's JSON body
//! (`{"error": {"code", "field", "message"}}`, docs/api.md "Errors") becomes one.
//!
//! This file only classifies failures; it does not retry or log.

use serde::Deserialize;

/// A failed call. The server's refusals are [`ClientError::Api`], with the fields of its error
/// body; everything else means the exchange itself failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server answered with a 4xx/5xx status. `code` is the API's error code (`not_found`,
    /// `invalid_field`, `wrong_state`, ...), `field` the offending field for `invalid_field`,
    /// `state` the job's state for `wrong_state`. A body that is not the documented error shape
    /// (say, from a proxy) gives code `unknown` and the body's text as the message.
    #[error("{message} ({status})")]
    Api {
        status: u16,
        code: String,
        field: Option<String>,
        message: String,
        state: Option<String>,
    },
    /// No connection could be made to the server at `addr` (`host:port`): nothing listens
    /// there, the name does not resolve, ...; `reason` is the root cause.
    #[error("cannot connect to {addr}: {reason}")]
    Connect { addr: String, reason: String },
    /// The request did not complete once connected: reset, timed out, ...
    #[error("{0}")]
    Transport(String),
    /// The server answered with a success status but a body this client cannot read.
    #[error("unexpected response: {0}")]
    Decode(String),
    /// The base URL given to [`crate::Client::new`] is not usable.
    #[error("invalid server URL: {0}")]
    InvalidUrl(String),
}

impl ClientError {
    /// The API error code, for [`ClientError::Api`].
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The HTTP status, for [`ClientError::Api`].
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// True for 404 `not_found`: no job with that id.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some("not_found")
    }

    /// Builds the error for a non-success answer from its status and body.
    pub(crate) fn from_response(status: u16, body: &[u8]) -> ClientError {
        #[derive(Deserialize)]
        struct Envelope {
            error: Inner,
            /// docs/api.md puts `state` in "the body"; accept it beside `error` too.
            #[serde(default)]
            state: Option<String>,
        }
        #[derive(Deserialize)]
        struct Inner {
            code: String,
            #[serde(default)]
            field: Option<String>,
            #[serde(default)]
            message: String,
            #[serde(default)]
            state: Option<String>,
        }
        match serde_json::from_slice::<Envelope>(body) {
            Ok(Envelope { error, state }) => ClientError::Api {
                status,
                message: if error.message.is_empty() {
                    error.code.replace('_', " ")
                } else {
                    error.message
                },
                code: error.code,
                field: error.field,
                state: error.state.or(state),
            },
            Err(_) => {
                let text = String::from_utf8_lossy(body);
                let text = text.trim();
                let message = if text.is_empty() {
                    "empty response".to_string()
                } else {
                    // One line, and not a whole HTML error page.
                    let line = text.lines().next().unwrap_or_default();
                    line.chars().take(200).collect()
                };
                ClientError::Api {
                    status,
                    code: "unknown".to_string(),
                    field: None,
                    message,
                    state: None,
                }
            }
        }
    }

    /// Describes a reqwest failure on one line: what failed, where, and the root cause ("connection
    /// refused" is only at the end of reqwest's source chain).
    pub(crate) fn transport(e: reqwest::Error) -> ClientError {
        let url = e.url().map(|u| u.as_str().to_string()).unwrap_or_default();
        let root = {
            let mut err: &dyn std::error::Error = &e;
            while let Some(source) = err.source() {
                err = source;
            }
            err.to_string()
        };
        if e.is_connect() && !e.is_timeout() {
            let addr = e
                .url()
                .map(|u| {
                    format!(
                        "{}:{}",
                        u.host_str().unwrap_or_default(),
                        u.port_or_known_default().unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            return ClientError::Connect { addr, reason: root };
        }
        ClientError::Transport(if e.is_timeout() {
            format!("request to {url} timed out")
        } else if root != e.to_string() {
            format!("{e}: {root}")
        } else {
            e.to_string()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_error_body_becomes_api_error() {
        let e = ClientError::from_response(
            400,
            br#"{"error": {"code": "invalid_field", "field": "topic", "message": "topic: must not be empty"}}"#,
        );
        assert_eq!(
            e,
            ClientError::Api {
                status: 400,
                code: "invalid_field".into(),
                field: Some("topic".into()),
                message: "topic: must not be empty".into(),
                state: None,
            }
        );
        assert_eq!(e.to_string(), "topic: must not be empty (400)");
    }

    #[test]
    fn wrong_state_carries_the_state_inside_or_beside_error() {
        for body in [
            r#"{"error": {"code": "wrong_state", "field": null, "message": "job is reserved", "state": "reserved"}}"#,
            r#"{"error": {"code": "wrong_state", "field": null, "message": "job is reserved"}, "state": "reserved"}"#,
        ] {
            let e = ClientError::from_response(409, body.as_bytes());
            match e {
                ClientError::Api { state, code, .. } => {
                    assert_eq!(state.as_deref(), Some("reserved"));
                    assert_eq!(code, "wrong_state");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn not_found_is_recognised() {
        let e = ClientError::from_response(
            404,
            br#"{"error": {"code": "not_found", "field": null, "message": "job not found"}}"#,
        );
        assert!(e.is_not_found());
        assert_eq!(e.to_string(), "job not found (404)");
    }

    #[test]
    fn body_that_is_not_the_error_shape_keeps_status_and_first_line() {
        let e = ClientError::from_response(413, b"length limit exceeded\nmore");
        assert_eq!(e.code(), Some("unknown"));
        assert_eq!(e.to_string(), "length limit exceeded (413)");
        let e = ClientError::from_response(502, b"");
        assert_eq!(e.to_string(), "empty response (502)");
    }
}
