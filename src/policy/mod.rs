//! Mitigation policies: what to do about stragglers, as pure decisions over what
//! is known (progress reports, help offers, the units left), with no clock and no
//! dataflow inside, so the same code runs in a timely job, in a replay of a
//! recorded trace, and in unit tests.
//!
//! | policy | module | kind |
//! |---|---|---|
//! | `bsp` | — | every worker computes its own units; all wait for all |
//! | `rapid-reassign` | [`reassign`] | FlexRR's RapidReassignment: peers that are ahead take units from the end of a slow worker's list |
//! | `speculate` | [`speculate`] | Spark/LATE: a slow worker's last units are cloned on a finished peer; the first copy wins |
//! | `ssp` | — | stale synchronous parallel: start iteration t with parameters ≥ t − slack (changes the math) |
//! | `flexrr` | [`reassign`] | FlexRR: `ssp` + `rapid-reassign` |
//! | `backup-workers` | — | use the first N − b workers' gradients, drop the rest (lossy, recorded) |
//! | `proactive` | [`proactive`] | DPro-SM: before each iteration, move units from predicted-slow to predicted-fast workers (greedy LPT) |
//! | `proactive-clone` | [`proactive`] | DPro-SM / Dolly: the same plan, but the predicted-slow worker's units are cloned on the predicted-fast ones (it keeps them too), within a budget; first copy wins |
//! | `dpro-substitute` | [`substitute`] | DPro-SM: a worker predicted to straggle computes only a floor of its partitions; the shard owners use its other units' last gradients (lossy, recorded as dropped partitions) |
//! | `forestall` | [`proactive`], [`reassign`] | `proactive`, with `rapid-reassign` catching what the predictor missed |
//! | `forestall-ssp` | [`proactive`], [`reassign`] | `forestall` with SSP's slack, without the broker: not BSP semantics (changes the math, as `flexrr` does) |
//! | `ideal` | — | the same job with injection off: the yardstick |
//!
//! The predictive policies decide at an iteration's start in one function,
//! [`boundary::decide`], which the run and the what-if replay both call; a
//! worker gives, clones and cancels units as [`handover`] says, in both.

pub mod boundary;
pub mod broker;
pub mod handover;
pub mod proactive;
pub mod reassign;
pub mod speculate;
pub mod substitute;

use serde::{Deserialize, Serialize};

pub use boundary::{decide, Decision, Known};
pub use proactive::{lists_after, order_for_gifts, plan_moves, Move, ProactiveConfig};
pub use reassign::{ControlKind, ReassignAgent, ReassignConfig};
pub use speculate::{SpeculateAgent, SpeculateConfig};
pub use substitute::substitution;

/// The policy a job runs, with its knobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum PolicyPlan {
    /// Bulk-synchronous: every worker computes its own units, all wait for all.
    Bsp,
    /// FlexRR's rapid reassignment of units to peers that are ahead.
    RapidReassign(ReassignConfig),
    /// Speculative clones of a slow worker's units on finished peers.
    Speculate(SpeculateConfig),
    /// Stale synchronous parallel: a worker may start iteration t with
    /// parameters of version ≥ t − slack.
    Ssp {
        /// Iterations a worker may run ahead (0 = BSP).
        slack: u64,
    },
    /// Backup workers: use the first N − b workers' gradients, drop the rest.
    BackupWorkers {
        /// Workers whose gradients are dropped each iteration (b).
        backups: u32,
    },
    /// FlexRR: SSP plus rapid reassignment.
    Flexrr {
        /// Iterations a worker may run ahead.
        slack: u64,
        /// Rapid-reassignment knobs.
        reassign: ReassignConfig,
    },
    /// DPro-SM's proactive balancing: units move before the iteration starts,
    /// from predicted-slow to predicted-fast workers.
    Proactive(ProactiveConfig),
    /// Clones of the predicted-slow workers' units on predicted-fast workers,
    /// planned as `proactive` plans moves.
    ProactiveClone {
        /// Planning knobs.
        proactive: ProactiveConfig,
        /// At most this share of an iteration's units is cloned.
        budget: f64,
    },
    /// DPro-SM's substitution: a worker predicted to finish later than
    /// `threshold` × the median worker computes only `floor` of its
    /// partitions; the other units' last gradients stand in for them (lossy).
    DproSubstitute {
        /// Share of its partitions a predicted straggler still computes.
        floor: f64,
        /// Predicted completion time over the median that calls a straggler.
        threshold: f64,
    },
    /// `proactive` plus rapid reassignment within the iteration.
    Forestall {
        /// Proactive knobs.
        proactive: ProactiveConfig,
        /// Rapid-reassignment knobs.
        reassign: ReassignConfig,
        /// Whether a worker with nothing left to give answers an offer of
        /// help with a copy of its unit in flight when that unit is far from
        /// its end ([`handover::clone_in_flight`]); with it, whether it
        /// passes on the units peers handed it that wait unbegun.
        clone_in_flight: bool,
        /// Whether such a worker answers with the rest of its unit in
        /// flight, between micro-batches, rather than a copy
        /// ([`handover::rest_in_flight`]; only with `clone_in_flight`).
        rest_in_flight: bool,
        /// Whether such a worker answers with the last micro-batches of its
        /// unit in flight not yet begun, going on with the others
        /// ([`handover::tail_in_flight`]; only with `clone_in_flight`).
        tail_in_flight: bool,
    },
    /// `forestall` with SSP's slack (not BSP semantics): a worker may start
    /// iteration t with parameters of version ≥ t − slack, and the plan for
    /// t learns from the iterations up to t − 1 − slack, which every worker
    /// has by then. No broker: its one balance per iteration assumes the
    /// workers are in the same iteration.
    ForestallSsp {
        /// Iterations a worker may run ahead.
        slack: u64,
        /// Proactive knobs.
        proactive: ProactiveConfig,
        /// Rapid-reassignment knobs (`broker` off).
        reassign: ReassignConfig,
    },
    /// No injected slowdown: the reference every policy is compared with.
    Ideal,
    /// A pipeline (`[parallel]`): between iterations, re-cut each
    /// replica's layers between its stages and re-share the partitions
    /// between the replicas as the measured speeds say
    /// ([`crate::pipeline::rebalance()`]).
    RebalanceStages,
}

impl PolicyPlan {
    /// The name used in job files.
    pub fn as_str(&self) -> &'static str {
        match self {
            PolicyPlan::Bsp => "bsp",
            PolicyPlan::RapidReassign(_) => "rapid-reassign",
            PolicyPlan::Speculate(_) => "speculate",
            PolicyPlan::Ssp { .. } => "ssp",
            PolicyPlan::BackupWorkers { .. } => "backup-workers",
            PolicyPlan::Flexrr { .. } => "flexrr",
            PolicyPlan::Proactive(_) => "proactive",
            PolicyPlan::ProactiveClone { .. } => "proactive-clone",
            PolicyPlan::DproSubstitute { .. } => "dpro-substitute",
            PolicyPlan::Forestall { .. } => "forestall",
            PolicyPlan::ForestallSsp { .. } => "forestall-ssp",
            PolicyPlan::Ideal => "ideal",
            PolicyPlan::RebalanceStages => "rebalance-stages",
        }
    }

    /// Whether the policy acts on predictions at every iteration boundary (and
    /// so waits for every worker's timing of the iteration before).
    pub fn predicts(&self) -> bool {
        self.proactive().is_some() || matches!(self, PolicyPlan::DproSubstitute { .. })
    }

    /// The proactive knobs, if the policy moves work before an iteration.
    pub fn proactive(&self) -> Option<&ProactiveConfig> {
        match self {
            PolicyPlan::Proactive(c)
            | PolicyPlan::Forestall { proactive: c, .. }
            | PolicyPlan::ForestallSsp { proactive: c, .. }
            | PolicyPlan::ProactiveClone { proactive: c, .. } => Some(c),
            _ => None,
        }
    }

    /// Whether the policy keeps BSP semantics (every unit counted exactly once per
    /// iteration, fixed reduction order): its parameters equal `bsp`'s bit for bit.
    pub fn keeps_bsp_semantics(&self) -> bool {
        self.slack() == 0
            && !matches!(
                self,
                PolicyPlan::BackupWorkers { .. } | PolicyPlan::DproSubstitute { .. }
            )
    }

    /// Whether a worker answers an offer of help with a copy of its unit in
    /// flight ([`handover::clone_in_flight`]).
    pub fn clones_in_flight(&self) -> bool {
        matches!(
            self,
            PolicyPlan::Forestall {
                clone_in_flight: true,
                ..
            }
        )
    }

    /// Whether a worker answers an offer of help with the rest of its unit
    /// in flight ([`handover::rest_in_flight`]).
    pub fn rests_in_flight(&self) -> bool {
        matches!(
            self,
            PolicyPlan::Forestall {
                clone_in_flight: true,
                rest_in_flight: true,
                ..
            }
        )
    }

    /// Whether a worker answers an offer of help with the tail of its unit
    /// in flight ([`handover::tail_in_flight`]).
    pub fn tails_in_flight(&self) -> bool {
        matches!(
            self,
            PolicyPlan::Forestall {
                clone_in_flight: true,
                tail_in_flight: true,
                ..
            }
        )
    }

    /// How many versions a worker's parameters may lag its iteration (0 = BSP).
    pub fn slack(&self) -> u64 {
        match self {
            PolicyPlan::Ssp { slack }
            | PolicyPlan::Flexrr { slack, .. }
            | PolicyPlan::ForestallSsp { slack, .. } => *slack,
            _ => 0,
        }
    }
}

/// The peer-to-peer agent of `worker` among `workers` (`per_process` to a
/// process), if `policy` uses one.
pub fn peer_agent(
    policy: &PolicyPlan,
    worker: u32,
    workers: u32,
    per_process: u32,
) -> Option<PeerAgent> {
    let group = |size| reassign::helper_group(worker, workers, per_process, size);
    match policy {
        PolicyPlan::RapidReassign(config)
        | PolicyPlan::Flexrr {
            reassign: config, ..
        }
        | PolicyPlan::Forestall {
            reassign: config, ..
        }
        | PolicyPlan::ForestallSsp {
            reassign: config, ..
        } => {
            // Only a policy that copies units in flight offers help to
            // silent peers, which are among those that report to it.
            let silent = policy.clones_in_flight();
            let reporters = match silent {
                true => reassign::reporters(worker, workers, per_process, config.group_size),
                false => Vec::new(),
            };
            Some(PeerAgent::Reassign(
                ReassignAgent::new(worker, group(config.group_size), *config)
                    .with_broker(workers)
                    .with_slack(policy.slack())
                    .with_silent_offers(silent, reporters)
                    .with_rests(policy.rests_in_flight())
                    .with_tails(policy.tails_in_flight()),
            ))
        }
        PolicyPlan::Speculate(config) => Some(PeerAgent::Speculate(SpeculateAgent::new(
            group(config.group_size),
            *config,
        ))),
        _ => None,
    }
}

/// A worker's agent for the peer-to-peer policies. Not boxed: a replay keeps
/// thousands side by side in one vector, and scattering them over the heap
/// made the what-if replay at 10,000 workers 2.4× slower.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum PeerAgent {
    /// Rapid reassignment.
    Reassign(ReassignAgent),
    /// Speculation.
    Speculate(SpeculateAgent),
}

impl PeerAgent {
    /// Starts `iteration` with `own_total` units of this worker's own.
    pub fn begin(&mut self, iteration: u64, own_total: u32) {
        match self {
            PeerAgent::Reassign(a) => a.begin(iteration, own_total),
            PeerAgent::Speculate(a) => a.begin(own_total),
        }
    }

    /// Whether its worker answers an offer of help with a copy of its unit
    /// in flight, when it has nothing else to give (its agent then also
    /// offers help to peers it has not heard from; see [`peer_agent`]).
    pub fn copies_in_flight(&self) -> bool {
        matches!(self, PeerAgent::Reassign(a) if a.offers_to_silent_peers())
    }

    /// Whether its worker answers an offer of help with the rest of its
    /// unit in flight, between micro-batches ([`PolicyPlan::rests_in_flight`]).
    pub fn rests_in_flight(&self) -> bool {
        matches!(self, PeerAgent::Reassign(a) if a.hands_over_rests())
    }

    /// Its worker handed `to` an own unit whole while it carried out a
    /// [`ControlKind::Cut`] (see [`ReassignAgent::handed_own`]).
    pub fn handed_own(&mut self, to: u32) {
        if let PeerAgent::Reassign(a) = self {
            a.handed_own(to);
        }
    }

    /// Its worker began an own unit of `micro_batches` micro-batches.
    pub fn set_micro_batches(&mut self, micro_batches: u32) {
        if let PeerAgent::Reassign(a) = self {
            a.set_micro_batches(micro_batches);
        }
    }

    /// Whether its worker answers an offer of help with the tail of its
    /// unit in flight ([`PolicyPlan::tails_in_flight`]).
    pub fn tails_in_flight(&self) -> bool {
        matches!(self, PeerAgent::Reassign(a) if a.hands_over_tails())
    }

    /// How many peers may still take units from its worker, at least 1
    /// (see [`handover::report_taker`]).
    pub fn takers(&self) -> u32 {
        match self {
            PeerAgent::Reassign(a) => a.takers(),
            PeerAgent::Speculate(_) => 1,
        }
    }

    /// The peer it expects to be free first, other than `except`, as a
    /// taker of units queued here (see [`ReassignAgent::freest_peer`]).
    pub fn freest_peer(&self, except: u32) -> Option<(u32, handover::Taker)> {
        match self {
            PeerAgent::Reassign(a) => a.freest_peer(except),
            PeerAgent::Speculate(_) => None,
        }
    }

    /// Its worker passed units on to the peer
    /// [`PeerAgent::freest_peer`] named (see [`ReassignAgent::forwarded`]).
    pub fn forwarded(&mut self) {
        if let PeerAgent::Reassign(a) = self {
            a.forwarded();
        }
    }

    /// Its worker passed `count` queued units on to `peer` (see
    /// [`ReassignAgent::passed`]).
    pub fn passed(&mut self, peer: u32, count: u32) {
        if let PeerAgent::Reassign(a) = self {
            a.passed(peer, count);
        }
    }

    /// Whether it is worker 0's with a broker, which wants every worker's
    /// list at the start of an iteration ([`PeerAgent::expect_lists`]).
    pub fn brokers(&self) -> bool {
        matches!(self, PeerAgent::Reassign(a) if a.brokers())
    }

    /// Every worker's units at the start of the iteration begun last
    /// (after the plan's moves), for the broker.
    pub fn expect_lists(&mut self, lists: Vec<u32>) {
        if let PeerAgent::Reassign(a) = self {
            a.expect_lists(lists);
        }
    }

    /// When worker 0's broker wants [`PeerAgent::on_broker_time`] called
    /// (the worker's clock, µs), if it does.
    pub fn broker_due(&mut self) -> Option<u64> {
        match self {
            PeerAgent::Reassign(a) => a.broker_due(),
            PeerAgent::Speculate(_) => None,
        }
    }

    /// Worker 0's clock reached [`PeerAgent::broker_due`] (call after
    /// `observe`; `left`: units in its own list): the broker's orders.
    pub fn on_broker_time(&mut self, left: usize) -> Vec<(u32, ControlKind)> {
        match self {
            PeerAgent::Reassign(a) => a.on_broker_time(left),
            PeerAgent::Speculate(_) => Vec::new(),
        }
    }

    /// One of this worker's own units is done (by it or by a clone).
    pub fn on_own_unit_done(&mut self, unit_us: u64) -> Vec<(u32, ControlKind)> {
        match self {
            PeerAgent::Reassign(a) => a.on_own_unit_done(unit_us),
            PeerAgent::Speculate(a) => a.on_own_unit_done(unit_us),
        }
    }

    /// A control message arrived; `left` is the number of own units that could
    /// be handed off.
    pub fn on_message(
        &mut self,
        from: u32,
        kind: &ControlKind,
        left: usize,
    ) -> Vec<(u32, ControlKind)> {
        match self {
            PeerAgent::Reassign(a) => a.on_message(from, kind, left),
            PeerAgent::Speculate(a) => a.on_message(from, kind, left),
        }
    }

    /// What the worker is doing now (before every other call): how long the
    /// unit in flight has run, if one is, how many units wait ahead of the
    /// own list (peers' units, planned units that came with their rows), how
    /// many are in the list, and the worker's clock, µs.
    pub fn observe(&mut self, running_us: Option<u64>, queued: usize, listed: usize, now_us: u64) {
        match self {
            PeerAgent::Reassign(a) => a.observe(running_us, queued, listed, now_us),
            PeerAgent::Speculate(a) => a.observe(running_us),
        }
    }

    /// A unit count to describe a peer that has finished this iteration (any
    /// positive number works: only done == total matters).
    pub fn own_total_hint(&self) -> u32 {
        1
    }

    /// This worker has nothing left to compute; `oldest_open` is the oldest
    /// iteration not yet reduced. Returns (peer, iteration, message).
    pub fn on_idle(&mut self, unit_us: u64, oldest_open: u64) -> Vec<(u32, u64, ControlKind)> {
        match self {
            PeerAgent::Reassign(a) => a.on_idle(unit_us, oldest_open),
            PeerAgent::Speculate(_) => Vec::new(),
        }
    }

    /// A message about an iteration this worker has already left: only
    /// bookkeeping (reports to remember, answers to offers).
    pub fn on_earlier(&mut self, iteration: u64, from: u32, kind: &ControlKind) {
        if let PeerAgent::Reassign(a) = self {
            match *kind {
                ControlKind::Progress { done, total, .. } => {
                    a.note_progress(iteration, from, done, total)
                }
                ControlKind::Assign { .. } | ControlKind::Decline => {
                    a.on_reply(iteration, from, kind)
                }
                _ => {}
            }
        }
    }
}
