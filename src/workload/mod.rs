//! What a job trains: the workloads behind one seam, and the per-coordinate Adam
//! optimiser that shard owners step.

pub mod logistic;
pub mod optim;

pub use logistic::{evaluate, unit_gradient, Evaluation, UnitGradient};
pub use optim::{Adam, AdamConfig};
