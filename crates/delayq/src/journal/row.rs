//! What the journal writes: [`Op`], one per acknowledged transition, queued by the hook
//! (`hook.rs`) and written in order by the writer (`writer.rs`); and [`JobRow`], a job as
//! its row holds it, read back by the restore. Recurring schedules and topics' flow control
//! settings are rows of their own ([`Op::is_job`] says which ops are about jobs).

use crate::job::{Callback, Job, JobId, JobSpec, JobState, Publish, Topic, UnixMillis};
use crate::schedule::{Schedule, ScheduleId};
use crate::store::TopicSettings;

/// The `state` column: a job's [`JobState`], or why it no longer exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowState {
    Live(JobState),
    /// Finished by a consumer: never restored.
    Finished,
    /// Deleted: never restored.
    Deleted,
    /// Left out of a restore as overdue (`overdue: skip`): never restored.
    Skipped,
}

impl RowState {
    pub fn as_str(self) -> &'static str {
        match self {
            RowState::Live(s) => s.as_str(),
            RowState::Finished => "finished",
            RowState::Deleted => "deleted",
            RowState::Skipped => "skipped",
        }
    }

    pub fn parse(s: &str) -> Option<RowState> {
        Some(match s {
            "delayed" => RowState::Live(JobState::Delayed),
            "ready" => RowState::Live(JobState::Ready),
            "reserved" => RowState::Live(JobState::Reserved),
            "dead" => RowState::Live(JobState::Dead),
            "finished" => RowState::Finished,
            "deleted" => RowState::Deleted,
            "skipped" => RowState::Skipped,
            _ => return None,
        })
    }

    /// The states whose rows retention prunes.
    pub const ENDED: [&'static str; 3] = ["finished", "deleted", "skipped"];
}

/// A job as its row in `delayq_jobs` holds it: everything needed to rebuild it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    pub spec: JobSpec,
    pub state: RowState,
    pub attempts: u32,
    pub reserved_until: Option<UnixMillis>,
    /// The store's stamp of the job ([`Job::seq`]; 0 for a push, whose stamp the store keeps
    /// to itself): orders dead jobs by burial for a kick of their topic.
    pub seq: u64,
    /// When the row last changed (the transition's time).
    pub changed_at: UnixMillis,
}

impl JobRow {
    /// A job as it is after a transition at `at`.
    pub fn of_job(job: &Job, at: UnixMillis) -> JobRow {
        JobRow {
            spec: job.spec.clone(),
            state: RowState::Live(job.state),
            attempts: job.attempts,
            reserved_until: job.reserved_until,
            seq: job.seq,
            changed_at: at,
        }
    }

    /// A job just pushed at `now`.
    pub fn of_push(spec: &JobSpec, now: UnixMillis) -> JobRow {
        JobRow {
            state: RowState::Live(spec.initial_state(now)),
            spec: spec.clone(),
            attempts: 0,
            reserved_until: None,
            seq: 0,
            changed_at: now,
        }
    }

    /// The backoff schedule as the `backoff_ms` column holds it: steps joined by commas.
    pub fn backoff_text(&self) -> String {
        let steps: Vec<String> = self.spec.backoff_ms.iter().map(u64::to_string).collect();
        steps.join(",")
    }

    /// Rebuilds a row from its columns; `None` names the column that does not parse.
    #[allow(clippy::too_many_arguments)]
    pub fn from_columns(
        id: String,
        topic: String,
        body: Vec<u8>,
        run_at: i64,
        ttr_ms: i64,
        priority: i64,
        attempts: i64,
        max_attempts: i64,
        backoff_ms: String,
        callback_url: Option<String>,
        callback_timeout_ms: Option<i64>,
        state: String,
        reserved_until: Option<i64>,
        changed_at: i64,
        publish: Option<String>,
    ) -> Result<JobRow, String> {
        let id = JobId::parse(id).map_err(|e| format!("id: {e}"))?;
        let bad = |column: &str| format!("job {id}: column {column} does not parse");
        let topic = Topic::parse(topic).map_err(|_| bad("topic"))?;
        let body = String::from_utf8(body).map_err(|_| bad("body"))?;
        let u = |v: i64, column: &str| u64::try_from(v).map_err(|_| bad(column));
        let backoff_ms = if backoff_ms.is_empty() {
            Vec::new()
        } else {
            backoff_ms
                .split(',')
                .map(|s| s.parse::<u64>().map_err(|_| bad("backoff_ms")))
                .collect::<Result<Vec<u64>, String>>()?
        };
        let callback = match (callback_url, callback_timeout_ms) {
            (Some(url), Some(t)) => Some(Callback {
                url,
                timeout_ms: u(t, "callback_timeout_ms")?,
            }),
            _ => None,
        };
        let spec = JobSpec {
            topic,
            id: id.clone(),
            body,
            run_at: u(run_at, "run_at")?,
            ttr_ms: u(ttr_ms, "ttr_ms")?,
            priority: u32::try_from(priority).map_err(|_| bad("priority"))?,
            max_attempts: u32::try_from(max_attempts).map_err(|_| bad("max_attempts"))?,
            backoff_ms,
            callback,
            publish: publish
                .as_deref()
                .map(Publish::unpack)
                .transpose()
                .map_err(|_| bad("publish"))?
                .map(Box::new),
        };
        Ok(JobRow {
            spec,
            state: RowState::parse(&state).ok_or_else(|| bad("state"))?,
            attempts: u32::try_from(attempts).map_err(|_| bad("attempts"))?,
            reserved_until: reserved_until.map(|v| u(v, "reserved_until")).transpose()?,
            seq: 0,
            changed_at: u(changed_at, "changed_at")?,
        })
    }
}

/// The columns a transition by id other than a reschedule changes (reserve, release, touch,
/// bury, kick): everything of the job but its spec, whose only changing field is `run_at`. (A
/// reschedule may change the body and priority too: it writes the whole row.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub id: JobId,
    pub state: JobState,
    pub run_at: UnixMillis,
    pub attempts: u32,
    pub reserved_until: Option<UnixMillis>,
    pub seq: u64,
    /// The transition's time (`changed_at`).
    pub at: UnixMillis,
}

impl Moved {
    pub fn of_job(job: &Job, at: UnixMillis) -> Moved {
        Moved {
            id: job.spec.id.clone(),
            state: job.state,
            run_at: job.spec.run_at,
            attempts: job.attempts,
            reserved_until: job.reserved_until,
            seq: job.seq,
            at,
        }
    }

    /// `row` after this move.
    pub fn apply(&self, row: &mut JobRow) {
        row.state = RowState::Live(self.state);
        row.spec.run_at = self.run_at;
        row.attempts = self.attempts;
        row.reserved_until = self.reserved_until;
        row.seq = self.seq;
        row.changed_at = self.at;
    }
}

/// One acknowledged change, as the writer applies it.
#[derive(Debug, Clone)]
pub enum Op {
    /// The job's whole row as it now is (a push, a restore, a reschedule), and the state it
    /// came from (`None`: new, or unknown).
    Put { row: JobRow, from: Option<JobState> },
    /// A transition by id: only the row's changing columns are written (a row that does not
    /// exist, a job pushed before the journal was enabled, stays absent).
    Move {
        moved: Moved,
        from: Option<JobState>,
    },
    /// The job no longer exists (`to` is finished, deleted or skipped).
    End {
        id: JobId,
        from: Option<JobState>,
        to: RowState,
        at: UnixMillis,
    },
    /// `n` dead jobs of `queue` were kicked, oldest burial first: the journal kicks its own
    /// `n` oldest dead rows of that queue.
    KickTopic {
        queue: Topic,
        n: u64,
        at: UnixMillis,
    },
    /// A recurring schedule as stored now (created or replaced): its whole row.
    PutSchedule { schedule: Schedule, at: UnixMillis },
    /// A schedule fired: its new place. Queued after the fire's jobs, in the same batch, so
    /// the journal never holds the schedule moved past a tick without that tick's job.
    FireSchedule { fired: Fired, at: UnixMillis },
    /// A schedule was deleted: its row becomes a tombstone.
    DeleteSchedule { id: ScheduleId, at: UnixMillis },
    /// A topic's flow control settings now in force.
    Settings {
        topic: Topic,
        settings: TopicSettings,
        at: UnixMillis,
    },
}

/// A fired schedule's new place: the columns a fire changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    pub id: ScheduleId,
    /// The schedule's version after the fire.
    pub version: u64,
    pub next_tick: Option<UnixMillis>,
    pub last_tick: Option<UnixMillis>,
}

impl Op {
    /// The job the op is about, when it is about one.
    pub fn id(&self) -> Option<&JobId> {
        match self {
            Op::Put { row, .. } => Some(&row.spec.id),
            Op::Move { moved, .. } => Some(&moved.id),
            Op::End { id, .. } => Some(id),
            Op::KickTopic { .. }
            | Op::PutSchedule { .. }
            | Op::FireSchedule { .. }
            | Op::DeleteSchedule { .. }
            | Op::Settings { .. } => None,
        }
    }

    /// Whether the op is about jobs (their rows and events), not a schedule or settings.
    pub fn is_job(&self) -> bool {
        match self {
            Op::Put { .. } | Op::Move { .. } | Op::End { .. } | Op::KickTopic { .. } => true,
            Op::PutSchedule { .. }
            | Op::FireSchedule { .. }
            | Op::DeleteSchedule { .. }
            | Op::Settings { .. } => false,
        }
    }
}
