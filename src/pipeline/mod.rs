//! Model-parallel (pipeline) training's pure parts: the order in which a
//! stage runs its micro-batches' passes under a named schedule, what that
//! order costs when stages wait on each other (the bubble), and the best
//! cut of the layers into stages for the stage workers' speeds (the
//! pipeline's bound).
//!
//! Not yet here: the stages as timely dataflow, which will run these
//! orders; see `docs/model-parallel.md` for where that stands.

pub mod bound;
pub mod layout;
pub mod rebalance;
pub mod schedule;
pub mod whatif;

pub use bound::{best_cut, best_split, cuts, paced_bound_us, ReplicaPlan};
pub use layout::StageLayout;
pub use rebalance::{rebalance, Measured, Placement};
pub use schedule::{timeline, Pass, Schedule, ScheduleError, StageCost, Timeline, SCHEDULES};
