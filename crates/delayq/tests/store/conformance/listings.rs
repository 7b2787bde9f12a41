//! What a store counts and lists: `stats`, pages of a queue's jobs in each state's order (stable
//! while jobs come and go), and the schedule of delayed jobs per step.

use super::*;

async fn stats_count_jobs_by_topic_and_state(b: &Backend) {
    push(b, job("a", "a1", "", T0 + 30 * SEC), T0).await;
    push(b, job("a", "a2", "", T0 + 20 * SEC), T0).await;
    push(b, job("a", "a3", "", T0), T0).await;
    push(b, job("b", "b1", "", T0), T0).await;
    push(b, job("b", "b2", "", T0), T0).await;
    reserve_ids(b, &["b"], 1, T0).await;
    b.store.bury(&id("b2"), None, T0).await.unwrap();
    let stats = b.store.stats().await.unwrap();
    let a = stats.topics[&topic("a")];
    let bb = stats.topics[&topic("b")];
    assert_eq!((a.delayed, a.ready, a.reserved, a.dead), (2, 1, 0, 0));
    assert_eq!((bb.delayed, bb.ready, bb.reserved, bb.dead), (0, 0, 1, 1));
    assert_eq!(stats.next_due, Some(T0 + 20 * SEC));
}

/// The listing order of each state, with other topics' and other states' jobs around: delayed
/// by run_at (near and far, ties by id), ready in delivery order, reserved by deadline, dead
/// oldest burial first; callback jobs are listed apart under their topic's callback queue.
async fn listing_pages_each_state_in_its_order(b: &Backend) {
    let t = "lst";
    // Delayed: near and far, two with the same run_at.
    for (i, at) in [
        ("d3", 3 * HOUR),
        ("d1", 30 * SEC),
        ("d2b", 90 * SEC),
        ("d2a", 90 * SEC),
        ("d4", 50 * HOUR),
    ] {
        push(b, job(t, i, "", T0 + at), T0).await;
        push(b, job("other", &format!("o{i}"), "", T0 + at), T0).await;
    }
    // Ready: priorities and push order.
    for (i, p) in [
        ("r1", 5),
        ("r2", 1),
        ("r3", 5),
        ("r4", 9),
        ("x1", 0),
        ("x2", 0),
    ] {
        let mut spec = job(t, i, "", T0);
        spec.priority = p;
        push(b, spec, T0).await;
    }
    // Reserved: x1 and x2 (priority 0) with different TTRs.
    let got = b.store.reserve(&[topic(t)], 1, T0).await.unwrap();
    assert_eq!(got[0].spec.id.as_str(), "x1");
    b.store.touch(&id("x1"), T0 + 20 * SEC).await.unwrap();
    let got = b.store.reserve(&[topic(t)], 1, T0 + SEC).await.unwrap();
    assert_eq!(got[0].spec.id.as_str(), "x2");
    // Dead: buried in this order.
    for (k, i) in ["z2", "z1", "z3"].iter().enumerate() {
        push(b, job(t, i, "", T0 + HOUR), T0).await;
        b.store
            .bury(&id(i), None, T0 + 2 * SEC + k as u64)
            .await
            .unwrap();
    }
    push(b, callback_job(t, "cb2", T0 + 2 * HOUR), T0).await;
    push(b, callback_job(t, "cb1", T0 + 2 * HOUR), T0).await;
    push(b, callback_job(t, "cb0", T0 + HOUR), T0).await;

    for limit in [1, 2, 3, 100] {
        assert_eq!(
            walk(b, t, JobState::Delayed, limit).await,
            ["d1", "d2a", "d2b", "d3", "d4"],
            "limit {limit}"
        );
        assert_eq!(
            walk(b, t, JobState::Ready, limit).await,
            ["r2", "r1", "r3", "r4"]
        );
        assert_eq!(walk(b, t, JobState::Reserved, limit).await, ["x2", "x1"]);
        assert_eq!(walk(b, t, JobState::Dead, limit).await, ["z2", "z1", "z3"]);
        assert_eq!(
            walk(b, "lst,callback", JobState::Delayed, limit).await,
            ["cb0", "cb1", "cb2"]
        );
    }
    assert!(walk(b, "nothing", JobState::Ready, 10).await.is_empty());
    assert!(walk(b, "lst,callback", JobState::Dead, 10).await.is_empty());
    // A full page is followed by a cursor; the last page has none.
    let page = b
        .store
        .list(&topic(t), JobState::Ready, None, 4)
        .await
        .unwrap();
    assert_eq!(page.jobs.len(), 4);
    if let Some(k) = page.next {
        let rest = b
            .store
            .list(&topic(t), JobState::Ready, Some(&k), 4)
            .await
            .unwrap();
        assert_eq!((rest.jobs.len(), rest.next), (0, None));
    }
    // Every field as `get` has it.
    let page = b
        .store
        .list(&topic(t), JobState::Reserved, None, 1)
        .await
        .unwrap();
    assert_eq!(page.jobs[0], b.store.get(&id("x2")).await.unwrap());
}

/// A walk over the pages while other tasks push and finish jobs of the same topic and state
/// (before and after the cursor): every job that stays the whole walk is listed exactly once,
/// in order.
async fn paging_is_stable_under_concurrent_pushes_and_finishes(b: &Backend) {
    let t = "walk";
    let spread = |k: u64| (k * 7_919) % (3 * HOUR);
    let mut specs = Vec::new();
    for k in 0..400u64 {
        let i = format!("s{k:03}");
        // Delayed jobs near and far; ready ones with a spread of priorities.
        specs.push(job(t, &i, "", T0 + 1 + spread(k)));
        let mut r = job(t, &format!("r{k:03}"), "", T0);
        r.priority = (k % 7) as u32;
        specs.push(r);
    }
    b.store
        .push_batch(specs, PushMode::Reject, T0)
        .await
        .unwrap();
    for state in [JobState::Delayed, JobState::Ready] {
        let store = b.store.clone();
        let churn = tokio::spawn(async move {
            for k in 0..300u64 {
                let i = format!("c{}{k:03}", state.as_str());
                let at = if state == JobState::Delayed {
                    T0 + 1 + spread(k * 13)
                } else {
                    T0
                };
                let mut spec = job(t, &i, "", at);
                spec.priority = (k % 5) as u32;
                store.push(spec, PushMode::Reject, T0).await.unwrap();
                if k % 2 == 0 {
                    store.delete(&id(&i)).await.unwrap();
                }
                if k % 10 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        });
        let listed = walk(b, t, state, 7).await;
        churn.await.unwrap();
        let prefix = if state == JobState::Delayed { "s" } else { "r" };
        let mine: Vec<&String> = listed.iter().filter(|i| i.starts_with(prefix)).collect();
        let unique: HashSet<&&String> = mine.iter().collect();
        assert_eq!(unique.len(), mine.len(), "{state:?}: a job listed twice");
        assert_eq!(mine.len(), 400, "{state:?}: a job skipped");
    }
}

/// The schedule counts of a topic and of every topic, minute by minute over an hour and hour
/// by hour over a day, against a count of the same jobs through `get`, after jobs moved
/// between states, were rescheduled, deleted and promoted.
async fn schedule_counts_match_a_brute_force_count(b: &Backend) {
    const MIN: u64 = 60 * SEC;
    let m0 = T0 - T0 % MIN;
    let mut ids = Vec::new();
    let mut specs = Vec::new();
    for k in 0..600u64 {
        let t = ["sa", "sb", "sc"][(k % 3) as usize];
        let at = m0 + (k * 104_729) % (26 * HOUR);
        let i = format!("q{k:03}");
        if k % 11 == 0 {
            specs.push(callback_job(t, &i, at));
        } else {
            specs.push(job(t, &i, "", at));
        }
        ids.push(i);
    }
    b.store
        .push_batch(specs, PushMode::Reject, m0)
        .await
        .unwrap();
    for (n, i) in ids.iter().enumerate() {
        match n % 9 {
            0 => drop(b.store.delete(&id(i)).await),
            1 => drop(b.store.bury(&id(i), None, m0).await),
            2 => {
                let change = Reschedule {
                    run_at: m0 + (n as u64 * 7_777) % (30 * HOUR),
                    ..Reschedule::default()
                };
                drop(b.store.reschedule(&id(i), change, m0).await);
            }
            _ => {}
        }
    }
    // Promote what falls due in the first ten minutes.
    let now = m0 + 10 * MIN;
    while b
        .store
        .tick(now, 1000)
        .await
        .unwrap()
        .next_due
        .is_some_and(|t| t <= now)
    {}

    let mut jobs = Vec::new();
    for i in &ids {
        if let Ok(j) = b.store.get(&id(i)).await {
            jobs.push(j);
        }
    }
    for (from, to, step) in [
        (m0, m0 + HOUR, MIN),
        (m0, m0 + 24 * HOUR, HOUR),
        (m0 + 5 * MIN, m0 + 31 * HOUR, 7 * MIN),
    ] {
        for t in [Some("sa"), Some("sb"), None, Some("none")] {
            let want: Vec<u64> = (0..(to - from).div_ceil(step))
                .map(|s| {
                    let lo = from + s * step;
                    let hi = (lo + step).min(to);
                    jobs.iter()
                        .filter(|j| j.state == JobState::Delayed)
                        .filter(|j| t.is_none_or(|t| j.spec.topic.as_str() == t))
                        .filter(|j| (lo..hi).contains(&j.spec.run_at))
                        .count() as u64
                })
                .collect();
            let topic = t.map(topic);
            let got = b
                .store
                .schedule(topic.as_ref(), from, to, step)
                .await
                .unwrap();
            assert_eq!(got, want, "{t:?} from {from} to {to} by {step}");
        }
    }
    assert!(
        jobs.iter()
            .any(|j| j.state == JobState::Delayed && j.spec.callback.is_some())
    );
}

backend_tests!(
    stats_count_jobs_by_topic_and_state,
    listing_pages_each_state_in_its_order,
    paging_is_stable_under_concurrent_pushes_and_finishes,
    schedule_counts_match_a_brute_force_count,
);
