//! Building a job from a `NewJob` (docs/api.md), the body of `POST /v1/jobs` and each item of
//! `POST /v1/jobs/batch`: every field read and checked, its `callback` against the allowed
//! destinations, its `publish` only on a server with RabbitMQ, into a validated `JobSpec`.
//! The handlers decide what to do with it (push one, push a batch in one mode).

use super::due::due_time;
use super::error::ApiError;
use super::input::Fields;
use super::{ApiResult, required};
use crate::api::AppState;
use crate::clock::Reading;
use crate::delivery::allow::AllowList;
use crate::job::{self, Callback, JobId, JobSpec, Publish, Topic};

/// The fields of `NewJob` (docs/api.md).
pub(super) const NEW_JOB_FIELDS: &[&str] = &[
    "topic",
    "id",
    "body",
    "delay_ms",
    "run_at_ms",
    "ttr_ms",
    "priority",
    "max_attempts",
    "backoff_ms",
    "callback",
    "publish",
    "replace",
];

/// The `NewJob` field that sets a field of `JobSpec` (as job.rs's validation errors name it).
fn field_of_spec(spec_field: &'static str) -> &'static str {
    match spec_field {
        "run_at" => "run_at_ms",
        // `topic`, `id`, `body`, `ttr_ms`, `backoff_ms`: the same word.
        other => other,
    }
}

/// Reads a `NewJob`'s `callback` object: its URL checked against the allowed destinations,
/// its timeout within limits.
fn callback(f: &mut Fields, allow: &AllowList) -> ApiResult<Option<Callback>> {
    let Some(value) = f.take("callback") else {
        return Ok(None);
    };
    if value.is_null() {
        return Ok(None);
    }
    let name = f.name("callback");
    let mut cf = Fields::from_value(value, &name, &["url", "timeout_ms"])?;
    let url = cf.string("url")?;
    let url = required(&cf, "url", url)?;
    allow
        .check_url(&url)
        .map_err(|e| ApiError::field(cf.name("url"), e))?;
    let timeout_ms = cf
        .u64("timeout_ms")?
        .unwrap_or(job::DEFAULT_CALLBACK_TIMEOUT_MS);
    job::validate_callback_timeout_ms(timeout_ms)
        .map_err(|e| ApiError::from_invalid(cf.name("timeout_ms"), e))?;
    Ok(Some(Callback { url, timeout_ms }))
}

/// Reads a `NewJob`'s `publish` object (RabbitMQ, docs/rabbitmq.md): refused on a server
/// without `--amqp`.
fn publish(f: &mut Fields, st: &AppState) -> ApiResult<Option<Publish>> {
    let Some(value) = f.take("publish") else {
        return Ok(None);
    };
    if value.is_null() {
        return Ok(None);
    }
    let name = f.name("publish");
    if st.config.amqp.is_none() {
        return Err(ApiError::field(
            name,
            "needs a server started with --amqp (RabbitMQ)",
        ));
    }
    let mut pf = Fields::from_value(value, &name, &["exchange", "routing_key"])?;
    let exchange = pf.string("exchange")?.unwrap_or_default();
    let routing_key = pf.string("routing_key")?;
    let routing_key = required(&pf, "routing_key", routing_key)?;
    let p = Publish {
        exchange,
        routing_key,
        content_type: None,
        headers: None,
        body_base64: false,
    };
    p.validate().map_err(|e| {
        let field = e.field.strip_prefix("publish.").unwrap_or(e.field);
        ApiError::from_invalid(pf.name(field), e)
    })?;
    Ok(Some(p))
}

/// A validated `NewJob` and its own `replace` flag, if it gave one.
pub(super) struct NewJob {
    pub(super) spec: JobSpec,
    pub(super) replace: Option<bool>,
}

pub(super) fn new_job(mut f: Fields, now: Reading, st: &AppState) -> ApiResult<NewJob> {
    let max_body_bytes = st.config.max_body_bytes;
    let topic = f.string("topic")?;
    let topic = required(&f, "topic", topic)?;
    let topic = Topic::parse(topic).map_err(|e| ApiError::from_invalid(f.name("topic"), e))?;
    let id = match f.string("id")? {
        Some(s) => JobId::parse(s).map_err(|e| ApiError::from_invalid(f.name("id"), e))?,
        None => JobId::generate(),
    };
    let body = f.string("body")?.unwrap_or_default();
    if body.len() > max_body_bytes {
        return Err(ApiError::body_too_large(
            f.name("body"),
            body.len(),
            max_body_bytes,
        ));
    }
    let run_at = due_time(&mut f, now)?.unwrap_or(now.millis());
    let mut spec = JobSpec::new(topic, id, body, run_at);
    spec.callback = callback(&mut f, &st.config.callback_allow)?;
    let publish = publish(&mut f, st)?;
    if publish.is_some() && spec.callback.is_some() {
        return Err(ApiError::field(
            f.name("publish"),
            "a job has a callback or a publish, not both",
        ));
    }
    let ttr = f.u64("ttr_ms")?;
    if let Some(ttr) = ttr {
        job::validate_ttr_ms(ttr).map_err(|e| ApiError::from_invalid(f.name("ttr_ms"), e))?;
        spec.ttr_ms = ttr;
    }
    if let Some(p) = f.u32("priority")? {
        spec.priority = p;
    }
    let max_attempts = f.u32("max_attempts")?;
    let backoff = f.u64s("backoff_ms")?;
    if let Some(steps) = &backoff {
        job::validate_backoff(steps)
            .map_err(|e| ApiError::from_invalid(f.name("backoff_ms"), e))?;
    }
    if let Some(cb) = spec.callback.take() {
        spec.with_callback_defaults(cb, ttr, max_attempts, backoff);
    } else if let Some(p) = publish {
        if spec.id.as_str().len() > job::MAX_AMQP_NAME_BYTES {
            return Err(ApiError::field(
                f.name("id"),
                format!(
                    "of a publish job (its message_id) must be at most {} bytes",
                    job::MAX_AMQP_NAME_BYTES
                ),
            ));
        }
        let attempt_ms = st.config.amqp_publish_timeout_secs.saturating_mul(1000);
        spec.with_publish_defaults(p, attempt_ms, ttr, max_attempts, backoff);
    } else {
        spec.max_attempts = max_attempts.unwrap_or(spec.max_attempts);
        spec.backoff_ms = backoff.unwrap_or_default();
    }
    let replace = f.bool("replace")?;
    // Everything was checked above; this is the domain's own word on it, kept as a backstop.
    spec.validate(max_body_bytes)
        .map_err(|e| ApiError::from_invalid(f.name(field_of_spec(e.field)), e))?;
    Ok(NewJob { spec, replace })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_validation_errors_name_the_new_job_fields() {
        let topic = Topic::parse("t").unwrap();
        let mut spec = JobSpec::new(topic, JobId::parse("j").unwrap(), "b", job::MAX_RUN_AT + 1);
        let field = |spec: &JobSpec| field_of_spec(spec.validate(1).unwrap_err().field);
        assert_eq!(field(&spec), "run_at_ms");
        spec.run_at = 0;
        spec.ttr_ms = 0;
        assert_eq!(field(&spec), "ttr_ms");
        spec.ttr_ms = 1;
        spec.backoff_ms = vec![0; job::MAX_BACKOFF_STEPS + 1];
        assert_eq!(field(&spec), "backoff_ms");
        spec.backoff_ms.clear();
        spec.body = "two".into();
        assert_eq!(field(&spec), "body");
    }
}
