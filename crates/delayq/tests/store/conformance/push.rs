//! `push` and `push_batch`: every field stored as given, byte for byte; an existing id refused
//! or replaced (the old version never delivered again); ids and topics that look like internal
//! names; `get` of an unknown job.

use super::*;

async fn push_then_get_returns_every_field(b: &Backend) {
    let mut spec = job("mail", "m1", "  {\"to\": \"ü\"}\n ", T0 + 5 * SEC);
    spec.ttr_ms = 30 * SEC;
    spec.priority = 7;
    spec.max_attempts = 3;
    spec.backoff_ms = vec![15 * SEC, 180 * SEC];
    assert_eq!(push(b, spec.clone(), T0).await, PushOutcome::Created);

    let got = b.store.get(&id("m1")).await.unwrap();
    assert_eq!(
        got.spec, spec,
        "stored fields differ (body must be byte-for-byte)"
    );
    assert_eq!(got.state, JobState::Delayed);
    assert_eq!(got.attempts, 0);
    assert_eq!(got.reserved_until, None);
}

async fn unknown_job_is_not_found(b: &Backend) {
    assert_eq!(state(b, "nope").await, Err(StoreError::NotFound));
    assert_eq!(b.store.finish(&id("nope")).await, Err(StoreError::NotFound));
    assert_eq!(b.store.delete(&id("nope")).await, Err(StoreError::NotFound));
    assert_eq!(
        b.store.release(&id("nope"), None, T0).await.unwrap_err(),
        StoreError::NotFound
    );
    assert_eq!(
        b.store.touch(&id("nope"), T0).await.unwrap_err(),
        StoreError::NotFound
    );
}

async fn pushing_an_existing_id_is_refused_without_replace(b: &Backend) {
    push(b, job("t", "j", "first", T0 + SEC), T0).await;
    let err = b
        .store
        .push(job("t", "j", "second", T0), PushMode::Reject, T0)
        .await;
    assert_eq!(err, Err(StoreError::Exists));
    // Ids are unique across topics.
    let err = b
        .store
        .push(job("other", "j", "third", T0), PushMode::Reject, T0)
        .await;
    assert_eq!(err, Err(StoreError::Exists));
    let got = b.store.get(&id("j")).await.unwrap();
    assert_eq!(got.spec.body, "first");
    assert_eq!(got.state, JobState::Delayed);
}

async fn replace_delivers_the_new_version_once_and_the_old_never(b: &Backend) {
    // Old version ready, new version delayed: nothing before the new due time.
    push(b, job("t", "a", "old", T0), T0).await;
    let out = b
        .store
        .push(job("t", "a", "new", T0 + SEC), PushMode::Replace, T0)
        .await
        .unwrap();
    assert_eq!(out, PushOutcome::Replaced(JobState::Ready));
    assert!(reserve_ids(b, &["t"], 10, T0).await.is_empty());

    // Old version delayed earlier than the new: the old due time must not fire.
    push(b, job("t", "b", "old", T0 + SEC), T0).await;
    b.store
        .push(job("t", "b", "new", T0 + 50 * SEC), PushMode::Replace, T0)
        .await
        .unwrap();
    b.store.tick(T0 + 2 * SEC, 100).await.unwrap();
    let got = b
        .store
        .reserve(&[topic("t")], 10, T0 + 2 * SEC)
        .await
        .unwrap();
    let got: Vec<_> = got.iter().map(|j| j.spec.id.as_str().to_string()).collect();
    assert_eq!(got, vec!["a"], "only a (due at T0+1s) is due at T0+2s");

    // Old version reserved: its TTR deadline must not redeliver anything.
    let mut spec = job("t", "c", "old", T0);
    spec.ttr_ms = SEC;
    push(b, spec, T0).await;
    b.store.tick(T0 + 2 * SEC, 100).await.unwrap();
    assert_eq!(reserve_ids(b, &["t"], 1, T0 + 2 * SEC).await, vec!["c"]);
    let out = b
        .store
        .push(
            job("t", "c", "new", T0 + 60 * SEC),
            PushMode::Replace,
            T0 + 2 * SEC,
        )
        .await
        .unwrap();
    assert_eq!(out, PushOutcome::Replaced(JobState::Reserved));
    b.store.tick(T0 + 10 * SEC, 100).await.unwrap();
    assert!(reserve_ids(b, &["t"], 10, T0 + 10 * SEC).await.is_empty());

    b.store.tick(T0 + 60 * SEC, 100).await.unwrap();
    let got = b
        .store
        .reserve(&[topic("t")], 10, T0 + 60 * SEC)
        .await
        .unwrap();
    let mut bodies: Vec<_> = got
        .iter()
        .map(|j| {
            (
                j.spec.id.as_str().to_string(),
                j.spec.body.clone(),
                j.attempts,
            )
        })
        .collect();
    bodies.sort();
    assert_eq!(
        bodies,
        vec![
            ("b".to_string(), "new".to_string(), 1),
            ("c".to_string(), "new".to_string(), 1)
        ]
    );
    let counts = b.store.stats().await.unwrap().topics[&topic("t")];
    assert_eq!(counts.reserved, 3, "a, b and c, once each");
    assert_eq!(counts.total(), 3);
}

async fn push_batch_reports_each_outcome(b: &Backend) {
    push(b, job("t", "dup", "", T0), T0).await;
    let out = b
        .store
        .push_batch(
            vec![
                job("t", "n1", "", T0),
                job("t", "dup", "", T0),
                job("u", "n2", "", T0 + SEC),
            ],
            PushMode::Reject,
            T0,
        )
        .await
        .unwrap();
    assert_eq!(
        out,
        vec![
            Ok(PushOutcome::Created),
            Err(StoreError::Exists),
            Ok(PushOutcome::Created)
        ]
    );
    assert_eq!(state(b, "n2").await, Ok(JobState::Delayed));
}

async fn bodies_round_trip_byte_for_byte(b: &Backend) {
    let bodies = [
        "",
        " ",
        "  padded  ",
        "line\nbreak\ttab\r\n",
        "nul\u{0}inside",
        "emoji 🎉 中文 ключ",
        "{\"json\": [1, 2, {\"a\": null}]}",
    ];
    for (i, body) in bodies.iter().enumerate() {
        push(b, job("t", &format!("b{i}"), body, T0), T0).await;
    }
    let big = "x".repeat(1 << 20);
    push(b, job("t", "big", &big, T0), T0).await;
    for (i, body) in bodies.iter().enumerate() {
        let j = b.store.get(&id(&format!("b{i}"))).await.unwrap();
        assert_eq!(j.spec.body, *body);
    }
    let got = b.store.reserve(&[topic("t")], 100, T0).await.unwrap();
    let big_got = got.iter().find(|j| j.spec.id.as_str() == "big").unwrap();
    assert_eq!(big_got.spec.body.len(), big.len());
}

async fn ids_and_topics_that_look_like_internal_names_are_plain_data(b: &Backend) {
    for (t, i) in [
        ("delayq", "delayq:{delayq:0}:jobs"),
        ("jobs", "{0}"),
        ("t:ready:x", "dq_queue_t"),
    ] {
        push(b, job(t, i, "x", T0), T0).await;
        assert_eq!(reserve_ids(b, &[t], 1, T0).await, vec![i.to_string()]);
        assert_eq!(b.store.finish(&id(i)).await, Ok(JobState::Reserved));
    }
    assert!(b.store.stats().await.unwrap().topics.is_empty());
}

backend_tests!(
    push_then_get_returns_every_field,
    unknown_job_is_not_found,
    pushing_an_existing_id_is_refused_without_replace,
    replace_delivers_the_new_version_once_and_the_old_never,
    push_batch_reports_each_outcome,
    bodies_round_trip_byte_for_byte,
    ids_and_topics_that_look_like_internal_names_are_plain_data,
);
