//! The model trained by a job and its optimiser: binary logistic regression on
//! sparse features, trained with Adam on the mean log-loss plus an L2 penalty.

pub mod logistic;
pub mod optim;

pub use logistic::{evaluate, unit_gradient, Evaluation, UnitGradient};
pub use optim::{Adam, AdamConfig};
