//! `restore_batch`: jobs the store lost put back with their attempts, delayed or ready by their
//! due time; an id still present left alone.

use super::*;

/// A restore puts back absent jobs with their attempts, delayed or ready by their due time,
/// and leaves a present id alone.
async fn restore_keeps_attempts_and_leaves_present_jobs_alone(b: &Backend) {
    push(b, job("r", "present", "kept", T0 + HOUR), T0).await;
    let lost = |i: &str, run_at, attempts| Job {
        spec: job("r", i, "back", run_at),
        state: JobState::Ready,
        attempts,
        reserved_until: None,
        seq: 0,
    };
    let mut cb = lost("cb", T0, 4);
    cb.spec = callback_job("r", "cb", T0);
    let out = b
        .store
        .restore_batch(
            &[
                lost("due", T0, 3),
                lost("later", T0 + HOUR, 7),
                lost("present", T0, 1),
                cb,
            ],
            T0,
        )
        .await
        .unwrap();
    assert_eq!(out[0], Ok(PushOutcome::Created));
    assert_eq!(out[1], Ok(PushOutcome::Created));
    assert_eq!(out[2], Err(StoreError::Exists));
    assert_eq!(out[3], Ok(PushOutcome::Created));
    let present = b.store.get(&id("present")).await.unwrap();
    assert_eq!((present.spec.body.as_str(), present.attempts), ("kept", 0));
    let later = b.store.get(&id("later")).await.unwrap();
    assert_eq!((later.state, later.attempts), (JobState::Delayed, 7));
    let got = b.store.reserve(&[topic("r")], 10, T0).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].spec.id.as_str(), got[0].attempts), ("due", 4));
    let queue = topic("r").callback_queue();
    let got = b.store.reserve(&[queue], 10, T0).await.unwrap();
    assert_eq!((got[0].spec.id.as_str(), got[0].attempts), ("cb", 5));
    assert_eq!(got[0].spec, callback_job("r", "cb", T0));
}

backend_tests!(restore_keeps_attempts_and_leaves_present_jobs_alone,);
