//! Mitigation policies: what to do about stragglers, as pure decisions over what
//! is known (progress reports, help offers, the units left), with no clock and no
//! dataflow inside, so the same code runs in a timely job, in a replay of a
//! recorded trace, and in unit tests.
//!
//! | policy | module | kind |
//! |---|---|---|
//! | `bsp` | — | every worker computes its own units; all wait for all |
//! | `rapid-reassign` | [`reassign`] | FlexRR's RapidReassignment: peers that are ahead take units from the end of a slow worker's list |
//! | `ideal` | — | the same job with injection off: the yardstick |

pub mod reassign;

use serde::{Deserialize, Serialize};

pub use reassign::{ControlKind, ReassignAgent, ReassignConfig};

/// The policy a job runs, with its knobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum PolicyPlan {
    /// Bulk-synchronous: every worker computes its own units, all wait for all.
    Bsp,
    /// FlexRR's rapid reassignment of units to peers that are ahead.
    RapidReassign(ReassignConfig),
    /// No injected slowdown: the reference every policy is compared with.
    Ideal,
}

impl PolicyPlan {
    /// The name used in job files.
    pub fn as_str(&self) -> &'static str {
        match self {
            PolicyPlan::Bsp => "bsp",
            PolicyPlan::RapidReassign(_) => "rapid-reassign",
            PolicyPlan::Ideal => "ideal",
        }
    }

    /// Whether the policy keeps BSP semantics (every unit counted exactly once per
    /// iteration, fixed reduction order): its parameters equal `bsp`'s bit for bit.
    pub fn keeps_bsp_semantics(&self) -> bool {
        true
    }
}
