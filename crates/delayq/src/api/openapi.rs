//! The OpenAPI 3.1 document of the /v1 API, written by hand from docs/api.md and served at
//! `GET /v1/openapi.json` (routed by `v1::routes`).
//!
//! It is a description, not a source of truth: docs/api.md is the contract, v1.rs implements it,
//! and this file follows both. It is not generated from the handlers (that would pull in a
//! schema-derive dependency and still miss the hand-written validation); instead
//! tests/http/http_v1/openapi.rs checks that every route of the router appears here, and `.ci/schemathesis`
//! sends the server requests generated from this document and fails on any request the
//! document allows and the server refuses, or the reverse. So every limit the handlers enforce
//! is written here: lengths and character sets (`pattern`), ranges, the limits taken from the
//! configuration (`max_batch`, `max_wait`, `max_body_bytes`: the document describes the server
//! that serves it), `null` wherever the handlers read it as an absent field, and the rules that
//! tie fields together (`not`, `oneOf`). Health checks are described too, since clients use
//! them, though another module serves them.

use super::AppState;
use super::v1::{DEFAULT_PAGE, MAX_DELAY_MS, MAX_PAGE, MAX_SCHEDULE_STEPS};
use crate::callback::allow::AllowList;
use crate::config::Config;
use crate::job::{
    DEFAULT_CALLBACK_TIMEOUT_MS, DEFAULT_PRIORITY, DEFAULT_TTR_MS, MAX_BACKOFF_STEPS,
    MAX_CALLBACK_TIMEOUT_MS, MAX_ID_CHARS, MAX_RUN_AT, MAX_TOPIC_CHARS, MAX_TTR_MS,
};
use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

/// Characters a job id must not contain: the control characters (`char::is_control`, Unicode
/// category Cc), as `JobId::parse` refuses them. Inclusive ranges.
const ID_FORBIDDEN: &[(char, char)] = &[('\u{0}', '\u{1f}'), ('\u{7f}', '\u{9f}')];

/// Characters a topic must not contain: control characters, whitespace (`char::is_whitespace`,
/// Unicode White_Space) and the comma, as `Topic::parse` refuses them. Inclusive ranges.
const TOPIC_FORBIDDEN: &[(char, char)] = &[
    ('\u{0}', ' '),
    (',', ','),
    ('\u{7f}', '\u{a0}'),
    ('\u{1680}', '\u{1680}'),
    ('\u{2000}', '\u{200a}'),
    ('\u{2028}', '\u{2029}'),
    ('\u{202f}', '\u{202f}'),
    ('\u{205f}', '\u{205f}'),
    ('\u{3000}', '\u{3000}'),
];

/// A regular expression matching strings of one or more characters outside `forbidden`,
/// written with `\uXXXX` escapes only, which ECMA-262 (the dialect of JSON Schema), Python and
/// Rust's `regex` read alike. Classes such as `\s` are avoided: each dialect has its own.
fn pattern_without(forbidden: &[(char, char)]) -> String {
    let mut class = String::new();
    for &(lo, hi) in forbidden {
        class.push_str(&format!("\\u{:04x}", u32::from(lo)));
        if hi != lo {
            class.push_str(&format!("-\\u{:04x}", u32::from(hi)));
        }
    }
    format!("^[^{class}]+$")
}

/// `GET /v1/openapi.json`: the document of this server's configuration.
pub async fn serve(State(state): State<AppState>) -> Json<Value> {
    Json(document(&state.config))
}

/// The OpenAPI document of /v1 as served with `config`.
pub fn document(config: &Config) -> Value {
    let mut paths = paths();
    add_unauthorized(&mut paths);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "delayq /v1 API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A delay queue: jobs become ready at a given time; consumers reserve them and finish them within their time-to-run. Times are Unix milliseconds. Every refusal has the body `Error`. Bodies are JSON whatever the Content-Type; `null` counts as an absent field; unknown fields are refused; a number is an integer when its fractional part is zero (`5.0` is 5). Ids in paths are percent-encoded (`a%2Fb` for `a/b`). The limits that depend on the server's configuration (`max_batch`, `max_wait`, `max_body_bytes`) are this server's.",
            "license": {"name": "MIT OR Apache-2.0", "identifier": "MIT OR Apache-2.0"}
        },
        "tags": [
            {"name": "jobs", "description": "Pushing and managing jobs"},
            {"name": "consumers", "description": "Reserving and finishing jobs"},
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
            "schemas": schemas(&Limits::of(config))
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

/// A response with an `Error` body.
fn error(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    })
}

/// A JSON response of a schema in `components`.
fn ok(description: &str, schema: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}
    })
}

/// A JSON request body of a schema in `components`.
fn request(schema: &str, required: bool) -> Value {
    json!({
        "required": required,
        "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}
    })
}

/// The responses every operation can give, plus the given ones.
fn responses(mut specific: serde_json::Map<String, Value>, body: bool) -> Value {
    specific.insert(
        "400".into(),
        error("Invalid input (`invalid_field` naming the field, or `invalid_json`)"),
    );
    if body {
        specific.insert(
            "413".into(),
            error("`too_large`: the request body or a job body is over the limit"),
        );
    }
    specific.insert(
        "500".into(),
        error("`internal`: stored data could not be read (logged)"),
    );
    specific.insert(
        "503".into(),
        error("`store_unavailable`: the store could not be reached or did not answer in time; unreached changes nothing, no answer in time is in doubt (retry with the same id)"),
    );
    Value::Object(specific)
}

fn map(v: Value) -> serde_json::Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

/// An operation on one job, addressed by its id in the path.
fn job_op(op_id: &str, summary: &str, body: Option<(&str, bool)>, specific: Value) -> Value {
    let has_body = body.is_some();
    let mut op = json!({
        "operationId": op_id,
        "summary": summary,
        "tags": ["jobs"],
        "responses": responses(map(specific), has_body),
    });
    if let (Some((schema, required)), Value::Object(m)) = (body, &mut op) {
        m.insert("requestBody".into(), request(schema, required));
    }
    op
}

/// Adds the 401 of bearer authentication to every operation, and marks `/healthz`, the one
/// path that never asks for a token, as needing no security; adds the refusals of `origin.rs`
/// to every operation.
fn add_unauthorized(paths: &mut Value) {
    let Value::Object(paths) = paths else { return };
    for (path, item) in paths.iter_mut() {
        let Value::Object(item) = item else { continue };
        for (method, op) in item.iter_mut() {
            if method == "parameters" {
                continue;
            }
            let Value::Object(op) = op else { continue };
            let open = path == "/healthz";
            if open {
                op.insert("security".into(), json!([]));
            }
            if let Some(Value::Object(responses)) = op.get_mut("responses") {
                if !open {
                    responses.insert(
                        "401".into(),
                        error("`unauthorized`: authentication is on and the bearer token is missing or wrong"),
                    );
                }
                add_origin_refusals(method, responses);
            }
        }
    }
}

/// The refusals of `origin.rs`, which come before authentication: 421 on every operation,
/// 403 on those that change something.
fn add_origin_refusals(method: &str, responses: &mut serde_json::Map<String, Value>) {
    responses.insert(
        "421".into(),
        error("`host_not_allowed`: the request's `Host` is not one this server answers to (`allowed_hosts`)"),
    );
    if !matches!(method, "get" | "head" | "options") {
        responses.insert(
            "403".into(),
            error("`cross_site`: a browser sent this change from a page of another site (`Sec-Fetch-Site`, `Origin`)"),
        );
    }
}

/// A `POST` with a required JSON body of schema `request_schema`, answering 200 `reply`.
/// `what` is the operation's id, summary and tag.
fn post_op(what: [&str; 3], request_schema: &str, reply: Value) -> Value {
    let [op_id, summary, tag] = what;
    json!({
        "operationId": op_id,
        "summary": summary,
        "tags": [tag],
        "requestBody": request(request_schema, true),
        "responses": responses(map(json!({"200": reply})), true)
    })
}

fn paths() -> Value {
    let not_found = error("`not_found`: no job with that id");
    let topic_param = json!({
        "name": "topic", "in": "path", "required": true,
        "schema": {"$ref": "#/components/schemas/Topic"}
    });
    let ms = |name: &str, what: &str| {
        json!({
            "name": name, "in": "query", "required": true, "description": what,
            "schema": {"type": "integer", "minimum": 0, "maximum": MAX_RUN_AT}
        })
    };
    let schedule_params = json!([
        ms("from", "Start, Unix ms"),
        ms("to", "End (exclusive), Unix ms, after `from`"),
        {"name": "step", "in": "query", "required": true,
         "description": "Width of a step in ms; at most 10,080 steps from `from` to `to`",
         "schema": {"type": "integer", "minimum": 1}}
    ]);
    let wrong_state =
        error("`wrong_state`: the job's state does not allow this; `state` says which it is");
    let job = ok("The job as it is now", "Job");
    json!({
        "/v1/jobs": {
            "post": {
                "operationId": "push",
                "summary": "Push a job",
                "tags": ["jobs"],
                "requestBody": request("NewJob", true),
                "responses": responses(map(json!({
                    "201": {
                        "description": "Created (or replaced, with `replace: true`)",
                        "headers": {"Location": {
                            "description": "`/v1/jobs/{id}`, the id percent-encoded",
                            "schema": {"type": "string"}
                        }},
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Job"}}}
                    },
                    "409": error("`exists`: a job with this id exists and `replace` was not true")
                })), true)
            }
        },
        // `batch` is also a job id: the job whose id is `batch` is read and deleted here, since
        // this path, not `/v1/jobs/{id}`, is the one its URL matches; its other operations
        // (`/v1/jobs/batch/finish`, ...) are those of `/v1/jobs/{id}`.
        "/v1/jobs/batch": {
            "get": job_op("getJobBatch", "Get the job whose id is `batch`", None, json!({"200": job.clone(), "404": not_found.clone()})),
            "delete": job_op("deleteJobBatch", "Delete the job whose id is `batch`, whatever its state", None, json!({
                "204": {"description": "Deleted"}, "404": not_found.clone()
            })),
            "post": {
                "operationId": "pushBatch",
                "summary": "Push several jobs",
                "description": "Validated whole before anything is pushed: one invalid job makes the whole batch a 400 naming `jobs[i].field`. A conflict on one job does not stop the others. At most `max_batch` jobs. A job's own `replace`, if given, must equal the batch's.",
                "tags": ["jobs"],
                "requestBody": request("BatchPush", true),
                "responses": responses(map(json!({
                    "200": ok("One result per job, in order", "BatchPushReply")
                })), true)
            }
        },
        "/v1/jobs/{id}": {
            "parameters": [{"$ref": "#/components/parameters/JobId"}],
            "get": job_op("getJob", "Get a job", None, json!({"200": job.clone(), "404": not_found.clone()})),
            "delete": job_op("deleteJob", "Delete a job, whatever its state", None, json!({
                "204": {"description": "Deleted"}, "404": not_found.clone()
            }))
        },
        "/v1/jobs/{id}/finish": {
            "parameters": [{"$ref": "#/components/parameters/JobId"}],
            "post": job_op("finish", "Finish (remove) a job, whatever its state", None, json!({
                "204": {"description": "Finished"}, "404": not_found.clone()
            }))
        },
        "/v1/jobs/{id}/release": {
            "parameters": [{"$ref": "#/components/parameters/JobId"}],
            "post": job_op("release", "Return a reserved job early: ready now, delayed by `delay_ms` (or by its backoff), or dead when out of attempts", Some(("Release", false)), json!({
                "200": job.clone(), "404": not_found.clone(), "409": wrong_state.clone()
            }))
        },
        "/v1/jobs/{id}/touch": {
            "parameters": [{"$ref": "#/components/parameters/JobId"}],
            "post": job_op("touch", "Extend a reservation to now + ttr", None, json!({
                "200": job.clone(), "404": not_found.clone(), "409": wrong_state.clone()
            }))
        },
        "/v1/jobs/{id}/bury": {
            "parameters": [{"$ref": "#/components/parameters/JobId"}],
            "post": job_op("bury", "Move a delayed, ready or reserved job to dead", None, json!({
                "200": job.clone(), "404": not_found.clone(), "409": wrong_state.clone()
            }))
        },
        "/v1/jobs/{id}/kick": {
            "parameters": [{"$ref": "#/components/parameters/JobId"}],
            "post": job_op("kick", "Return a dead job to ready, attempts reset to 0", None, json!({
                "200": job.clone(), "404": not_found.clone(), "409": wrong_state.clone()
            }))
        },
        "/v1/jobs/{id}/reschedule": {
            "parameters": [{"$ref": "#/components/parameters/JobId"}],
            "post": job_op("reschedule", "Change the due time (and optionally body and priority) of a delayed or ready job", Some(("Reschedule", true)), json!({
                "200": ok("The job as it is now and the state it was in", "RescheduleReply"),
                "404": not_found.clone(),
                "409": error("`wrong_state`: the job is reserved or dead (the caller lost the race against delivery)")
            }))
        },
        "/v1/reserve": {
            "post": post_op(
                ["reserve", "Reserve ready jobs, waiting up to `timeout_ms` for one", "consumers"],
                "ReserveRequest",
                ok("The reserved jobs; empty when none became ready in time", "ReserveReply")
            )
        },
        "/v1/finish": {
            "post": post_op(
                ["finishBatch", "Finish several jobs", "consumers"],
                "FinishBatch",
                ok("How many were finished and which ids were not found", "FinishBatchReply")
            )
        },
        "/v1/topics/{topic}/kick": {
            "parameters": [{
                "name": "topic", "in": "path", "required": true,
                "schema": {"$ref": "#/components/schemas/Topic"}
            }],
            "post": post_op(
                ["kickTopic", "Return up to `max` dead jobs of a topic, oldest burial first, to ready", "jobs"],
                "KickTopic",
                ok("How many were kicked", "KickTopicReply")
            )
        },
        "/v1/jobs/{id}/history": {
            "parameters": [{"$ref": "#/components/parameters/JobId"}],
            "get": {
                "operationId": "jobHistory",
                "summary": "A job's journaled state changes, oldest first (the latest 1,000; docs/journal.md)",
                "tags": ["jobs"],
                "responses": responses(map(json!({
                    "200": ok("The job's history", "History"),
                    "404": error("`not_found`: the journal has no state change of this job; `journal_disabled`: the server runs without `--journal`")
                })), false)
            }
        },
        "/v1/restore": {
            "post": {
                "operationId": "restore",
                "summary": "Put back the journaled jobs the store lost (docs/journal.md); jobs still in the store are left alone",
                "tags": ["admin"],
                "requestBody": request("RestoreRequest", false),
                "responses": responses(map(json!({
                    "200": ok("What the restore did, job by job", "RestoreReply"),
                    "404": error("`not_found`: the journal has no job with that `id`"),
                    "409": error("`restore_running`: another restore is running; `no_journal`: the server runs without `--journal`")
                })), true)
            }
        },
        "/v1/stats": {
            "get": {
                "operationId": "stats",
                "summary": "Job counts per topic and state",
                "tags": ["admin"],
                "responses": {
                    "200": ok("Counts", "Stats"),
                    "500": error("`internal`: stored data could not be read (logged)"),
                    "503": error("`store_unavailable`: the store cannot be reached")
                }
            }
        },
        "/v1/topics": {
            "get": {
                "operationId": "topics",
                "summary": "Every topic with a pull or callback job, by name, with its counts by state",
                "tags": ["admin"],
                "responses": responses(map(json!({"200": ok("The topics", "Topics")})), false)
            }
        },
        "/v1/topics/{topic}/jobs": {
            "parameters": [topic_param.clone()],
            "get": {
                "operationId": "listJobs",
                "summary": "One page of a topic's jobs in one state: delayed by run_at, reserved by reservation deadline, ready in delivery order, dead oldest burial first (then id)",
                "tags": ["admin"],
                "parameters": [
                    {"name": "state", "in": "query", "required": true, "schema": schema_ref("JobState")},
                    {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": DEFAULT_PAGE}},
                    {"name": "cursor", "in": "query", "required": false, "description": "The `next_cursor` of the previous page", "schema": {"type": "string"}},
                    {"name": "callback", "in": "query", "required": false, "description": "`true`: the topic's callback jobs instead of its pull jobs", "schema": {"type": "boolean", "default": false}}
                ],
                "responses": responses(map(json!({"200": ok("The page", "JobsPage")})), false)
            }
        },
        "/v1/topics/{topic}/schedule": {
            "parameters": [topic_param],
            "get": {
                "operationId": "topicSchedule",
                "summary": "How many of a topic's delayed jobs (pull and callback) fall due in each step from `from` to `to`",
                "tags": ["admin"],
                "parameters": schedule_params.clone(),
                "responses": responses(map(json!({"200": ok("The counts", "Schedule")})), false)
            }
        },
        "/v1/schedule": {
            "get": {
                "operationId": "schedule",
                "summary": "How many delayed jobs of every topic fall due in each step from `from` to `to`",
                "tags": ["admin"],
                "parameters": schedule_params,
                "responses": responses(map(json!({"200": ok("The counts", "Schedule")})), false)
            }
        },
        "/v1/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "tags": ["admin"],
                "responses": {"200": {
                    "description": "The OpenAPI 3.1 document",
                    "content": {"application/json": {"schema": {"type": "object"}}}
                }}
            }
        },
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "The process is alive",
                "tags": ["admin"],
                "responses": {"200": ok("Alive", "Health")}
            }
        },
        "/readyz": {
            "get": {
                "operationId": "readyz",
                "summary": "The store answers",
                "tags": ["admin"],
                "responses": {
                    "200": ok("Ready", "Health"),
                    "503": ok("The store is unreachable", "Health")
                }
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics (docs/metrics.md)",
                "tags": ["admin"],
                "responses": {"200": {
                    "description": "Counters of this instance's transitions, the delivery lateness histogram and the store's job counts: in OpenMetrics when Accept asks for application/openmetrics-text, else in the Prometheus text format 0.0.4",
                    "content": {
                        "text/plain": {"schema": {"type": "string"}},
                        "application/openmetrics-text": {"schema": {"type": "string"}}
                    }
                }}
            }
        }
    })
}

/// `schema` or `null`, for an optional field: the handlers read `null` as an absent field.
fn or_null(schema: Value) -> Value {
    json!({"oneOf": [schema, {"type": "null"}]})
}

/// A schema of `components` by name.
fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// Adds `description` to a schema object.
fn described(mut schema: Value, description: &str) -> Value {
    if let Value::Object(m) = &mut schema {
        m.insert("description".into(), json!(description));
    }
    schema
}

/// Adds `default` (the value an absent field stands for) to a schema object.
fn defaulting(mut schema: Value, default: Value) -> Value {
    if let Value::Object(m) = &mut schema {
        m.insert("default".into(), default);
    }
    schema
}

/// An integer in `min..=max`.
fn int(min: u64, max: u64) -> Value {
    json!({"type": "integer", "minimum": min, "maximum": max})
}

fn schemas(limits: &Limits) -> Value {
    let u32_max = u64::from(u32::MAX);
    let batch = u64::try_from(limits.batch).unwrap_or(u64::MAX);
    // `validate_backoff`'s bound on one step.
    let backoff_step = MAX_RUN_AT / 2;
    let body = json!({"type": "string", "maxLength": limits.body_bytes});
    let body_description = "Stored byte-for-byte; at most `max_body_bytes` bytes of UTF-8 (413 when over; `maxLength` counts characters, so a body of multi-byte characters may be refused below it)";
    let delay = described(
        int(0, MAX_DELAY_MS),
        "Due this long after now; 0 is ready now; at most 1000 years",
    );
    // Both due times given (neither `null`): refused, naming `run_at_ms`.
    let both_due_times = json!({
        "required": ["delay_ms", "run_at_ms"],
        "properties": {"delay_ms": {"type": "integer"}, "run_at_ms": {"type": "integer"}}
    });
    // A job is delivered by a callback or a publish, not both.
    let both_deliveries = json!({
        "required": ["callback", "publish"],
        "properties": {"callback": {"type": "object"}, "publish": {"type": "object"}}
    });
    let mut all = map(json!({
        "JobId": {
            "type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS,
            "pattern": pattern_without(ID_FORBIDDEN),
            "description": "1–256 characters, no control characters; unique across topics"
        },
        "Topic": {
            "type": "string", "minLength": 1, "maxLength": MAX_TOPIC_CHARS,
            "pattern": pattern_without(TOPIC_FORBIDDEN),
            "description": "1–128 characters, no whitespace, control characters or commas"
        },
        "UnixMillis": {"type": "integer", "format": "int64", "minimum": 0, "maximum": MAX_RUN_AT},
        "JobState": {"type": "string", "enum": ["delayed", "ready", "reserved", "dead"]},
        "Job": {
            "type": "object",
            "required": ["id", "topic", "body", "state", "run_at_ms", "ttr_ms", "priority", "max_attempts", "backoff_ms", "attempts", "reserved_until_ms", "callback", "publish"],
            "properties": {
                "id": schema_ref("JobId"),
                "topic": schema_ref("Topic"),
                "body": {"type": "string"},
                "state": schema_ref("JobState"),
                "run_at_ms": schema_ref("UnixMillis"),
                "ttr_ms": int(1, MAX_TTR_MS),
                "priority": int(0, u32_max),
                "max_attempts": int(0, u32_max),
                "backoff_ms": {"type": "array", "items": int(0, backoff_step), "maxItems": MAX_BACKOFF_STEPS},
                "attempts": {"type": "integer", "minimum": 0},
                "reserved_until_ms": described(or_null(schema_ref("UnixMillis")), "Set only while reserved"),
                "callback": described(or_null(schema_ref("Callback")), "Set only for a callback job"),
                "publish": described(or_null(schema_ref("Publish")), "Set only for a publish job (RabbitMQ)")
            }
        },
        "Publish": {
            "type": "object",
            "required": ["exchange", "routing_key"],
            "properties": {
                "exchange": {"type": "string"},
                "routing_key": {"type": "string"},
                "content_type": described(json!({"type": "string"}), "An intake message's content type, published with the body"),
                "body_base64": described(json!({"type": "boolean"}), "`body` is the base64 of the bytes to publish (an intake message's body that is not UTF-8)")
            }
        },
        "NewPublish": {
            "type": "object",
            "additionalProperties": false,
            "required": ["routing_key"],
            "description": "Push delivery to RabbitMQ (a server started with `--amqp`; 400 otherwise): when due, the job's body is published to `exchange` with `routing_key` (persistent, mandatory, `message_id` = the job id, headers `x-delayq-topic` and `x-delayq-attempt`), and the broker's confirm finishes it; a nack, a return (unroutable) or no confirm within the publish timeout is a failed attempt, retried after its backoff. Defaults as a callback job's. A job has a callback or a publish, not both (400 naming `publish`).",
            "properties": {
                "exchange": defaulting(described(or_null(json!({"type": "string", "maxLength": 255})), "The exchange; \"\" is the default exchange. At most 255 bytes"), json!("")),
                "routing_key": described(json!({"type": "string", "maxLength": 255}), "At most 255 bytes")
            }
        },
        "Callback": {
            "type": "object",
            "required": ["url", "timeout_ms"],
            "properties": {
                "url": {"type": "string"},
                "timeout_ms": int(1, MAX_CALLBACK_TIMEOUT_MS)
            }
        },
        "NewCallback": {
            "type": "object",
            "additionalProperties": false,
            "required": ["url"],
            "description": "Push delivery: when due, the job's body is POSTed to `url` (signed, Standard Webhooks), and a 2xx within `timeout_ms` finishes it; otherwise it is called again after its backoff. Without its own `backoff_ms` and `max_attempts` a callback job gets 15 s, 3 min, 10 min, 30 min, 1 h, 2 h, 6 h, 15 h and 9 attempts; its `ttr_ms` is at least `timeout_ms` + 5 s.",
            "properties": {
                "url": limits.callback_url.clone(),
                "timeout_ms": defaulting(described(or_null(int(1, MAX_CALLBACK_TIMEOUT_MS)), "How long one call may take: 1 ms to 10 minutes"), json!(DEFAULT_CALLBACK_TIMEOUT_MS))
            }
        },
        "NewJob": {
            "type": "object",
            "additionalProperties": false,
            "required": ["topic"],
            "description": "`null` is the same as an absent field. Giving both `delay_ms` and `run_at_ms`, or both `callback` and `publish`, is an error.",
            "properties": {
                "topic": schema_ref("Topic"),
                "id": described(or_null(schema_ref("JobId")), "Default: a new UUIDv7 (time-ordered)"),
                "body": defaulting(described(or_null(body.clone()), body_description), json!("")),
                "delay_ms": defaulting(or_null(delay.clone()), json!(0)),
                "run_at_ms": described(or_null(schema_ref("UnixMillis")), "Absolute due time instead of `delay_ms`; a past time is ready now"),
                "ttr_ms": defaulting(described(or_null(int(1, MAX_TTR_MS)), "Time-to-run: 1 ms to 1 day"), json!(DEFAULT_TTR_MS)),
                "priority": defaulting(described(or_null(int(0, u32_max)), "0 is most urgent"), json!(DEFAULT_PRIORITY)),
                "max_attempts": defaulting(described(or_null(int(0, u32_max)), "Deliveries before the job is dead; 0 = unlimited"), json!(0)),
                "backoff_ms": defaulting(described(
                    or_null(json!({"type": "array", "items": int(0, backoff_step), "maxItems": MAX_BACKOFF_STEPS})),
                    "Delay before the n-th redelivery; the last step repeats"
                ), json!([])),
                "callback": described(or_null(schema_ref("NewCallback")), "Makes it a callback job: delayq calls the URL instead of handing the job to consumers"),
                "publish": described(or_null(schema_ref("NewPublish")), "Makes it a publish job: delayq publishes the body to RabbitMQ instead of handing the job to consumers"),
                "replace": defaulting(described(or_null(json!({"type": "boolean"})), "Replace an existing job with this id instead of answering 409"), json!(false))
            },
            "not": both_due_times.clone(),
            "allOf": [{"not": both_deliveries}]
        }
    }));
    all.extend(map(json!({
        "BatchPush": {
            "type": "object",
            "additionalProperties": false,
            "required": ["jobs"],
            "description": "A batch has one mode: a job's own `replace`, if given, must equal the batch's.",
            "properties": {
                "jobs": {"type": "array", "items": schema_ref("NewJob"), "maxItems": batch, "description": "At most `max_batch`"},
                "replace": defaulting(or_null(json!({"type": "boolean"})), json!(false))
            },
            "oneOf": [
                {
                    "required": ["replace"],
                    "properties": {
                        "replace": {"const": true},
                        "jobs": {"items": {"properties": {"replace": {"enum": [true, null]}}}}
                    }
                },
                {
                    "properties": {
                        "replace": {"enum": [false, null]},
                        "jobs": {"items": {"properties": {"replace": {"enum": [false, null]}}}}
                    }
                }
            ]
        },
        "PushResult": {
            "type": "object",
            "required": ["id", "status"],
            "properties": {
                "id": schema_ref("JobId"),
                "status": {"type": "string", "enum": ["created", "replaced", "exists"]}
            }
        },
        "BatchPushReply": {
            "type": "object",
            "required": ["results"],
            "properties": {"results": {"type": "array", "items": schema_ref("PushResult")}}
        },
        "Release": {
            "type": "object",
            "additionalProperties": false,
            "description": "The body may be empty",
            "properties": {
                "delay_ms": described(or_null(int(0, MAX_DELAY_MS)), "Default: the job's backoff schedule; at most 1000 years")
            }
        },
        "Reschedule": {
            "type": "object",
            "additionalProperties": false,
            "description": "Exactly one of `delay_ms` and `run_at_ms`",
            "properties": {
                "delay_ms": or_null(delay),
                "run_at_ms": or_null(schema_ref("UnixMillis")),
                "body": described(or_null(body), body_description),
                "priority": or_null(int(0, u32_max))
            },
            "oneOf": [
                {"required": ["delay_ms"], "properties": {"delay_ms": {"type": "integer"}}},
                {"required": ["run_at_ms"], "properties": {"run_at_ms": {"type": "integer"}}}
            ]
        },
        "RescheduleReply": {
            "type": "object",
            "required": ["job", "previous_state"],
            "properties": {
                "job": schema_ref("Job"),
                "previous_state": {"type": "string", "enum": ["delayed", "ready"]}
            }
        }
    })));
    all.extend(map(json!({
        "ReserveRequest": {
            "type": "object",
            "additionalProperties": false,
            "required": ["topics"],
            "properties": {
                "topics": {"type": "array", "items": schema_ref("Topic"), "minItems": 1, "maxItems": batch, "description": "Preferred in the order given (a repeated name counts once); at most `max_batch`"},
                "max": defaulting(described(or_null(int(1, batch)), "At most `max_batch`"), json!(1)),
                "timeout_ms": defaulting(described(or_null(int(0, limits.wait_ms)), "How long to wait when nothing is ready, at most `max_wait` × 1000"), json!(0))
            }
        },
        "ReserveReply": {
            "type": "object",
            "required": ["jobs"],
            "properties": {"jobs": {"type": "array", "items": schema_ref("Job")}}
        },
        "FinishBatch": {
            "type": "object",
            "additionalProperties": false,
            "required": ["ids"],
            "properties": {"ids": {"type": "array", "items": schema_ref("JobId"), "maxItems": batch, "description": "At most `max_batch`; a repeated id counts once"}}
        },
        "FinishBatchReply": {
            "type": "object",
            "required": ["finished", "missing"],
            "properties": {
                "finished": {"type": "integer", "minimum": 0},
                "missing": {"type": "array", "items": schema_ref("JobId")}
            }
        },
        "KickTopic": {
            "type": "object",
            "additionalProperties": false,
            "required": ["max"],
            "properties": {"max": described(int(1, batch), "At most `max_batch`")}
        },
        "RestoreRequest": {
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "overdue": or_null(described(json!({"enum": ["fire", "skip"]}), "Jobs due before the restore began: `fire` (the default) puts them back ready; `skip` leaves them out and records that, so no later restore brings them back")),
                "id": or_null(described(schema_ref("JobId"), "Only this job"))
            }
        },
        "History": {
            "type": "object",
            "required": ["history"],
            "properties": {"history": {"type": "array", "items": schema_ref("HistoryEntry")}}
        },
        "HistoryEntry": {
            "type": "object",
            "required": ["from", "to", "at_ms", "instance"],
            "properties": {
                "from": or_null(described(schema_ref("RowState"), "The state before; null for a new job")),
                "to": schema_ref("RowState"),
                "at_ms": described(json!({"type": "integer", "minimum": 0}), "When, Unix ms"),
                "instance": described(json!({"type": "string"}), "The delayq that made the change (host:pid)")
            }
        },
        "RowState": {"enum": ["delayed", "ready", "reserved", "dead", "finished", "deleted", "skipped"]},
        "RestoreReply": {
            "type": "object",
            "required": ["restored", "already_present", "skipped_overdue", "skipped_finished"],
            "properties": {
                "restored": {"type": "integer", "minimum": 0},
                "already_present": {"type": "integer", "minimum": 0},
                "skipped_overdue": {"type": "integer", "minimum": 0},
                "skipped_finished": {"type": "integer", "minimum": 0}
            }
        },
        "KickTopicReply": {
            "type": "object",
            "required": ["kicked"],
            "properties": {"kicked": {"type": "integer", "minimum": 0}}
        },
        "TopicCounts": {
            "type": "object",
            "required": ["delayed", "ready", "reserved", "dead"],
            "properties": {
                "delayed": {"type": "integer", "minimum": 0},
                "ready": {"type": "integer", "minimum": 0},
                "reserved": {"type": "integer", "minimum": 0},
                "dead": {"type": "integer", "minimum": 0}
            }
        },
        "Stats": {
            "type": "object",
            "required": ["topics", "callbacks", "next_due_ms"],
            "properties": {
                "topics": {"type": "object", "additionalProperties": schema_ref("TopicCounts"), "description": "Topics with at least one pull job"},
                "callbacks": {"type": "object", "additionalProperties": schema_ref("TopicCounts"), "description": "Topics with at least one callback job, and those jobs' counts"},
                "next_due_ms": described(
                    or_null(schema_ref("UnixMillis")),
                    "The earliest due time of a delayed job or reservation deadline"
                )
            }
        },
        "TopicSummary": {
            "type": "object",
            "required": ["topic", "delayed", "ready", "reserved", "dead", "callbacks"],
            "properties": {
                "topic": schema_ref("Topic"),
                "delayed": {"type": "integer", "minimum": 0},
                "ready": {"type": "integer", "minimum": 0},
                "reserved": {"type": "integer", "minimum": 0},
                "dead": {"type": "integer", "minimum": 0},
                "callbacks": described(schema_ref("TopicCounts"), "The topic's callback jobs' counts")
            }
        },
        "Topics": {
            "type": "object",
            "required": ["topics", "next_due_ms"],
            "properties": {
                "topics": {"type": "array", "items": schema_ref("TopicSummary"), "description": "Sorted by name; the counts are the pull jobs'"},
                "next_due_ms": described(
                    or_null(schema_ref("UnixMillis")),
                    "The earliest due time of a delayed job or reservation deadline"
                )
            }
        },
        "JobsPage": {
            "type": "object",
            "required": ["jobs", "next_cursor"],
            "properties": {
                "jobs": {"type": "array", "items": schema_ref("Job"), "maxItems": MAX_PAGE},
                "next_cursor": described(
                    or_null(json!({"type": "string"})),
                    "Pass as `cursor` for the next page; null when there is no more. A page may be shorter than `limit` (even empty) while this is not null"
                )
            }
        },
        "Schedule": {
            "type": "object",
            "required": ["from", "to", "step", "counts"],
            "properties": {
                "from": schema_ref("UnixMillis"),
                "to": schema_ref("UnixMillis"),
                "step": {"type": "integer", "minimum": 1},
                "counts": {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": MAX_SCHEDULE_STEPS, "description": "counts[i]: jobs due in [from + i*step, min(from + (i+1)*step, to)), exact when from, to and step are whole minutes (a job counts in the step its run_at's minute starts in)"}
            }
        },
        "Health": {
            "type": "object",
            "required": ["status"],
            "properties": {
                "status": {"type": "string", "enum": ["ok", "unavailable"]},
                "store": {"type": "string"},
                "error": {"type": "string", "description": "Why the store is unavailable"}
            }
        },
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["code", "field", "message"],
                    "properties": {
                        "code": {"type": "string", "enum": ["invalid_field", "invalid_json", "not_found", "exists", "wrong_state", "too_large", "unauthorized", "host_not_allowed", "cross_site", "timeout", "store_unavailable", "too_many_waiters", "internal", "restore_running", "no_journal", "journal_disabled"]},
                        "field": {"type": ["string", "null"], "description": "The offending field (`jobs[3].topic` in batches) for `invalid_field`, and for `too_large` about a job body"},
                        "message": {"type": "string"},
                        "state": described(json!({"allOf": [schema_ref("JobState")]}), "Only with `wrong_state`: the job's current state")
                    }
                }
            }
        }
    })));
    Value::Object(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{self, JobId, Topic};

    fn excluded(ranges: &[(char, char)], c: char) -> bool {
        ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
    }

    #[test]
    fn the_patterns_exclude_exactly_the_characters_ids_and_topics_refuse() {
        for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
            let s = c.to_string();
            let id_refused = JobId::parse(s.as_str()).is_err();
            assert_eq!(excluded(ID_FORBIDDEN, c), id_refused, "id {c:?}");
            let topic_refused = Topic::parse(s).is_err();
            assert_eq!(excluded(TOPIC_FORBIDDEN, c), topic_refused, "topic {c:?}");
        }
    }

    #[test]
    fn patterns_are_written_with_four_digit_escapes() {
        assert_eq!(
            pattern_without(ID_FORBIDDEN),
            r"^[^\u0000-\u001f\u007f-\u009f]+$"
        );
        assert_eq!(pattern_without(&[(',', ',')]), r"^[^\u002c]+$");
    }

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
        let doc = document(&Config::default());
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
}
