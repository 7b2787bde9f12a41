//! The OpenAPI 3.1 document of the /v1 API, written by hand from docs/api.md and served at
//! `GET /v1/openapi.json` (routed by `v1::routes`): this file assembles it for the server that
//! serves it; `paths.rs` holds the operations and their responses, `schemas.rs` the bodies.
//!
//! It is a description, not a source of truth: docs/api.md is the contract, v1.rs implements it,
//! and this module follows both. It is not generated from the handlers (that would pull in a
//! schema-derive dependency and still miss the hand-written validation); instead the HTTP tests
//! check that every route of the router appears here, and `.ci/schemathesis` sends the server
//! requests generated from this document and fails on any request the document allows and the
//! server refuses, or the reverse. So every limit the handlers enforce is written here: lengths
//! and character sets (`pattern`), ranges, `null` wherever the handlers read it as an absent
//! field, and the rules that tie fields together (`not`, `oneOf`).
//!
//! The document describes the running server, not every server: the limits taken from the
//! configuration (`max_batch`, `max_wait`, `max_body_bytes`, `callback_allow`) are this
//! server's, a job's `publish` is offered only with RabbitMQ (`--amqp`), and the journal's
//! routes (a job's history, the restore) only with a journal (`--journal`); without one they
//! answer 404 `journal_disabled`, as docs/api.md says. Health checks are described too, since
//! clients use them, though another module serves them.

mod paths;
mod schemas;

use super::AppState;
use crate::config::Config;
use crate::delivery::allow::AllowList;
use axum::Json;
use axum::extract::State;
use schemas::described;
use serde_json::{Value, json};

/// What the server runs beside its store, which decides the operations and fields it offers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// RabbitMQ (`--amqp`): a pushed job may have a `publish`.
    pub amqp: bool,
    /// The recovery journal (`--journal`): `GET /v1/jobs/{id}/history` and `POST /v1/restore`.
    pub journal: bool,
}

impl Features {
    /// The features of the server whose state is `state`.
    pub fn of(state: &AppState) -> Features {
        Features {
            amqp: state.config.amqp.is_some(),
            journal: state.journal.is_some(),
        }
    }
}

/// `GET /v1/openapi.json`: the document of this server.
pub async fn serve(State(state): State<AppState>) -> Json<Value> {
    Json(document(&state.config, Features::of(&state)))
}

/// The OpenAPI document of /v1 as served with `config` and `features`.
pub fn document(config: &Config, features: Features) -> Value {
    let mut paths = paths::paths(features);
    paths::add_unauthorized(&mut paths);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "delayq /v1 API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A delay queue: jobs become ready at a given time; consumers reserve them and finish them within their time-to-run. Times are Unix milliseconds. Every refusal has the body `Error`. Bodies are JSON whatever the Content-Type; `null` counts as an absent field; unknown fields are refused; a number is an integer when its fractional part is zero (`5.0` is 5). Ids in paths are percent-encoded (`a%2Fb` for `a/b`). This document describes this server: the limits that depend on its configuration (`max_batch`, `max_wait`, `max_body_bytes`) are its own, a job's `publish` is offered only when it runs with RabbitMQ (`--amqp`), and a job's history and the restore only when it runs with a journal (`--journal`; without one they answer 404 `journal_disabled`).",
            "license": {"name": "MIT OR Apache-2.0", "identifier": "MIT OR Apache-2.0"}
        },
        "tags": [
            {"name": "jobs", "description": "Pushing and managing jobs"},
            {"name": "consumers", "description": "Reserving and finishing jobs"},
            {"name": "schedules", "description": "Recurring schedules: jobs pushed at cron or interval ticks"},
            {"name": "admin", "description": "Statistics, health and this document"}
        ],
        "paths": paths,
        // Either a bearer token or nothing: which one the server wants is its configuration.
        "security": [{"bearer": []}, {}],
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Required on every operation but `GET /healthz` when the server is configured with tokens (`auth_tokens`, `auth_token_file`): `Authorization: Bearer <token>`. Without it, or with a wrong one, the answer is 401 `unauthorized` with `WWW-Authenticate: Bearer`."
                }
            },
            "parameters": {
                "JobId": {
                    "name": "id", "in": "path", "required": true,
                    "description": "The job id, percent-encoded (`a%2Fb` for `a/b`, `a%20b` for `a b`)",
                    "schema": {"$ref": "#/components/schemas/JobId"}
                }
            },
            "schemas": schemas::schemas(&Limits::of(config), features)
        }
    })
}

/// The limits of the configuration that the request schemas state.
struct Limits {
    /// `max_batch`: most jobs, topics or ids in one request, and the largest `max`.
    batch: usize,
    /// `max_wait` in milliseconds: the longest `timeout_ms` of a reserve.
    wait_ms: u64,
    /// `max_body_bytes`, the `maxLength` of a job body. The server counts UTF-8 bytes, JSON
    /// Schema's `maxLength` characters: a body over `maxLength` is over the limit in bytes too,
    /// but a body of multi-byte characters may be refused (413) below it, which no JSON Schema
    /// keyword can say.
    body_bytes: usize,
    /// The schema of a callback URL under `callback_allow`.
    callback_url: Value,
}

/// Callback URLs the default `callback_allow` (`public`) surely accepts: http or https, a
/// host name (its addresses are checked when it is called), an optional port and path. The
/// server accepts more (any absolute http(s) URL whose host is allowed: IP literals, other
/// names); a pattern cannot say which addresses are public, so it says less, never more.
const PUBLIC_CALLBACK_URL: &str = r"^https?://[a-z][a-z0-9]{0,30}(\.[a-z][a-z0-9]{0,30}){0,3}\.(com|net|org)(:[1-9][0-9]{0,3})?(/[^\s#?]*)?$";

impl Limits {
    fn of(config: &Config) -> Limits {
        let callback_url = if config.callback_allow == AllowList::default() {
            json!({"type": "string", "pattern": PUBLIC_CALLBACK_URL})
        } else {
            json!({"type": "string", "format": "uri"})
        };
        Limits {
            batch: config.max_batch,
            wait_ms: config.max_wait_secs.saturating_mul(1000),
            body_bytes: config.max_body_bytes,
            callback_url: described(
                callback_url,
                "An absolute http or https URL whose host is among this server's allowed destinations (`callback_allow`; by default any host whose addresses are all public)",
            ),
        }
    }
}

/// The members of a JSON object (an empty map for anything else).
fn map(v: Value) -> serde_json::Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job;

    /// The non-null schema of an optional field of `schema` in `doc`.
    fn field<'a>(doc: &'a Value, schema: &str, field: &str) -> &'a Value {
        let s = &doc["components"]["schemas"][schema]["properties"][field];
        s["oneOf"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["type"] != "null"))
            .unwrap_or(s)
    }

    fn maximum(schema: &Value) -> u64 {
        schema["maximum"].as_u64().expect("a maximum")
    }

    #[test]
    fn the_documents_bounds_are_the_validators() {
        let doc = document(&Config::default(), Features::default());
        let ttr = maximum(field(&doc, "NewJob", "ttr_ms"));
        assert!(job::validate_ttr_ms(ttr).is_ok() && job::validate_ttr_ms(ttr + 1).is_err());
        let run_at = maximum(&doc["components"]["schemas"]["UnixMillis"]);
        assert!(job::validate_run_at(run_at).is_ok() && job::validate_run_at(run_at + 1).is_err());
        let backoff = field(&doc, "NewJob", "backoff_ms");
        let step = maximum(&backoff["items"]);
        assert!(job::validate_backoff(&[step]).is_ok());
        assert!(job::validate_backoff(&[step + 1]).is_err());
        let steps = backoff["maxItems"].as_u64().unwrap() as usize;
        assert!(job::validate_backoff(&vec![0; steps]).is_ok());
        assert!(job::validate_backoff(&vec![0; steps + 1]).is_err());
    }

    /// The paths of `doc` with the methods of each.
    fn operations(doc: &Value) -> Vec<String> {
        let mut ops = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("a path item").keys() {
                if method != "parameters" {
                    ops.push(format!("{method} {path}"));
                }
            }
        }
        ops
    }

    #[test]
    fn publish_is_offered_only_with_amqp() {
        let without = document(&Config::default(), Features::default());
        let new_job = &without["components"]["schemas"]["NewJob"];
        assert_eq!(new_job["additionalProperties"], false);
        assert!(new_job["properties"].get("publish").is_none());
        assert!(new_job.get("allOf").is_none());
        assert!(without["components"]["schemas"].get("NewPublish").is_none());

        let amqp = Features {
            amqp: true,
            journal: false,
        };
        let with = document(&Config::default(), amqp);
        let new_job = &with["components"]["schemas"]["NewJob"];
        assert_eq!(
            new_job["properties"]["publish"]["oneOf"][0]["$ref"],
            "#/components/schemas/NewPublish"
        );
        assert!(with["components"]["schemas"]["NewPublish"].is_object());
        assert!(new_job["allOf"][0]["not"]["required"].is_array());
    }

    #[test]
    fn the_journal_routes_are_described_only_with_a_journal() {
        let journal_ops = ["get /v1/jobs/{id}/history", "post /v1/restore"];
        let without = operations(&document(&Config::default(), Features::default()));
        for op in journal_ops {
            assert!(!without.iter().any(|o| o == op), "{op} without a journal");
        }
        let journal = Features {
            amqp: false,
            journal: true,
        };
        let doc = document(&Config::default(), journal);
        let with = operations(&doc);
        for op in journal_ops {
            assert!(with.iter().any(|o| o == op), "{op} with a journal");
        }
        assert!(doc["components"]["schemas"]["History"].is_object());
        assert_eq!(with.len(), without.len() + journal_ops.len());
    }
}
