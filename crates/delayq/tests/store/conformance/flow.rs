//! Flow control (`set_settings`, `settings`, and what `reserve` does with them): a paused
//! topic hands out nothing, `max_in_flight` bounds its reserved jobs (pull and callback), a
//! rate limit is a token bucket over its hand-outs; held-back jobs stay ready and go out, in
//! order, as soon as the limit allows, announced by a `Ready` event (a resume, a reservation
//! that ends) or by the timer (the bucket's next token).
//!
//! On a Redis store with several shards each shard applies its share of a limit to its own
//! jobs (docs/flow-control.md), so a bound is exact there only when it divides among the
//! shards; the tests use such limits where they hold every store to the same number, and say
//! where one store's answer is exact and another's only bounded.

use super::*;
use delayq::store::{RATE_UNIT, SettingsChange, TopicSettings};

/// Whether the store holds a topic's limits in one place (every store but Redis with several
/// shards, where each shard holds its share).
fn exact(b: &Backend) -> bool {
    !matches!(b.name, "redis" | "redis_cluster")
}

fn rate(per_s: u64) -> Option<Option<u64>> {
    Some(Some(per_s * RATE_UNIT))
}

async fn set(b: &Backend, t: &str, change: SettingsChange, now: UnixMillis) -> TopicSettings {
    b.store.set_settings(&topic(t), change, now).await.unwrap()
}

async fn settings_are_kept_merged_and_shown_in_stats_before_any_job(b: &Backend) {
    assert_eq!(
        b.store.settings(&topic("fresh")).await.unwrap(),
        TopicSettings::default()
    );
    let s = set(
        b,
        "fresh",
        SettingsChange {
            rate_micros: Some(Some(2_500_000)),
            max_in_flight: Some(Some(16)),
            ..SettingsChange::default()
        },
        T0,
    )
    .await;
    assert_eq!(s.rate_per_s(), Some(2.5));
    assert_eq!(
        s.burst(),
        Some(2),
        "the default burst is max(1, floor(rate))"
    );
    assert_eq!((s.paused, s.max_in_flight), (false, Some(16)));

    // Fields not given stay; a burst needs a rate and goes with it.
    let s = set(
        b,
        "fresh",
        SettingsChange {
            paused: Some(true),
            burst: Some(Some(7)),
            ..SettingsChange::default()
        },
        T0,
    )
    .await;
    assert_eq!(
        s,
        TopicSettings {
            paused: true,
            rate_micros: Some(2_500_000),
            burst: Some(7),
            max_in_flight: Some(16),
        }
    );
    assert_eq!(b.store.settings(&topic("fresh")).await.unwrap(), s);
    let stats = b.store.stats().await.unwrap();
    assert_eq!(stats.settings.get(&topic("fresh")), Some(&s));
    assert!(!stats.topics.contains_key(&topic("fresh")), "no job yet");

    let s = set(
        b,
        "fresh",
        SettingsChange {
            rate_micros: Some(None),
            ..SettingsChange::default()
        },
        T0,
    )
    .await;
    assert_eq!((s.rate_micros, s.burst, s.burst()), (None, None, None));

    // Back to the defaults: nothing is kept.
    let s = set(
        b,
        "fresh",
        SettingsChange {
            paused: Some(false),
            max_in_flight: Some(None),
            ..SettingsChange::default()
        },
        T0,
    )
    .await;
    assert!(s.is_default());
    let stats = b.store.stats().await.unwrap();
    assert!(!stats.settings.contains_key(&topic("fresh")));
}

async fn a_paused_topic_hands_out_nothing_and_its_jobs_go_out_in_order_on_resume(b: &Backend) {
    for (i, pri) in [("p-low", 9), ("p-high", 1), ("p-mid", 5)] {
        let mut spec = job("paused", i, "", T0);
        spec.priority = pri;
        push(b, spec, T0).await;
    }
    push(b, callback_job("paused", "p-call", T0), T0).await;
    push(b, job("open", "o", "", T0), T0).await;
    set(
        b,
        "paused",
        SettingsChange {
            paused: Some(true),
            ..SettingsChange::default()
        },
        T0,
    )
    .await;

    // A reserve over several topics skips the paused one; its callback queue too.
    let queue = topic("paused").callback_queue();
    let both = [topic("paused"), queue.clone(), topic("open")];
    let got = b.store.reserve(&both, 10, T0).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|j| j.spec.id.as_str()).collect();
    assert_eq!(ids, ["o"]);
    // Pushes are taken and timed as usual, and the rest works on its jobs.
    push(b, job("paused", "p-later", "", T0 + SEC), T0).await;
    let tick = b.store.tick(T0 + SEC, 100).await.unwrap();
    assert_eq!(tick.promoted, 1);
    assert!(
        reserve_ids(b, &["paused"], 10, T0 + 5 * SEC)
            .await
            .is_empty()
    );
    assert_eq!(state(b, "p-mid").await, Ok(JobState::Ready));
    b.store
        .bury(&id("p-mid"), None, T0 + 5 * SEC)
        .await
        .unwrap();
    b.store.kick(&id("p-mid"), T0 + 5 * SEC).await.unwrap();
    let stats = b.store.stats().await.unwrap();
    assert_eq!(stats.topics[&topic("paused")].ready, 4);
    assert!(stats.held[&topic("paused")].paused >= 1);

    // The resume is announced, and every job goes out in its usual order.
    let mut rx = b.store.subscribe();
    set(
        b,
        "paused",
        SettingsChange {
            paused: Some(false),
            ..SettingsChange::default()
        },
        T0 + 6 * SEC,
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let ev = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .expect("a Ready event for the resumed topic within 10 s")
            .unwrap();
        if ev == StoreEvent::Ready(topic("paused")) {
            break;
        }
    }
    let order = reserve_ids(b, &["paused"], 10, T0 + 6 * SEC).await;
    assert_eq!(order, ["p-high", "p-mid", "p-low", "p-later"]);
    let calls = b.store.reserve(&[queue], 10, T0 + 6 * SEC).await.unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].spec.id, id("p-call"));
}

async fn max_in_flight_counts_pull_and_callback_reservations_and_frees_on_finish(b: &Backend) {
    // 8 divides among the 8 shards of the sharded stores: the same bound everywhere.
    for i in 0..20 {
        push(b, job("lim", &format!("l{i:02}"), "", T0), T0).await;
        push(b, callback_job("lim", &format!("c{i:02}"), T0), T0).await;
    }
    set(
        b,
        "lim",
        SettingsChange {
            max_in_flight: Some(Some(8)),
            ..SettingsChange::default()
        },
        T0,
    )
    .await;
    let queues = [topic("lim"), topic("lim").callback_queue()];
    let first = b.store.reserve(&queues, 40, T0).await.unwrap();
    assert!(!first.is_empty() && first.len() <= 8, "{}", first.len());
    if exact(b) {
        assert_eq!(first.len(), 8);
    }
    assert!(b.store.reserve(&queues, 40, T0).await.unwrap().is_empty());
    let stats = b.store.stats().await.unwrap();
    assert!(stats.held[&topic("lim")].max_in_flight >= 1);

    // A reservation that ends lets one more out, announced to waiting consumers.
    let mut rx = b.store.subscribe();
    let done = &first[0];
    b.store.finish(&done.spec.id).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let queue = done.spec.queue();
    loop {
        let ev = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .expect("a Ready event after the finish within 10 s")
            .unwrap();
        if ev == StoreEvent::Ready(queue.clone()) {
            break;
        }
    }
    let next = b.store.reserve(&queues, 40, T0).await.unwrap();
    assert!(next.len() <= 1);
    if exact(b) {
        assert_eq!(next.len(), 1);
    }
    // Released and expired reservations free room too, and in the end every job goes out
    // once, never more than 8 at a time.
    let mut held: Vec<Job> = first[1..].iter().chain(&next).cloned().collect();
    let released = held.pop().unwrap();
    b.store.release(&released.spec.id, None, T0).await.unwrap();
    let mut seen: HashSet<String> = first.iter().map(|j| j.spec.id.to_string()).collect();
    seen.extend(next.iter().map(|j| j.spec.id.to_string()));
    let mut now = T0;
    while seen.len() < 40 {
        now += SEC;
        assert!(now < T0 + 600 * SEC, "only {} of 40 went out", seen.len());
        for j in held.drain(..) {
            b.store.finish(&j.spec.id).await.unwrap();
        }
        held = b.store.reserve(&queues, 40, now).await.unwrap();
        assert!(held.len() <= 8, "{} in flight", held.len());
        for j in &held {
            seen.insert(j.spec.id.to_string());
        }
    }
}

async fn a_rate_limit_hands_out_a_burst_then_one_per_token_and_wakes_the_timer(b: &Backend) {
    // 80/s with a burst of 8: 10/s and 1 on each of 8 shards, the same sums everywhere.
    for i in 0..200 {
        push(b, job("slow", &format!("s{i:03}"), "", T0), T0).await;
    }
    set(
        b,
        "slow",
        SettingsChange {
            rate_micros: rate(80),
            burst: Some(Some(8)),
            ..SettingsChange::default()
        },
        T0,
    )
    .await;
    let first = reserve_ids(b, &["slow"], 200, T0).await;
    assert!(!first.is_empty() && first.len() <= 8, "{}", first.len());
    if exact(b) {
        assert_eq!(first.len(), 8);
    }
    assert!(reserve_ids(b, &["slow"], 200, T0).await.is_empty());

    // The timer wakes for the next token (1/80 s, or 1/10 s on a shard) and announces it.
    let mut rx = b.store.subscribe();
    let tick = b.store.tick(T0, 100).await.unwrap();
    let wake = tick.next_due.expect("a wake-up for the next token");
    assert!(wake > T0 && wake <= T0 + 100, "{}", wake - T0);
    b.store.tick(wake, 100).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let ev = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .expect("a Ready event at the next token within 10 s")
            .unwrap();
        if ev == StoreEvent::Ready(topic("slow")) {
            break;
        }
    }

    // Over 2 s, never more than the burst plus the rate: a consumer asking every 10 ms.
    let mut total = first.len() as u64;
    let mut now = T0;
    while now < T0 + 2 * SEC {
        now += 10;
        total += reserve_ids(b, &["slow"], 200, now).await.len() as u64;
        let allowed = 8 + 80 * (now - T0) / SEC;
        assert!(total <= allowed, "{total} out by +{} ms", now - T0);
    }
    assert!(total >= 80, "only {total} out in 2 s");
    if exact(b) {
        assert!(total >= 8 + 80 * 2 - 2, "only {total} out in 2 s");
    }
    assert!(b.store.stats().await.unwrap().held[&topic("slow")].rate >= 1);
}

/// A held-back topic with more ready jobs than a reserve asks for does not hide the jobs of
/// the other topics it names.
async fn a_held_back_topic_does_not_hide_the_next_topics_jobs(b: &Backend) {
    for i in 0..40 {
        push(b, job("busy", &format!("b{i:02}"), "", T0), T0).await;
    }
    for i in 0..6 {
        push(b, job("calm", &format!("c{i}"), "", T0), T0).await;
    }
    set(
        b,
        "busy",
        SettingsChange {
            paused: Some(true),
            ..SettingsChange::default()
        },
        T0,
    )
    .await;
    let mut got = reserve_ids(b, &["busy", "calm"], 5, T0).await;
    got.sort();
    assert_eq!(got, ["c0", "c1", "c2", "c3", "c4"]);
}

backend_tests!(
    a_held_back_topic_does_not_hide_the_next_topics_jobs,
    settings_are_kept_merged_and_shown_in_stats_before_any_job,
    a_paused_topic_hands_out_nothing_and_its_jobs_go_out_in_order_on_resume,
    max_in_flight_counts_pull_and_callback_reservations_and_frees_on_finish,
    a_rate_limit_hands_out_a_burst_then_one_per_token_and_wakes_the_timer,
);
