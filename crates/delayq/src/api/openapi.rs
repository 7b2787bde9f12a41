//! The OpenAPI 3.1 document of the /v1 API, written by hand from docs/api.md and served at
//! `GET /v1/openapi.json` (routed by `v1::routes`).
//!
//! It is a description, not a source of truth: docs/api.md is the contract, v1.rs implements it,
//! and this file follows both. It is not generated from the handlers (that would pull in a
//! schema-derive dependency and still miss the hand-written validation); instead
//! tests/http_v1.rs checks that every route of the router appears here. Health checks are
//! described too, since clients use them, though another module serves them.

use axum::Json;
use serde_json::{Value, json};
use std::sync::LazyLock;

/// The document, built once.
static DOCUMENT: LazyLock<Value> = LazyLock::new(build);

/// The OpenAPI document of /v1.
pub fn document() -> &'static Value {
    &DOCUMENT
}

/// `GET /v1/openapi.json`.
pub async fn serve() -> Json<&'static Value> {
    Json(document())
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

fn build() -> Value {
    let mut paths = paths();
    add_unauthorized(&mut paths);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "delayq /v1 API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A delay queue: jobs become ready at a given time; consumers reserve them and finish them within their time-to-run. Times are Unix milliseconds. Every refusal has the body `Error`. Bodies are JSON whatever the Content-Type; `null` counts as an absent field; unknown fields are refused. Ids in paths are percent-encoded (`a%2Fb` for `a/b`).",
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
            "schemas": schemas()
        }
    })
}

/// Adds the 401 of bearer authentication to every operation, and marks `/healthz`, the one
/// path that never asks for a token, as needing no security.
fn add_unauthorized(paths: &mut Value) {
    let Value::Object(paths) = paths else { return };
    for (path, item) in paths.iter_mut() {
        let Value::Object(item) = item else { continue };
        for (method, op) in item.iter_mut() {
            if method == "parameters" {
                continue;
            }
            let Value::Object(op) = op else { continue };
            if path == "/healthz" {
                op.insert("security".into(), json!([]));
                continue;
            }
            if let Some(Value::Object(responses)) = op.get_mut("responses") {
                responses.insert(
                    "401".into(),
                    error("`unauthorized`: authentication is on and the bearer token is missing or wrong"),
                );
            }
        }
    }
}

fn paths() -> Value {
    let not_found = error("`not_found`: no job with that id");
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
        "/v1/jobs/batch": {
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
            "post": {
                "operationId": "reserve",
                "summary": "Reserve ready jobs, waiting up to `timeout_ms` for one",
                "tags": ["consumers"],
                "requestBody": request("ReserveRequest", true),
                "responses": responses(map(json!({
                    "200": ok("The reserved jobs; empty when none became ready in time", "ReserveReply")
                })), true)
            }
        },
        "/v1/finish": {
            "post": {
                "operationId": "finishBatch",
                "summary": "Finish several jobs",
                "tags": ["consumers"],
                "requestBody": request("FinishBatch", true),
                "responses": responses(map(json!({
                    "200": ok("How many were finished and which ids were not found", "FinishBatchReply")
                })), true)
            }
        },
        "/v1/topics/{topic}/kick": {
            "parameters": [{
                "name": "topic", "in": "path", "required": true,
                "schema": {"$ref": "#/components/schemas/Topic"}
            }],
            "post": {
                "operationId": "kickTopic",
                "summary": "Return up to `max` dead jobs of a topic, oldest burial first, to ready",
                "tags": ["jobs"],
                "requestBody": request("KickTopic", true),
                "responses": responses(map(json!({
                    "200": ok("How many were kicked", "KickTopicReply")
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
                    "description": "Counters of this instance's transitions, the delivery lateness histogram and the store's job counts, in the OpenMetrics text format",
                    "content": {"application/openmetrics-text": {"schema": {"type": "string"}}}
                }}
            }
        }
    })
}

fn schemas() -> Value {
    let mut all = map(json!({
        "JobId": {
            "type": "string", "minLength": 1, "maxLength": 256,
            "description": "1–256 characters, no control characters; unique across topics"
        },
        "Topic": {
            "type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^\\s,\\x00-\\x1f\\x7f-\\x9f]+$",
            "description": "1–128 characters, no whitespace, control characters or commas"
        },
        "UnixMillis": {"type": "integer", "format": "int64", "minimum": 0, "maximum": 253_402_300_799_000_u64},
        "JobState": {"type": "string", "enum": ["delayed", "ready", "reserved", "dead"]},
        "Job": {
            "type": "object",
            "required": ["id", "topic", "body", "state", "run_at_ms", "ttr_ms", "priority", "max_attempts", "backoff_ms", "attempts", "reserved_until_ms"],
            "properties": {
                "id": {"$ref": "#/components/schemas/JobId"},
                "topic": {"$ref": "#/components/schemas/Topic"},
                "body": {"type": "string"},
                "state": {"$ref": "#/components/schemas/JobState"},
                "run_at_ms": {"$ref": "#/components/schemas/UnixMillis"},
                "ttr_ms": {"type": "integer", "minimum": 1, "maximum": 86_400_000},
                "priority": {"type": "integer", "minimum": 0, "maximum": 4_294_967_295_u64},
                "max_attempts": {"type": "integer", "minimum": 0, "maximum": 4_294_967_295_u64},
                "backoff_ms": {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": 64},
                "attempts": {"type": "integer", "minimum": 0},
                "reserved_until_ms": {
                    "oneOf": [{"$ref": "#/components/schemas/UnixMillis"}, {"type": "null"}],
                    "description": "Set only while reserved"
                }
            }
        },
        "NewJob": {
            "type": "object",
            "additionalProperties": false,
            "required": ["topic"],
            "description": "`null` is the same as an absent field. Giving both `delay_ms` and `run_at_ms` is an error.",
            "properties": {
                "topic": {"$ref": "#/components/schemas/Topic"},
                "id": {"allOf": [{"$ref": "#/components/schemas/JobId"}], "description": "Default: a new UUIDv7 (time-ordered)"},
                "body": {"type": "string", "default": "", "description": "Stored byte-for-byte; at most `max_body_bytes` (413 when over)"},
                "delay_ms": {"type": "integer", "minimum": 0, "default": 0, "description": "Due this long after now; 0 is ready now"},
                "run_at_ms": {"allOf": [{"$ref": "#/components/schemas/UnixMillis"}], "description": "Absolute due time instead of `delay_ms`; a past time is ready now"},
                "ttr_ms": {"type": "integer", "minimum": 1, "maximum": 86_400_000, "default": 60_000},
                "priority": {"type": "integer", "minimum": 0, "maximum": 4_294_967_295_u64, "default": 1024, "description": "0 is most urgent"},
                "max_attempts": {"type": "integer", "minimum": 0, "maximum": 4_294_967_295_u64, "default": 0, "description": "Deliveries before the job is dead; 0 = unlimited"},
                "backoff_ms": {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": 64, "default": [], "description": "Delay before the n-th redelivery; the last step repeats"},
                "replace": {"type": "boolean", "default": false, "description": "Replace an existing job with this id instead of answering 409"}
            }
        }
    }));
    all.extend(map(json!({
                "BatchPush": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["jobs"],
                    "properties": {
                        "jobs": {"type": "array", "items": {"$ref": "#/components/schemas/NewJob"}, "description": "At most `max_batch` (default 1000)"},
                        "replace": {"type": "boolean", "default": false}
                    }
                },
                "PushResult": {
                    "type": "object",
                    "required": ["id", "status"],
                    "properties": {
                        "id": {"$ref": "#/components/schemas/JobId"},
                        "status": {"type": "string", "enum": ["created", "replaced", "exists"]}
                    }
                },
                "BatchPushReply": {
                    "type": "object",
                    "required": ["results"],
                    "properties": {"results": {"type": "array", "items": {"$ref": "#/components/schemas/PushResult"}}}
                },
                "Release": {
                    "type": "object",
                    "additionalProperties": false,
                    "description": "The body may be empty",
                    "properties": {
                        "delay_ms": {"type": "integer", "minimum": 0, "description": "Default: the job's backoff schedule"}
                    }
                },
                "Reschedule": {
                    "type": "object",
                    "additionalProperties": false,
                    "description": "Exactly one of `delay_ms` and `run_at_ms`",
                    "properties": {
                        "delay_ms": {"type": "integer", "minimum": 0},
                        "run_at_ms": {"$ref": "#/components/schemas/UnixMillis"},
                        "body": {"type": "string"},
                        "priority": {"type": "integer", "minimum": 0, "maximum": 4_294_967_295_u64}
                    }
                },
                "RescheduleReply": {
                    "type": "object",
                    "required": ["job", "previous_state"],
                    "properties": {
                        "job": {"$ref": "#/components/schemas/Job"},
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
                        "topics": {"type": "array", "items": {"$ref": "#/components/schemas/Topic"}, "minItems": 1, "description": "Preferred in the order given; at most `max_batch`"},
                        "max": {"type": "integer", "minimum": 1, "default": 1, "description": "At most `max_batch` (default 1000)"},
                        "timeout_ms": {"type": "integer", "minimum": 0, "default": 0, "description": "How long to wait when nothing is ready; at most `max_wait_secs` × 1000 (default 300000)"}
                    }
                },
                "ReserveReply": {
                    "type": "object",
                    "required": ["jobs"],
                    "properties": {"jobs": {"type": "array", "items": {"$ref": "#/components/schemas/Job"}}}
                },
                "FinishBatch": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["ids"],
                    "properties": {"ids": {"type": "array", "items": {"$ref": "#/components/schemas/JobId"}, "description": "At most `max_batch`"}}
                },
                "FinishBatchReply": {
                    "type": "object",
                    "required": ["finished", "missing"],
                    "properties": {
                        "finished": {"type": "integer", "minimum": 0},
                        "missing": {"type": "array", "items": {"$ref": "#/components/schemas/JobId"}}
                    }
                },
                "KickTopic": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["max"],
                    "properties": {"max": {"type": "integer", "minimum": 1, "description": "At most `max_batch`"}}
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
                    "required": ["topics", "next_due_ms"],
                    "properties": {
                        "topics": {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/TopicCounts"}, "description": "Topics with at least one job"},
                        "next_due_ms": {
                            "oneOf": [{"$ref": "#/components/schemas/UnixMillis"}, {"type": "null"}],
                            "description": "The earliest due time of a delayed job or reservation deadline"
                        }
                    }
                },
                "Health": {
                    "type": "object",
                    "required": ["status"],
                    "properties": {
                        "status": {"type": "string"},
                        "store": {"type": "string"}
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
                                "code": {"type": "string", "enum": ["invalid_field", "invalid_json", "not_found", "exists", "wrong_state", "too_large", "unauthorized", "timeout", "store_unavailable", "too_many_waiters", "internal"]},
                                "field": {"type": ["string", "null"], "description": "The offending field (`jobs[3].topic` in batches) for `invalid_field`, and for `too_large` about a job body"},
                                "message": {"type": "string"},
                                "state": {"allOf": [{"$ref": "#/components/schemas/JobState"}], "description": "Only with `wrong_state`: the job's current state"}
                            }
                        }
                    }
                }
            })));
    Value::Object(all)
}
