//! Reports: what a run achieved, for people (text) and machines (JSON lines).
//! Rendering only: the numbers come from the run's records.

pub mod curves;
pub mod html;
pub mod json;
pub mod plot;
pub mod summary;

pub use summary::RunSummary;
