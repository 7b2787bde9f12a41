//! The /v1 API's routes and handlers: JSON in, JSON out, as specified by docs/api.md (and
//! described for machines by `openapi/`, served at `/v1/openapi.json`). The journal's /v1 routes
//! are in `restore.rs`.
//!
//! Each handler reads its input by hand (input.rs; a pushed job: new_job.rs, due times: due.rs,
//! listing cursors: cursor.rs), validates it completely before touching the store, calls the
//! store (or the dispatcher, for the long-poll of `reserve`), and renders the result (model.rs)
//! or an [`ApiError`] (error.rs). Handlers never wait themselves, never read the clock
//! other than through `AppState::clock`, and never log job bodies. Health checks are not here.
//!
//! Ids travel in paths percent-encoded: axum decodes path parameters, so an id with a space is
//! `/v1/jobs/a%20b` and one with a slash is `/v1/jobs/a%2Fb` (a raw `/` would end the segment).

mod cursor;
mod due;
mod error;
pub(super) mod input;
mod model;
mod new_job;
mod schedules;

pub use due::MAX_DELAY_MS;
pub use error::ApiError;
pub use schedules::{MAX_SCHEDULES_COUNTED, MAX_TICKS_COUNTED};

use super::AppState;
use crate::job::{self, JobId, JobState, Topic, UnixMillis};
use crate::store::{
    MAX_RATE_PER_S, PushMode, RATE_UNIT, Reschedule, SettingsChange, StoreError, schedule_steps,
};
use axum::Json;
use axum::Router;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use cursor::{decode_cursor, encode_cursor};
use due::{after_delay, due_time};
use input::{Fields, Query};
use model::{
    BatchPushReply, FinishBatchReply, JobView, JobsPage, KickTopicReply, PushResult,
    RescheduleReply, ReserveReply, ScheduleView, SettingsView, StatsView, TopicsView,
};
use new_job::{NEW_JOB_FIELDS, NewJob, new_job};
use std::collections::HashSet;
use std::time::Duration;

/// Every /v1 route (health checks excepted).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/jobs", post(push))
        // A static segment wins over `{id}`, so the job whose id is "batch" is served here too.
        .route(
            "/v1/jobs/batch",
            post(push_batch)
                .get(|st: State<AppState>| get_job_by_id(st, literal_batch_id()))
                .delete(|st: State<AppState>| delete_job_by_id(st, literal_batch_id())),
        )
        .route("/v1/jobs/{id}", get(get_job).delete(delete_job))
        .route("/v1/jobs/{id}/finish", post(finish))
        .route("/v1/jobs/{id}/release", post(release))
        .route("/v1/jobs/{id}/touch", post(touch))
        .route("/v1/jobs/{id}/bury", post(bury))
        .route("/v1/jobs/{id}/kick", post(kick))
        .route("/v1/jobs/{id}/reschedule", post(reschedule))
        .route("/v1/reserve", post(reserve))
        .route("/v1/finish", post(finish_batch))
        .route("/v1/topics/{topic}/kick", post(kick_topic))
        .route("/v1/stats", get(stats))
        .route("/v1/topics", get(topics))
        .route("/v1/topics/{topic}/jobs", get(list_jobs))
        .route("/v1/topics/{topic}/schedule", get(topic_schedule))
        .route(
            "/v1/topics/{topic}/settings",
            get(get_settings).put(put_settings),
        )
        .route("/v1/schedule", get(schedule))
        .route("/v1/openapi.json", get(super::openapi::serve))
        .merge(schedules::routes())
}

type ApiResult<T> = Result<T, ApiError>;
type Body = Result<Bytes, BytesRejection>;
/// A path parameter (`{id}` or `{topic}`), percent-decoded.
type IdPath = Result<Path<String>, PathRejection>;

/// The path of a job: `/v1/jobs/` and its id, percent-encoded.
pub fn job_path(id: &JobId) -> String {
    let mut out = String::from("/v1/jobs/");
    for b in id.as_str().bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn literal_batch_id() -> IdPath {
    Ok(Path("batch".to_string()))
}

fn record_id(id: &JobId) {
    tracing::Span::current().record("job_id", id.as_str());
}

/// The job id of a path, validated like any id.
fn path_id(path: IdPath) -> ApiResult<JobId> {
    let Path(raw) = path.map_err(|r| ApiError::path("id", r))?;
    let id = JobId::parse(raw).map_err(|e| ApiError::from_invalid("id", e))?;
    record_id(&id);
    Ok(id)
}

fn required<T>(f: &Fields, field: &str, v: Option<T>) -> ApiResult<T> {
    v.ok_or_else(|| ApiError::field(f.name(field), "is required"))
}

/// `usize` limit from the config as a `u64`, for comparing with request numbers.
fn limit_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Refuses a list of `len` jobs or ids (`field`) longer than `max_batch`.
fn batch_len(field: &str, len: usize, max_batch: usize) -> ApiResult<()> {
    if len > max_batch {
        return Err(ApiError::field(
            field,
            format!("has {len} {field}, at most {max_batch} allowed"),
        ));
    }
    Ok(())
}

/// Refuses a `max` (jobs to reserve or kick) outside 1 to `max_batch`.
fn batch_max(max: u64, max_batch: usize) -> ApiResult<()> {
    if max == 0 || max > limit_u64(max_batch) {
        return Err(ApiError::field(
            "max",
            format!("must be between 1 and {max_batch}, got {max}"),
        ));
    }
    Ok(())
}

/// `POST /v1/jobs`: 201 and the job, with its `Location`.
#[tracing::instrument(skip_all, fields(job_id = tracing::field::Empty))]
async fn push(State(st): State<AppState>, body: Body) -> ApiResult<Response> {
    let at = st.clock.read();
    let now = at.millis();
    let f = Fields::new(input::object(&body?, false)?, "", NEW_JOB_FIELDS)?;
    let NewJob { spec, replace } = new_job(f, at, &st)?;
    record_id(&spec.id);
    let mode = if replace.unwrap_or(false) {
        PushMode::Replace
    } else {
        PushMode::Reject
    };
    let location = HeaderValue::from_str(&job_path(&spec.id))
        .map_err(|e| ApiError::Internal(format!("location header: {e}")))?;
    st.store.push(spec.clone(), mode, now).await?;
    // What the store just created, without a second round trip (which could race a consumer).
    let job = job::Job::new(spec, now, 0);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(JobView::from(job)),
    )
        .into_response())
}

/// `POST /v1/jobs/batch`: validated whole, then pushed; a conflict on one job does not stop the
/// others.
#[tracing::instrument(skip_all, fields(jobs = tracing::field::Empty))]
async fn push_batch(State(st): State<AppState>, body: Body) -> ApiResult<Json<BatchPushReply>> {
    let at = st.clock.read();
    let now = at.millis();
    let mut f = Fields::new(input::object(&body?, false)?, "", &["jobs", "replace"])?;
    let replace = f.bool("replace")?.unwrap_or(false);
    let items = f.array("jobs")?;
    let items = required(&f, "jobs", items)?;
    tracing::Span::current().record("jobs", items.len());
    batch_len("jobs", items.len(), st.config.max_batch)?;
    let mut specs = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let name = format!("jobs[{i}]");
        let jf = Fields::from_value(item, &name, NEW_JOB_FIELDS)?;
        let job = new_job(jf, at, &st)?;
        if job.replace.is_some_and(|r| r != replace) {
            return Err(ApiError::field(
                format!("{name}.replace"),
                "differs from the batch's replace; a batch has one mode, set it on the batch",
            ));
        }
        specs.push(job.spec);
    }
    let ids: Vec<String> = specs.iter().map(|s| s.id.to_string()).collect();
    let mode = if replace {
        PushMode::Replace
    } else {
        PushMode::Reject
    };
    let outcomes = st.store.push_batch(specs, mode, now).await?;
    if outcomes.len() != ids.len() {
        return Err(ApiError::Internal(format!(
            "store answered {} outcomes for {} jobs",
            outcomes.len(),
            ids.len()
        )));
    }
    let mut results = Vec::with_capacity(ids.len());
    for (id, outcome) in ids.into_iter().zip(outcomes) {
        let status = match outcome {
            Ok(o) => PushResult::status_of(o),
            Err(StoreError::Exists) => "exists",
            Err(e) => return Err(e.into()),
        };
        results.push(PushResult { id, status });
    }
    Ok(Json(BatchPushReply { results }))
}

/// `GET /v1/jobs/{id}`.
async fn get_job(st: State<AppState>, path: IdPath) -> ApiResult<Json<JobView>> {
    get_job_by_id(st, path).await
}

#[tracing::instrument(skip_all, fields(job_id = tracing::field::Empty))]
async fn get_job_by_id(State(st): State<AppState>, path: IdPath) -> ApiResult<Json<JobView>> {
    let id = path_id(path)?;
    Ok(Json(st.store.get(&id).await?.into()))
}

/// `DELETE /v1/jobs/{id}`: 204 whatever the job's state.
async fn delete_job(st: State<AppState>, path: IdPath) -> ApiResult<StatusCode> {
    delete_job_by_id(st, path).await
}

#[tracing::instrument(skip_all, fields(job_id = tracing::field::Empty))]
async fn delete_job_by_id(State(st): State<AppState>, path: IdPath) -> ApiResult<StatusCode> {
    let id = path_id(path)?;
    st.store.delete(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/jobs/{id}/finish`: 204.
#[tracing::instrument(skip_all, fields(job_id = tracing::field::Empty))]
async fn finish(State(st): State<AppState>, path: IdPath) -> ApiResult<StatusCode> {
    let id = path_id(path)?;
    st.store.finish(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/jobs/{id}/release`, body `{"delay_ms"}` optional (an empty body is fine).
#[tracing::instrument(skip_all, fields(job_id = tracing::field::Empty))]
async fn release(State(st): State<AppState>, path: IdPath, body: Body) -> ApiResult<Json<JobView>> {
    let at = st.clock.read();
    let id = path_id(path)?;
    let mut f = Fields::new(input::object(&body?, true)?, "", &["delay_ms"])?;
    let delay = f.u64("delay_ms")?;
    if let Some(d) = delay {
        after_delay(f.name("delay_ms"), d, at)?;
    }
    // The store adds the delay to the `now` it is given: a delay runs from the instant rounded
    // up, as `after_delay` computes it; no delay (or the backoff's) from the instant rounded down.
    let now = match delay {
        Some(d) if d > 0 => at.millis_ceil(),
        _ => at.millis(),
    };
    Ok(Json(st.store.release(&id, delay, now).await?.into()))
}

/// `POST /v1/jobs/{id}/touch`: extends the reservation by the job's TTR from now.
#[tracing::instrument(skip_all, fields(job_id = tracing::field::Empty))]
async fn touch(State(st): State<AppState>, path: IdPath) -> ApiResult<Json<JobView>> {
    let id = path_id(path)?;
    Ok(Json(st.store.touch(&id, st.clock.now()).await?.into()))
}

/// `POST /v1/jobs/{id}/bury`: to `dead`.
#[tracing::instrument(skip_all, fields(job_id = tracing::field::Empty))]
async fn bury(State(st): State<AppState>, path: IdPath) -> ApiResult<Json<JobView>> {
    let id = path_id(path)?;
    Ok(Json(st.store.bury(&id, None, st.clock.now()).await?.into()))
}

/// `POST /v1/jobs/{id}/kick`: a dead job back to `ready`.
#[tracing::instrument(skip_all, fields(job_id = tracing::field::Empty))]
async fn kick(State(st): State<AppState>, path: IdPath) -> ApiResult<Json<JobView>> {
    let id = path_id(path)?;
    Ok(Json(st.store.kick(&id, st.clock.now()).await?.into()))
}

/// `POST /v1/jobs/{id}/reschedule`: new due time (and optionally body and priority) of a
/// delayed or ready job.
#[tracing::instrument(skip_all, fields(job_id = tracing::field::Empty))]
async fn reschedule(
    State(st): State<AppState>,
    path: IdPath,
    body: Body,
) -> ApiResult<Json<RescheduleReply>> {
    let at = st.clock.read();
    let now = at.millis();
    let id = path_id(path)?;
    let mut f = Fields::new(
        input::object(&body?, false)?,
        "",
        &["delay_ms", "run_at_ms", "body", "priority"],
    )?;
    let run_at = due_time(&mut f, at)?
        .ok_or_else(|| ApiError::field("delay_ms", "one of delay_ms or run_at_ms is required"))?;
    let body = f.string("body")?;
    if let Some(b) = &body
        && b.len() > st.config.max_body_bytes
    {
        return Err(ApiError::body_too_large(
            "body",
            b.len(),
            st.config.max_body_bytes,
        ));
    }
    let priority = f.u32("priority")?;
    let change = Reschedule {
        run_at,
        body,
        priority,
    };
    let (job, previous_state) = st.store.reschedule(&id, change, now).await?;
    Ok(Json(RescheduleReply {
        job: job.into(),
        previous_state,
    }))
}

/// `POST /v1/reserve`: up to `max` jobs, waiting up to `timeout_ms` for the first.
#[tracing::instrument(skip_all, fields(topics, max, timeout_ms))]
async fn reserve(State(st): State<AppState>, body: Body) -> ApiResult<Json<ReserveReply>> {
    let cfg = &st.config;
    let mut f = Fields::new(
        input::object(&body?, false)?,
        "",
        &["topics", "max", "timeout_ms", "finish"],
    )?;
    // Jobs to finish first: validated with the rest, before anything changes.
    let finish = match f.strings("finish")? {
        Some(raw) => job_ids("finish", raw, cfg.max_batch)?,
        None => Vec::new(),
    };
    let names = f.strings("topics")?;
    let names = required(&f, "topics", names)?;
    if names.is_empty() || names.len() > cfg.max_batch {
        return Err(ApiError::field(
            "topics",
            format!(
                "must name 1 to {} topics, got {}",
                cfg.max_batch,
                names.len()
            ),
        ));
    }
    let mut seen = HashSet::new();
    let mut topics = Vec::with_capacity(names.len());
    for (i, name) in names.into_iter().enumerate() {
        let t =
            Topic::parse(name).map_err(|e| ApiError::from_invalid(format!("topics[{i}]"), e))?;
        if seen.insert(t.clone()) {
            topics.push(t);
        }
    }
    let max = f.u64("max")?.unwrap_or(1);
    batch_max(max, cfg.max_batch)?;
    let timeout_ms = f.u64("timeout_ms")?.unwrap_or(0);
    let max_wait_ms = cfg.max_wait_secs.saturating_mul(1000);
    if timeout_ms > max_wait_ms {
        return Err(ApiError::field(
            "timeout_ms",
            format!(
                "must be at most {max_wait_ms} ({} s), got {timeout_ms}",
                cfg.max_wait_secs
            ),
        ));
    }
    let span = tracing::Span::current();
    span.record("topics", topics.len());
    span.record("max", max);
    span.record("timeout_ms", timeout_ms);
    let max = usize::try_from(max).unwrap_or(cfg.max_batch);
    let FinishBatchReply { finished, missing } = finish_ids(&st, finish).await?;
    let jobs = st
        .dispatch
        .poll(topics, max, Duration::from_millis(timeout_ms))
        .await?;
    Ok(Json(ReserveReply {
        jobs: jobs.into_iter().map(JobView::from).collect(),
        finished,
        missing,
    }))
}

/// The ids of a list (`field`): at most `max_batch`, each valid (else a 400 naming
/// `field[i]`), a repeated one counted once.
fn job_ids(field: &str, raw: Vec<String>, max_batch: usize) -> ApiResult<Vec<JobId>> {
    batch_len(field, raw.len(), max_batch)?;
    let mut seen = HashSet::new();
    let mut ids = Vec::with_capacity(raw.len());
    for (i, s) in raw.into_iter().enumerate() {
        let id = JobId::parse(s).map_err(|e| ApiError::from_invalid(format!("{field}[{i}]"), e))?;
        if seen.insert(id.clone()) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// Finishes each id; the ones that do not exist are listed, not refused.
async fn finish_ids(st: &AppState, ids: Vec<JobId>) -> ApiResult<FinishBatchReply> {
    let mut finished = 0u64;
    let mut missing = Vec::new();
    if ids.is_empty() {
        return Ok(FinishBatchReply { finished, missing });
    }
    let results = st.store.finish_batch(&ids).await?;
    for (id, r) in ids.into_iter().zip(results) {
        match r {
            Ok(_) => finished = finished.saturating_add(1),
            Err(StoreError::NotFound) => missing.push(id.into()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(FinishBatchReply { finished, missing })
}

/// `POST /v1/finish`: finishes each id; unknown ones are listed, not refused.
#[tracing::instrument(skip_all, fields(ids = tracing::field::Empty))]
async fn finish_batch(State(st): State<AppState>, body: Body) -> ApiResult<Json<FinishBatchReply>> {
    let mut f = Fields::new(input::object(&body?, false)?, "", &["ids"])?;
    let raw = f.strings("ids")?;
    let raw = required(&f, "ids", raw)?;
    tracing::Span::current().record("ids", raw.len());
    let ids = job_ids("ids", raw, st.config.max_batch)?;
    Ok(Json(finish_ids(&st, ids).await?))
}

/// `POST /v1/topics/{topic}/kick`, body `{"max"}`: up to `max` dead jobs back to `ready`.
#[tracing::instrument(skip_all, fields(topic = tracing::field::Empty))]
async fn kick_topic(
    State(st): State<AppState>,
    path: IdPath,
    body: Body,
) -> ApiResult<Json<KickTopicReply>> {
    let Path(raw) = path.map_err(|r| ApiError::path("topic", r))?;
    let topic = Topic::parse(raw).map_err(|e| ApiError::from_invalid("topic", e))?;
    tracing::Span::current().record("topic", topic.as_str());
    let mut f = Fields::new(input::object(&body?, false)?, "", &["max"])?;
    let max = f.u64("max")?;
    let max = required(&f, "max", max)?;
    batch_max(max, st.config.max_batch)?;
    // The topic's dead pull jobs first, then its dead callback jobs, `max` in all.
    let now = st.clock.now();
    let mut kicked = st.store.kick_topic(&topic, max, now).await?;
    if kicked < max {
        kicked += st
            .store
            .kick_topic(&topic.callback_queue(), max - kicked, now)
            .await?;
    }
    Ok(Json(KickTopicReply { kicked }))
}

/// `GET /v1/stats`.
#[tracing::instrument(skip_all)]
async fn stats(State(st): State<AppState>) -> ApiResult<Json<StatsView>> {
    Ok(Json(st.store.stats().await?.into()))
}

/// `GET /v1/topics`: every topic with a pull or callback job, by name, with its counts.
#[tracing::instrument(skip_all)]
async fn topics(State(st): State<AppState>, RawQuery(q): RawQuery) -> ApiResult<Json<TopicsView>> {
    Query::new(q.as_deref(), &[])?;
    Ok(Json(st.store.stats().await?.into()))
}

/// The smallest `rate_per_s` a topic takes: one hand-out in about 11.6 days.
pub const MIN_RATE_PER_S: f64 = 1.0 / RATE_UNIT as f64;
/// The largest `burst` and `max_in_flight` a topic takes.
pub const MAX_FLOW_COUNT: u64 = 1_000_000;

/// `GET /v1/topics/{topic}/settings`: the topic's flow control in force (defaults when never
/// set).
#[tracing::instrument(skip_all, fields(topic = tracing::field::Empty))]
async fn get_settings(State(st): State<AppState>, path: IdPath) -> ApiResult<Json<SettingsView>> {
    let topic = path_topic(path)?;
    Ok(Json(st.store.settings(&topic).await?.into()))
}

/// `PUT /v1/topics/{topic}/settings`, any of `{"paused", "rate_per_s", "burst",
/// "max_in_flight"}`: fields not given are unchanged, `null` removes a limit. Answers the
/// settings now in force.
#[tracing::instrument(skip_all, fields(topic = tracing::field::Empty))]
async fn put_settings(
    State(st): State<AppState>,
    path: IdPath,
    body: Body,
) -> ApiResult<Json<SettingsView>> {
    let topic = path_topic(path)?;
    let mut f = Fields::new(
        input::object(&body?, false)?,
        "",
        &["paused", "rate_per_s", "burst", "max_in_flight"],
    )?;
    if f.is_null("paused") {
        return Err(ApiError::field("paused", "must be true or false, got null"));
    }
    let paused = f.bool("paused")?;
    // `null` removes a limit; `take` reads it as absent, so it is seen first.
    let nulls = ["rate_per_s", "burst", "max_in_flight"].map(|field| f.is_null(field));
    let nullable = |null: bool, v: Option<u64>| match v {
        Some(n) => Some(Some(n)),
        None if null => Some(None),
        None => None,
    };
    let rate = f
        .number("rate_per_s", MIN_RATE_PER_S, MAX_RATE_PER_S as f64)?
        .map(|r| ((r * RATE_UNIT as f64).round() as u64).max(1));
    let rate = nullable(nulls[0], rate);
    let burst = nullable(nulls[1], f.count("burst", MAX_FLOW_COUNT)?);
    let limit = nullable(nulls[2], f.count("max_in_flight", MAX_FLOW_COUNT)?);
    if let Some(Some(_)) = burst {
        let rated = match rate {
            Some(r) => r.is_some(),
            None => st.store.settings(&topic).await?.rate_micros.is_some(),
        };
        if !rated {
            return Err(ApiError::field(
                "burst",
                "needs a rate: give rate_per_s too, or set one first",
            ));
        }
    }
    let narrow = |v: Option<Option<u64>>| v.map(|o| o.map(|n| n as u32));
    let change = SettingsChange {
        paused,
        rate_micros: rate,
        burst: narrow(burst),
        max_in_flight: narrow(limit),
    };
    let now = st.clock.now();
    Ok(Json(
        st.store.set_settings(&topic, change, now).await?.into(),
    ))
}

/// The most jobs one page of `GET /v1/topics/{topic}/jobs` holds, and the default.
pub const MAX_PAGE: u64 = 1000;
pub const DEFAULT_PAGE: u64 = 50;
/// The most steps one schedule answers: a week by minute.
pub const MAX_SCHEDULE_STEPS: u64 = 10_080;

/// The topic of a path.
fn path_topic(path: IdPath) -> ApiResult<Topic> {
    let Path(raw) = path.map_err(|r| ApiError::path("topic", r))?;
    let topic = Topic::parse(raw).map_err(|e| ApiError::from_invalid("topic", e))?;
    tracing::Span::current().record("topic", topic.as_str());
    Ok(topic)
}

/// `GET /v1/topics/{topic}/jobs?state=&limit=&cursor=&callback=`: one page of the topic's pull
/// (or callback) jobs in one state.
#[tracing::instrument(skip_all, fields(topic = tracing::field::Empty))]
async fn list_jobs(
    State(st): State<AppState>,
    path: IdPath,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<JobsPage>> {
    let topic = path_topic(path)?;
    let mut q = Query::new(q.as_deref(), &["state", "limit", "cursor", "callback"])?;
    let state = match q.string("state").as_deref() {
        None => return Err(ApiError::field("state", "is required")),
        Some("delayed") => JobState::Delayed,
        Some("ready") => JobState::Ready,
        Some("reserved") => JobState::Reserved,
        Some("dead") => JobState::Dead,
        Some(other) => {
            return Err(ApiError::field(
                "state",
                format!(
                    "must be one of delayed, ready, reserved, dead, got {:?}",
                    input::shorten(other)
                ),
            ));
        }
    };
    let limit = q.u64("limit")?.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::field(
            "limit",
            format!("must be between 1 and {MAX_PAGE}, got {limit}"),
        ));
    }
    let after = q.string("cursor").map(|c| decode_cursor(&c)).transpose()?;
    let queue = match q.bool("callback")? {
        Some(true) => topic.callback_queue(),
        _ => topic,
    };
    let page = st
        .store
        .list(&queue, state, after.as_ref(), limit as usize)
        .await?;
    Ok(Json(JobsPage {
        jobs: page.jobs.into_iter().map(JobView::from).collect(),
        next_cursor: page.next.as_ref().map(encode_cursor),
    }))
}

/// `from`, `to` and `step` of a schedule, checked.
fn schedule_range(q: Option<&str>) -> ApiResult<(UnixMillis, UnixMillis, u64)> {
    let mut q = Query::new(q, &["from", "to", "step"])?;
    let from = q
        .u64("from")?
        .ok_or_else(|| ApiError::field("from", "is required"))?;
    let to = q
        .u64("to")?
        .ok_or_else(|| ApiError::field("to", "is required"))?;
    let step = q
        .u64("step")?
        .ok_or_else(|| ApiError::field("step", "is required"))?;
    for (name, t) in [("from", from), ("to", to)] {
        if t > job::MAX_RUN_AT {
            return Err(ApiError::field(
                name,
                format!("must be at most {}, got {t}", job::MAX_RUN_AT),
            ));
        }
    }
    if to <= from {
        return Err(ApiError::field(
            "to",
            format!("must be after from ({from}), got {to}"),
        ));
    }
    if step == 0 {
        return Err(ApiError::field("step", "must be at least 1"));
    }
    let steps = schedule_steps(from, to, step);
    if steps > MAX_SCHEDULE_STEPS {
        return Err(ApiError::field(
            "step",
            format!("makes {steps} steps from from to to, at most {MAX_SCHEDULE_STEPS} allowed"),
        ));
    }
    Ok((from, to, step))
}

/// `GET /v1/topics/{topic}/schedule?from=&to=&step=`: the topic's delayed jobs (pull and
/// callback) falling due in each step, and the coming ticks of the recurring schedules whose
/// jobs go to the topic.
#[tracing::instrument(skip_all, fields(topic = tracing::field::Empty))]
async fn topic_schedule(
    State(st): State<AppState>,
    path: IdPath,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<ScheduleView>> {
    let topic = path_topic(path)?;
    let (from, to, step) = schedule_range(q.as_deref())?;
    let counts = st.store.schedule(Some(&topic), from, to, step).await?;
    let (ticks, ticks_partial) = schedules::coming_ticks(&st, Some(&topic), from, to, step).await?;
    Ok(Json(ScheduleView {
        from,
        to,
        step,
        counts,
        ticks,
        ticks_partial,
    }))
}

/// `GET /v1/schedule?from=&to=&step=`: the same over every topic.
#[tracing::instrument(skip_all)]
async fn schedule(
    State(st): State<AppState>,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<ScheduleView>> {
    let (from, to, step) = schedule_range(q.as_deref())?;
    let counts = st.store.schedule(None, from, to, step).await?;
    let (ticks, ticks_partial) = schedules::coming_ticks(&st, None, from, to, step).await?;
    Ok(Json(ScheduleView {
        from,
        to,
        step,
        counts,
        ticks,
        ticks_partial,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_paths_percent_encode_everything_but_unreserved_characters() {
        let id = JobId::parse("a b/c%d.é").unwrap();
        assert_eq!(job_path(&id), "/v1/jobs/a%20b%2Fc%25d.%C3%A9");
    }
}
