//! Model-parallel (pipeline) training's pure parts: the order in which a
//! stage runs its micro-batches' passes under a named schedule, what that
//! order costs when stages wait on each other (the bubble), where the
//! stages run and what they hold (`layout`), the best cut of the layers
//! into stages for the stage workers' speeds (the pipeline's bound), and
//! `rebalance-stages`' placements, and the units replicas take from each
//! other within an iteration (`steal`). The stage operators that run these
//! orders on timely dataflow are in `run::stage`; see
//! `docs/model-parallel.md`.

pub mod bound;
pub mod layout;
pub mod rebalance;
pub mod schedule;
pub mod steal;

pub use bound::{
    best_cut, best_shares, best_split, cuts, paced_bound_us, paced_shares_bound_us, ReplicaPlan,
};
pub use layout::StageLayout;
pub use rebalance::{lasting, rebalance, slowdowns, Measured, Placement};
pub use schedule::{timeline, Pass, Schedule, ScheduleError, StageCost, Timeline, SCHEDULES};
