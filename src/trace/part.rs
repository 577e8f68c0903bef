//! A part file: its name and the stamp it carries.

use serde::{Deserialize, Serialize};

/// What every part file is stamped with, so a trace can be traced back to the
/// code, plan and seed that produced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceStamp {
    /// Identifier of the job; also the `job_id` column of every row.
    pub job_id: String,
    /// Git revision of the code that ran the job.
    pub git_revision: String,
    /// Hash of the resolved job plan.
    pub plan_hash: String,
    /// Seed of the job.
    pub seed: u64,
}

/// The extension of every part file.
pub(crate) const PART_SUFFIX: &str = ".parquet";

/// The start of process `process`'s part names.
pub(crate) fn part_prefix(process: u32) -> String {
    format!("part-p{process:03}-")
}

/// `part-p{process:03}-{seq:05}.parquet`.
pub(crate) fn part_file_name(process: u32, seq: u32) -> String {
    format!("{}{seq:05}{PART_SUFFIX}", part_prefix(process))
}

/// Whether a directory entry named `name` is a finished part file: a visible
/// `*.parquet` file (temporary files are hidden).
pub(crate) fn is_part_file_name(name: &str) -> bool {
    !name.starts_with('.') && name.ends_with(PART_SUFFIX)
}
