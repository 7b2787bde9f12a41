//! The operations of the OpenAPI document: one entry per route of /v1 (and the health checks),
//! with the responses each can give. The journal's routes are listed only for a server with a
//! journal. The bodies they name are in `schemas.rs`; this file states no field.

use super::schemas::schema_ref;
use super::{Features, map};
use crate::api::v1::{DEFAULT_PAGE, MAX_PAGE};
use crate::job::MAX_RUN_AT;
use serde_json::{Value, json};

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
pub(super) fn add_unauthorized(paths: &mut Value) {
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

/// The document's `paths`: every operation `features` make available.
pub(super) fn paths(features: Features) -> Value {
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
    let mut paths = map(json!({
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
            "parameters": [topic_param.clone()],
            "get": {
                "operationId": "topicSchedule",
                "summary": "How many of a topic's delayed jobs (pull and callback) fall due in each step from `from` to `to`",
                "tags": ["admin"],
                "parameters": schedule_params.clone(),
                "responses": responses(map(json!({"200": ok("The counts", "Schedule")})), false)
            }
        },
        "/v1/topics/{topic}/settings": {
            "parameters": [topic_param.clone()],
            "get": {
                "operationId": "getTopicSettings",
                "summary": "A topic's flow control in force: paused, rate limit, burst, max_in_flight (the defaults when never set)",
                "tags": ["admin"],
                "responses": responses(map(json!({"200": ok("The settings in force", "TopicSettings")})), false)
            },
            "put": {
                "operationId": "putTopicSettings",
                "summary": "Change a topic's flow control: fields not given are unchanged, null removes a limit; a topic may be set before its first job",
                "tags": ["admin"],
                "requestBody": request("TopicSettingsChange", true),
                "responses": responses(map(json!({"200": ok("The settings now in force", "TopicSettings")})), true)
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
    }));
    if features.journal {
        paths.extend(journal_paths());
    }
    paths.extend(schedule_paths());
    paths.extend(backup_paths());
    Value::Object(paths)
}

/// The recurring schedules' operations (docs/schedules.md).
fn schedule_paths() -> serde_json::Map<String, Value> {
    let id = json!({
        "name": "id", "in": "path", "required": true,
        "description": "The schedule id, percent-encoded",
        "schema": schema_ref("ScheduleId")
    });
    let not_found = error("`not_found`: no schedule with that id");
    let schedule = ok(
        "The schedule, with its next 10 fire times",
        "RecurringSchedule",
    );
    let op = |op_id: &str, summary: &str, specific: Value| {
        json!({
            "operationId": op_id,
            "summary": summary,
            "tags": ["schedules"],
            "responses": responses(map(specific), false)
        })
    };
    map(json!({
        "/v1/schedules": {
            "get": {
                "operationId": "listSchedules",
                "summary": "One page of the recurring schedules, by id",
                "tags": ["schedules"],
                "parameters": [
                    {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": DEFAULT_PAGE}},
                    {"name": "cursor", "in": "query", "required": false, "description": "The `next_cursor` of the previous page", "schema": schema_ref("ScheduleId")}
                ],
                "responses": responses(map(json!({"200": ok("The page", "SchedulesPage")})), false)
            }
        },
        "/v1/schedules/{id}": {
            "parameters": [id.clone()],
            "put": {
                "operationId": "putSchedule",
                "summary": "Create or replace a recurring schedule: each tick pushes the job `<id>@<tick in Unix ms>`, due at the tick",
                "tags": ["schedules"],
                "requestBody": request("NewSchedule", true),
                "responses": responses(map(json!({
                    "200": ok("Replaced (its last tick kept)", "RecurringSchedule"),
                    "201": ok("Created", "RecurringSchedule")
                })), true)
            },
            "get": op("getSchedule", "Get a recurring schedule, its next 10 fire times and its last tick", json!({"200": schedule.clone(), "404": not_found.clone()})),
            "delete": op("deleteSchedule", "Delete a recurring schedule (the jobs it pushed stay)", json!({"204": {"description": "Deleted"}, "404": not_found.clone()}))
        },
        "/v1/schedules/{id}/pause": {
            "parameters": [id.clone()],
            "post": op("pauseSchedule", "Pause a recurring schedule: no tick fires until it is resumed", json!({"200": schedule.clone(), "404": not_found.clone()}))
        },
        "/v1/schedules/{id}/resume": {
            "parameters": [id],
            "post": op("resumeSchedule", "Resume a paused schedule: ticks fire again from now on (none of those that fell while it was paused)", json!({"200": schedule, "404": not_found}))
        }
    }))
}

/// The online backup (docs/operations.md), on every server: a store without one, or a server
/// without `backup_dir`, answers 409 naming why.
fn backup_paths() -> serde_json::Map<String, Value> {
    map(json!({
        "/v1/backup": {
            "post": {
                "operationId": "backup",
                "summary": "Write a consistent copy of the embedded store into a new or empty directory under the server's `backup_dir`, while it serves; `delayq serve --data-dir` on that directory has every job acknowledged before the request. Answers when the copy is complete (no request deadline)",
                "tags": ["admin"],
                "requestBody": request("BackupRequest", true),
                "responses": {
                    "200": ok("The copy is complete and synced", "BackupReply"),
                    "400": error("`invalid_field` naming `dir` (outside `backup_dir`, not empty, not a directory), or `invalid_json`"),
                    "409": error("`backup_unsupported`: the store has no online backup (Redis, Redis Cluster: back up Redis itself; memory: nothing to back up); `backup_disabled`: the server has no `backup_dir`; `backup_running`: another backup is running"),
                    "413": error("`too_large`: the request body is over the limit"),
                    "500": error("`backup_failed`: the copy could not be written (the message says why)"),
                    "503": error("`store_unavailable`: the store has failed or is stopping")
                }
            }
        }
    }))
}

/// The journal's operations (docs/journal.md), on a server with a journal. Without one these
/// routes answer 404 `journal_disabled`: left out of the document, they are not operations of
/// that server, and a job it created is never missing its history.
fn journal_paths() -> serde_json::Map<String, Value> {
    map(json!({
        "/v1/jobs/{id}/history": {
            "parameters": [{"$ref": "#/components/parameters/JobId"}],
            "get": {
                "operationId": "jobHistory",
                "summary": "A job's journaled state changes, oldest first (the latest 1,000; docs/journal.md)",
                "tags": ["jobs"],
                "responses": responses(map(json!({
                    "200": ok("The job's history", "History"),
                    "404": error("`not_found`: the journal has no state change of this job")
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
                    "409": error("`restore_running`: another restore is running")
                })), true)
            }
        }
    }))
}
