//! `finish`, `finish_batch` and `delete`: a job removed for good in any state, an answer per
//! id, and concurrent pushes and finishes of the same ids each winning once.

use super::*;

async fn finish_removes_the_job_for_good(b: &Backend) {
    let mut spec = job("t", "j", "", T0);
    spec.ttr_ms = SEC;
    push(b, spec, T0).await;
    reserve_ids(b, &["t"], 1, T0).await;
    assert_eq!(b.store.finish(&id("j")).await, Ok(JobState::Reserved));
    assert_eq!(state(b, "j").await, Err(StoreError::NotFound));
    // Its TTR deadline passing later must not bring it back.
    let tick = b.store.tick(T0 + 60 * SEC, 100).await.unwrap();
    assert_eq!(tick.expired, 0);
    assert!(reserve_ids(b, &["t"], 1, T0 + 60 * SEC).await.is_empty());
    assert!(b.store.stats().await.unwrap().topics.is_empty());
}

async fn finish_batch_answers_each_id_in_order(b: &Backend) {
    push(b, job("t", "delayed", "", T0 + SEC), T0).await;
    push(b, job("t", "ready", "", T0), T0).await;
    push(b, job("t", "reserved", "", T0 - 1), T0).await;
    assert_eq!(reserve_ids(b, &["t"], 1, T0).await, vec!["reserved"]);
    let ids: Vec<JobId> = ["reserved", "nope", "ready", "delayed", "ready"]
        .into_iter()
        .map(id)
        .collect();
    let out = b.store.finish_batch(&ids).await.unwrap();
    assert_eq!(
        out,
        vec![
            Ok(JobState::Reserved),
            Err(StoreError::NotFound),
            Ok(JobState::Ready),
            Ok(JobState::Delayed),
            // Given twice: gone the second time.
            Err(StoreError::NotFound),
        ]
    );
    b.store.tick(T0 + 600 * SEC, 100).await.unwrap();
    assert!(reserve_ids(b, &["t"], 10, T0 + 600 * SEC).await.is_empty());
    assert!(b.store.stats().await.unwrap().topics.is_empty());
    assert_eq!(b.store.finish_batch(&[]).await, Ok(Vec::new()));
}

async fn delete_removes_a_job_in_any_state(b: &Backend) {
    push(b, job("t", "delayed", "", T0 + SEC), T0).await;
    push(b, job("t", "ready", "", T0), T0).await;
    push(b, job("t", "reserved", "", T0 - 1), T0).await;
    push(b, job("t", "dead", "", T0 + SEC), T0).await;
    assert_eq!(reserve_ids(b, &["t"], 1, T0).await, vec!["reserved"]);
    b.store.bury(&id("dead"), None, T0).await.unwrap();
    for (i, s) in [
        ("delayed", JobState::Delayed),
        ("ready", JobState::Ready),
        ("reserved", JobState::Reserved),
        ("dead", JobState::Dead),
    ] {
        assert_eq!(b.store.delete(&id(i)).await, Ok(s), "{i}");
        assert_eq!(state(b, i).await, Err(StoreError::NotFound), "{i}");
    }
    b.store.tick(T0 + 600 * SEC, 100).await.unwrap();
    assert!(reserve_ids(b, &["t"], 10, T0 + 600 * SEC).await.is_empty());
    assert!(b.store.stats().await.unwrap().topics.is_empty());
}

/// Many producers and finishers at once, with overlapping ids: the stores that join concurrent
/// calls into shared round trips or commits (Redis, embedded) must answer each caller as if the
/// calls had run one after the other.
async fn concurrent_pushes_and_finishes_of_the_same_ids_each_win_once(b: &Backend) {
    let ids = 50;
    let callers = 8;
    // Every caller pushes every id (in its own order, some one at a time, some in batches):
    // each id is created exactly once, and every other push of it is refused.
    let mut tasks = Vec::new();
    for c in 0..callers {
        let store = b.store.clone();
        tasks.push(tokio::spawn(async move {
            let mut order: Vec<usize> = (0..ids).collect();
            order.rotate_left(c * 7 % ids);
            let mut created = Vec::new();
            for chunk in order.chunks(if c % 2 == 0 { 1 } else { 5 }) {
                let specs = chunk
                    .iter()
                    .map(|i| job("cc", &format!("j{i}"), &format!("from {c}"), T0 + SEC))
                    .collect();
                let out = store.push_batch(specs, PushMode::Reject, T0).await.unwrap();
                for (i, r) in chunk.iter().zip(out) {
                    match r {
                        Ok(PushOutcome::Created) => created.push(*i),
                        Err(StoreError::Exists) => {}
                        other => panic!("push of j{i}: {other:?}"),
                    }
                }
            }
            created
        }));
    }
    let mut created = Vec::new();
    for t in tasks {
        created.extend(t.await.unwrap());
    }
    created.sort_unstable();
    assert_eq!(
        created,
        (0..ids).collect::<Vec<_>>(),
        "each id created exactly once"
    );
    // Every caller finishes every id: each is removed exactly once.
    let mut tasks = Vec::new();
    for c in 0..callers {
        let store = b.store.clone();
        tasks.push(tokio::spawn(async move {
            let all: Vec<JobId> = (0..ids).map(|i| id(&format!("j{i}"))).collect();
            let out = if c % 2 == 0 {
                let mut out = Vec::new();
                for i in &all {
                    out.push(store.finish(i).await);
                }
                out
            } else {
                store.finish_batch(&all).await.unwrap()
            };
            out.iter().filter(|r| r.is_ok()).count()
        }));
    }
    let mut removed = 0;
    for t in tasks {
        removed += t.await.unwrap();
    }
    assert_eq!(removed, ids, "each id finished exactly once");
    assert!(b.store.stats().await.unwrap().topics.is_empty());
}

backend_tests!(
    finish_removes_the_job_for_good,
    finish_batch_answers_each_id_in_order,
    delete_removes_a_job_in_any_state,
    concurrent_pushes_and_finishes_of_the_same_ids_each_win_once,
);
