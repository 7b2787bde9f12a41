//! Recurring schedules over /v1 (docs/schedules.md): `PUT /v1/schedules/{id}` (create or
//! replace), `GET /v1/schedules` (paged by id), `GET`/`DELETE /v1/schedules/{id}`, and
//! `POST /v1/schedules/{id}/pause` and `/resume`. The firing itself is `scheduler.rs`'s; a
//! change made here wakes it when it sleeps past the schedule's next tick.
//!
//! A change is read, then written with the version read (`Store::put_schedule` with `expect`),
//! so a fire or another change that lands in between makes it start again instead of undoing
//! it. A `PUT` is first tried as a creation (expecting no schedule), so creating one is one
//! store call.

use super::input::{self, Fields, Query};
use super::model::{CallbackView, PublishView};
use super::new_job::{NEW_JOB_FIELDS, new_job};
use super::{ApiError, ApiResult, Body, DEFAULT_PAGE, IdPath, MAX_PAGE};
use crate::api::AppState;
use crate::job::{self, JobSpec, Topic, UnixMillis};
use crate::schedule::{
    CatchUp, NEXT_RUNS, Overlap, Recurrence, Rule, Schedule, ScheduleId, ScheduleSpec, parse_tz,
};
use crate::store::{SCHEDULE_BUCKET_MS, StoreError, schedule_step_of, schedule_steps};
use axum::Json;
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use std::sync::Arc;

/// The routes of this file.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/schedules", get(list))
        .route("/v1/schedules/{id}", get(get_one).put(put).delete(delete))
        .route("/v1/schedules/{id}/pause", post(pause))
        .route("/v1/schedules/{id}/resume", post(resume))
}

/// The fields of a schedule's body.
const SCHEDULE_FIELDS: &[&str] = &[
    "cron",
    "every_ms",
    "tz",
    "job",
    "start_at_ms",
    "end_at_ms",
    "catch_up",
    "overlap",
    "paused",
];

/// A `NewJob`'s fields a job template takes: all but its id and due time (`<schedule id>@<tick>`
/// and the tick) and `replace`.
fn template_fields() -> Vec<&'static str> {
    NEW_JOB_FIELDS
        .iter()
        .copied()
        .filter(|f| !matches!(*f, "id" | "delay_ms" | "run_at_ms" | "replace"))
        .collect()
}

/// The most schedules whose ticks "what fires next" counts (`GET /v1/schedule`), read in id
/// order, and the most ticks it computes: past either, the answer says `ticks_partial`. They
/// bound the work of a dashboard that asks every few seconds.
pub const MAX_SCHEDULES_COUNTED: usize = 10_000;
pub const MAX_TICKS_COUNTED: usize = 50_000;

/// The coming ticks of the recurring schedules (those whose jobs go to `topic`, or all) in
/// each step of `step` from `from` to `to`, bucketed as [`Store::schedule`] buckets jobs (the
/// step its minute starts in), and whether the count is partial. A coming tick is one after
/// now, at or after the schedule's next tick (an earlier one has fired: its job is a job);
/// paused schedules have none. Each schedule's ticks come from schedule.rs's rules
/// (`ScheduleSpec::next_after`: its rule, zone, start and end).
///
/// [`Store::schedule`]: crate::store::Store::schedule
pub(super) async fn coming_ticks(
    st: &AppState,
    topic: Option<&Topic>,
    from: UnixMillis,
    to: UnixMillis,
    step: u64,
) -> ApiResult<(Vec<u64>, bool)> {
    let steps = usize::try_from(schedule_steps(from, to, step)).unwrap_or(0);
    let mut ticks = vec![0; steps];
    let now = st.clock.now();
    let (mut read, mut computed) = (0, 0);
    let mut after: Option<ScheduleId> = None;
    loop {
        let page = st
            .store
            .list_schedules(after.as_ref(), MAX_PAGE as usize)
            .await?;
        let full = page.len() >= MAX_PAGE as usize;
        after = page.last().map(|sc| sc.spec.id.clone());
        for sc in page {
            if read == MAX_SCHEDULES_COUNTED {
                return Ok((ticks, true));
            }
            read += 1;
            if sc.spec.paused || topic.is_some_and(|t| *t != sc.spec.job.topic) {
                continue;
            }
            let (Some(next), Some(rule)) = (sc.next_tick, st.scheduler.recurrence(&sc.spec.rule))
            else {
                continue;
            };
            let mut at = from.saturating_sub(1).max(now).max(next.saturating_sub(1));
            while let Some(t) = sc.spec.next_after(&rule, at) {
                let minute = t - t % SCHEDULE_BUCKET_MS;
                if minute >= to {
                    break;
                }
                if computed == MAX_TICKS_COUNTED {
                    return Ok((ticks, true));
                }
                computed += 1;
                if let Some(c) =
                    schedule_step_of(minute, from, to, step).and_then(|i| ticks.get_mut(i))
                {
                    *c += 1;
                }
                at = t;
            }
        }
        if !full {
            return Ok((ticks, false));
        }
    }
}

/// How many times a change is tried again when the schedule moved on under it (a fire).
const CHANGE_TRIES: usize = 5;

/// The schedule object of docs/api.md.
#[derive(Debug, Serialize)]
struct ScheduleView {
    id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    every_ms: Option<u64>,
    tz: String,
    job: TemplateView,
    start_at_ms: Option<UnixMillis>,
    end_at_ms: Option<UnixMillis>,
    catch_up: &'static str,
    overlap: &'static str,
    paused: bool,
    /// The next fire times (none while paused).
    next_runs_ms: Vec<UnixMillis>,
    /// The last tick that pushed a job.
    last_tick_ms: Option<UnixMillis>,
}

/// A schedule's job template: a job's fields but its id and due time.
#[derive(Debug, Serialize)]
struct TemplateView {
    topic: String,
    body: String,
    ttr_ms: u64,
    priority: u32,
    max_attempts: u32,
    backoff_ms: Vec<u64>,
    callback: Option<CallbackView>,
    publish: Option<PublishView>,
}

#[derive(Debug, Serialize)]
struct SchedulesPage {
    schedules: Vec<ScheduleView>,
    next_cursor: Option<String>,
}

fn view(sc: Schedule, now: UnixMillis, st: &AppState) -> ScheduleView {
    let rule = st.scheduler.recurrence(&sc.spec.rule);
    view_with(sc, now, rule.as_deref())
}

/// [`view`] with the schedule's rule parsed (`None`: it does not parse).
fn view_with(sc: Schedule, now: UnixMillis, rule: Option<&Recurrence>) -> ScheduleView {
    let next_runs_ms = match (sc.spec.paused, rule) {
        (false, Some(r)) => {
            // The runs from the next tick still to handle on (one just due included).
            let from = sc.next_tick.map_or(now, |t| t.saturating_sub(1).min(now));
            sc.spec.next_runs(r, from, NEXT_RUNS)
        }
        _ => Vec::new(),
    };
    let (cron, every_ms, tz) = match sc.spec.rule {
        Rule::Cron { expr, tz } => (Some(expr), None, tz),
        Rule::Every { every_ms, .. } => (None, Some(every_ms), "UTC".to_string()),
    };
    let job = super::model::JobView::from(job::Job::new(sc.spec.job, 0, 0));
    ScheduleView {
        id: sc.spec.id.to_string(),
        cron,
        every_ms,
        tz,
        job: TemplateView {
            topic: job.topic,
            body: job.body,
            ttr_ms: job.ttr_ms,
            priority: job.priority,
            max_attempts: job.max_attempts,
            backoff_ms: job.backoff_ms,
            callback: job.callback,
            publish: job.publish,
        },
        start_at_ms: sc.spec.start_at,
        end_at_ms: sc.spec.end_at,
        catch_up: sc.spec.catch_up.as_str(),
        overlap: sc.spec.overlap.as_str(),
        paused: sc.spec.paused,
        next_runs_ms,
        last_tick_ms: sc.last_tick,
    }
}

/// The schedule id of a path.
fn path_id(path: IdPath) -> ApiResult<ScheduleId> {
    let Path(raw) = path.map_err(|r| ApiError::path("id", r))?;
    ScheduleId::parse(raw).map_err(|e| ApiError::from_invalid("id", e))
}

fn not_found(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound => ApiError::ScheduleNotFound,
        e => e.into(),
    }
}

/// A time field: at most job.rs's `MAX_RUN_AT`.
fn time_field(f: &mut Fields, name: &str) -> ApiResult<Option<UnixMillis>> {
    let t = f.u64(name)?;
    if let Some(t) = t
        && t > job::MAX_RUN_AT
    {
        return Err(ApiError::field(
            f.name(name),
            format!("must be at most {}, got {t}", job::MAX_RUN_AT),
        ));
    }
    Ok(t)
}

/// A schedule's body, checked completely: the spec and its rule parsed (the rule's zone for an
/// interval is only checked). `anchor` is where an interval counts from when `start_at_ms` is
/// not given.
fn read_spec(
    id: ScheduleId,
    body: &[u8],
    st: &AppState,
    anchor: UnixMillis,
) -> ApiResult<(ScheduleSpec, Arc<Recurrence>)> {
    let at = st.clock.read();
    let mut f = Fields::new(input::object(body, false)?, "", SCHEDULE_FIELDS)?;
    let cron = f.string("cron")?;
    let every_ms = f.u64("every_ms")?;
    let tz = f.string("tz")?.unwrap_or_else(|| "UTC".to_string());
    parse_tz(&tz).map_err(|e| ApiError::from_invalid("tz", e))?;
    let start_at = time_field(&mut f, "start_at_ms")?;
    let end_at = time_field(&mut f, "end_at_ms")?;
    if let (Some(s), Some(e)) = (start_at, end_at)
        && e < s
    {
        return Err(ApiError::field(
            "end_at_ms",
            format!("must not be before start_at_ms ({s}), got {e}"),
        ));
    }
    let rule = match (cron, every_ms) {
        (Some(_), Some(_)) => {
            return Err(ApiError::field(
                "every_ms",
                "a schedule has cron or every_ms, not both",
            ));
        }
        (None, None) => {
            return Err(ApiError::field(
                "cron",
                "one of cron or every_ms is required",
            ));
        }
        (Some(expr), None) => Rule::Cron { expr, tz },
        (None, Some(every_ms)) if every_ms > job::MAX_RUN_AT => {
            return Err(ApiError::field(
                "every_ms",
                format!("must be at most {}, got {every_ms}", job::MAX_RUN_AT),
            ));
        }
        (None, Some(every_ms)) => Rule::Every {
            every_ms,
            anchor: start_at.unwrap_or(anchor),
        },
    };
    // The cron expression and zone, parsed once per distinct rule (the scheduler's cache).
    let recurrence = st
        .scheduler
        .checked(&rule)
        .map_err(|e| ApiError::from_invalid(e.field, e))?;
    let catch_up = match f.string("catch_up")? {
        None => CatchUp::default(),
        Some(s) => CatchUp::parse(&s).ok_or_else(|| {
            ApiError::field(
                "catch_up",
                format!(
                    "must be one of latest, none, all, got {:?}",
                    input::shorten(&s)
                ),
            )
        })?,
    };
    let overlap = match f.string("overlap")? {
        None => Overlap::default(),
        Some(s) => Overlap::parse(&s).ok_or_else(|| {
            ApiError::field(
                "overlap",
                format!("must be one of allow, skip, got {:?}", input::shorten(&s)),
            )
        })?,
    };
    let paused = f.bool("paused")?.unwrap_or(false);
    let job_value = f
        .take("job")
        .ok_or_else(|| ApiError::field("job", "is required"))?;
    let jf = Fields::from_value(job_value, "job", &template_fields())?;
    let job: JobSpec = new_job(jf, at, st)?.spec;
    let spec = ScheduleSpec {
        id,
        rule,
        job,
        start_at,
        end_at,
        catch_up,
        overlap,
        paused,
    };
    Ok((spec, recurrence))
}

/// `PUT /v1/schedules/{id}`: 201 and the schedule when created, 200 when replaced. A
/// replaced schedule keeps its last tick (and an interval its cadence, unless `start_at_ms`
/// moves it); its next tick is the new rule's first after now.
#[tracing::instrument(skip_all, fields(schedule = tracing::field::Empty))]
async fn put(State(st): State<AppState>, path: IdPath, body: Body) -> ApiResult<Response> {
    let id = path_id(path)?;
    tracing::Span::current().record("schedule", id.as_str());
    let body = body?;
    // First as a creation (insert-if-absent: no read before it); a schedule that exists is
    // read, then replaced at the version read.
    let mut old: Option<Schedule> = None;
    for attempt in 0..=CHANGE_TRIES {
        let now = st.clock.now();
        if attempt > 0 {
            old = match st.store.get_schedule(&id).await {
                Ok(old) => Some(old),
                Err(StoreError::NotFound) => None,
                Err(e) => return Err(e.into()),
            };
        }
        // An interval keeps counting from where it did: re-putting the same schedule (a
        // deploy) does not shift its ticks. A new one counts from the next whole second.
        let anchor = match old.as_ref().map(|o| &o.spec.rule) {
            Some(Rule::Every { anchor, .. }) => *anchor,
            _ => now.div_ceil(1000) * 1000,
        };
        let (spec, rule) = match read_spec(id.clone(), &body, &st, anchor) {
            Ok(read) => read,
            // A store that cannot answer says so before the body is judged, as when the
            // schedule was read first.
            Err(e) if attempt == 0 => match st.store.get_schedule(&id).await {
                Ok(_) | Err(StoreError::NotFound) => return Err(e),
                Err(store) => return Err(store.into()),
            },
            Err(e) => return Err(e),
        };
        let mut sc = Schedule::new(spec, &rule, now);
        sc.last_tick = old.as_ref().and_then(|o| o.last_tick);
        if let Some(old) = &old {
            keep_ahead(old, &mut sc, &rule, now);
        }
        // Version 0: only if there is none.
        let expect = old.as_ref().map_or(0, |o| o.version);
        match st.store.put_schedule(&sc, Some(expect)).await {
            Ok(stored) => {
                st.scheduler
                    .changed(stored.next_tick.filter(|_| !stored.spec.paused));
                let status = if old.is_some() {
                    StatusCode::OK
                } else {
                    StatusCode::CREATED
                };
                return Ok((status, Json(view_with(stored, now, Some(&rule)))).into_response());
            }
            // Created, changed or deleted meanwhile: read it again.
            Err(StoreError::Exists | StoreError::NotFound) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::StoreUnavailable(
        "the schedule kept changing while it was being replaced".into(),
    ))
}

/// A replace of `old` by `sc` (its new state at `now`): a tick `old` fired ahead
/// (`Schedule::ahead_tick`) is kept when the new schedule would fire it ahead too, with the
/// same job (not paused, `overlap: allow`, the tick still one of its ticks, the same job
/// template): `sc` then moves past it. Else the store withdraws its job with the change
/// (`Schedule::withdraws`), and `sc` fires it again if it is still a tick; its last tick is
/// then unknown (none).
fn keep_ahead(old: &Schedule, sc: &mut Schedule, rule: &Recurrence, now: UnixMillis) {
    let Some(t) = old.ahead_tick(now) else {
        return;
    };
    let still = !sc.spec.paused
        && sc.fires_ahead()
        && sc.spec.job == old.spec.job
        && sc.spec.next_after(rule, t - 1) == Some(t);
    if still {
        sc.next_tick = sc.spec.next_after(rule, t);
        sc.last_tick = Some(t);
    } else {
        sc.last_tick = None;
    }
}

/// `GET /v1/schedules/{id}`.
#[tracing::instrument(skip_all)]
async fn get_one(State(st): State<AppState>, path: IdPath) -> ApiResult<Json<ScheduleView>> {
    let id = path_id(path)?;
    let sc = st.store.get_schedule(&id).await.map_err(not_found)?;
    Ok(Json(view(sc, st.clock.now(), &st)))
}

/// `GET /v1/schedules?limit=&cursor=`: one page of the schedules, by id.
#[tracing::instrument(skip_all)]
async fn list(State(st): State<AppState>, RawQuery(q): RawQuery) -> ApiResult<Json<SchedulesPage>> {
    let mut q = Query::new(q.as_deref(), &["limit", "cursor"])?;
    let limit = q.u64("limit")?.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::field(
            "limit",
            format!("must be between 1 and {MAX_PAGE}, got {limit}"),
        ));
    }
    let after = q
        .string("cursor")
        .map(|c| ScheduleId::parse(c).map_err(|e| ApiError::from_invalid("cursor", e)))
        .transpose()?;
    let page = st
        .store
        .list_schedules(after.as_ref(), limit as usize)
        .await?;
    let next_cursor = (page.len() as u64 >= limit)
        .then(|| page.last().map(|s| s.spec.id.to_string()))
        .flatten();
    let now = st.clock.now();
    Ok(Json(SchedulesPage {
        schedules: page.into_iter().map(|s| view(s, now, &st)).collect(),
        next_cursor,
    }))
}

/// `DELETE /v1/schedules/{id}`: 204; the jobs it pushed stay.
#[tracing::instrument(skip_all)]
async fn delete(State(st): State<AppState>, path: IdPath) -> ApiResult<StatusCode> {
    let id = path_id(path)?;
    st.store.delete_schedule(&id).await.map_err(not_found)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/schedules/{id}/pause`: no tick fires until it is resumed.
#[tracing::instrument(skip_all)]
async fn pause(st: State<AppState>, path: IdPath) -> ApiResult<Json<ScheduleView>> {
    set_paused(st, path, true).await
}

/// `POST /v1/schedules/{id}/resume`: ticks fire again from now on; those that fell while it was
/// paused are not missed ones (none fires).
#[tracing::instrument(skip_all)]
async fn resume(st: State<AppState>, path: IdPath) -> ApiResult<Json<ScheduleView>> {
    set_paused(st, path, false).await
}

async fn set_paused(
    State(st): State<AppState>,
    path: IdPath,
    paused: bool,
) -> ApiResult<Json<ScheduleView>> {
    let id = path_id(path)?;
    for _ in 0..CHANGE_TRIES {
        let now = st.clock.now();
        let mut sc = st.store.get_schedule(&id).await.map_err(not_found)?;
        if sc.spec.paused == paused {
            return Ok(Json(view(sc, now, &st)));
        }
        // A tick fired ahead is withdrawn with the pause (`Schedule::withdraws`): its last
        // tick is then unknown (none).
        if paused && sc.ahead_tick(now).is_some() {
            sc.last_tick = None;
        }
        sc.spec.paused = paused;
        if !paused {
            let rule =
                sc.spec.rule.recurrence().map_err(|e| {
                    ApiError::Internal(format!("a stored rule does not parse: {e}"))
                })?;
            sc.next_tick = sc.spec.next_after(&rule, now);
        }
        match st.store.put_schedule(&sc, Some(sc.version)).await {
            Ok(stored) => {
                st.scheduler
                    .changed(stored.next_tick.filter(|_| !stored.spec.paused));
                return Ok(Json(view(stored, now, &st)));
            }
            Err(StoreError::Exists) => continue,
            Err(e) => return Err(not_found(e)),
        }
    }
    Err(ApiError::StoreUnavailable(
        "the schedule kept changing while it was being paused or resumed".into(),
    ))
}
