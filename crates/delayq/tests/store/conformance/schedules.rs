//! Recurring schedules in the store: put (with and without an expected version), get, the
//! listing, delete, the due schedules, and the fire: one atomic compare-and-set that pushes a
//! tick's job once, whatever the number of racing firers and however soon the job is finished.

use super::*;
use delayq::schedule::{CatchUp, Overlap, Rule, Schedule, ScheduleId, ScheduleSpec};
use delayq::store::{FireOutcome, SettingsChange};

fn sid(s: &str) -> ScheduleId {
    ScheduleId::parse(s).unwrap()
}

/// A schedule every second from T0, its jobs on topic `t`.
fn every_second(name: &str) -> Schedule {
    every_second_from(name, T0)
}

/// A schedule every second from `anchor` (its first tick a second later), made at `anchor`,
/// its jobs on topic `t`.
pub(crate) fn every_second_from(name: &str, anchor: UnixMillis) -> Schedule {
    let rule = Rule::Every {
        every_ms: SEC,
        anchor,
    };
    let spec = ScheduleSpec {
        id: sid(name),
        job: job("t", "template", "{\"tick\":true}", 0),
        rule: rule.clone(),
        start_at: None,
        end_at: None,
        catch_up: CatchUp::Latest,
        overlap: Overlap::Allow,
        paused: false,
    };
    Schedule::new(spec, &rule.recurrence().unwrap(), anchor)
}

async fn put(b: &Backend, sc: &Schedule) -> Schedule {
    b.store.put_schedule(sc, None).await.unwrap()
}

async fn schedules_are_put_read_listed_and_deleted(b: &Backend) {
    let a = put(b, &every_second("a")).await;
    assert_eq!(
        (a.version, a.next_tick, a.last_tick),
        (1, Some(T0 + SEC), None)
    );
    let got = b.store.get_schedule(&sid("a")).await.unwrap();
    assert_eq!(got, a, "every field reads back as put");
    assert_eq!(got.spec.job.body, "{\"tick\":true}");

    let mut changed = every_second("a");
    changed.spec.paused = true;
    let changed = put(b, &changed).await;
    assert_eq!(changed.version, 2, "a replace moves the version on");
    assert!(b.store.get_schedule(&sid("a")).await.unwrap().spec.paused);

    // With an expected version: refused when at another one, or absent.
    assert_eq!(
        b.store.put_schedule(&every_second("a"), Some(1)).await,
        Err(StoreError::Exists)
    );
    assert_eq!(
        b.store.put_schedule(&every_second("zz"), Some(1)).await,
        Err(StoreError::NotFound)
    );
    assert_eq!(
        b.store.get_schedule(&sid("zz")).await,
        Err(StoreError::NotFound)
    );
    let again = b.store.put_schedule(&every_second("a"), Some(2)).await;
    assert_eq!(again.map(|s| s.version), Ok(3));

    // Expecting version 0: only if there is none (a restore's insert-if-absent).
    assert_eq!(
        b.store.put_schedule(&every_second("a"), Some(0)).await,
        Err(StoreError::Exists)
    );
    assert_eq!(b.store.get_schedule(&sid("a")).await.unwrap().version, 3);
    let absent = b.store.put_schedule(&every_second("zz"), Some(0)).await;
    assert_eq!(absent.map(|s| s.version), Ok(1), "created");
    assert_eq!(b.store.delete_schedule(&sid("zz")).await, Ok(()));

    for name in ["c", "b", "e", "d"] {
        put(b, &every_second(name)).await;
    }
    let names = |page: Vec<Schedule>| -> Vec<String> {
        page.iter().map(|s| s.spec.id.to_string()).collect()
    };
    let first = b.store.list_schedules(None, 2).await.unwrap();
    assert_eq!(names(first.clone()), ["a", "b"]);
    let next = b
        .store
        .list_schedules(Some(&first[1].spec.id), 10)
        .await
        .unwrap();
    assert_eq!(names(next), ["c", "d", "e"]);

    assert_eq!(b.store.delete_schedule(&sid("c")).await, Ok(()));
    assert_eq!(
        b.store.delete_schedule(&sid("c")).await,
        Err(StoreError::NotFound)
    );
    assert_eq!(
        names(b.store.list_schedules(None, 10).await.unwrap()),
        ["a", "b", "d", "e"]
    );
}

async fn due_schedules_are_the_unpaused_ones_whose_tick_came(b: &Backend) {
    let mut late = every_second("late");
    late.next_tick = Some(T0 + 10 * SEC);
    put(b, &late).await;
    let mut paused = every_second("paused");
    paused.spec.paused = true;
    put(b, &paused).await;
    let mut early = every_second("early");
    early.next_tick = Some(T0 + 500);
    put(b, &early).await;
    put(b, &every_second("on-time")).await; // T0 + 1 s

    let due = b.store.due_schedules(T0 + 400, 10).await.unwrap();
    assert!(due.due.is_empty());
    assert_eq!(due.next, Some(T0 + 500));

    let due = b.store.due_schedules(T0 + SEC, 10).await.unwrap();
    let ids: Vec<String> = due.due.iter().map(|s| s.spec.id.to_string()).collect();
    assert_eq!(
        ids,
        ["early", "on-time"],
        "earliest first, the paused one left out"
    );
    assert_eq!(due.next, Some(T0 + 10 * SEC));

    let due = b.store.due_schedules(T0 + SEC, 1).await.unwrap();
    assert_eq!(due.due.len(), 1, "at most the limit");
    assert!(
        due.next.is_some_and(|t| t <= T0 + SEC),
        "more are due at once"
    );
}

async fn a_fire_pushes_the_tick_s_job_and_moves_the_schedule_on(b: &Backend) {
    let sc = put(b, &every_second("rep")).await;
    let rule = sc.spec.rule.recurrence().unwrap();
    let now = T0 + SEC + 3;
    let plan = sc.plan(&rule, now, false);
    let fire = plan.fire.expect("due");
    assert_eq!(fire.jobs.len(), 1);
    assert_eq!(
        b.store.fire_schedule(&fire, now).await,
        Ok(FireOutcome::Fired {
            pushed: 1,
            existed: 0
        })
    );
    let j = b
        .store
        .get(&id(&format!("rep@{}", T0 + SEC)))
        .await
        .unwrap();
    assert_eq!(
        (j.spec.run_at, j.state, j.spec.topic.as_str()),
        (T0 + SEC, JobState::Ready, "t")
    );
    assert_eq!(j.spec.body, "{\"tick\":true}");
    let after = b.store.get_schedule(&sid("rep")).await.unwrap();
    assert_eq!(
        (after.version, after.next_tick, after.last_tick),
        (2, Some(T0 + 2 * SEC), Some(T0 + SEC))
    );
    // The same plan again is stale: the schedule moved on.
    assert_eq!(
        b.store.fire_schedule(&fire, now).await,
        Ok(FireOutcome::Stale)
    );
    // A deleted schedule's fire is stale too, and its jobs stay.
    let plan = after.plan(&rule, T0 + 2 * SEC, false).fire.unwrap();
    b.store.delete_schedule(&sid("rep")).await.unwrap();
    assert_eq!(
        b.store.fire_schedule(&plan, T0 + 2 * SEC).await,
        Ok(FireOutcome::Stale)
    );
    assert!(b.store.get(&id(&format!("rep@{}", T0 + SEC))).await.is_ok());
    assert_eq!(
        b.store.get(&id(&format!("rep@{}", T0 + 2 * SEC))).await,
        Err(StoreError::NotFound)
    );
}

async fn racing_fires_push_each_tick_once_even_when_its_job_is_finished_at_once(b: &Backend) {
    put(b, &every_second("race")).await;
    let mut delivered = Vec::new();
    for tick in 1..=5u64 {
        let now = T0 + tick * SEC;
        // Eight firers read the schedule and plan the same tick, then all fire at once.
        let sc = b.store.get_schedule(&sid("race")).await.unwrap();
        let rule = sc.spec.rule.recurrence().unwrap();
        let fire = sc.plan(&rule, now, false).fire.unwrap();
        let outcomes =
            futures::future::join_all((0..8).map(|_| b.store.fire_schedule(&fire, now))).await;
        let fired = outcomes
            .iter()
            .filter(|o| matches!(o, Ok(FireOutcome::Fired { .. })))
            .count();
        assert_eq!(fired, 1, "tick {tick}: {outcomes:?}");
        // The consumer takes and finishes the job at once: its id is free again.
        for j in b.store.reserve(&[topic("t")], 10, now).await.unwrap() {
            delivered.push(j.spec.id.as_str().to_string());
            b.store.finish(&j.spec.id).await.unwrap();
        }
        // Late firers with the same plan change nothing.
        assert_eq!(
            b.store.fire_schedule(&fire, now).await,
            Ok(FireOutcome::Stale)
        );
        assert!(
            b.store
                .reserve(&[topic("t")], 10, now)
                .await
                .unwrap()
                .is_empty()
        );
    }
    let want: Vec<String> = (1..=5).map(|k| format!("race@{}", T0 + k * SEC)).collect();
    assert_eq!(delivered, want);
}

async fn a_fire_leaves_a_job_of_the_same_id_as_it_is(b: &Backend) {
    let sc = put(b, &every_second("dup")).await;
    let tick_id = format!("dup@{}", T0 + SEC);
    push(b, job("other", &tick_id, "mine", T0 + HOUR), T0).await;
    let rule = sc.spec.rule.recurrence().unwrap();
    let fire = sc.plan(&rule, T0 + SEC, false).fire.unwrap();
    assert_eq!(
        b.store.fire_schedule(&fire, T0 + SEC).await,
        Ok(FireOutcome::Fired {
            pushed: 0,
            existed: 1
        })
    );
    let j = b.store.get(&id(&tick_id)).await.unwrap();
    assert_eq!(
        (j.spec.body.as_str(), j.spec.topic.as_str()),
        ("mine", "other")
    );
    assert_eq!(
        b.store.get_schedule(&sid("dup")).await.unwrap().next_tick,
        Some(T0 + 2 * SEC)
    );
}

async fn a_fire_whose_ticks_are_all_skipped_moves_the_schedule_on(b: &Backend) {
    let mut sc = every_second("skipper");
    sc.spec.overlap = Overlap::Skip;
    sc.last_tick = Some(T0);
    let sc = put(b, &sc).await;
    let rule = sc.spec.rule.recurrence().unwrap();
    // The previous tick's job still exists: the plan pushes nothing.
    let plan = sc.plan(&rule, T0 + SEC, true);
    assert_eq!(plan.skipped_overlap, 1);
    let fire = plan.fire.unwrap();
    assert!(fire.jobs.is_empty());
    assert_eq!(
        b.store.fire_schedule(&fire, T0 + SEC).await,
        Ok(FireOutcome::Fired {
            pushed: 0,
            existed: 0
        })
    );
    let after = b.store.get_schedule(&sid("skipper")).await.unwrap();
    assert_eq!(
        (after.next_tick, after.last_tick, after.version),
        (Some(T0 + 2 * SEC), Some(T0), 2)
    );
    assert!(
        b.store
            .reserve(&[topic("t")], 10, T0 + SEC)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn a_batch_of_fires_is_each_fire_as_if_alone(b: &Backend) {
    // fresh: due at T0 + 1 s. fired: its T0 + 1 s tick already fired (its plan is stale).
    // skipper: overlap skip, its previous tick's job still there. gone: deleted after it was
    // planned. dup: a job of its tick's id exists already.
    let rule = every_second("x").spec.rule.recurrence().unwrap();
    let fresh = put(b, &every_second("fresh")).await;
    let fired = put(b, &every_second("fired")).await;
    let mut skipper = every_second("skipper");
    skipper.spec.overlap = Overlap::Skip;
    skipper.last_tick = Some(T0);
    let skipper = put(b, &skipper).await;
    let gone = put(b, &every_second("gone")).await;
    let dup = put(b, &every_second("dup")).await;
    let now = T0 + SEC;
    push(b, job("t", &format!("skipper@{T0}"), "previous", T0), T0).await;
    push(
        b,
        job("other", &format!("dup@{now}"), "mine", T0 + HOUR),
        T0,
    )
    .await;

    let fired_plan = fired.plan(&rule, now, false).fire.unwrap();
    assert!(matches!(
        b.store.fire_schedule(&fired_plan, now).await,
        Ok(FireOutcome::Fired { pushed: 1, .. })
    ));
    let skip_plan = skipper.plan(&rule, now, true);
    assert_eq!(skip_plan.skipped_overlap, 1);
    let fires = vec![
        fresh.plan(&rule, now, false).fire.unwrap(),
        fired_plan,
        skip_plan.fire.unwrap(),
        gone.plan(&rule, now, false).fire.unwrap(),
        dup.plan(&rule, now, false).fire.unwrap(),
    ];
    b.store.delete_schedule(&sid("gone")).await.unwrap();
    assert_eq!(
        b.store.fire_schedules(&fires, now).await,
        Ok(vec![
            FireOutcome::Fired {
                pushed: 1,
                existed: 0
            },
            FireOutcome::Stale,
            FireOutcome::Fired {
                pushed: 0,
                existed: 0
            },
            FireOutcome::Stale,
            FireOutcome::Fired {
                pushed: 0,
                existed: 1
            },
        ])
    );
    // Each as alone: the fresh tick's job, the schedules moved on, the deleted one not back.
    let j = b.store.get(&id(&format!("fresh@{now}"))).await.unwrap();
    assert_eq!((j.spec.run_at, j.state), (now, JobState::Ready));
    for (name, version, last) in [
        ("fresh", 2, Some(now)),
        ("fired", 2, Some(now)),
        ("skipper", 2, Some(T0)),
        ("dup", 2, Some(now)),
    ] {
        let sc = b.store.get_schedule(&sid(name)).await.unwrap();
        assert_eq!(
            (sc.version, sc.next_tick, sc.last_tick),
            (version, Some(now + SEC), last),
            "{name}"
        );
    }
    assert_eq!(
        b.store.get_schedule(&sid("gone")).await,
        Err(StoreError::NotFound)
    );
    assert_eq!(
        b.store.get(&id(&format!("gone@{now}"))).await,
        Err(StoreError::NotFound)
    );
    assert_eq!(
        b.store
            .get(&id(&format!("dup@{now}")))
            .await
            .unwrap()
            .spec
            .body,
        "mine"
    );
    // One job each: the fresh and fired ticks, the skipper's previous job, the dup's own.
    let ready = b.store.reserve(&[topic("t")], 10, now).await.unwrap();
    let mut ids: Vec<String> = ready.iter().map(|j| j.spec.id.to_string()).collect();
    ids.sort();
    assert_eq!(
        ids,
        [
            format!("fired@{now}"),
            format!("fresh@{now}"),
            format!("skipper@{T0}"),
        ]
    );
    // The same batch again changes nothing.
    assert_eq!(
        b.store.fire_schedules(&fires, now).await,
        Ok(vec![FireOutcome::Stale; 5])
    );
    assert_eq!(b.store.fire_schedules(&[], now).await, Ok(Vec::new()));
}

async fn racing_batches_push_each_tick_once(b: &Backend) {
    let names: Vec<String> = (0..20).map(|k| format!("many-{k}")).collect();
    for n in &names {
        put(b, &every_second(n)).await;
    }
    let rule = every_second("x").spec.rule.recurrence().unwrap();
    let now = T0 + SEC;
    let mut fires = Vec::new();
    for n in &names {
        let sc = b.store.get_schedule(&sid(n)).await.unwrap();
        fires.push(sc.plan(&rule, now, false).fire.unwrap());
    }
    // Four firers with overlapping batches, all at once.
    let batches = [&fires[0..10], &fires[5..15], &fires[10..20], &fires[..]];
    let outcomes =
        futures::future::join_all(batches.iter().map(|f| b.store.fire_schedules(f, now))).await;
    let mut won = vec![0; names.len()];
    for (batch, out) in batches.iter().zip(&outcomes) {
        let out = out.as_ref().unwrap();
        assert_eq!(out.len(), batch.len());
        for (fire, o) in batch.iter().zip(out) {
            if matches!(o, FireOutcome::Fired { .. }) {
                won[names.iter().position(|n| n == fire.id.as_str()).unwrap()] += 1;
            }
        }
    }
    assert_eq!(won, vec![1; names.len()], "{outcomes:?}");
    let jobs = b.store.reserve(&[topic("t")], 100, now).await.unwrap();
    assert_eq!(jobs.len(), names.len(), "one job per tick");
}

/// A tick fired ahead (docs/schedules.md): its job is stored delayed until the tick and handed
/// out at it, never before; a replace that keeps the tick keeps its job; a pause, a replace
/// that brings the tick back (to fire it again) and a delete withdraw the job while it waits,
/// in the change itself; a job already handed out stays.
async fn a_tick_fired_ahead_waits_for_it_and_a_change_that_drops_it_withdraws_it(b: &Backend) {
    let sc = put(b, &every_second("ah")).await;
    let rule = sc.spec.rule.recurrence().unwrap();
    let tick = T0 + SEC;
    let job_id = id(&format!("ah@{tick}"));
    let fire_ahead = |sc: &Schedule, now| {
        let plan = sc.plan_ahead(&rule, now, false);
        assert_eq!(plan.ahead, 1, "{plan:?}");
        plan.fire.unwrap()
    };
    let now = T0 + 100;
    let fire = fire_ahead(&sc, now);
    assert_eq!(fire.jobs.len(), 1);
    assert_eq!(
        b.store
            .fire_schedules(std::slice::from_ref(&fire), now)
            .await,
        Ok(vec![FireOutcome::Fired {
            pushed: 1,
            existed: 0
        }])
    );
    let j = b.store.get(&job_id).await.unwrap();
    assert_eq!((j.state, j.spec.run_at), (JobState::Delayed, tick));
    let fired = b.store.get_schedule(&sid("ah")).await.unwrap();
    assert_eq!(
        (fired.next_tick, fired.last_tick),
        (Some(tick + SEC), Some(tick))
    );
    assert_eq!(fired.ahead_tick(now), Some(tick));

    // A replace that keeps the tick as its last and moves past it keeps its job.
    let kept = b
        .store
        .put_schedule(&fired, Some(fired.version))
        .await
        .unwrap();
    assert_eq!(
        b.store.get(&job_id).await.map(|j| j.state),
        Ok(JobState::Delayed)
    );

    // A pause withdraws it.
    let mut paused = kept.clone();
    paused.spec.paused = true;
    paused.last_tick = None;
    let paused = b
        .store
        .put_schedule(&paused, Some(kept.version))
        .await
        .unwrap();
    assert_eq!(b.store.get(&job_id).await, Err(StoreError::NotFound));

    // Resumed before the tick: the tick fires ahead again (its id is free again, on Redis
    // too: the shard's mark went back with the job).
    let mut resumed = paused.clone();
    resumed.spec.paused = false;
    resumed.next_tick = Some(tick);
    let resumed = b
        .store
        .put_schedule(&resumed, Some(paused.version))
        .await
        .unwrap();
    let fire = fire_ahead(&resumed, now + 1);
    assert_eq!(
        b.store
            .fire_schedules(std::slice::from_ref(&fire), now + 1)
            .await,
        Ok(vec![FireOutcome::Fired {
            pushed: 1,
            existed: 0
        }])
    );
    assert_eq!(
        b.store.get(&job_id).await.map(|j| j.state),
        Ok(JobState::Delayed)
    );

    // A replace that brings the tick back (a new job template: fired again) withdraws it.
    let current = b.store.get_schedule(&sid("ah")).await.unwrap();
    let mut changed = current.clone();
    changed.spec.job.body = "{\"tick\":2}".into();
    changed.next_tick = Some(tick);
    let changed = b
        .store
        .put_schedule(&changed, Some(current.version))
        .await
        .unwrap();
    assert_eq!(b.store.get(&job_id).await, Err(StoreError::NotFound));
    let fire = fire_ahead(&changed, now + 2);
    b.store
        .fire_schedules(std::slice::from_ref(&fire), now + 2)
        .await
        .unwrap();
    assert_eq!(
        b.store.get(&job_id).await.map(|j| j.spec.body),
        Ok("{\"tick\":2}".to_string())
    );

    // Never handed out before its tick; at the tick, the timer makes it ready.
    let ts = [topic("t")];
    assert!(b.store.reserve(&ts, 10, tick - 1).await.unwrap().is_empty());
    b.store.tick(tick - 1, 100).await.unwrap();
    assert!(b.store.reserve(&ts, 10, tick - 1).await.unwrap().is_empty());
    b.store.tick(tick, 100).await.unwrap();
    let got = b.store.reserve(&ts, 10, tick).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].spec.id, job_id);
    // Handed out, then released with a delay (delayed again, attempt 1): a delete of the
    // schedule leaves it, as it leaves every job it pushed.
    b.store
        .release(&job_id, Some(5 * SEC), tick + 1)
        .await
        .unwrap();
    b.store.delete_schedule(&sid("ah")).await.unwrap();
    assert_eq!(b.store.get(&job_id).await.map(|j| j.attempts), Ok(1));

    // A delete withdraws a tick ahead still waiting.
    let sc = put(b, &every_second("ah2")).await;
    let fire = fire_ahead(&sc, now);
    b.store
        .fire_schedules(std::slice::from_ref(&fire), now)
        .await
        .unwrap();
    let job2 = id(&format!("ah2@{tick}"));
    assert!(b.store.get(&job2).await.is_ok());
    b.store.delete_schedule(&sid("ah2")).await.unwrap();
    assert_eq!(b.store.get(&job2).await, Err(StoreError::NotFound));
}

/// The jobs of one tick fired ahead for several schedules (one of another priority) are delayed
/// jobs in every view until the timer reaches the tick, and ready jobs in every view after:
/// counts, both listings, get, the schedule of what fires next; one deleted before the tick
/// leaves every count.
async fn ticks_fired_ahead_are_delayed_in_every_view_until_the_timer_reaches_them(b: &Backend) {
    let tick = T0 + SEC;
    let now = T0 + 100;
    let names = ["v1", "v2", "v3", "v4"];
    let mut fires = Vec::new();
    for name in names {
        let mut sc = every_second(name);
        if name == "v4" {
            sc.spec.job.priority = 7;
        }
        let sc = put(b, &sc).await;
        let rule = sc.spec.rule.recurrence().unwrap();
        fires.push(sc.plan_ahead(&rule, now, false).fire.unwrap());
    }
    let fired = b.store.fire_schedules(&fires, now).await.unwrap();
    assert!(
        fired.iter().all(|f| *f
            == FireOutcome::Fired {
                pushed: 1,
                existed: 0
            }),
        "{fired:?}"
    );
    let job_id = |n: &str| format!("{n}@{tick}");
    let counts = || async {
        let stats = b.store.stats().await.unwrap();
        let c = stats.topics.get(&topic("t")).copied().unwrap_or_default();
        (c.delayed, c.ready, c.reserved)
    };
    // T0 is 20 s into its minute: the tick's minute starts at T0 - 20 s.
    let minute = T0 - T0 % 60_000;
    let fires_next = || async {
        b.store
            .schedule(Some(&topic("t")), minute, minute + 60_000, 60_000)
            .await
            .unwrap()
    };

    assert_eq!(counts().await, (4, 0, 0));
    assert_eq!(fires_next().await, [4]);
    assert_eq!(
        walk(b, "t", JobState::Delayed, 3).await,
        names.map(job_id),
        "by run_at, ties by id"
    );
    assert!(walk(b, "t", JobState::Ready, 3).await.is_empty());
    for n in names {
        assert_eq!(state(b, &job_id(n)).await, Ok(JobState::Delayed));
    }
    assert_eq!(
        b.store.delete(&id(&job_id("v2"))).await,
        Ok(JobState::Delayed)
    );
    assert_eq!(counts().await, (3, 0, 0));
    assert_eq!(fires_next().await, [3]);
    assert!(reserve_ids(b, &["t"], 10, tick - 1).await.is_empty());

    let outcome = b.store.tick(tick, 100).await.unwrap();
    assert_eq!(outcome.promoted, 3);
    assert_eq!(counts().await, (0, 3, 0));
    assert_eq!(fires_next().await, [0]);
    assert!(walk(b, "t", JobState::Delayed, 3).await.is_empty());
    // Priority first (v4's 7 before the default); v1 and v3 by their push stamps, which a
    // store with several shards gives per shard.
    let by_priority = |mut ids: Vec<String>| {
        ids[1..].sort();
        ids
    };
    let ready = ["v4", "v1", "v3"].map(job_id);
    assert_eq!(by_priority(walk(b, "t", JobState::Ready, 2).await), ready);
    for n in ["v1", "v3", "v4"] {
        assert_eq!(state(b, &job_id(n)).await, Ok(JobState::Ready));
    }
    assert_eq!(by_priority(reserve_ids(b, &["t"], 10, tick).await), ready);
    assert_eq!(counts().await, (0, 0, 3));
}

/// Puts schedules every second from T0 named `prefix`0.. (`n` of them), their jobs on topic `t`
/// with priority `prio`, and fires their first tick (T0 + 1 s) ahead, at `now`.
async fn fire_first_ticks(b: &Backend, prefix: &str, n: usize, prio: u32, now: UnixMillis) {
    let mut fires = Vec::new();
    for i in 0..n {
        let mut sc = every_second(&format!("{prefix}{i}"));
        sc.spec.job.priority = prio;
        let sc = put(b, &sc).await;
        let rule = sc.spec.rule.recurrence().unwrap();
        fires.push(sc.plan_ahead(&rule, now, false).fire.unwrap());
    }
    let fired = b.store.fire_schedules(&fires, now).await.unwrap();
    assert_eq!(fired.len(), n);
    assert!(
        fired
            .iter()
            .all(|f| matches!(f, FireOutcome::Fired { pushed: 1, .. }))
    );
}

/// The jobs of a tick fired ahead are made ready at the tick by the timer's passes; while they
/// wait, they hold back no ready job of a later priority. (Memory, embedded and Redis promote
/// them together, in one entry of a pass, or in a reserve once the tick has come:
/// tests/store/redis_store/ahead.rs and the engine's unit tests.)
async fn a_tick_s_jobs_fired_ahead_are_promoted_at_the_tick_and_hold_back_nothing(b: &Backend) {
    let tick = T0 + SEC;
    fire_first_ticks(b, "p", 300, 1, T0 + 100).await;
    let mut later = job("t", "later-priority", "", T0);
    later.priority = 5;
    push(b, later, T0).await;
    assert_eq!(
        reserve_ids(b, &["t"], 10, T0 + 200).await,
        ["later-priority"]
    );
    let mut promoted = 0;
    for _ in 0..1000 {
        let out = b.store.tick(tick, 10).await.unwrap();
        promoted += out.promoted;
        if out.next_due.is_none_or(|t| t > tick) {
            break;
        }
    }
    assert_eq!(promoted, 300);
    assert_eq!(
        b.store
            .reserve(&[topic("t")], 1000, tick)
            .await
            .unwrap()
            .len(),
        300
    );
}

/// A paused topic whose only jobs are a tick's fired ahead holds nothing back before the tick
/// (no job could go out: its held-back count stays 0), and holds them back after it as any
/// ready jobs.
async fn jobs_fired_ahead_count_as_held_back_by_a_pause_only_from_their_tick(b: &Backend) {
    let pause = SettingsChange {
        paused: Some(true),
        ..SettingsChange::default()
    };
    b.store.set_settings(&topic("t"), pause, T0).await.unwrap();
    fire_first_ticks(b, "h", 3, 1024, T0 + 100).await;
    let held_by_pause = || async {
        let stats = b.store.stats().await.unwrap();
        stats
            .held
            .get(&topic("t"))
            .copied()
            .unwrap_or_default()
            .paused
    };
    for _ in 0..3 {
        assert!(reserve_ids(b, &["t"], 10, T0 + 200).await.is_empty());
    }
    assert_eq!(held_by_pause().await, 0);
    b.store.tick(T0 + SEC, 100).await.unwrap();
    assert!(reserve_ids(b, &["t"], 10, T0 + SEC).await.is_empty());
    assert!(held_by_pause().await >= 1);
}

backend_tests!(
    jobs_fired_ahead_count_as_held_back_by_a_pause_only_from_their_tick,
    a_tick_s_jobs_fired_ahead_are_promoted_at_the_tick_and_hold_back_nothing,
    ticks_fired_ahead_are_delayed_in_every_view_until_the_timer_reaches_them,
    a_tick_fired_ahead_waits_for_it_and_a_change_that_drops_it_withdraws_it,
    a_fire_whose_ticks_are_all_skipped_moves_the_schedule_on,
    schedules_are_put_read_listed_and_deleted,
    due_schedules_are_the_unpaused_ones_whose_tick_came,
    a_fire_pushes_the_tick_s_job_and_moves_the_schedule_on,
    racing_fires_push_each_tick_once_even_when_its_job_is_finished_at_once,
    a_fire_leaves_a_job_of_the_same_id_as_it_is,
    a_batch_of_fires_is_each_fire_as_if_alone,
    racing_batches_push_each_tick_once,
);
