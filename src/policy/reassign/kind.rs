//! The messages peers exchange within an iteration.

use serde::{Deserialize, Serialize};

use super::Pace;

/// What one worker tells another about the current iteration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControlKind {
    /// "I have done `done` of my `total` own units, taking `unit_us` per unit,
    /// and `queued` units wait ahead of my list."
    Progress {
        /// Own units done.
        done: u32,
        /// Own units in all.
        total: u32,
        /// Units queued ahead of its own list (peers' units, planned units
        /// that came with their rows): work it has besides its own, so a
        /// worker through its own list is not idle while it has them.
        queued: u32,
        /// Mean time per unit so far this iteration, µs.
        unit_us: u64,
    },
    /// "I am idle and take `unit_us` per unit; give me work."
    Offer {
        /// Mean time per unit so far this iteration, µs.
        unit_us: u64,
    },
    /// "These many units from the end of my list are yours now" (the operator
    /// fills in which).
    Assign {
        /// How many.
        count: u32,
    },
    /// "I have nothing to give."
    Decline,
    /// Speculation: "compute copies of these units of mine; I keep them too, and
    /// whichever of us finishes one first wins" (the operator fills in which).
    Clone {
        /// How many.
        count: u32,
    },
    /// Speculation: "I finished these cloned units; skip them."
    Done,
    /// "The rest of my unit in flight is yours: its micro-batches from
    /// `done` on, with the running sums of the ones before" (the operator
    /// fills in the unit and the sums; see
    /// [`handover::rest_in_flight`](crate::policy::handover::rest_in_flight)).
    Rest {
        /// Micro-batches of the unit already folded into the sums.
        done: u32,
    },
    /// "The micro-batches of my unit in flight from `first` on, `count` of
    /// them, are yours; I compute those before": each computed from zero
    /// and sent as it is, for the shard owners to fold after the sums of
    /// the ones before (the operator fills in the unit; see
    /// [`handover::tail_in_flight`](crate::policy::handover::tail_in_flight)).
    Tail {
        /// The first micro-batch handed over.
        first: u32,
        /// How many.
        count: u32,
    },
    /// Proactive plan: "these many units from the end of my list are yours
    /// this iteration, as the plan says" (counted as the receiver's own).
    Planned {
        /// How many.
        count: u32,
    },
    /// Online prediction: "I went idle in this iteration after `units` units
    /// taking `busy_us`" (sent once per iteration, to worker 0).
    Timing {
        /// Units computed.
        units: u32,
        /// From the iteration's start to the last unit's end, µs.
        busy_us: u64,
    },
    /// Broker: "after my first own unit (or idle, or handed units), this is
    /// my pace" (to worker 0).
    Pace(Pace),
    /// Broker, from worker 0: "give `count` units from the end of your list
    /// to `to`, then `cut` micro-batches more from the end of what is left"
    /// (see [`handover::cut`](crate::policy::handover::cut)).
    Give {
        /// The receiver.
        to: u32,
        /// How many whole units.
        count: u32,
        /// Micro-batches beyond them (0: none).
        #[serde(default)]
        cut: u32,
    },
    /// A giver's order to its own worker, never sent as it is: "hand `to`
    /// the last `count` micro-batches of the last unit of my list" (the
    /// operator cuts that unit in two, keeps its first part in the list
    /// and sends the other as a [`ControlKind::Tail`]).
    Cut {
        /// Micro-batches from the unit's end.
        count: u32,
    },
    /// Online prediction, from worker 0 once every worker's timing of the
    /// iteration is in: all of them, by worker, as (units, busy µs).
    Timings {
        /// Every worker's timing.
        all: Vec<(u32, u64)>,
    },
}

impl ControlKind {
    /// Bytes on the wire: a 4-byte tag and the fields, fixed-width (u32 4,
    /// u64 8, a vector 8 of length and its items).
    pub fn wire_bytes(&self) -> u64 {
        4 + match self {
            ControlKind::Progress { .. } => 4 + 4 + 4 + 8,
            ControlKind::Offer { .. } => 8,
            ControlKind::Assign { .. }
            | ControlKind::Clone { .. }
            | ControlKind::Planned { .. }
            | ControlKind::Rest { .. }
            | ControlKind::Cut { .. } => 4,
            ControlKind::Decline | ControlKind::Done => 0,
            ControlKind::Timing { .. } => 4 + 8,
            ControlKind::Pace(_) => 4 + 4 + 8 + 8 + 8 + 9,
            ControlKind::Give { .. } => 4 + 4 + 4,
            ControlKind::Tail { .. } => 4 + 4,
            ControlKind::Timings { all } => 8 + 12 * all.len() as u64,
        }
    }
}
