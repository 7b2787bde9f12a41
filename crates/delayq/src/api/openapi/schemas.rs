//! The bodies of the OpenAPI document (`components.schemas`): what each request accepts, field
//! by field, with the handlers' limits (the configured ones from [`Limits`]), and what each
//! answer holds. The patterns for ids and topics are derived here from the characters
//! `JobId::parse` and `Topic::parse` refuse (tested against them). Operations are in `paths.rs`.

use super::{Features, Limits, map};
use crate::api::v1::{
    MAX_DELAY_MS, MAX_PAGE, MAX_SCHEDULE_STEPS, MAX_SCHEDULES_COUNTED, MAX_TICKS_COUNTED,
};
use crate::job::{
    DEFAULT_CALLBACK_TIMEOUT_MS, DEFAULT_PRIORITY, DEFAULT_TTR_MS, MAX_BACKOFF_STEPS,
    MAX_CALLBACK_TIMEOUT_MS, MAX_ID_CHARS, MAX_RUN_AT, MAX_TOPIC_CHARS, MAX_TTR_MS,
};
use crate::schedule::{MAX_SCHEDULE_ID_CHARS, MIN_EVERY_MS, NEXT_RUNS};
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
/// `schema` or `null`, for an optional field: the handlers read `null` as an absent field.
fn or_null(schema: Value) -> Value {
    json!({"oneOf": [schema, {"type": "null"}]})
}

/// A schema of `components` by name.
pub(super) fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// Adds `description` to a schema object.
pub(super) fn described(mut schema: Value, description: &str) -> Value {
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

/// The document's `components.schemas` for a server with `limits` and `features`.
pub(super) fn schemas(limits: &Limits, features: Features) -> Value {
    let u32_max = u64::from(u32::MAX);
    let flow = crate::api::v1::MAX_FLOW_COUNT;
    let rate = json!({
        "type": "number",
        "minimum": crate::api::v1::MIN_RATE_PER_S,
        "maximum": crate::store::MAX_RATE_PER_S
    });
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
            "description": "`null` is the same as an absent field. Giving both `delay_ms` and `run_at_ms` is an error.",
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
                "replace": defaulting(described(or_null(json!({"type": "boolean"})), "Replace an existing job with this id instead of answering 409"), json!(false))
            },
            "not": both_due_times.clone()
        }
    }));
    if features.amqp {
        add_publish(&mut all);
    }
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
                "timeout_ms": defaulting(described(or_null(int(0, limits.wait_ms)), "How long to wait when nothing is ready, at most `max_wait` × 1000"), json!(0)),
                "finish": described(or_null(json!({"type": "array", "items": schema_ref("JobId"), "maxItems": batch})), "Jobs to finish before reserving, as `POST /v1/finish` does (at most `max_batch`; a repeated id counts once): a consumer finishes what it was given and reserves more in one request. They are finished even when nothing is then reserved")
            }
        },
        "ReserveReply": {
            "type": "object",
            "required": ["jobs", "finished", "missing"],
            "properties": {
                "jobs": {"type": "array", "items": schema_ref("Job")},
                "finished": described(json!({"type": "integer", "minimum": 0}), "How many of the request's `finish` ids were finished (0 without `finish`)"),
                "missing": described(json!({"type": "array", "items": schema_ref("JobId")}), "The request's `finish` ids that were not found")
            }
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
        "TopicSettings": {
            "type": "object",
            "required": ["paused", "rate_per_s", "burst", "max_in_flight"],
            "properties": {
                "paused": {"type": "boolean", "description": "Nothing of the topic is handed out (pull reservations, callbacks, publishes)"},
                "rate_per_s": described(or_null(rate.clone()), "Hand-outs per second (a token bucket shared by every instance); null: no rate limit"),
                "burst": described(or_null(int(1, flow)), "The bucket's size in force (as set, else max(1, floor(rate_per_s))); null without a rate"),
                "max_in_flight": described(or_null(int(1, flow)), "At most this many of the topic's jobs reserved at once (pull and callback); null: no limit")
            }
        },
        "TopicSettingsChange": {
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "paused": {"type": "boolean"},
                "rate_per_s": described(or_null(rate), "null removes the rate limit (and the burst)"),
                "burst": described(or_null(int(1, flow)), "Needs a rate, given here or already set; null: the default"),
                "max_in_flight": described(or_null(int(1, flow)), "null removes the limit")
            }
        },
        "BackupRequest": {
            "type": "object",
            "additionalProperties": false,
            "required": ["dir"],
            "properties": {
                "dir": described(json!({"type": "string", "maxLength": 4096, "pattern": pattern_without(&[('\u{0}', '\u{1f}'), ('\u{7f}', '\u{9f}')])}), "A directory under the server's `backup_dir`: relative to it, or absolute inside it; no `..`. Created, or must be empty")
            }
        },
        "BackupReply": {
            "type": "object",
            "required": ["dir", "jobs", "schedules", "bytes", "took_ms"],
            "properties": {
                "dir": described(json!({"type": "string"}), "The directory written, absolute"),
                "jobs": described(json!({"type": "integer", "minimum": 0}), "Jobs in the copy"),
                "schedules": described(json!({"type": "integer", "minimum": 0}), "Recurring schedules in the copy"),
                "bytes": described(json!({"type": "integer", "minimum": 0}), "Size of the copy (`delayq.redb`)"),
                "took_ms": described(json!({"type": "integer", "minimum": 0}), "How long the backup took")
            }
        },
        "Stats": {
            "type": "object",
            "required": ["topics", "callbacks", "settings", "next_due_ms"],
            "properties": {
                "topics": {"type": "object", "additionalProperties": schema_ref("TopicCounts"), "description": "Topics with at least one pull job"},
                "callbacks": {"type": "object", "additionalProperties": schema_ref("TopicCounts"), "description": "Topics with at least one callback job, and those jobs' counts"},
                "settings": {"type": "object", "additionalProperties": schema_ref("TopicSettings"), "description": "Topics with flow control settings, with or without jobs"},
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
            "required": ["from", "to", "step", "counts", "ticks", "ticks_partial"],
            "properties": {
                "from": schema_ref("UnixMillis"),
                "to": schema_ref("UnixMillis"),
                "step": {"type": "integer", "minimum": 1},
                "counts": {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": MAX_SCHEDULE_STEPS, "description": "counts[i]: jobs due in [from + i*step, min(from + (i+1)*step, to)), exact when from, to and step are whole minutes (a job counts in the step its run_at's minute starts in)"},
                "ticks": {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": MAX_SCHEDULE_STEPS, "description": "ticks[i]: the coming ticks of recurring schedules (not paused; for a topic, those whose jobs go to it) in the same step as counts[i]: jobs that do not exist yet and will be pushed then"},
                "ticks_partial": {"type": "boolean", "description": format!("true when not every schedule's ticks were counted: more than {MAX_SCHEDULES_COUNTED} schedules, or more than {MAX_TICKS_COUNTED} ticks in the range")}
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
                        "code": {"type": "string", "enum": ["invalid_field", "invalid_json", "not_found", "exists", "wrong_state", "too_large", "unauthorized", "host_not_allowed", "cross_site", "timeout", "store_unavailable", "too_many_waiters", "internal", "restore_running", "journal_disabled", "backup_unsupported", "backup_disabled", "backup_running", "backup_failed"]},
                        "field": {"type": ["string", "null"], "description": "The offending field (`jobs[3].topic` in batches) for `invalid_field`, and for `too_large` about a job body"},
                        "message": {"type": "string"},
                        "state": described(json!({"allOf": [schema_ref("JobState")]}), "Only with `wrong_state`: the job's current state")
                    }
                }
            }
        }
    })));
    if features.journal {
        all.extend(journal_schemas());
    }
    for (name, schema) in schedule_schemas(&all) {
        let clobbered = all.insert(name.clone(), schema);
        debug_assert!(clobbered.is_none(), "two schemas named {name}");
    }
    Value::Object(all)
}

/// The bodies of the recurring schedules' operations (docs/schedules.md). A schedule's job
/// template is `NewJob` (with `publish` on a server with RabbitMQ) without its id, due time and
/// `replace`.
fn schedule_schemas(all: &serde_json::Map<String, Value>) -> serde_json::Map<String, Value> {
    let mut template = all.get("NewJob").cloned().unwrap_or_else(|| json!({}));
    if let Value::Object(t) = &mut template {
        t.remove("not");
        if let Some(Value::Object(p)) = t.get_mut("properties") {
            for f in ["id", "delay_ms", "run_at_ms", "replace"] {
                p.remove(f);
            }
        }
        t.insert(
            "description".into(),
            json!("The job each tick pushes, as `NewJob` without `id` (each tick's job is `<schedule id>@<tick in Unix ms>`), `delay_ms`, `run_at_ms` (it is due at its tick) and `replace`."),
        );
    }
    let view_template = {
        let mut job = all.get("Job").cloned().unwrap_or_else(|| json!({}));
        if let Value::Object(j) = &mut job {
            if let Some(Value::Object(p)) = j.get_mut("properties") {
                for f in ["id", "state", "run_at_ms", "attempts", "reserved_until_ms"] {
                    p.remove(f);
                }
            }
            j.insert(
                "required".into(),
                json!([
                    "topic",
                    "body",
                    "ttr_ms",
                    "priority",
                    "max_attempts",
                    "backoff_ms",
                    "callback",
                    "publish"
                ]),
            );
        }
        job
    };
    let time = |what: &str| described(or_null(schema_ref("UnixMillis")), what);
    map(json!({
        "ScheduleId": {
            "type": "string", "minLength": 1, "maxLength": MAX_SCHEDULE_ID_CHARS,
            "pattern": pattern_without(ID_FORBIDDEN),
            "description": "1–200 characters, no control characters"
        },
        "JobTemplate": template,
        "NewSchedule": {
            "type": "object",
            "additionalProperties": false,
            "required": ["job"],
            "description": "Exactly one of `cron` and `every_ms`. `null` is the same as an absent field.",
            "properties": {
                "cron": described(or_null(json!({"type": "string"})), "5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first; month and day names; `@hourly`, `@daily`, `@weekly`, `@monthly`. Wall clock times in `tz`: one that does not exist that day (clocks go forward) does not fire; one that happens twice fires once, at its first occurrence"),
                "every_ms": described(or_null(int(MIN_EVERY_MS, MAX_RUN_AT)), "A fixed interval instead of `cron`, counted from `start_at_ms` (default: when the schedule was created)"),
                "tz": defaulting(described(or_null(json!({"type": "string"})), "An IANA time zone (`Europe/Berlin`) for `cron`"), json!("UTC")),
                "job": schema_ref("JobTemplate"),
                "start_at_ms": time("No tick before this time"),
                "end_at_ms": time("No tick after this time; not before `start_at_ms`"),
                "catch_up": defaulting(described(or_null(json!({"enum": ["latest", "none", "all"]})), "Ticks missed while no instance could fire them: the most recent one, none, or all (at most 1,000)"), json!("latest")),
                "overlap": defaulting(described(or_null(json!({"enum": ["allow", "skip"]})), "`skip`: a tick whose previous tick's job still exists pushes nothing"), json!("allow")),
                "paused": defaulting(or_null(json!({"type": "boolean"})), json!(false))
            },
            "oneOf": [
                {"required": ["cron"], "properties": {"cron": {"type": "string"}, "every_ms": {"type": "null"}}},
                {"required": ["every_ms"], "properties": {"every_ms": {"type": "integer"}, "cron": {"type": "null"}}}
            ]
        },
        "RecurringSchedule": {
            "type": "object",
            "required": ["id", "tz", "job", "start_at_ms", "end_at_ms", "catch_up", "overlap", "paused", "next_runs_ms", "last_tick_ms"],
            "properties": {
                "id": schema_ref("ScheduleId"),
                "cron": described(json!({"type": "string"}), "Absent for an interval"),
                "every_ms": described(int(MIN_EVERY_MS, MAX_RUN_AT), "Absent for a cron schedule"),
                "tz": {"type": "string"},
                "job": view_template,
                "start_at_ms": or_null(schema_ref("UnixMillis")),
                "end_at_ms": or_null(schema_ref("UnixMillis")),
                "catch_up": {"enum": ["latest", "none", "all"]},
                "overlap": {"enum": ["allow", "skip"]},
                "paused": {"type": "boolean"},
                "next_runs_ms": described(json!({"type": "array", "items": schema_ref("UnixMillis"), "maxItems": NEXT_RUNS}), "The next 10 fire times (fewer near `end_at_ms`; none while paused)"),
                "last_tick_ms": described(or_null(schema_ref("UnixMillis")), "The last tick that pushed a job")
            }
        },
        "SchedulesPage": {
            "type": "object",
            "required": ["schedules", "next_cursor"],
            "properties": {
                "schedules": {"type": "array", "items": schema_ref("RecurringSchedule"), "maxItems": MAX_PAGE},
                "next_cursor": described(or_null(json!({"type": "string"})), "Where the next page starts; null on the last page")
            }
        }
    }))
}

/// `NewJob`'s `publish` (RabbitMQ), on a server with `--amqp`; without it the field is unknown,
/// so refused (400 naming `publish`), as the server refuses it.
fn add_publish(all: &mut serde_json::Map<String, Value>) {
    all.extend(map(json!({
        "NewPublish": {
            "type": "object",
            "additionalProperties": false,
            "required": ["routing_key"],
            "description": "Push delivery to RabbitMQ (a server started with `--amqp`; 400 otherwise): when due, the job's body is published to `exchange` with `routing_key` (persistent, mandatory, `message_id` = the job id, headers `x-delayq-topic` and `x-delayq-attempt`), and the broker's confirm finishes it; a nack, a return (unroutable) or no confirm within the publish timeout is a failed attempt, retried after its backoff. Defaults as a callback job's. A job has a callback or a publish, not both (400 naming `publish`).",
            "properties": {
                "exchange": defaulting(described(or_null(json!({"type": "string", "maxLength": 255})), "The exchange; \"\" is the default exchange. At most 255 bytes"), json!("")),
                "routing_key": described(json!({"type": "string", "maxLength": 255}), "At most 255 bytes")
            }
        }
    })));
    let Some(Value::Object(new_job)) = all.get_mut("NewJob") else {
        return;
    };
    if let Some(Value::Object(properties)) = new_job.get_mut("properties") {
        properties.insert(
            "publish".into(),
            described(
                or_null(schema_ref("NewPublish")),
                "Makes it a publish job: delayq publishes the body to RabbitMQ instead of handing the job to consumers",
            ),
        );
    }
    // A job is delivered by a callback or a publish, not both.
    let both_deliveries = json!({
        "required": ["callback", "publish"],
        "properties": {"callback": {"type": "object"}, "publish": {"type": "object"}}
    });
    new_job.insert("allOf".into(), json!([{"not": both_deliveries}]));
    new_job.insert(
        "description".into(),
        json!("`null` is the same as an absent field. Giving both `delay_ms` and `run_at_ms`, or both `callback` and `publish`, is an error."),
    );
}

/// The bodies of the journal's operations (`paths.rs`), on a server with a journal.
fn journal_schemas() -> serde_json::Map<String, Value> {
    map(json!({
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
            "required": ["restored", "already_present", "skipped_overdue", "skipped_finished",
                "schedules_restored", "schedules_already_present", "settings_restored",
                "settings_already_present"],
            "properties": {
                "restored": {"type": "integer", "minimum": 0},
                "already_present": {"type": "integer", "minimum": 0},
                "skipped_overdue": {"type": "integer", "minimum": 0},
                "skipped_finished": {"type": "integer", "minimum": 0},
                "schedules_restored": described(json!({"type": "integer", "minimum": 0}), "Recurring schedules put back (a restore of the whole journal only)"),
                "schedules_already_present": described(json!({"type": "integer", "minimum": 0}), "Recurring schedules still in the store, left as they are"),
                "settings_restored": described(json!({"type": "integer", "minimum": 0}), "Topics whose flow control settings were put back"),
                "settings_already_present": described(json!({"type": "integer", "minimum": 0}), "Topics with settings still in the store, left as they are")
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobId, Topic};

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
}
