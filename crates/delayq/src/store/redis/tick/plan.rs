//! The plan of one timer pass over the shards: which shards' tick functions to call, with
//! what share of the pass's limit and which far windows to drain, given what a look at every
//! shard found (its due count, timeline head and first far windows). Also the two decisions
//! around it: whether a one-shard pass may skip the look, and how a pass whose window drains
//! were refused is run again.
//!
//! Pure: no I/O, no clock, no shared state. `tick.rs` reads the shards, asks here, and sends
//! what the plan says.

use crate::job::UnixMillis;
use crate::store::redis::keys::WINDOW_MS;
use crate::store::{StoreError, StoreResult, TickOutcome};

/// What the look found on one shard.
#[derive(Debug, Clone, Default)]
pub struct Look {
    /// Timeline entries due at `now`.
    pub due: u64,
    /// The timeline's earliest deadline.
    pub head: Option<UnixMillis>,
    /// The shard's first far windows, earliest score first.
    pub windows: Vec<Window>,
}

/// A far window as the look found it.
#[derive(Debug, Clone)]
pub struct Window {
    /// Its number (list `w:<n>`). A member that is not a number fails the pass only once
    /// the window is to be drained; until then only its score counts.
    pub number: StoreResult<u64>,
    /// The earliest run_at ever pushed into it; it is drained from `score - WINDOW_MS` on.
    pub score: UnixMillis,
}

/// One shard's tick function call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pass {
    pub shard: usize,
    /// Most timeline entries the call promotes or expires.
    pub limit: u64,
    /// The windows it drains, in the look's order; none: the `tick` function (`allow-oom`),
    /// else `tick_drain` (scripts.rs).
    pub drains: Vec<u64>,
    /// Most ids it takes from the lists of `drains`.
    pub drain_budget: usize,
}

/// The calls of one pass, and the earliest deadline of the shards left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub passes: Vec<Pass>,
    /// The earliest timeline head or window drain time among the shards not called: `<= now`
    /// when one of them has work left that the limit did not cover.
    pub next_due: Option<UnixMillis>,
}

/// Whether a pass goes straight to the one shard's function, without the look: with one
/// shard there is no limit to share out, and the look is needed only for the far windows,
/// which are looked at every `WINDOW_CHECK_MS` (`window_check_at`, tick.rs). A window drained
/// that much late delays no job: it is drained a whole [`WINDOW_MS`] before its first job is
/// due.
pub fn skips_look(shards: usize, now: UnixMillis, window_check_at: UnixMillis) -> bool {
    shards == 1 && now < window_check_at
}

/// The call of a pass that skips the look: shard 0, the whole limit, no drains.
pub fn direct(limit: usize) -> Pass {
    Pass {
        shard: 0,
        limit: limit as u64,
        drains: Vec::new(),
        drain_budget: 0,
    }
}

/// After a direct pass that did `done` with `limit`: `None` when the pass is complete, or
/// what is left of the limit for a full pass (look and plan). A full pass follows when work
/// is still due though the limit was not reached: a far window is due to be drained, which
/// only a planned pass does.
pub fn left_after_direct(done: &TickOutcome, now: UnixMillis, limit: usize) -> Option<usize> {
    let used = (done.promoted + done.expired) as usize;
    if done.next_due.is_none_or(|t| t > now) || used >= limit {
        return None;
    }
    Some(limit - used)
}

/// Plans a pass at `now` with `limit` over the shards `looks` describe.
///
/// A window is due to be drained once `now` reaches its score minus [`WINDOW_MS`], unless
/// drains were refused until `refused_until` (Redis full): then its drain time counts as
/// `refused_until`. A window whose score is due itself may hold jobs due now, so its shard's
/// claim on the limit grows by the whole limit. The limit is shared out by what each shard
/// has due ([`share_out`], odd units from shard `start` on); the drain budget (also `limit`
/// ids) is shared equally by the shards with windows to drain. A shard is called when it has
/// a share or windows to drain; the others' heads and drain times make up `next_due`.
pub fn plan(
    looks: &[Look],
    now: UnixMillis,
    limit: usize,
    refused_until: UnixMillis,
    start: usize,
) -> StoreResult<Plan> {
    let n = looks.len();
    let mut due = Vec::with_capacity(n);
    let mut drains: Vec<Vec<u64>> = Vec::with_capacity(n);
    let mut first_drain: Vec<Option<UnixMillis>> = Vec::with_capacity(n);
    for look in looks {
        let mut due_now = look.due;
        let mut mine = Vec::new();
        let mut first: Option<UnixMillis> = None;
        for w in &look.windows {
            let mut drain_at = w.score.saturating_sub(WINDOW_MS);
            if drain_at <= now && now < refused_until {
                drain_at = refused_until;
            }
            first = Some(first.map_or(drain_at, |t| t.min(drain_at)));
            if drain_at <= now {
                mine.push(w.number.clone()?);
                if w.score <= now {
                    due_now = due_now.saturating_add(limit as u64);
                }
            }
        }
        due.push(due_now);
        drains.push(mine);
        first_drain.push(first);
    }
    let shares = share_out(limit as u64, &due, start);
    let draining = drains.iter().filter(|d| !d.is_empty()).count().max(1);
    let drain_budget = (limit / draining).max(1);
    let mut plan = Plan {
        passes: Vec::new(),
        next_due: None,
    };
    for (shard, (share, drains)) in shares.into_iter().zip(drains).enumerate() {
        if share == 0 && drains.is_empty() {
            let later = [looks[shard].head, first_drain[shard]];
            for t in later.into_iter().flatten() {
                plan.next_due = Some(plan.next_due.map_or(t, |d| d.min(t)));
            }
            continue;
        }
        plan.passes.push(Pass {
            shard,
            limit: share,
            drains,
            drain_budget,
        });
    }
    Ok(plan)
}

/// The passes to run again after some of `passes` failed (`failed`: index into `passes` and
/// error, in order), with the error to report; `None` when none failed.
///
/// A call that drains windows may add memory, so a full Redis refuses it; its shard runs
/// again as a plain pass (same limit, no drains), so its due jobs are still promoted now,
/// and the error is the first such refusal. A failed call that drained nothing fails the
/// whole pass: that error is returned.
pub fn after_refusal(
    passes: &[Pass],
    failed: Vec<(usize, StoreError)>,
) -> Result<Option<(Vec<Pass>, StoreError)>, StoreError> {
    let mut again = Vec::new();
    let mut refused = None;
    for (i, e) in failed {
        let pass = &passes[i];
        if pass.drains.is_empty() {
            return Err(e);
        }
        again.push(Pass {
            shard: pass.shard,
            limit: pass.limit,
            drains: Vec::new(),
            drain_budget: 0,
        });
        refused.get_or_insert(e);
    }
    Ok(refused.map(|e| (again, e)))
}

/// Shares `limit` out over shards with `due[s]` due entries each: every shard gets what it
/// has due if that fits, else equal shares of what is left (water-filling); units that do not
/// divide evenly go to shards in rotation from `start`. Never more than `limit` in total.
pub fn share_out(limit: u64, due: &[u64], start: usize) -> Vec<u64> {
    let n = due.len();
    let mut shares = vec![0u64; n];
    let mut left = limit;
    while left > 0 {
        let needy: Vec<usize> = (0..n)
            .map(|i| (start + i) % n)
            .filter(|&s| shares[s] < due[s])
            .collect();
        if needy.is_empty() {
            break;
        }
        let each = (left / needy.len() as u64).max(1);
        for s in needy {
            let give = each.min(due[s] - shares[s]).min(left);
            shares[s] += give;
            left -= give;
            if left == 0 {
                break;
            }
        }
    }
    shares
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: UnixMillis = 10 * WINDOW_MS;

    fn look(due: u64, head: Option<UnixMillis>) -> Look {
        Look {
            due,
            head,
            windows: Vec::new(),
        }
    }

    fn window(number: u64, score: UnixMillis) -> Window {
        Window {
            number: Ok(number),
            score,
        }
    }

    fn shards_called(plan: &Plan) -> Vec<usize> {
        plan.passes.iter().map(|p| p.shard).collect()
    }

    #[test]
    fn tick_limit_is_shared_out_without_exceeding_it() {
        assert_eq!(share_out(10, &[3, 3, 3], 0), vec![3, 3, 3]);
        assert_eq!(share_out(10, &[0, 20, 1], 0), vec![0, 9, 1]);
        assert_eq!(share_out(10, &[8, 8, 8], 0).iter().sum::<u64>(), 10);
        assert_eq!(share_out(2, &[5, 5, 5, 5], 1), vec![0, 1, 1, 0]);
        assert_eq!(share_out(0, &[5], 0), vec![0]);
        assert_eq!(share_out(5, &[], 0), Vec::<u64>::new());
    }

    #[test]
    fn a_pass_shares_its_limit_by_what_each_shard_has_due() {
        let looks = [
            look(8, Some(NOW - 5)),
            look(8, Some(NOW - 1)),
            look(2, Some(NOW)),
        ];
        let plan = plan(&looks, NOW, 10, 0, 0).unwrap();
        let limits: Vec<u64> = plan.passes.iter().map(|p| p.limit).collect();
        assert_eq!(limits.iter().sum::<u64>(), 10);
        assert_eq!(limits[2], 2, "a shard whose due work fits gets all of it");
        assert!(limits.iter().zip(&looks).all(|(l, s)| *l <= s.due));
        assert!(plan.passes.iter().all(|p| p.drains.is_empty()));
        assert_eq!(plan.next_due, None);
    }

    #[test]
    fn a_shard_with_nothing_due_is_not_called_and_its_head_is_the_next_deadline() {
        let looks = [
            look(3, Some(NOW - 10)),
            look(0, Some(NOW + 500)),
            look(0, None),
        ];
        let plan = plan(&looks, NOW, 100, 0, 0).unwrap();
        assert_eq!(shards_called(&plan), [0]);
        assert_eq!(plan.passes[0].limit, 3);
        assert_eq!(plan.next_due, Some(NOW + 500));
    }

    #[test]
    fn a_shard_left_out_by_the_limit_reports_work_due_now() {
        // Limit 1 over two shards with work due: one is called, the other's head (due) says
        // "call again at once".
        let looks = [look(4, Some(NOW - 7)), look(4, Some(NOW - 3))];
        let plan = plan(&looks, NOW, 1, 0, 1).unwrap();
        assert_eq!(shards_called(&plan), [1]);
        assert_eq!(plan.next_due, Some(NOW - 7));
        assert!(plan.next_due.unwrap() <= NOW);
    }

    #[test]
    fn the_odd_units_rotate_over_the_shards_with_the_start() {
        let looks = vec![look(5, Some(NOW)); 4];
        let called = |start| shards_called(&plan(&looks, NOW, 2, 0, start).unwrap());
        assert_eq!(called(0), [0, 1]);
        assert_eq!(called(1), [1, 2]);
        assert_eq!(called(2), [2, 3]);
        assert_eq!(called(3), [0, 3]);
    }

    #[test]
    fn a_window_within_one_window_of_now_is_drained_with_a_share_of_the_budget() {
        let near = window(11, NOW + WINDOW_MS / 2);
        let far = window(13, NOW + 3 * WINDOW_MS);
        let looks = [
            Look {
                windows: vec![near.clone(), far],
                ..look(0, None)
            },
            Look {
                windows: vec![window(11, NOW + 10)],
                ..look(0, None)
            },
            look(0, Some(NOW + 20)),
        ];
        let plan = plan(&looks, NOW, 100, 0, 0).unwrap();
        assert_eq!(
            plan.passes,
            [
                Pass {
                    shard: 0,
                    limit: 0,
                    drains: vec![11],
                    drain_budget: 50,
                },
                Pass {
                    shard: 1,
                    limit: 0,
                    drains: vec![11],
                    drain_budget: 50,
                },
            ]
        );
        assert_eq!(plan.next_due, Some(NOW + 20));
    }

    #[test]
    fn a_window_whose_score_is_due_gives_its_shard_a_share_of_the_limit() {
        let looks = [
            Look {
                windows: vec![window(9, NOW - 1)],
                ..look(0, None)
            },
            look(0, None),
        ];
        let plan = plan(&looks, NOW, 64, 0, 0).unwrap();
        assert_eq!(plan.passes.len(), 1);
        assert_eq!(
            (plan.passes[0].limit, &plan.passes[0].drains),
            (64, &vec![9])
        );
    }

    #[test]
    fn while_drains_are_refused_a_window_waits_for_the_retry() {
        let retry_at = NOW + 700;
        let looks = [Look {
            windows: vec![window(10, NOW + 5)],
            ..look(0, Some(NOW + 900))
        }];
        let plan = plan(&looks, NOW, 100, retry_at, 0).unwrap();
        assert!(plan.passes.is_empty());
        assert_eq!(plan.next_due, Some(retry_at));
        // Once the retry time is reached, the window is drained again.
        let later = super::plan(&looks, retry_at, 100, retry_at, 0).unwrap();
        assert_eq!(later.passes[0].drains, [10]);
    }

    #[test]
    fn a_window_that_is_not_a_number_fails_the_pass_only_when_it_is_to_be_drained() {
        let bad = |score| Look {
            windows: vec![Window {
                number: Err(StoreError::Corrupt("bad member".into())),
                score,
            }],
            ..look(0, None)
        };
        let later = plan(&[bad(NOW + 5 * WINDOW_MS)], NOW, 10, 0, 0).unwrap();
        assert_eq!(later.next_due, Some(NOW + 4 * WINDOW_MS));
        assert!(plan(&[bad(NOW)], NOW, 10, 0, 0).is_err());
    }

    #[test]
    fn a_drain_refused_for_oom_is_run_again_as_a_plain_pass() {
        let passes = vec![
            Pass {
                shard: 0,
                limit: 5,
                drains: Vec::new(),
                drain_budget: 50,
            },
            Pass {
                shard: 3,
                limit: 7,
                drains: vec![11, 12],
                drain_budget: 50,
            },
        ];
        let oom = StoreError::Unavailable("OOM command not allowed".into());
        let (again, cause) = after_refusal(&passes, vec![(1, oom.clone())])
            .unwrap()
            .expect("a retry");
        assert_eq!(
            again,
            [Pass {
                shard: 3,
                limit: 7,
                drains: Vec::new(),
                drain_budget: 0,
            }]
        );
        assert_eq!(cause, oom);
        assert_eq!(after_refusal(&passes, Vec::new()), Ok(None));
        // A failed call that drained nothing fails the pass.
        let down = StoreError::Unavailable("down".into());
        assert_eq!(
            after_refusal(&passes, vec![(1, oom), (0, down.clone())]),
            Err(down)
        );
    }

    #[test]
    fn one_shard_skips_the_look_until_the_windows_are_due_for_a_check() {
        assert!(skips_look(1, NOW, NOW + 1));
        assert!(!skips_look(1, NOW, NOW));
        assert!(!skips_look(2, NOW, NOW + 1));
        assert_eq!(direct(32).limit, 32);
        assert!(direct(32).drains.is_empty());
    }

    #[test]
    fn a_direct_pass_is_followed_by_a_full_one_only_when_due_work_is_left_under_the_limit() {
        let done = |promoted, next_due| TickOutcome {
            promoted,
            expired: 0,
            next_due,
        };
        assert_eq!(left_after_direct(&done(3, Some(NOW + 1)), NOW, 10), None);
        assert_eq!(left_after_direct(&done(3, None), NOW, 10), None);
        assert_eq!(left_after_direct(&done(10, Some(NOW)), NOW, 10), None);
        assert_eq!(left_after_direct(&done(3, Some(NOW)), NOW, 10), Some(7));
    }
}
