//! The predictive policies' decision at an iteration's start: one pure
//! function of what is known then (every worker's timings so far, the
//! predictor, every worker's own unit count), called by the run's workers
//! (`run::worker`) and by the what-if replay (`whatif`) alike,
//! so that a policy changed here is changed in both.
//!
//! - Every worker's time per unit is predicted from the histories. Under SSP's
//!   slack the decision for iteration t reads the iterations up to
//!   t − 1 − slack only: every worker has those when it begins t, so every
//!   worker decides alike whatever else has arrived.
//! - `proactive`, `forestall` and `forestall-ssp` move units from the workers
//!   whose slowdown lasts ([`OnlineHistory::lasting`]) to the fast ones
//!   ([`plan_moves`]).
//! - `proactive-clone` makes the same plan, within its budget, as clones: the
//!   givers keep their units.
//! - `dpro-substitute` names the workers predicted to straggle
//!   ([`stragglers`]); each keeps only a floor of its partitions
//!   ([`Action::kept_partitions`]).
//! - Any other policy only predicts (a trace records the predictions).

use super::proactive::{plan_moves, within_budget, Move};
use super::substitute::{kept_partitions, stragglers};
use super::PolicyPlan;
use crate::predict::{OnlineHistory, OnlinePredictor, DEFAULT_STRAGGLER_THRESHOLD};

/// What is known when an iteration begins.
#[derive(Debug, Clone, Copy)]
pub struct Known<'a> {
    /// Every worker's timings that have arrived.
    pub history: &'a OnlineHistory,
    /// The policy's predictor.
    pub predictor: &'a OnlinePredictor,
    /// The iteration about to begin, numbered as `history` numbers them.
    pub iteration: u64,
    /// Every worker's own units in it, by worker.
    pub own: &'a [u32],
}

/// What a policy decided for the iteration about to begin.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Every worker's predicted time per unit, µs, as predicted (what a
    /// trace records; a plan acts on the lasting part of it).
    pub predicted: Vec<Option<f64>>,
    /// What the workers do about it.
    pub action: Action,
}

/// What the workers do before an iteration.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Every worker computes its own units.
    Keep,
    /// Units change hands before the iteration: every worker's moves, by
    /// giver, then receiver (the giver's units leave its list).
    Move(Vec<Move>),
    /// The receivers compute copies of the givers' units, which the givers
    /// keep; the first copy to finish counts.
    Clone(Vec<Move>),
    /// The workers marked `true` (by worker) compute only the first `floor`
    /// share of their partitions; the shard owners use the other units' last
    /// gradients (lossy).
    Substitute {
        /// Predicted stragglers, by worker.
        slow: Vec<bool>,
        /// Share of its partitions a straggler still computes.
        floor: f64,
    },
}

impl Action {
    /// The partitions `worker`, whose partitions are `partitions` in order,
    /// keeps under [`Action::Substitute`] (`None`: it computes all its units).
    pub fn kept_partitions(&self, worker: u32, partitions: &[u32]) -> Option<Vec<u32>> {
        match self {
            Action::Substitute { slow, floor } if slow.get(worker as usize) == Some(&true) => {
                Some(kept_partitions(partitions, *floor))
            }
            _ => None,
        }
    }

    /// Units the plan moves or clones (0 for the others).
    pub fn planned_units(&self) -> u64 {
        match self {
            Action::Move(moves) | Action::Clone(moves) => {
                moves.iter().map(|m| u64::from(m.count)).sum()
            }
            _ => 0,
        }
    }
}

/// What `policy` does before the iteration `known` describes.
pub fn decide(policy: &PolicyPlan, known: &Known<'_>) -> Decision {
    let workers = known.own.len() as u32;
    let slack = policy.slack();
    let behind;
    let history = if slack == 0 {
        known.history
    } else {
        behind = match known.iteration.checked_sub(1 + slack) {
            Some(last) => known.history.through(last),
            None => OnlineHistory::new(workers),
        };
        &behind
    };
    let predicted = history.predict(known.predictor);
    let action = match policy {
        PolicyPlan::DproSubstitute { floor, threshold } => Action::Substitute {
            slow: stragglers(&predicted, known.own, *threshold),
            floor: *floor,
        },
        _ => match policy.proactive() {
            None => Action::Keep,
            Some(config) => {
                // A plan moves units only for slowdowns that last.
                let acted = history.lasting(&predicted, DEFAULT_STRAGGLER_THRESHOLD);
                let moves = plan_moves(known.own, &acted, config);
                match policy {
                    PolicyPlan::ProactiveClone { budget, .. } => {
                        let total: u32 = known.own.iter().sum();
                        let budget = (f64::from(total) * budget).floor() as u32;
                        Action::Clone(within_budget(&moves, budget))
                    }
                    _ => Action::Move(moves),
                }
            }
        },
    };
    Decision { predicted, action }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{ProactiveConfig, ReassignConfig};
    use crate::predict::Timing;

    /// Four workers of 20 units each; worker 3 takes `slow` × as long as
    /// the others in the iterations `slow_in`, 100 µs a unit elsewhere.
    fn history(iterations: u64, slow_in: impl Fn(u64) -> bool, slow: u64) -> OnlineHistory {
        let mut h = OnlineHistory::new(4);
        for i in 0..iterations {
            let timings: Vec<Timing> = (0..4)
                .map(|w| Timing {
                    units: 20,
                    busy_us: if w == 3 && slow_in(i) {
                        2000 * slow
                    } else {
                        2000
                    },
                })
                .collect();
            h.record_next(&timings);
        }
        h
    }

    const OWN: [u32; 4] = [20; 4];

    fn decided(policy: &PolicyPlan, history: &OnlineHistory, iteration: u64) -> Decision {
        decide(
            policy,
            &Known {
                history,
                predictor: &OnlinePredictor::Last,
                iteration,
                own: &OWN,
            },
        )
    }

    fn proactive() -> PolicyPlan {
        PolicyPlan::Proactive(ProactiveConfig::default())
    }

    #[test]
    fn a_lasting_slowdown_moves_units_from_the_slow_worker() {
        let h = history(6, |_| true, 4);
        let d = decided(&proactive(), &h, 6);
        assert_eq!(d.predicted[3], Some(400.0));
        assert_eq!(d.predicted[0], Some(100.0));
        let Action::Move(moves) = &d.action else {
            panic!("{d:?}");
        };
        assert!(moves.iter().all(|m| m.from == 3), "{moves:?}");
        // As `plan_moves` balances the predictions: 80 units at speeds
        // 1, 1, 1, ¼ leave the slow worker about 6.
        let given: u32 = moves.iter().map(|m| m.count).sum();
        assert_eq!(
            d.action,
            Action::Move(plan_moves(
                &OWN,
                &[Some(100.0), Some(100.0), Some(100.0), Some(400.0)],
                &ProactiveConfig::default()
            ))
        );
        assert!((12..=15).contains(&given), "{given}");
        // forestall plans the same moves (its peers mend the rest).
        let forestall = PolicyPlan::Forestall {
            proactive: ProactiveConfig::default(),
            reassign: ReassignConfig::default(),
            clone_in_flight: true,
            rest_in_flight: true,
            tail_in_flight: true,
        };
        assert_eq!(decided(&forestall, &h, 6), d);
    }

    #[test]
    fn a_short_slowdown_moves_nothing_but_is_predicted() {
        // Slow in the last iteration only: predicted slow, but it has not
        // lasted, so nothing moves.
        let h = history(6, |i| i == 5, 4);
        let d = decided(&proactive(), &h, 6);
        assert_eq!(d.predicted[3], Some(400.0));
        assert_eq!(d.action, Action::Move(Vec::new()));
        // Other policies only predict.
        let bsp = decided(&PolicyPlan::Bsp, &h, 6);
        assert_eq!((bsp.predicted, bsp.action), (d.predicted, Action::Keep));
    }

    #[test]
    fn clones_are_the_plan_within_the_budget() {
        let h = history(6, |_| true, 4);
        let plan = decided(&proactive(), &h, 6).action;
        let clone = |budget| PolicyPlan::ProactiveClone {
            proactive: ProactiveConfig::default(),
            budget,
        };
        // 25 % of 80 units: 20, more than the plan moves.
        let Action::Move(moves) = plan else {
            panic!("{plan:?}")
        };
        assert_eq!(
            decided(&clone(0.25), &h, 6).action,
            Action::Clone(moves.clone())
        );
        // 5 % of 80: the first 4 units of the plan.
        let cut = decided(&clone(0.05), &h, 6).action;
        assert_eq!(cut, Action::Clone(within_budget(&moves, 4)));
        assert_eq!(cut.planned_units(), 4);
    }

    #[test]
    fn under_slack_the_decision_reads_only_what_every_worker_has() {
        // Slow from iteration 2 on: at iteration 8 with slack 2 the
        // decision reads iterations 0..=5, which show the slowdown lasting;
        // with slack 5, iterations 0..=2 only: nothing lasts yet.
        let h = history(8, |i| i >= 2, 4);
        let ssp = |slack| PolicyPlan::ForestallSsp {
            slack,
            proactive: ProactiveConfig::default(),
            reassign: ReassignConfig::default(),
        };
        let near = decided(&ssp(2), &h, 8);
        assert_eq!(near, decided(&proactive(), &h.through(5), 8));
        assert!(near.action.planned_units() > 0, "{near:?}");
        let far = decided(&ssp(5), &h, 8);
        assert_eq!(far.action, Action::Move(Vec::new()));
        // Before any iteration is known to every worker: no prediction.
        let first = decided(&ssp(2), &h, 2);
        assert_eq!(first.predicted, vec![None; 4]);
        assert_eq!(first.action, Action::Move(Vec::new()));
    }

    #[test]
    fn substitution_names_the_predicted_stragglers() {
        let h = history(3, |i| i == 2, 4);
        let policy = PolicyPlan::DproSubstitute {
            floor: 0.5,
            threshold: 1.5,
        };
        let d = decided(&policy, &h, 3);
        assert_eq!(
            d.action,
            Action::Substitute {
                slow: vec![false, false, false, true],
                floor: 0.5
            }
        );
        let partitions = [3, 7, 11];
        assert_eq!(d.action.kept_partitions(3, &partitions), Some(vec![3, 7]));
        assert_eq!(d.action.kept_partitions(0, &partitions), None);
        assert_eq!(d.action.planned_units(), 0);
    }
}
