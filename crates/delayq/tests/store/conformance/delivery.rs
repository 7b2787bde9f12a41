//! Jobs delivered by the server rather than pulled: callback and publish jobs live in their
//! topic's callback queue, keep their target through every transition, retry along their
//! backoff, die, and are kicked back to that queue.

use super::*;

/// Callback jobs wait in their topic's callback queue: a consumer of the topic never gets one;
/// the callback queue hands them out, with a reservation of the timeout plus 5 s, and they
/// are counted apart.
async fn callback_jobs_are_only_in_their_topics_callback_queue(b: &Backend) {
    push(b, callback_job("orders", "cb1", T0), T0).await;
    push(b, job("orders", "pull1", "p", T0), T0).await;
    let got = b.store.get(&id("cb1")).await.unwrap();
    assert_eq!(
        got.spec,
        callback_job("orders", "cb1", T0),
        "every field kept"
    );
    let stats = b.store.stats().await.unwrap();
    assert_eq!(stats.topics[&topic("orders")].ready, 1);
    assert_eq!(stats.callbacks[&topic("orders")].ready, 1);

    assert_eq!(reserve_ids(b, &["orders"], 10, T0).await, ["pull1"]);
    assert!(reserve_ids(b, &["orders"], 10, T0).await.is_empty());
    let queue = topic("orders").callback_queue();
    let jobs = b
        .store
        .reserve(std::slice::from_ref(&queue), 10, T0)
        .await
        .unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].spec.id.as_str(), "cb1");
    assert_eq!(jobs[0].reserved_until, Some(T0 + 15 * SEC));
    assert_eq!(jobs[0].attempts, 1);
    assert!(b.store.reserve(&[queue], 10, T0).await.unwrap().is_empty());
}

/// A callback job's failed call follows its backoff, then it dies; kicked, it is in its
/// callback queue again, and `kick_topic` of that queue brings back its dead.
async fn callback_job_retries_dies_and_is_kicked_back_to_its_queue(b: &Backend) {
    let queue = topic("mail").callback_queue();
    push(b, callback_job("mail", "cb", T0), T0).await;
    let mut rx = b.store.subscribe();
    b.store
        .reserve(std::slice::from_ref(&queue), 1, T0)
        .await
        .unwrap();
    let j = b.store.release(&id("cb"), None, T0 + SEC).await.unwrap();
    assert_eq!((j.state, j.spec.run_at), (JobState::Delayed, T0 + 16 * SEC));
    b.store.tick(T0 + 16 * SEC, 100).await.unwrap();
    // The timer's promotion names the callback queue, which the deliverer listens for.
    let mut heard = false;
    while let Ok(Ok(ev)) = tokio::time::timeout(Duration::from_secs(2), rx.recv()).await {
        if ev == StoreEvent::Ready(queue.clone()) {
            heard = true;
            break;
        }
    }
    assert!(heard, "no Ready event for the callback queue");
    assert_eq!(
        b.store
            .reserve(std::slice::from_ref(&queue), 1, T0 + 16 * SEC)
            .await
            .unwrap()
            .len(),
        1
    );
    let j = b
        .store
        .release(&id("cb"), None, T0 + 17 * SEC)
        .await
        .unwrap();
    assert_eq!(j.state, JobState::Dead, "out of its 2 attempts");
    assert_eq!(
        b.store.stats().await.unwrap().callbacks[&topic("mail")].dead,
        1
    );
    assert_eq!(
        b.store
            .kick_topic(&topic("mail"), 10, T0 + 18 * SEC)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        b.store.kick_topic(&queue, 10, T0 + 18 * SEC).await.unwrap(),
        1
    );
    assert!(
        reserve_ids(b, &["mail"], 10, T0 + 18 * SEC)
            .await
            .is_empty()
    );
    let again = b.store.reserve(&[queue], 1, T0 + 18 * SEC).await.unwrap();
    assert_eq!((again.len(), again[0].attempts), (1, 1));
}

/// A publish job (RabbitMQ): every field of its target kept, a binary body's base64 flag
/// included, through every transition and a replace; it waits in its topic's callback queue,
/// never in the topic's, and is counted there; released past its attempts it is dead.
async fn publish_jobs_keep_their_target_and_live_in_the_callback_queue(b: &Backend) {
    let queue = topic("orders").callback_queue();
    let mut spec = job("orders", "p1", "AP8A", T0);
    spec.with_publish_defaults(
        Publish {
            exchange: "orders-x".into(),
            routing_key: "order.cancel".into(),
            content_type: Some("application/octet-stream".into()),
            headers: Some(r#"{"trace":{"LongString":[116]}}"#.into()),
            body_base64: true,
        },
        30 * SEC,
        None,
        Some(2),
        Some(vec![SEC]),
    );
    assert_eq!(spec.ttr_ms, 35 * SEC, "the publish timeout plus the grace");
    push(b, spec.clone(), T0).await;
    assert_eq!(b.store.get(&id("p1")).await.unwrap().spec, spec);
    assert!(reserve_ids(b, &["orders"], 10, T0).await.is_empty());
    assert_eq!(
        b.store.stats().await.unwrap().callbacks[&topic("orders")].ready,
        1
    );
    let got = b
        .store
        .reserve(std::slice::from_ref(&queue), 10, T0)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].spec, spec);
    assert_eq!(got[0].reserved_until, Some(T0 + 35 * SEC));
    let j = b.store.release(&id("p1"), Some(SEC), T0).await.unwrap();
    assert_eq!(
        (j.state, j.spec.clone()),
        (JobState::Delayed, {
            let mut s = spec.clone();
            s.run_at = T0 + SEC;
            s
        })
    );
    b.store.tick(T0 + SEC, 100).await.unwrap();
    let again = b
        .store
        .reserve(std::slice::from_ref(&queue), 10, T0 + SEC)
        .await
        .unwrap();
    assert_eq!(again[0].spec.publish, spec.publish);
    let j = b
        .store
        .release(&id("p1"), None, T0 + 2 * SEC)
        .await
        .unwrap();
    assert_eq!(j.state, JobState::Dead);
    assert_eq!(j.spec.publish, spec.publish);
    assert_eq!(
        b.store.stats().await.unwrap().callbacks[&topic("orders")].dead,
        1
    );

    // Replaced by a plain publish job: the intake's fields are gone with the old version.
    let mut plain = job("orders", "p1", "text", T0 + 3 * SEC);
    plain.with_publish_defaults(
        Publish {
            exchange: String::new(),
            routing_key: "q".into(),
            content_type: None,
            headers: None,
            body_base64: false,
        },
        30 * SEC,
        None,
        None,
        None,
    );
    b.store
        .push(plain.clone(), PushMode::Replace, T0 + 2 * SEC)
        .await
        .unwrap();
    assert_eq!(b.store.get(&id("p1")).await.unwrap().spec, plain);
}

backend_tests!(
    callback_jobs_are_only_in_their_topics_callback_queue,
    callback_job_retries_dies_and_is_kicked_back_to_its_queue,
    publish_jobs_keep_their_target_and_live_in_the_callback_queue,
);
