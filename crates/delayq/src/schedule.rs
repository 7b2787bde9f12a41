//! Recurring schedules' times: when a cron expression in a time zone, or a fixed interval,
//! fires (docs/schedules.md). Pure: no I/O, no clock reads; every answer takes the instant it
//! counts from.
//!
//! A cron expression names wall clock times (croner parses it and finds the next matching wall
//! clock time, searched on a zone-less calendar); each is then placed in the schedule's zone
//! (chrono-tz) by EventBridge Scheduler's rules: a wall clock time the zone skips that day
//! (clocks going forward) does not fire, and one the zone passes twice (clocks going back)
//! fires once, at its first occurrence. Fire times are whole seconds, in Unix milliseconds.

use crate::job::{InvalidField, JobId, JobSpec, UnixMillis};
use chrono::{DateTime, LocalResult, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use std::sync::Arc;

/// The shortest interval of an `every_ms` schedule.
pub const MIN_EVERY_MS: u64 = 1_000;
/// The longest schedule id: its jobs' ids (`<id>@<tick ms>`, at most 21 characters more) stay
/// within [`crate::job::MAX_ID_CHARS`].
pub const MAX_SCHEDULE_ID_CHARS: usize = 200;
/// The most ticks a schedule that catches up with `all` fires at once; the older ones are
/// skipped (and counted).
pub const MAX_CATCH_UP: usize = 1_000;
/// How many coming fire times a schedule shows (`next_runs_ms`).
pub const NEXT_RUNS: usize = 10;
/// The wall clock times examined for one answer before giving up: a pattern that matches only
/// times the zone skips, or the later half of a long repeated range, is searched no further.
const MAX_CANDIDATES: usize = 100_000;

/// A schedule's id: a job id's rules (no control characters, not empty) and at most
/// [`MAX_SCHEDULE_ID_CHARS`] characters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ScheduleId(Arc<str>);

impl ScheduleId {
    pub fn parse(s: impl Into<String>) -> Result<ScheduleId, InvalidField> {
        let s = s.into();
        let n = s.chars().count();
        if n > MAX_SCHEDULE_ID_CHARS {
            return Err(InvalidField::new(
                "id",
                format!("must be at most {MAX_SCHEDULE_ID_CHARS} characters, got {n}"),
            ));
        }
        JobId::parse(s.clone())?;
        Ok(ScheduleId(s.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id of the job this schedule pushes for the tick at `tick`: `<id>@<tick ms>`.
    pub fn job_id(&self, tick: UnixMillis) -> JobId {
        JobId::parse(format!("{}@{tick}", self.0)).expect("a schedule id leaves room for a tick")
    }
}

impl std::fmt::Display for ScheduleId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// When a schedule fires, as given (kept as text so a stored schedule reads back as written).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Rule {
    /// A cron expression (5 fields, or 6 with seconds first), in the zone `tz`.
    Cron { expr: String, tz: String },
    /// Every `every_ms` milliseconds from `anchor` (the schedule's `start_at`, or the time it
    /// was first created).
    Every { every_ms: u64, anchor: UnixMillis },
}

/// A [`Rule`] checked and ready to answer: the parsed expression and zone.
#[derive(Debug, Clone)]
pub enum Recurrence {
    Cron {
        cron: Box<Cron>,
        tz: Tz,
        /// The last few answers of `next_after`: schedules sharing a rule (most do) are
        /// planned from the same instants in one pass of the firing task, so one search
        /// answers all of them.
        memo: Memo,
    },
    Every {
        every_ms: u64,
        anchor: UnixMillis,
    },
}

/// Answers kept per cron rule ([`Recurrence::Cron`]'s `memo`).
const MEMO_ENTRIES: usize = 16;

/// Up to [`MEMO_ENTRIES`] `(after, next)` answers of one rule. A clone starts empty (it is a
/// cache, not the rule).
#[derive(Debug, Default)]
pub struct Memo(Box<std::sync::Mutex<MemoEntries>>);

#[derive(Debug, Default)]
struct MemoEntries {
    entries: [Option<(UnixMillis, Option<UnixMillis>)>; MEMO_ENTRIES],
}

impl Clone for Memo {
    fn clone(&self) -> Memo {
        Memo::default()
    }
}

impl Memo {
    /// The answer for `after`: kept, or `f`'s (then kept in place of the one for the earliest
    /// instant: times move forward, so that one is the least likely to be asked again).
    fn get_or(
        &self,
        after: UnixMillis,
        f: impl FnOnce() -> Option<UnixMillis>,
    ) -> Option<UnixMillis> {
        let found = {
            let m = self.0.lock().unwrap_or_else(|p| p.into_inner());
            m.entries
                .iter()
                .flatten()
                .find(|(a, _)| *a == after)
                .map(|(_, n)| *n)
        };
        if let Some(n) = found {
            return n;
        }
        let n = f();
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let slot = (0..MEMO_ENTRIES)
            .min_by_key(|&i| m.entries[i].map(|(a, _)| a))
            .unwrap_or(0);
        m.entries[slot] = Some((after, n));
        n
    }
}

/// Checks a cron expression: 5 fields (minute resolution) or 6 with seconds first; month and
/// day names; `@hourly`, `@daily`, `@weekly`, `@monthly` (and croner's `@yearly`).
pub fn parse_cron(expr: &str) -> Result<Cron, InvalidField> {
    let fields = expr.split_whitespace().count();
    if !expr.trim_start().starts_with('@') && !(5..=6).contains(&fields) {
        return Err(InvalidField::new(
            "cron",
            format!("must have 5 fields, or 6 with seconds first; got {fields}"),
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(expr)
        .map_err(|e| InvalidField::new("cron", format!("is not a valid cron expression: {e}")))
}

/// Checks an IANA time zone name (`Europe/Berlin`, `UTC`).
pub fn parse_tz(name: &str) -> Result<Tz, InvalidField> {
    name.parse::<Tz>()
        .map_err(|_| InvalidField::new("tz", format!("unknown IANA time zone {name:?}")))
}

impl Rule {
    /// The rule, checked: `cron` and `tz` parse, `every_ms` is at least [`MIN_EVERY_MS`].
    pub fn recurrence(&self) -> Result<Recurrence, InvalidField> {
        match self {
            Rule::Cron { expr, tz } => Ok(Recurrence::Cron {
                cron: Box::new(parse_cron(expr)?),
                tz: parse_tz(tz)?,
                memo: Memo::default(),
            }),
            &Rule::Every { every_ms, anchor } => {
                if every_ms < MIN_EVERY_MS {
                    return Err(InvalidField::new(
                        "every_ms",
                        format!("must be at least {MIN_EVERY_MS}, got {every_ms}"),
                    ));
                }
                Ok(Recurrence::Every { every_ms, anchor })
            }
        }
    }
}

impl Recurrence {
    /// The first fire time strictly after `after`, or `None` when there is none (a pattern
    /// that never matches again, or one past the calendar's end).
    pub fn next_after(&self, after: UnixMillis) -> Option<UnixMillis> {
        match self {
            &Recurrence::Every { every_ms, anchor } => {
                if after < anchor {
                    return Some(anchor);
                }
                let k = (after - anchor) / every_ms + 1;
                k.checked_mul(every_ms)?.checked_add(anchor)
            }
            Recurrence::Cron { cron, tz, memo } => {
                memo.get_or(after, || next_cron(cron, tz, after))
            }
        }
    }

    /// Up to `max` fire times in `(after, until]`, in order.
    pub fn ticks_between(
        &self,
        after: UnixMillis,
        until: UnixMillis,
        max: usize,
    ) -> Vec<UnixMillis> {
        let mut out = Vec::new();
        let mut at = after;
        while out.len() < max {
            match self.next_after(at) {
                Some(t) if t <= until => {
                    out.push(t);
                    at = t;
                }
                _ => break,
            }
        }
        out
    }

    /// The next `n` fire times after `after`.
    pub fn next_n(&self, after: UnixMillis, n: usize) -> Vec<UnixMillis> {
        self.ticks_between(after, UnixMillis::MAX, n)
    }
}

/// Which missed ticks a schedule fires when it is handled late (every instance was down, or it
/// could not reach its store): only the most recent, none, or all of them (the latest
/// [`MAX_CATCH_UP`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CatchUp {
    #[default]
    Latest,
    None,
    All,
}

/// Whether a tick fires while the job of the schedule's previous fired tick still exists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Overlap {
    #[default]
    Allow,
    Skip,
}

impl CatchUp {
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::Latest => "latest",
            CatchUp::None => "none",
            CatchUp::All => "all",
        }
    }

    pub fn parse(s: &str) -> Option<CatchUp> {
        [CatchUp::Latest, CatchUp::None, CatchUp::All]
            .into_iter()
            .find(|c| c.as_str() == s)
    }
}

impl Overlap {
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
        }
    }

    pub fn parse(s: &str) -> Option<Overlap> {
        [Overlap::Allow, Overlap::Skip]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// A schedule as its owner set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleSpec {
    pub id: ScheduleId,
    pub rule: Rule,
    /// The job each tick pushes: every field but its id (`<id>@<tick>`) and due time (the
    /// tick), which [`ScheduleSpec::job_for`] sets.
    pub job: JobSpec,
    /// No tick before this time.
    pub start_at: Option<UnixMillis>,
    /// No tick after this time.
    pub end_at: Option<UnixMillis>,
    pub catch_up: CatchUp,
    pub overlap: Overlap,
    pub paused: bool,
}

/// A stored schedule: its spec and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub spec: ScheduleSpec,
    /// The next tick to handle; `None` when none is left (past `end_at`, or a pattern that
    /// never matches again). A paused schedule keeps it but is not due.
    pub next_tick: Option<UnixMillis>,
    /// The last tick that pushed a job.
    pub last_tick: Option<UnixMillis>,
    /// Set by the store: 1 when created, one more at each change. A fire names the version it
    /// was planned from and changes nothing if the schedule moved on meanwhile.
    pub version: u64,
}

/// One handling of a due schedule, planned by [`Schedule::plan`] and applied atomically by
/// `Store::fire_schedule`: the jobs pushed and the schedule's new place, if the schedule is
/// still at `version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleFire {
    pub id: ScheduleId,
    pub version: u64,
    pub jobs: Vec<JobSpec>,
    pub next_tick: Option<UnixMillis>,
    pub last_tick: Option<UnixMillis>,
}

/// What a planned fire does, for the counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FirePlan {
    pub fire: Option<ScheduleFire>,
    /// Ticks pushed that were missed (handled after a later tick was due, or late by
    /// [`LATE_AFTER_MS`] or more).
    pub caught_up: u64,
    /// Ticks passed over: missed ticks the catch-up policy does not fire.
    pub skipped_missed: u64,
    /// Ticks passed over because the previous tick's job still exists.
    pub skipped_overlap: u64,
    /// Ticks pushed ahead of their time (due at their tick): 0 or 1.
    pub ahead: u64,
}

/// A due tick handled this long after its time or later is a missed one (while an instance
/// runs, the firing task handles a tick well within it: ticks fire ahead, docs/benchmarks.md).
pub const LATE_AFTER_MS: u64 = 1_000;
/// How long before its tick a tick's job is pushed (fired ahead), as a delayed job due at the
/// tick, so that at the tick only the timer's promotion of stored jobs is left
/// (docs/schedules.md, "Fired ahead"). It must cover the firing of a tick shared by many
/// schedules (100,000 take 0.4 s in memory, 1.4 s embedded, 2.9 s on Redis on the benchmarks'
/// machine, docs/benchmarks.md) and the firing task's longest sleep (0.5 s); past it the
/// jobs are late by the rest, as when firing at the tick. Not longer: a change to a schedule
/// within this time of its next tick has to withdraw the tick's job, and a tick fired ahead
/// before every instance stopped is delivered when one is back whatever `catch_up` says.
/// Only `overlap: allow` schedules fire ahead (`skip` is judged at the tick), and at most one
/// tick of a schedule is ahead at a time (its last tick): a schedule every second fires each
/// tick when the one before it passes, a second ahead.
pub const FIRE_AHEAD_MS: u64 = 5_000;
/// The most missed ticks looked at one by one when catching up (a longer outage counts the
/// rest as skipped without listing them).
const MAX_MISSED_SCAN: usize = 100_000;

impl ScheduleSpec {
    /// The job of the tick at `tick`.
    pub fn job_for(&self, tick: UnixMillis) -> JobSpec {
        let mut job = self.job.clone();
        job.id = self.id.job_id(tick);
        job.run_at = tick;
        job
    }

    /// The first tick after `after` within `start_at..=end_at`.
    pub fn next_after(&self, r: &Recurrence, after: UnixMillis) -> Option<UnixMillis> {
        let after = match self.start_at {
            Some(s) if s > 0 => after.max(s - 1),
            _ => after,
        };
        // No tick past `end_at`, nor past the latest due time a job may have.
        r.next_after(after)
            .filter(|&t| t <= crate::job::MAX_RUN_AT && self.end_at.is_none_or(|end| t <= end))
    }

    /// The next `n` ticks after `now` within `start_at..=end_at`.
    pub fn next_runs(&self, r: &Recurrence, now: UnixMillis, n: usize) -> Vec<UnixMillis> {
        let mut out = Vec::with_capacity(n);
        let mut at = now;
        while out.len() < n {
            match self.next_after(r, at) {
                Some(t) => {
                    out.push(t);
                    at = t;
                }
                None => break,
            }
        }
        out
    }
}

impl Schedule {
    /// A new schedule's state at `now`: its first tick after `now` (ticks before its creation
    /// are not missed ones).
    pub fn new(mut spec: ScheduleSpec, r: &Recurrence, now: UnixMillis) -> Schedule {
        // The template's own id and due time are never used: stored as the tick 0 job's.
        spec.job.id = spec.id.job_id(0);
        spec.job.run_at = 0;
        Schedule {
            next_tick: spec.next_after(r, now),
            spec,
            last_tick: None,
            version: 0,
        }
    }

    /// Whether the firing task should handle it at `now`.
    pub fn is_due(&self, now: UnixMillis) -> bool {
        !self.spec.paused && self.next_tick.is_some_and(|t| t <= now)
    }

    /// The tick whose job a change of this stored schedule withdraws if that job still
    /// waits for it (fired ahead: delayed, due at the tick, never handed out): its last tick,
    /// unless `new` (the schedule replacing it; `None`: deleting it) keeps that tick as its
    /// last, is not paused and has moved past it. The stores apply it with the change itself
    /// (`Store::put_schedule`, `Store::delete_schedule`), so a schedule paused, deleted or
    /// whose rule changed does not deliver a tick it fired ahead.
    pub fn withdraws(&self, new: Option<&Schedule>) -> Option<UnixMillis> {
        let t = self.last_tick?;
        let keeps = new.is_some_and(|n| {
            !n.spec.paused && n.last_tick == Some(t) && n.next_tick.is_none_or(|x| x > t)
        });
        (!keeps).then_some(t)
    }

    /// Whether its ticks fire ahead ([`FIRE_AHEAD_MS`]): `overlap: skip` is judged at the tick.
    pub fn fires_ahead(&self) -> bool {
        self.spec.overlap == Overlap::Allow
    }

    /// The tick fired ahead whose job may still be waiting for its time, if any: the last
    /// tick, when it is after `now` and the schedule moved past it (a change that brought
    /// the next tick back to or before it withdrew its job).
    pub fn ahead_tick(&self, now: UnixMillis) -> Option<UnixMillis> {
        self.last_tick
            .filter(|&t| t > now && self.next_tick.is_none_or(|n| n > t))
    }

    /// When the firing task should handle it next: at its next tick, or [`FIRE_AHEAD_MS`]
    /// before it when it fires ahead, but not before the tick it fired ahead last passed (one
    /// tick ahead at a time). `None`: paused, or no tick left.
    pub fn handle_at(&self) -> Option<UnixMillis> {
        let next = self.next_tick.filter(|_| !self.spec.paused)?;
        if !self.fires_ahead() {
            return Some(next);
        }
        let pending = self.last_tick.filter(|&t| t < next).unwrap_or(0);
        Some(next.saturating_sub(FIRE_AHEAD_MS).max(pending))
    }

    /// [`Schedule::plan`], then, for a schedule that fires ahead with nothing ahead already,
    /// its next tick if it falls within [`FIRE_AHEAD_MS`] after `now`: pushed now as a job
    /// due at that tick (never earlier), the schedule moved past it, and it becomes the last
    /// tick. A tick fired ahead is never a missed one.
    pub fn plan_ahead(&self, r: &Recurrence, now: UnixMillis, previous_exists: bool) -> FirePlan {
        let mut plan = self.plan(r, now, previous_exists);
        if !self.fires_ahead() || self.spec.paused {
            return plan;
        }
        // Where the schedule stands after the due ticks' handling, if any.
        let (next, last) = match &plan.fire {
            Some(f) => (f.next_tick, f.last_tick),
            None => (self.next_tick, self.last_tick),
        };
        let Some(t) = next.filter(|&t| t > now && t - now <= FIRE_AHEAD_MS) else {
            return plan;
        };
        if last.is_some_and(|l| l > now && l < t) {
            // A tick already ahead: the next one fires once it passed.
            return plan;
        }
        let fire = plan.fire.get_or_insert_with(|| ScheduleFire {
            id: self.spec.id.clone(),
            version: self.version,
            jobs: Vec::new(),
            next_tick: next,
            last_tick: last,
        });
        fire.jobs.push(self.spec.job_for(t));
        fire.next_tick = self.spec.next_after(r, t);
        fire.last_tick = Some(t);
        plan.ahead = 1;
        plan
    }

    /// Plans the handling of this schedule at `now`: which due ticks push a job (by its
    /// catch-up and overlap policies), and its next tick. `previous_exists` says whether the
    /// job of its last fired tick still exists (read just before; only asked with
    /// `overlap: skip`). Nothing to do when it is not due.
    pub fn plan(&self, r: &Recurrence, now: UnixMillis, previous_exists: bool) -> FirePlan {
        let Some(first) = self.next_tick.filter(|_| self.is_due(now)) else {
            return FirePlan::default();
        };
        // The due ticks: `first` and those after it up to `now`, the last MAX_CATCH_UP + 1
        // kept, the rest only counted.
        let mut due = std::collections::VecDeque::new();
        let mut dropped = 0u64;
        let mut at = Some(first);
        let mut scanned = 0;
        while let Some(t) = at.filter(|&t| t <= now) {
            if scanned == MAX_MISSED_SCAN {
                // An outage this long: count the rest as skipped and go on from now.
                dropped += 1;
                break;
            }
            scanned += 1;
            due.push_back(t);
            if due.len() > MAX_CATCH_UP + 1 {
                due.pop_front();
                dropped += 1;
            }
            at = self.spec.next_after(r, t);
        }
        let next_tick = self.spec.next_after(r, now);
        let on_time = due.back().copied().filter(|&t| now - t < LATE_AFTER_MS);
        if on_time.is_some() {
            due.pop_back();
        }
        // `due` now holds the missed ticks (the latest of them).
        let mut plan = FirePlan::default();
        let mut ticks: Vec<UnixMillis> = Vec::new();
        let missed = due.len() as u64 + dropped;
        let caught: Vec<UnixMillis> = match self.spec.catch_up {
            CatchUp::None => Vec::new(),
            CatchUp::Latest if on_time.is_some() => Vec::new(),
            CatchUp::Latest => due.back().copied().into_iter().collect(),
            CatchUp::All => due.iter().rev().take(MAX_CATCH_UP).rev().copied().collect(),
        };
        plan.caught_up = caught.len() as u64;
        plan.skipped_missed = missed - plan.caught_up;
        ticks.extend(caught);
        ticks.extend(on_time);
        if self.spec.overlap == Overlap::Skip && !ticks.is_empty() {
            // The previous tick's job blocks every tick; a tick fired now blocks the rest.
            let keep = usize::from(!previous_exists);
            plan.skipped_overlap = (ticks.len() - keep) as u64;
            if keep == 0 {
                plan.caught_up = 0;
            } else if ticks.len() > 1 {
                plan.caught_up = plan.caught_up.min(1);
            }
            ticks.truncate(keep);
        }
        plan.fire = Some(ScheduleFire {
            id: self.spec.id.clone(),
            version: self.version,
            jobs: ticks.iter().map(|&t| self.spec.job_for(t)).collect(),
            next_tick,
            last_tick: ticks.last().copied().or(self.last_tick),
        });
        plan
    }
}

/// The wall clock time of `at` as a zone-less calendar time (croner searches these).
fn civil_of(at: UnixMillis, tz: &Tz) -> Option<DateTime<Utc>> {
    let instant = DateTime::<Utc>::from_timestamp_millis(i64::try_from(at).ok()?)?;
    Some(instant.with_timezone(tz).naive_local().and_utc())
}

/// Where the wall clock time `civil` falls in `tz` by the rules above: `None` when the zone
/// skips it, its first occurrence when it happens twice.
fn place(civil: NaiveDateTime, tz: &Tz) -> Option<UnixMillis> {
    let placed = match tz.from_local_datetime(&civil) {
        LocalResult::Single(t) => t,
        LocalResult::Ambiguous(first, _) => first,
        LocalResult::None => return None,
    };
    u64::try_from(placed.timestamp_millis()).ok()
}

fn next_cron(cron: &Cron, tz: &Tz, after: UnixMillis) -> Option<UnixMillis> {
    // Every wall clock time before `after`'s maps to an instant before `after` (the first
    // occurrence of a repeated time is the earliest one), so the search starts at `after`'s
    // wall clock time, inclusive, and passes over what lands at or before `after`: the repeated
    // times already passed when `after` is in the later half of a repeated range.
    let mut civil = civil_of(after, tz)?;
    let mut inclusive = true;
    for _ in 0..MAX_CANDIDATES {
        civil = cron.find_next_occurrence(&civil, inclusive).ok()?;
        inclusive = false;
        if let Some(t) = place(civil.naive_utc(), tz)
            && t > after
        {
            return Some(t);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cron(expr: &str, tz: &str) -> Recurrence {
        Rule::Cron {
            expr: expr.into(),
            tz: tz.into(),
        }
        .recurrence()
        .unwrap()
    }

    /// Unix ms of an RFC 3339 instant.
    fn at(rfc3339: &str) -> UnixMillis {
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_millis() as u64
    }

    /// The memo answers as the search: whatever order instants are asked in, again or not,
    /// more of them than it keeps.
    #[test]
    fn a_memoised_rule_answers_as_a_fresh_one() {
        let r = cron("*/7 * * * *", "Europe/Berlin");
        let start = at("2027-03-28T00:00:00Z");
        let mut asks: Vec<UnixMillis> = (0..40u64).map(|k| start + k * 97_000).collect();
        asks.extend(asks.clone().into_iter().rev());
        asks.extend((0..40u64).map(|k| start + (k * 37 % 40) * 97_000));
        for after in asks {
            let fresh = cron("*/7 * * * *", "Europe/Berlin").next_after(after);
            assert_eq!(r.next_after(after), fresh, "after {after}");
        }
    }

    #[test]
    fn every_counts_from_its_anchor() {
        let r = Rule::Every {
            every_ms: 1_000,
            anchor: 10_000,
        }
        .recurrence()
        .unwrap();
        assert_eq!(r.next_after(0), Some(10_000));
        assert_eq!(r.next_after(10_000), Some(11_000));
        assert_eq!(r.next_after(10_999), Some(11_000));
        assert_eq!(
            r.ticks_between(10_000, 13_500, 10),
            [11_000, 12_000, 13_000]
        );
        assert_eq!(r.ticks_between(10_000, 13_500, 2), [11_000, 12_000]);
    }

    #[test]
    fn bad_rules_name_their_field() {
        let every = Rule::Every {
            every_ms: 999,
            anchor: 0,
        };
        assert_eq!(every.recurrence().unwrap_err().field, "every_ms");
        for bad in [
            "* * * *",
            "61 * * * *",
            "* * * * * * *",
            "nonsense",
            "@sometimes",
        ] {
            let rule = Rule::Cron {
                expr: bad.into(),
                tz: "UTC".into(),
            };
            assert_eq!(rule.recurrence().unwrap_err().field, "cron", "{bad}");
        }
        let rule = Rule::Cron {
            expr: "* * * * *".into(),
            tz: "Mars/Olympus".into(),
        };
        assert_eq!(rule.recurrence().unwrap_err().field, "tz");
    }

    #[test]
    fn five_six_fields_names_and_nicknames() {
        let t0 = at("2027-01-04T10:00:30Z"); // a Monday
        assert_eq!(
            cron("*/15 * * * *", "UTC").next_after(t0),
            Some(at("2027-01-04T10:15:00Z"))
        );
        assert_eq!(
            cron("*/10 * * * * *", "UTC").next_after(t0),
            Some(at("2027-01-04T10:00:40Z"))
        );
        assert_eq!(
            cron("0 9 * JAN-MAR FRI", "UTC").next_after(t0),
            Some(at("2027-01-08T09:00:00Z"))
        );
        // Both day fields restricted: a day matching either fires (Vixie cron).
        let either = cron("0 0 13 * FRI", "UTC");
        assert_eq!(
            either.next_n(t0, 3),
            [
                at("2027-01-08T00:00:00Z"),
                at("2027-01-13T00:00:00Z"),
                at("2027-01-15T00:00:00Z")
            ]
        );
        assert_eq!(
            cron("@hourly", "UTC").next_after(t0),
            Some(at("2027-01-04T11:00:00Z"))
        );
        assert_eq!(
            cron("@daily", "UTC").next_after(t0),
            Some(at("2027-01-05T00:00:00Z"))
        );
        assert_eq!(
            cron("@weekly", "UTC").next_after(t0),
            Some(at("2027-01-10T00:00:00Z"))
        );
        assert_eq!(
            cron("@monthly", "UTC").next_after(t0),
            Some(at("2027-02-01T00:00:00Z"))
        );
    }

    #[test]
    fn schedule_ids_leave_room_for_the_tick() {
        let id = ScheduleId::parse("x".repeat(MAX_SCHEDULE_ID_CHARS)).unwrap();
        assert_eq!(
            id.job_id(u64::MAX).as_str().chars().count(),
            MAX_SCHEDULE_ID_CHARS + 21
        );
        assert_eq!(
            ScheduleId::parse("x".repeat(MAX_SCHEDULE_ID_CHARS + 1))
                .unwrap_err()
                .field,
            "id"
        );
        assert!(ScheduleId::parse("").is_err());
        assert_eq!(
            ScheduleId::parse("report").unwrap().job_id(1_000).as_str(),
            "report@1000"
        );
    }

    // Hand-computed instants of the 2027 transitions (tz database): New York springs forward
    // on 14 March (02:00 EST -> 03:00 EDT) and falls back on 7 November (02:00 EDT -> 01:00
    // EST); Berlin on 28 March (02:00 CET -> 03:00 CEST) and 31 October (03:00 CEST -> 02:00
    // CET); Sydney falls back on 4 April (03:00 AEDT -> 02:00 AEST) and springs forward on
    // 3 October (02:00 AEST -> 03:00 AEDT). tests/store/schedule_tz.rs checks the same rules
    // against Python's zoneinfo over whole years.

    #[test]
    fn a_skipped_wall_clock_time_does_not_fire_that_day() {
        for (tz, expr, before, want) in [
            // 02:30 does not exist on 14 March in New York: the next is 15 March 02:30 EDT.
            (
                "America/New_York",
                "30 2 * * *",
                "2027-03-13T00:00:00Z",
                ["2027-03-13T07:30:00Z", "2027-03-15T06:30:00Z"],
            ),
            (
                "Europe/Berlin",
                "30 2 * * *",
                "2027-03-26T12:00:00Z",
                ["2027-03-27T01:30:00Z", "2027-03-29T00:30:00Z"],
            ),
            (
                "Australia/Sydney",
                "30 2 * * *",
                "2027-10-01T00:00:00Z",
                ["2027-10-01T16:30:00Z", "2027-10-03T15:30:00Z"],
            ),
        ] {
            let r = cron(expr, tz);
            assert_eq!(
                r.next_n(at(before), 2),
                [at(want[0]), at(want[1])],
                "{tz} from {before}"
            );
        }
    }

    #[test]
    fn a_repeated_wall_clock_time_fires_once_at_its_first_occurrence() {
        for (tz, expr, before, want) in [
            // 01:30 happens twice on 7 November in New York: 05:30Z (EDT) and 06:30Z (EST).
            (
                "America/New_York",
                "30 1 * * *",
                "2027-11-06T12:00:00Z",
                ["2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z"],
            ),
            (
                "Europe/Berlin",
                "30 2 * * *",
                "2027-10-30T12:00:00Z",
                ["2027-10-31T00:30:00Z", "2027-11-01T01:30:00Z"],
            ),
            (
                "Australia/Sydney",
                "30 2 * * *",
                "2027-04-03T00:00:00Z",
                ["2027-04-03T15:30:00Z", "2027-04-04T16:30:00Z"],
            ),
        ] {
            let r = cron(expr, tz);
            assert_eq!(
                r.next_n(at(before), 2),
                [at(want[0]), at(want[1])],
                "{tz} from {before}"
            );
        }
    }

    #[test]
    fn counting_from_inside_the_second_half_of_a_repeated_hour() {
        // Every 20 minutes in New York on 7 November: 01:00, 01:20, 01:40 EDT, then the
        // repeated hour (EST) fires nothing, then 02:00 EST.
        let r = cron("*/20 * * * *", "America/New_York");
        assert_eq!(
            r.next_n(at("2027-11-07T04:50:00Z"), 4),
            [
                at("2027-11-07T05:00:00Z"),
                at("2027-11-07T05:20:00Z"),
                at("2027-11-07T05:40:00Z"),
                at("2027-11-07T07:00:00Z"),
            ]
        );
        // From 01:10 EST (06:10Z, the later half) the next is 02:00 EST.
        assert_eq!(
            r.next_after(at("2027-11-07T06:10:00Z")),
            Some(at("2027-11-07T07:00:00Z"))
        );
    }

    fn every_second(catch_up: CatchUp, overlap: Overlap) -> (Schedule, Recurrence) {
        let rule = Rule::Every {
            every_ms: 1_000,
            anchor: T,
        };
        let r = rule.recurrence().unwrap();
        let topic = crate::job::Topic::parse("t").unwrap();
        let job = JobSpec::new(topic, JobId::parse("x").unwrap(), "", 0);
        let spec = ScheduleSpec {
            id: ScheduleId::parse("s").unwrap(),
            rule,
            job,
            start_at: None,
            end_at: None,
            catch_up,
            overlap,
            paused: false,
        };
        (Schedule::new(spec, &r, T), r)
    }

    const T: UnixMillis = 1_800_000_000_000;

    fn ticks(plan: &FirePlan) -> Vec<UnixMillis> {
        let fire = plan.fire.as_ref().unwrap();
        fire.jobs.iter().map(|j| j.run_at).collect()
    }

    #[test]
    fn an_on_time_tick_fires_alone_and_the_schedule_moves_past_now() {
        let (sc, r) = every_second(CatchUp::Latest, Overlap::Allow);
        assert_eq!(sc.next_tick, Some(T + 1_000));
        assert_eq!(sc.plan(&r, T + 999, false), FirePlan::default(), "not due");
        let plan = sc.plan(&r, T + 1_005, false);
        assert_eq!(ticks(&plan), [T + 1_000]);
        let fire = plan.fire.as_ref().unwrap();
        assert_eq!(fire.jobs[0].id.as_str(), format!("s@{}", T + 1_000));
        assert_eq!(
            (fire.next_tick, fire.last_tick),
            (Some(T + 2_000), Some(T + 1_000))
        );
        assert_eq!((plan.caught_up, plan.skipped_missed), (0, 0));
    }

    #[test]
    fn after_an_outage_each_catch_up_policy_fires_what_it_says() {
        // Every instance was down from T + 0.5 s to T + 11.5 s: ticks 1..=10 s are missed,
        // 11 s is on time.
        let now = T + 11_500;
        let (sc, r) = every_second(CatchUp::Latest, Overlap::Allow);
        let plan = sc.plan(&r, now, false);
        assert_eq!(ticks(&plan), [T + 11_000]);
        assert_eq!((plan.caught_up, plan.skipped_missed), (0, 10));

        let (sc, r) = every_second(CatchUp::None, Overlap::Allow);
        let plan = sc.plan(&r, now, false);
        assert_eq!(ticks(&plan), [T + 11_000]);
        assert_eq!((plan.caught_up, plan.skipped_missed), (0, 10));

        // Every minute, back 5 s after the 5th tick: every due tick is missed.
        let back = T + 305_000;
        let minutely = |catch_up| {
            let (mut sc, _) = every_second(catch_up, Overlap::Allow);
            sc.spec.rule = Rule::Every {
                every_ms: 60_000,
                anchor: T,
            };
            let r = sc.spec.rule.recurrence().unwrap();
            let sc = Schedule::new(sc.spec, &r, T);
            sc.plan(&r, back, false)
        };
        let plan = minutely(CatchUp::Latest);
        assert_eq!(ticks(&plan), [T + 300_000], "the most recent missed tick");
        assert_eq!((plan.caught_up, plan.skipped_missed), (1, 4));
        let plan = minutely(CatchUp::None);
        assert!(ticks(&plan).is_empty(), "nothing missed fires");
        assert_eq!(plan.skipped_missed, 5);
        assert_eq!(plan.fire.unwrap().next_tick, Some(T + 360_000));

        let (sc, r) = every_second(CatchUp::All, Overlap::Allow);
        let plan = sc.plan(&r, now, false);
        assert_eq!(
            ticks(&plan),
            (1..=11).map(|k| T + k * 1_000).collect::<Vec<_>>()
        );
        assert_eq!((plan.caught_up, plan.skipped_missed), (10, 0));
        let fire = plan.fire.unwrap();
        assert_eq!(
            (fire.next_tick, fire.last_tick),
            (Some(T + 12_000), Some(T + 11_000))
        );
    }

    #[test]
    fn catching_up_all_fires_at_most_a_thousand_missed_ticks() {
        let (sc, r) = every_second(CatchUp::All, Overlap::Allow);
        // 2,500 ticks due, the last one on time.
        let plan = sc.plan(&r, T + 2_500_000, false);
        let fired = ticks(&plan);
        assert_eq!(fired.len(), MAX_CATCH_UP + 1);
        assert_eq!(
            fired.first(),
            Some(&(T + 1_500_000)),
            "the latest missed ones"
        );
        assert_eq!(fired.last(), Some(&(T + 2_500_000)));
        assert_eq!((plan.caught_up, plan.skipped_missed), (1_000, 1_499));
    }

    #[test]
    fn overlap_skip_passes_over_ticks_while_the_previous_job_exists() {
        let (mut sc, r) = every_second(CatchUp::Latest, Overlap::Skip);
        sc.last_tick = Some(T);
        let plan = sc.plan(&r, T + 1_000, true);
        assert!(ticks(&plan).is_empty());
        assert_eq!(plan.skipped_overlap, 1);
        let fire = plan.fire.unwrap();
        assert_eq!((fire.next_tick, fire.last_tick), (Some(T + 2_000), Some(T)));
        assert_eq!(ticks(&sc.plan(&r, T + 1_000, false)), [T + 1_000]);

        // Catching up all: the first tick fires, the rest overlap with it.
        let (sc, r) = every_second(CatchUp::All, Overlap::Skip);
        let plan = sc.plan(&r, T + 5_500, false);
        assert_eq!(ticks(&plan), [T + 1_000]);
        assert_eq!((plan.caught_up, plan.skipped_overlap), (1, 4));
    }

    #[test]
    fn a_paused_or_ended_schedule_is_not_due_and_start_and_end_bound_its_ticks() {
        let (mut sc, r) = every_second(CatchUp::Latest, Overlap::Allow);
        sc.spec.paused = true;
        assert!(!sc.is_due(T + 5_000));
        sc.spec.paused = false;
        sc.spec.start_at = Some(T + 3_500);
        sc.spec.end_at = Some(T + 6_000);
        assert_eq!(
            sc.spec.next_runs(&r, T, 10),
            [T + 4_000, T + 5_000, T + 6_000]
        );
        let sc = Schedule::new(sc.spec.clone(), &r, T + 6_000);
        assert_eq!(sc.next_tick, None);
        assert!(!sc.is_due(u64::MAX));
        // An interval whose next tick would be past the latest due time a job may have.
        let far = Rule::Every {
            every_ms: crate::job::MAX_RUN_AT,
            anchor: T,
        };
        let mut spec = sc.spec.clone();
        spec.rule = far.clone();
        spec.start_at = None;
        spec.end_at = None;
        assert_eq!(
            Schedule::new(spec, &far.recurrence().unwrap(), T + 1).next_tick,
            None
        );
    }

    #[test]
    fn a_tick_fires_ahead_as_a_job_due_at_it_one_tick_at_a_time() {
        // Every 10 s from T: the first tick, T + 10 s, is ahead from T + 5 s on.
        let (mut sc, _) = every_second(CatchUp::Latest, Overlap::Allow);
        sc.spec.rule = Rule::Every {
            every_ms: 10_000,
            anchor: T,
        };
        let r = sc.spec.rule.recurrence().unwrap();
        let sc = Schedule::new(sc.spec, &r, T);
        assert_eq!(sc.handle_at(), Some(T + 10_000 - FIRE_AHEAD_MS));
        assert_eq!(sc.plan_ahead(&r, T + 4_999, false), FirePlan::default());
        let plan = sc.plan_ahead(&r, T + 5_000, false);
        assert_eq!(ticks(&plan), [T + 10_000], "due at its tick, never earlier");
        assert_eq!(plan.ahead, 1);
        assert_eq!((plan.caught_up, plan.skipped_missed), (0, 0));
        let fire = plan.fire.unwrap();
        assert_eq!(fire.jobs[0].id.as_str(), format!("s@{}", T + 10_000));
        assert_eq!(
            (fire.next_tick, fire.last_tick),
            (Some(T + 20_000), Some(T + 10_000))
        );
        // Fired: the next tick is handled 5 s before it, not before.
        let mut fired = sc.clone();
        (fired.next_tick, fired.last_tick) = (fire.next_tick, fire.last_tick);
        assert_eq!(fired.ahead_tick(T + 9_999), Some(T + 10_000));
        assert_eq!(fired.ahead_tick(T + 10_000), None, "passed");
        assert_eq!(fired.handle_at(), Some(T + 15_000));

        // Every second: one tick ahead at a time, the next fired when it passed.
        let (sc, r) = every_second(CatchUp::Latest, Overlap::Allow);
        let plan = sc.plan_ahead(&r, T + 100, false);
        assert_eq!(ticks(&plan), [T + 1_000]);
        let mut fired = sc.clone();
        let fire = plan.fire.unwrap();
        (fired.next_tick, fired.last_tick) = (fire.next_tick, fire.last_tick);
        assert_eq!(fired.handle_at(), Some(T + 1_000));
        assert_eq!(fired.plan_ahead(&r, T + 999, false), FirePlan::default());
        assert_eq!(ticks(&fired.plan_ahead(&r, T + 1_000, false)), [T + 2_000]);

        // A tick due now fires as before, and the next one ahead with it.
        let (mut late, r) = every_second(CatchUp::Latest, Overlap::Allow);
        late.next_tick = Some(T + 1_000);
        let plan = late.plan_ahead(&r, T + 1_010, false);
        assert_eq!(ticks(&plan), [T + 1_000, T + 2_000]);
        let fire = plan.fire.unwrap();
        assert_eq!(
            (fire.next_tick, fire.last_tick),
            (Some(T + 3_000), Some(T + 2_000))
        );
    }

    #[test]
    fn skip_paused_and_ended_schedules_do_not_fire_ahead() {
        let (sc, r) = every_second(CatchUp::Latest, Overlap::Skip);
        assert_eq!(sc.handle_at(), Some(T + 1_000), "at its tick");
        assert_eq!(sc.plan_ahead(&r, T + 500, false), FirePlan::default());
        assert_eq!(ticks(&sc.plan_ahead(&r, T + 1_000, false)), [T + 1_000]);

        let (mut sc, r) = every_second(CatchUp::Latest, Overlap::Allow);
        sc.spec.paused = true;
        assert_eq!(sc.handle_at(), None);
        assert_eq!(sc.plan_ahead(&r, T + 500, false), FirePlan::default());

        let (mut sc, r) = every_second(CatchUp::Latest, Overlap::Allow);
        sc.spec.end_at = Some(T + 1_000);
        let plan = sc.plan_ahead(&r, T + 500, false);
        assert_eq!(ticks(&plan), [T + 1_000], "the last tick");
        assert_eq!(plan.fire.unwrap().next_tick, None);
    }

    #[test]
    fn a_change_withdraws_the_tick_ahead_unless_it_keeps_it() {
        let (mut old, _) = every_second(CatchUp::Latest, Overlap::Allow);
        (old.next_tick, old.last_tick) = (Some(T + 2_000), Some(T + 1_000));
        assert_eq!(old.withdraws(None), Some(T + 1_000), "a delete");
        let kept = old.clone();
        assert_eq!(old.withdraws(Some(&kept)), None, "kept, moved past it");
        let mut ended = old.clone();
        ended.next_tick = None;
        assert_eq!(old.withdraws(Some(&ended)), None, "kept as the last tick");
        let mut paused = old.clone();
        paused.spec.paused = true;
        assert_eq!(old.withdraws(Some(&paused)), Some(T + 1_000));
        let mut again = old.clone();
        again.next_tick = Some(T + 1_000);
        assert_eq!(old.withdraws(Some(&again)), Some(T + 1_000), "fired again");
        let mut forgotten = old.clone();
        forgotten.last_tick = None;
        assert_eq!(old.withdraws(Some(&forgotten)), Some(T + 1_000));
    }

    #[test]
    fn a_pattern_that_never_matches_has_no_next_time() {
        assert_eq!(cron("0 0 30 2 *", "UTC").next_after(0), None);
    }
}
