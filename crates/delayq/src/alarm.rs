//! A precise one-shot alarm for the timer (dispatch/timer.rs): one OS thread that sleeps until
//! the deadline it was given and then wakes an async waiter.
//!
//! Why not `tokio::time::sleep`: tokio's timer wheel has 1 ms ticks and rounds every deadline
//! up to its next tick, which is not aligned with the wall clock's milliseconds, so a job due
//! at the start of a millisecond would be promoted up to 2 ms after it. A condition variable's
//! timed wait ends within the kernel's timer slack (50 µs by default) of its deadline. The
//! thread costs nothing while it sleeps and one wake-up per alarm, at most one per timer pass.
//!
//! Never early: the thread re-checks the deadline against the monotonic clock after every
//! wake-up (spurious or not) and fires only once it has passed.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::Notify;

/// An alarm shared between its thread and the async side. Stops its thread when dropped.
pub struct Alarm {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    fired: Notify,
}

struct State {
    deadline: Option<Instant>,
    stop: bool,
}

impl Alarm {
    /// Starts the alarm's thread, unarmed.
    pub fn start() -> std::io::Result<Alarm> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                deadline: None,
                stop: false,
            }),
            changed: Condvar::new(),
            fired: Notify::new(),
        });
        let ours = shared.clone();
        std::thread::Builder::new()
            .name("delayq-alarm".into())
            .spawn(move || ours.run())?;
        Ok(Alarm { shared })
    }

    /// Arms the alarm for `deadline`, replacing any earlier setting. A deadline already past
    /// fires at once.
    pub fn set(&self, deadline: Instant) {
        self.shared.lock().deadline = Some(deadline);
        self.shared.changed.notify_one();
    }

    /// Completes once the alarm fires. A firing nobody awaited is kept (one), so an alarm
    /// that went off between [`Alarm::set`] and this call is not missed; the cost is that a
    /// firing left over from an earlier setting can complete this early, which the timer
    /// tolerates (it only ever ticks early, and the store never promotes early).
    pub async fn fired(&self) {
        self.shared.fired.notified().await;
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_one();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run(&self) {
        let mut state = self.lock();
        loop {
            if state.stop {
                return;
            }
            match state.deadline {
                None => {
                    state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
                }
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        state.deadline = None;
                        self.fired.notify_one();
                    } else {
                        state = self
                            .changed
                            .wait_timeout(state, deadline - now)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Generous: a loaded 2-core machine may delay any thread.
    const PROMPT: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn fires_at_its_deadline_never_before() {
        let alarm = Alarm::start().unwrap();
        for ms in [0u64, 1, 20] {
            let deadline = Instant::now() + Duration::from_millis(ms);
            alarm.set(deadline);
            tokio::time::timeout(PROMPT, alarm.fired())
                .await
                .expect("the alarm fires");
            assert!(Instant::now() >= deadline, "fired before its deadline");
        }
    }

    #[tokio::test]
    async fn a_new_setting_replaces_the_old_one() {
        let alarm = Alarm::start().unwrap();
        alarm.set(Instant::now() + Duration::from_secs(3600));
        let deadline = Instant::now() + Duration::from_millis(10);
        alarm.set(deadline);
        tokio::time::timeout(PROMPT, alarm.fired())
            .await
            .expect("the earlier setting fires; the hour-long one is gone");
        assert!(Instant::now() >= deadline);
        alarm.set(Instant::now() + Duration::from_secs(3600));
        assert!(
            tokio::time::timeout(Duration::from_millis(50), alarm.fired())
                .await
                .is_err(),
            "an alarm an hour ahead fired"
        );
    }
}
