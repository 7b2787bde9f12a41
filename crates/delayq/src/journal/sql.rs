//! What both dialects share, written once: the shape of a batch (what a run of ops leaves of
//! each job, [`last_of`]; the event row of each op; the runs between kicks of a topic), and
//! [`statements!`], the statements whose SQL is the same on PostgreSQL and MySQL (migrating,
//! reading rows and a job's history, pruning, kicking a topic's dead jobs), which
//! `postgres.rs` and `mysql.rs` instantiate with their own sqlx database type. How a batch is
//! written differs and is in each dialect's module.

use super::JournalError;
use super::row::{Fired, JobRow, Moved, Op, RowState};
use crate::job::{JobId, Topic, UnixMillis};
use crate::schedule::{Schedule, ScheduleId};
use crate::store::embedded::record::{decode_schedule, encode_schedule};
use crate::store::{Cause, TopicSettings};
use std::borrow::Cow;
use std::collections::HashMap;

/// Most rows per multi-row statement (both servers allow 65,535 placeholders; a job row has
/// 17).
pub const ROWS_PER_STATEMENT: usize = 1_000;

/// Most events a job's history answers (the latest ones).
pub const HISTORY_LIMIT: usize = 1_000;

/// A state change of a job, as `delayq_job_events` holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `None` for a new job (or one the journal did not know).
    pub from: Option<RowState>,
    pub to: RowState,
    pub at: UnixMillis,
    /// The delayq that made the change (`host:pid`).
    pub instance: String,
}

/// A failed statement as the journal reports it: what was being done, and the database's
/// error, kept typed.
pub fn db_err(what: &str, e: sqlx::Error) -> JournalError {
    JournalError::Database(Cause::with_source(what, e))
}

/// A row that does not decode: the database's error, kept typed.
pub fn corrupt(e: sqlx::Error) -> JournalError {
    JournalError::Corrupt(Cause::with_message(e.to_string(), e))
}

/// A time or duration as the BIGINT columns hold it (every value delayq accepts fits).
pub fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A state change: job, from (none for a new job), to, when.
pub type EventRow<'a> = (&'a JobId, Option<RowState>, RowState, UnixMillis);

/// The event row of an op: job id, from, to, time.
pub fn event_of(op: &Op) -> Option<EventRow<'_>> {
    match op {
        Op::Put { row, from } => Some((
            &row.spec.id,
            from.map(RowState::Live),
            row.state,
            row.changed_at,
        )),
        Op::Move { moved, from } => Some((
            &moved.id,
            from.map(RowState::Live),
            RowState::Live(moved.state),
            moved.at,
        )),
        Op::End { id, from, to, at } => Some((id, from.map(RowState::Live), *to, *at)),
        Op::KickTopic { .. }
        | Op::PutSchedule { .. }
        | Op::FireSchedule { .. }
        | Op::DeleteSchedule { .. }
        | Op::Settings { .. } => None,
    }
}

/// A kick of a topic's dead jobs: the queue, how many, when.
pub type Kick<'a> = (&'a Topic, u64, UnixMillis);

/// `ops` as runs without kicks of a topic, each followed by the kick that ended it (if one
/// did): each kick is written as its own statements after the ops before it.
pub fn runs(ops: &[Op]) -> impl Iterator<Item = (&[Op], Option<Kick<'_>>)> {
    ops.split_inclusive(|op| matches!(op, Op::KickTopic { .. }))
        .map(|run| match run.split_last() {
            Some((Op::KickTopic { queue, n, at }, rest)) => (rest, Some((queue, *n, *at))),
            _ => (run, None),
        })
}

/// Whether `ops` hold a kick of a topic.
pub fn has_kick(ops: &[Op]) -> bool {
    ops.iter().any(|op| matches!(op, Op::KickTopic { .. }))
}

/// The ends of a run: job, the state it ended in, when.
pub type Ends<'a> = [(&'a JobId, RowState, UnixMillis)];

/// What a run of ops (no kick of a topic among them) leaves of each job, each job in one of
/// the three: its whole row (a put, with the moves after it in the run applied), its changed
/// columns (moves only), or its end.
#[derive(Default)]
pub struct Last<'a> {
    pub puts: Vec<Cow<'a, JobRow>>,
    pub moves: Vec<&'a Moved>,
    pub ends: Vec<(&'a JobId, RowState, UnixMillis)>,
}

pub fn last_of(ops: &[Op]) -> Last<'_> {
    enum Left<'a> {
        Put(Cow<'a, JobRow>),
        Move(&'a Moved),
        End(RowState, UnixMillis),
    }
    // Jobs in the order first seen, so the statements' rows follow the ops.
    let mut order: Vec<&JobId> = Vec::new();
    let mut left: HashMap<&JobId, Left<'_>> = HashMap::new();
    for op in ops {
        let Some(id) = op.id() else { continue };
        let next = match op {
            Op::Put { row, .. } => Left::Put(Cow::Borrowed(row)),
            Op::Move { moved, .. } => match left.get_mut(id) {
                Some(Left::Put(row)) => {
                    moved.apply(row.to_mut());
                    continue;
                }
                _ => Left::Move(moved),
            },
            Op::End { to, at, .. } => Left::End(*to, *at),
            _ => continue,
        };
        if left.insert(id, next).is_none() {
            order.push(id);
        }
    }
    let mut last = Last::default();
    for id in order {
        match left.remove(id) {
            Some(Left::Put(row)) => last.puts.push(row),
            Some(Left::Move(m)) => last.moves.push(m),
            Some(Left::End(to, at)) => last.ends.push((id, to, at)),
            None => {}
        }
    }
    last
}

/// The `version` of a deleted schedule's row (a tombstone): above every version a store
/// gives, so a fire or change of the schedule written after its delete (from an instance whose
/// journal write lagged) changes nothing. Only a new schedule of that id (version 1) replaces
/// it.
pub const DELETED_VERSION: i64 = i64::MAX;

/// What a batch's schedule and settings ops leave of each schedule and topic: the last of a
/// schedule's puts, fires and deletes (a fire after a put in the batch folded into the put),
/// and the last settings of each topic. A schedule row is written only by a change of a higher
/// version than it holds (or a new schedule, version 1), so rows written out of order by
/// several delayqs keep the latest.
#[derive(Default)]
pub struct Meta<'a> {
    pub puts: Vec<(Cow<'a, Schedule>, UnixMillis)>,
    pub fires: Vec<(&'a Fired, UnixMillis)>,
    pub deletes: Vec<(&'a ScheduleId, UnixMillis)>,
    pub settings: Vec<(&'a Topic, TopicSettings, UnixMillis)>,
}

impl Meta<'_> {
    pub fn is_empty(&self) -> bool {
        self.puts.is_empty()
            && self.fires.is_empty()
            && self.deletes.is_empty()
            && self.settings.is_empty()
    }
}

pub fn meta_of(ops: &[Op]) -> Meta<'_> {
    enum Left<'a> {
        Put(Box<Cow<'a, Schedule>>, UnixMillis),
        Fire(&'a Fired, UnixMillis),
        Delete(UnixMillis),
    }
    let mut order: Vec<&ScheduleId> = Vec::new();
    let mut left: HashMap<&ScheduleId, Left<'_>> = HashMap::new();
    let mut topics: Vec<&Topic> = Vec::new();
    let mut settings: HashMap<&Topic, (TopicSettings, UnixMillis)> = HashMap::new();
    for op in ops {
        let (id, next) = match op {
            Op::PutSchedule { schedule, at } => (
                &schedule.spec.id,
                Left::Put(Box::new(Cow::Borrowed(schedule)), *at),
            ),
            Op::FireSchedule { fired, at } => match left.get_mut(&fired.id) {
                Some(Left::Put(sc, when)) => {
                    if fired.version > sc.version {
                        let sc = sc.to_mut();
                        sc.version = fired.version;
                        sc.next_tick = fired.next_tick;
                        sc.last_tick = fired.last_tick;
                        *when = *at;
                    }
                    continue;
                }
                Some(Left::Fire(f, when)) => {
                    if fired.version > f.version {
                        (*f, *when) = (fired, *at);
                    }
                    continue;
                }
                Some(Left::Delete(_)) => continue,
                None => (&fired.id, Left::Fire(fired, *at)),
            },
            Op::DeleteSchedule { id, at } => (id, Left::Delete(*at)),
            Op::Settings {
                topic,
                settings: s,
                at,
            } => {
                if settings.insert(topic, (*s, *at)).is_none() {
                    topics.push(topic);
                }
                continue;
            }
            _ => continue,
        };
        if left.insert(id, next).is_none() {
            order.push(id);
        }
    }
    let mut meta = Meta::default();
    for id in order {
        match left.remove(id) {
            Some(Left::Put(sc, at)) => meta.puts.push((*sc, at)),
            Some(Left::Fire(f, at)) => meta.fires.push((f, at)),
            Some(Left::Delete(at)) => meta.deletes.push((id, at)),
            None => {}
        }
    }
    for topic in topics {
        if let Some((s, at)) = settings.remove(topic) {
            meta.settings.push((topic, s, at));
        }
    }
    meta
}

/// A schedule's record as the `spec` column holds it: the store's (embedded/record.rs).
pub fn spec_bytes(sc: &Schedule) -> Vec<u8> {
    encode_schedule(sc)
}

/// A schedule from its row's columns: the record, with the place the columns hold.
pub fn schedule_of(
    id: &str,
    spec: &[u8],
    version: i64,
    next_tick: Option<i64>,
    last_tick: Option<i64>,
) -> Result<Schedule, JournalError> {
    let corrupt = |e: String| JournalError::Corrupt(format!("schedule {id}: {e}").into());
    let mut sc = decode_schedule(id, spec).map_err(corrupt)?;
    let u = |v: i64, column: &str| {
        u64::try_from(v).map_err(|_| corrupt(format!("column {column} does not parse")))
    };
    sc.version = u(version, "version")?;
    sc.next_tick = next_tick.map(|t| u(t, "next_tick")).transpose()?;
    sc.last_tick = last_tick.map(|t| u(t, "last_tick")).transpose()?;
    Ok(sc)
}

/// A topic's settings from its row's columns.
pub fn settings_of(
    topic: String,
    paused: bool,
    rate_micros: Option<i64>,
    burst: Option<i64>,
    max_in_flight: Option<i64>,
) -> Result<(Topic, TopicSettings), JournalError> {
    let corrupt = |c: &str| JournalError::Corrupt(format!("settings of {topic}: {c}").into());
    let t = Topic::parse(topic.clone()).map_err(|_| corrupt("topic"))?;
    let settings = TopicSettings {
        paused,
        rate_micros: rate_micros
            .map(|v| u64::try_from(v).map_err(|_| corrupt("rate_micros")))
            .transpose()?,
        burst: burst
            .map(|v| u32::try_from(v).map_err(|_| corrupt("burst")))
            .transpose()?,
        max_in_flight: max_in_flight
            .map(|v| u32::try_from(v).map_err(|_| corrupt("max_in_flight")))
            .transpose()?,
    };
    Ok((t, settings))
}

/// The statements whose SQL both dialects share, as functions of the calling module over
/// `$db` (`sqlx::Postgres` or `sqlx::MySql`): `migrate` (with `$migrations`, the dialect's
/// list in schema.rs), `rows`, `history`, `prune` (which finds ended jobs with `$prune_jobs`,
/// the dialect's join-delete, followed by the time bound) and `kick_topic`.
macro_rules! statements {
    ($db:ty, $migrations:expr, $prune_jobs:expr) => {
        use sqlx::Row as _;
        use $crate::job::UnixMillis;
        use $crate::journal::JournalError;
        use $crate::journal::row::{JobRow, RowState};
        use $crate::journal::schema;
        use $crate::journal::sql::{Event, HISTORY_LIMIT, ROWS_PER_STATEMENT, corrupt, db_err, i};

        type Q<'a> = sqlx::QueryBuilder<'a, $db>;

        /// Creates the tables or brings them to [`schema::LATEST`]; refuses a newer schema.
        pub async fn migrate(pool: &sqlx::Pool<$db>) -> Result<(), JournalError> {
            let create = format!(
                "CREATE TABLE IF NOT EXISTS {} (version BIGINT NOT NULL)",
                schema::VERSION_TABLE
            );
            sqlx::query(&create)
                .execute(pool)
                .await
                .map_err(|e| db_err("cannot create the schema table", e))?;
            let read = format!("SELECT MAX(version) AS v FROM {}", schema::VERSION_TABLE);
            let row = sqlx::query(&read)
                .fetch_one(pool)
                .await
                .map_err(|e| db_err("cannot read the schema version", e))?;
            let version: Option<i64> = row
                .try_get("v")
                .map_err(|e| db_err("cannot read the schema version", e))?;
            let version = version.unwrap_or(0);
            if version > schema::LATEST {
                return Err(JournalError::NewerSchema {
                    found: version,
                    supported: schema::LATEST,
                });
            }
            let migrations: &[&[&str]] = $migrations;
            for (n, statements) in migrations.iter().enumerate() {
                let target = n as i64 + 1;
                if target <= version {
                    continue;
                }
                for sql in *statements {
                    sqlx::query(sql).execute(pool).await.map_err(|e| {
                        db_err(&format!("migration to schema version {target} failed"), e)
                    })?;
                }
                let set = format!(
                    "INSERT INTO {} (version) VALUES ({target})",
                    schema::VERSION_TABLE
                );
                sqlx::query(&set)
                    .execute(pool)
                    .await
                    .map_err(|e| db_err("cannot record the schema version", e))?;
                tracing::info!(version = target, "journal schema migrated");
            }
            Ok(())
        }

        /// Kicks the `n` oldest dead rows of `queue`, by burial time and then the store's
        /// burial stamp (the store kicks its oldest burials).
        async fn kick_topic(
            tx: &mut sqlx::Transaction<'_, $db>,
            queue: &str,
            n: u64,
            at: UnixMillis,
            instance: &str,
        ) -> Result<(), sqlx::Error> {
            let mut q = Q::new("SELECT id FROM delayq_jobs WHERE queue = ");
            q.push_bind(queue.to_string())
                .push(" AND state = 'dead' ORDER BY changed_at, seq, id LIMIT ")
                .push_bind(i(n));
            let ids: Vec<String> = q
                .build()
                .fetch_all(&mut **tx)
                .await?
                .iter()
                .map(|r| text(r, "id"))
                .collect::<Result<_, _>>()?;
            for chunk in ids.chunks(ROWS_PER_STATEMENT) {
                let mut q =
                    Q::new("UPDATE delayq_jobs SET state = 'ready', attempts = 0, changed_at = ");
                q.push_bind(i(at)).push(", run_at = ").push_bind(i(at));
                q.push(" WHERE id IN (");
                let mut sep = q.separated(", ");
                for id in chunk {
                    sep.push_bind(id.clone());
                }
                q.push(")");
                q.build().execute(&mut **tx).await?;
                let mut q = Q::new(
                    "INSERT INTO delayq_job_events (job_id, from_state, to_state, at, instance) ",
                );
                q.push_values(chunk, |mut b, id| {
                    b.push_bind(id.clone())
                        .push_bind("dead")
                        .push_bind("ready")
                        .push_bind(i(at))
                        .push_bind(instance.to_string());
                });
                q.build().execute(&mut **tx).await?;
            }
            Ok(())
        }

        const COLUMNS: &str = "id, topic, body, run_at, ttr_ms, priority, attempts, \
            max_attempts, backoff_ms, callback_url, callback_timeout_ms, state, \
            reserved_until, changed_at, publish";

        /// A text column: MySQL reports a binary-collated one as VARBINARY.
        fn text(r: &<$db as sqlx::Database>::Row, col: &str) -> Result<String, sqlx::Error> {
            r.try_get::<String, _>(col).or_else(|_| {
                let bytes: Vec<u8> = r.try_get(col)?;
                String::from_utf8(bytes).map_err(|e| sqlx::Error::Decode(Box::new(e)))
            })
        }

        fn opt_text(
            r: &<$db as sqlx::Database>::Row,
            col: &str,
        ) -> Result<Option<String>, sqlx::Error> {
            r.try_get::<Option<String>, _>(col).or_else(|_| {
                let bytes: Option<Vec<u8>> = r.try_get(col)?;
                bytes
                    .map(String::from_utf8)
                    .transpose()
                    .map_err(|e| sqlx::Error::Decode(Box::new(e)))
            })
        }

        fn decode(r: &<$db as sqlx::Database>::Row) -> Result<JobRow, JournalError> {
            JobRow::from_columns(
                text(r, "id").map_err(corrupt)?,
                text(r, "topic").map_err(corrupt)?,
                r.try_get("body").map_err(corrupt)?,
                r.try_get("run_at").map_err(corrupt)?,
                r.try_get("ttr_ms").map_err(corrupt)?,
                r.try_get("priority").map_err(corrupt)?,
                r.try_get("attempts").map_err(corrupt)?,
                r.try_get("max_attempts").map_err(corrupt)?,
                text(r, "backoff_ms").map_err(corrupt)?,
                opt_text(r, "callback_url").map_err(corrupt)?,
                r.try_get("callback_timeout_ms").map_err(corrupt)?,
                text(r, "state").map_err(corrupt)?,
                r.try_get("reserved_until").map_err(corrupt)?,
                r.try_get("changed_at").map_err(corrupt)?,
                opt_text(r, "publish").map_err(corrupt)?,
            )
            .map_err(|e| JournalError::Corrupt(e.into()))
        }

        /// Up to `limit` rows with ids after `after`, in id order; or the row of `only`.
        pub async fn rows(
            pool: &sqlx::Pool<$db>,
            after: Option<&str>,
            only: Option<&str>,
            limit: usize,
        ) -> Result<Vec<JobRow>, JournalError> {
            let mut q = Q::new(format!("SELECT {COLUMNS} FROM delayq_jobs WHERE 1 = 1"));
            if let Some(after) = after {
                q.push(" AND id > ").push_bind(after.to_string());
            }
            if let Some(only) = only {
                q.push(" AND id = ").push_bind(only.to_string());
            }
            q.push(" ORDER BY id LIMIT ").push_bind(limit as i64);
            let rows = q
                .build()
                .fetch_all(pool)
                .await
                .map_err(|e| db_err("cannot read the journal", e))?;
            rows.iter().map(decode).collect()
        }

        /// Up to `limit` live schedules with ids after `after`, in id order.
        pub async fn schedules(
            pool: &sqlx::Pool<$db>,
            after: Option<&str>,
            limit: usize,
        ) -> Result<Vec<$crate::schedule::Schedule>, JournalError> {
            let mut q = Q::new(
                "SELECT id, spec, version, next_tick, last_tick FROM delayq_schedules \
                 WHERE state = 'live'",
            );
            if let Some(after) = after {
                q.push(" AND id > ").push_bind(after.to_string());
            }
            q.push(" ORDER BY id LIMIT ").push_bind(limit as i64);
            let rows = q
                .build()
                .fetch_all(pool)
                .await
                .map_err(|e| db_err("cannot read the journal's schedules", e))?;
            rows.iter()
                .map(|r| {
                    $crate::journal::sql::schedule_of(
                        &text(r, "id").map_err(corrupt)?,
                        &r.try_get::<Vec<u8>, _>("spec").map_err(corrupt)?,
                        r.try_get("version").map_err(corrupt)?,
                        r.try_get("next_tick").map_err(corrupt)?,
                        r.try_get("last_tick").map_err(corrupt)?,
                    )
                })
                .collect()
        }

        /// Up to `limit` topics' settings with topics after `after`, in topic order.
        pub async fn topic_settings(
            pool: &sqlx::Pool<$db>,
            after: Option<&str>,
            limit: usize,
        ) -> Result<Vec<($crate::job::Topic, $crate::store::TopicSettings)>, JournalError> {
            let mut q = Q::new(
                "SELECT topic, paused, rate_micros, burst, max_in_flight \
                 FROM delayq_topic_settings WHERE 1 = 1",
            );
            if let Some(after) = after {
                q.push(" AND topic > ").push_bind(after.to_string());
            }
            q.push(" ORDER BY topic LIMIT ").push_bind(limit as i64);
            let rows = q
                .build()
                .fetch_all(pool)
                .await
                .map_err(|e| db_err("cannot read the journal's topic settings", e))?;
            rows.iter()
                .map(|r| {
                    $crate::journal::sql::settings_of(
                        text(r, "topic").map_err(corrupt)?,
                        r.try_get("paused").map_err(corrupt)?,
                        r.try_get("rate_micros").map_err(corrupt)?,
                        r.try_get("burst").map_err(corrupt)?,
                        r.try_get("max_in_flight").map_err(corrupt)?,
                    )
                })
                .collect()
        }

        /// The events of job `id`, oldest first (at most [`HISTORY_LIMIT`], the latest).
        pub async fn history(pool: &sqlx::Pool<$db>, id: &str) -> Result<Vec<Event>, JournalError> {
            let mut q = Q::new(
                "SELECT from_state, to_state, at, instance FROM delayq_job_events WHERE job_id = ",
            );
            q.push_bind(id.to_string())
                .push(" ORDER BY at DESC, seq DESC LIMIT ")
                .push_bind(HISTORY_LIMIT as i64);
            let rows = q
                .build()
                .fetch_all(pool)
                .await
                .map_err(|e| db_err("cannot read the journal", e))?;
            let state = |s: String| {
                RowState::parse(&s)
                    .ok_or_else(|| JournalError::Corrupt(format!("job {id}: state {s}").into()))
            };
            let mut events = rows
                .iter()
                .map(|r| {
                    Ok(Event {
                        from: opt_text(r, "from_state")
                            .map_err(corrupt)?
                            .map(state)
                            .transpose()?,
                        to: state(text(r, "to_state").map_err(corrupt)?)?,
                        at: u64::try_from(r.try_get::<i64, _>("at").map_err(corrupt)?).unwrap_or(0),
                        instance: text(r, "instance").map_err(corrupt)?,
                    })
                })
                .collect::<Result<Vec<_>, JournalError>>()?;
            events.reverse();
            Ok(events)
        }

        /// Deletes ended jobs and events older than `before`; returns the rows deleted.
        /// Ended jobs are found through their ending events, so the cost follows what is
        /// pruned, not the table's size; events go after the jobs they end, and an ending
        /// event whose job row is still there in that state stays: whatever commits between
        /// the two statements (a late write, another instance's prune), no ended row is left
        /// without the event that finds it.
        pub async fn prune(pool: &sqlx::Pool<$db>, before: UnixMillis) -> Result<u64, sqlx::Error> {
            let ended = |q: &mut Q| {
                let mut sep = q.separated(", ");
                for s in RowState::ENDED {
                    sep.push_bind(s);
                }
            };
            let mut q = Q::new($prune_jobs);
            q.push_bind(i(before)).push(" AND e.to_state IN (");
            ended(&mut q);
            q.push(") AND j.state = e.to_state AND j.changed_at < ")
                .push_bind(i(before));
            let jobs = q.build().execute(pool).await?.rows_affected();
            let mut q = Q::new("DELETE FROM delayq_job_events WHERE at < ");
            q.push_bind(i(before))
                .push(" AND NOT (to_state IN (");
            ended(&mut q);
            q.push(
                ") AND EXISTS (SELECT 1 FROM delayq_jobs AS j \
                 WHERE j.id = delayq_job_events.job_id AND j.state = delayq_job_events.to_state))",
            );
            let events = q.build().execute(pool).await?.rows_affected();
            let mut q =
                Q::new("DELETE FROM delayq_schedules WHERE state = 'deleted' AND changed_at < ");
            q.push_bind(i(before));
            let tombstones = q.build().execute(pool).await?.rows_affected();
            Ok(jobs + events + tombstones)
        }
    };
}
pub(super) use statements;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobSpec, JobState, Topic};

    fn pushed(id: &str) -> Op {
        let spec = JobSpec::new(
            Topic::parse("t").unwrap(),
            JobId::parse(id).unwrap(),
            "b",
            10,
        );
        Op::Put {
            row: JobRow::of_push(&spec, 5),
            from: None,
        }
    }

    fn reserved(id: &str, at: UnixMillis) -> Op {
        Op::Move {
            moved: Moved {
                id: JobId::parse(id).unwrap(),
                state: JobState::Reserved,
                run_at: 10,
                attempts: 1,
                reserved_until: Some(at + 1_000),
                seq: 7,
                at,
            },
            from: Some(JobState::Ready),
        }
    }

    fn schedule(id: &str, version: u64) -> crate::schedule::Schedule {
        use crate::schedule::{CatchUp, Overlap, Rule, Schedule, ScheduleSpec};
        let rule = Rule::Every {
            every_ms: 1_000,
            anchor: 0,
        };
        let spec = ScheduleSpec {
            id: ScheduleId::parse(id).unwrap(),
            rule: rule.clone(),
            job: JobSpec::new(
                Topic::parse("t").unwrap(),
                JobId::parse("x").unwrap(),
                "",
                0,
            ),
            start_at: None,
            end_at: None,
            catch_up: CatchUp::Latest,
            overlap: Overlap::Allow,
            paused: false,
        };
        let mut sc = Schedule::new(spec, &rule.recurrence().unwrap(), 0);
        sc.version = version;
        sc
    }

    fn fired(id: &str, version: u64, tick: u64) -> Op {
        Op::FireSchedule {
            fired: Fired {
                id: ScheduleId::parse(id).unwrap(),
                version,
                next_tick: Some(tick + 1_000),
                last_tick: Some(tick),
            },
            at: tick,
        }
    }

    #[test]
    fn a_batch_leaves_the_latest_of_each_schedule_and_topic() {
        let put = |id: &str, v| Op::PutSchedule {
            schedule: schedule(id, v),
            at: 1,
        };
        let settings = |paused| Op::Settings {
            topic: Topic::parse("t").unwrap(),
            settings: TopicSettings {
                paused,
                ..TopicSettings::default()
            },
            at: 2,
        };
        let ops = vec![
            pushed("job"),
            put("a", 1),
            fired("a", 2, 5_000),
            fired("b", 7, 5_000),
            fired("b", 6, 4_000),
            settings(true),
            put("c", 3),
            Op::DeleteSchedule {
                id: ScheduleId::parse("c").unwrap(),
                at: 9,
            },
            fired("c", 4, 6_000),
            settings(false),
        ];
        let meta = meta_of(&ops);
        // a: the fire folded into its put.
        assert_eq!(meta.puts.len(), 1);
        let (a, at) = &meta.puts[0];
        assert_eq!(
            (a.version, a.next_tick, a.last_tick, *at),
            (2, Some(6_000), Some(5_000), 5_000)
        );
        // b: the higher version of its two fires, whatever their order.
        assert_eq!(meta.fires.len(), 1);
        assert_eq!(
            (meta.fires[0].0.version, meta.fires[0].0.last_tick),
            (7, Some(5_000))
        );
        // c: deleted; a fire queued after the delete does not bring it back.
        assert_eq!(meta.deletes.len(), 1);
        assert_eq!(meta.deletes[0].0.as_str(), "c");
        // The topic's last settings.
        assert_eq!(meta.settings.len(), 1);
        assert!(!meta.settings[0].1.paused);
        // None of it is a job's row or event.
        assert_eq!(last_of(&ops).puts.len(), 1);
        assert_eq!(ops.iter().filter_map(event_of).count(), 1);
    }

    #[test]
    fn each_job_leaves_one_row_change_and_a_move_after_a_put_is_folded_into_it() {
        let end = Op::End {
            id: JobId::parse("c").unwrap(),
            from: Some(JobState::Reserved),
            to: RowState::Finished,
            at: 30,
        };
        let ops = vec![
            pushed("a"),
            reserved("b", 11),
            reserved("a", 12),
            reserved("c", 13),
            end,
        ];
        let last = last_of(&ops);
        assert_eq!(last.puts.len(), 1);
        let a = &last.puts[0];
        assert_eq!(a.spec.id.as_str(), "a");
        assert_eq!(a.state, RowState::Live(JobState::Reserved));
        assert_eq!(
            (a.attempts, a.reserved_until, a.changed_at),
            (1, Some(1_012), 12)
        );
        assert_eq!(a.spec.body, "b", "the pushed row keeps its spec");
        let moved: Vec<&str> = last.moves.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(moved, ["b"]);
        assert_eq!(last.ends.len(), 1);
        assert_eq!(
            (last.ends[0].0.as_str(), last.ends[0].1),
            ("c", RowState::Finished)
        );
        // Every op is still an event.
        assert_eq!(ops.iter().filter_map(event_of).count(), 5);
    }
}
