//! An interrupted bench continues where it stopped.
//!
//! A bench writes `bench.json` (pipeline, [`pipeline_hash`], git revision,
//! machine) into its results directory before its first job, and the rows of
//! each job to `parts/<index>.parquet` the moment the job finishes (atomically:
//! a part is whole or absent). Rerun into the same directory, a bench whose
//! pipeline hash and revision equal the directory's skips every job with a
//! readable part and runs the rest; the final `raw.parquet` holds the same rows
//! an uninterrupted bench writes. A directory of another pipeline, of changed
//! jobs or of another revision is refused: finishing it would mix results that
//! cannot be compared.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::machine::Machine;
use super::results::{read_rows, write_rows, BenchRow, ResultsError};
use super::spec::RunSpec;
use crate::spec::JobPlan;

/// The file that says which bench a results directory holds.
pub const MANIFEST: &str = "bench.json";
/// The directory of per-job result parts.
pub const PARTS: &str = "parts";

/// What a bench results directory holds (`bench.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchManifest {
    /// `[bench] name` of the pipeline.
    pub pipeline: String,
    /// [`pipeline_hash`] of its planned runs.
    pub pipeline_hash: String,
    /// Git revision of the binary that ran it.
    pub git_revision: String,
    /// UTC date it started.
    pub date: String,
    /// Planned jobs.
    pub runs: usize,
    /// The machine it ran on.
    pub machine: Machine,
}

/// Why a results directory cannot take this bench.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    /// The directory holds files but no bench manifest.
    #[error(
        "results directory {dir} already holds files and is not an unfinished bench (no {MANIFEST}); \
         choose another --out"
    )]
    NotABench {
        /// The directory.
        dir: PathBuf,
    },
    /// The manifest cannot be read.
    #[error("results directory {dir}: cannot read {MANIFEST}: {message}")]
    Manifest {
        /// The directory.
        dir: PathBuf,
        /// Why.
        message: String,
    },
    /// The directory holds another bench, or this one's runs changed.
    #[error(
        "results directory {dir} holds {what}; resuming would mix results that cannot be \
         compared: choose another --out, or remove {dir} to start afresh"
    )]
    Mismatch {
        /// The directory.
        dir: PathBuf,
        /// What differs.
        what: String,
    },
}

/// SHA-256 (hex) of everything that decides a pipeline's rows: each run's
/// sweep, plan hash and bench settings, in order.
pub fn pipeline_hash(runs: &[(RunSpec, JobPlan)]) -> String {
    let mut h = Sha256::new();
    for (run, plan) in runs {
        let line = format!(
            "{}\t{}\t{}\t{}\t{:?}\t{:?}\t{:?}\n",
            run.sweep,
            plan.hash(),
            run.plain_reference,
            run.burn_reference,
            run.target_accuracy.map(f64::to_bits),
            run.processes,
            run.kill_at
        );
        h.update(line.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The part file of job `index`.
pub fn part_path(out_dir: &Path, index: usize) -> PathBuf {
    out_dir.join(PARTS).join(format!("{index:04}.parquet"))
}

/// Writes the rows of job `index` (atomically).
pub fn write_part(
    out_dir: &Path,
    index: usize,
    rows: &[BenchRow],
) -> Result<(), parquet::errors::ParquetError> {
    std::fs::create_dir_all(out_dir.join(PARTS))?;
    write_rows(&part_path(out_dir, index), rows)
}

/// How a bench starts in its results directory.
#[derive(Debug)]
pub enum Start {
    /// Nothing there: write the manifest and run every job.
    Fresh,
    /// The same bench, interrupted: these jobs (by index) are complete.
    Resume {
        /// Rows of each complete job.
        done: BTreeMap<usize, Vec<BenchRow>>,
        /// Parts that could not be read (their jobs run again).
        unreadable: Vec<ResultsError>,
    },
}

/// Reads the manifest of a bench results directory.
pub fn read_manifest(dir: &Path) -> Result<BenchManifest, ResumeError> {
    let path = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ResumeError::NotABench {
            dir: dir.to_owned(),
        },
        _ => ResumeError::Manifest {
            dir: dir.to_owned(),
            message: e.to_string(),
        },
    })?;
    serde_json::from_str(&text).map_err(|e| ResumeError::Manifest {
        dir: dir.to_owned(),
        message: e.to_string(),
    })
}

/// Decides whether `dir` starts afresh or resumes the bench `this`
/// describes, and reads the jobs already complete.
pub fn start_in(dir: &Path, this: &BenchManifest) -> Result<Start, ResumeError> {
    if !crate::fsutil::is_non_empty_dir(dir) {
        return Ok(Start::Fresh);
    }
    let found = read_manifest(dir)?;
    let mismatch = |what: String| ResumeError::Mismatch {
        dir: dir.to_owned(),
        what,
    };
    if found.pipeline != this.pipeline {
        return Err(mismatch(format!(
            "the bench '{}', not '{}'",
            found.pipeline, this.pipeline
        )));
    }
    if found.pipeline_hash != this.pipeline_hash || found.runs != this.runs {
        return Err(mismatch(format!(
            "a bench '{}' of other runs ({} jobs, pipeline hash {}; now {} jobs, {}): the pipeline or its jobs changed",
            found.pipeline,
            found.runs,
            &found.pipeline_hash[..12.min(found.pipeline_hash.len())],
            this.runs,
            &this.pipeline_hash[..12.min(this.pipeline_hash.len())]
        )));
    }
    if found.git_revision != this.git_revision {
        return Err(mismatch(format!(
            "a bench '{}' run by revision {}, and this binary is {}",
            found.pipeline, found.git_revision, this.git_revision
        )));
    }
    let mut done = BTreeMap::new();
    let mut unreadable = Vec::new();
    for index in 0..this.runs {
        let path = part_path(dir, index);
        if !path.is_file() {
            continue;
        }
        match read_rows(&path) {
            Ok(rows) if !rows.is_empty() => {
                done.insert(index, rows);
            }
            Ok(_) => {}
            Err(e) => unreadable.push(e),
        }
    }
    Ok(Start::Resume { done, unreadable })
}
