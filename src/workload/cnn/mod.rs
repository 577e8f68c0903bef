//! The seeds' CNN on chest X-rays: the burn net as a function of flat
//! parameters ([`net`]), the workload that trains it ([`classifier`]), and the
//! peer check's plain burn loop ([`peer`]; `run::plain_burn` drives it over a
//! job's units).

pub mod classifier;
pub mod net;
pub mod peer;
mod staged;

pub use classifier::CnnClassifier;
pub use net::{CnnConfig, CnnNet};
