//! Timing traces: the records a run produces and their Parquet part files.
//!
//! A trace directory has one subdirectory per table (`units/`, `workers/`,
//! `iterations/`), each holding part files written by [`TraceWriter`] and read
//! back by [`read_trace_dir`]. The columns and file layout are documented in
//! `docs/trace-schema.md`.

pub mod error;
pub mod imported;
mod metrics_json;
pub mod part;
pub mod reader;
pub mod record;
pub mod schema;
pub mod synth;
pub mod writer;

#[cfg(test)]
pub(crate) mod tests_support;

pub use error::{Result, TraceError};
pub use part::TraceStamp;
pub use reader::{
    for_each_part, read_iterations, read_iterations_file, read_trace_dir, read_units_file,
    read_workers_file, TracePart, TraceSet,
};
pub use record::{IterationRecord, UnitAction, UnitRecord, WorkerRecord};
pub use schema::{TraceTable, READABLE_SCHEMA_VERSIONS, SCHEMA_VERSION};
pub use writer::TraceWriter;
