//! Where and from what a run came: `machine.json` in its directory (git
//! revision, start time, machine, and the job's headline settings), written
//! when the run starts, so a crashed run has one too. Bench directories keep the same in `bench.json`
//! ([`crate::bench::resume::BenchManifest`]).

use std::path::Path;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::bench::machine::{this_machine, utc_time, Machine};
use crate::spec::JobPlan;

/// The file in a run directory.
pub const ORIGIN_FILE: &str = "machine.json";

/// What `machine.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOrigin {
    /// Git revision of the binary.
    pub git_revision: String,
    /// When the run started, `YYYY-MM-DD HH:MM:SS` UTC.
    pub started: String,
    /// The machine.
    pub machine: Machine,
    /// What the run trains, as planned.
    #[serde(default)]
    pub job: Option<PlannedJob>,
}

/// A run's headline settings, as its plan has them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedJob {
    /// Job name.
    pub name: String,
    /// The model kind.
    pub workload: String,
    /// Policy.
    pub policy: String,
    /// Injected pattern.
    pub pattern: String,
    /// Workers.
    pub workers: u32,
    /// Iterations planned.
    pub iterations: u64,
    /// Seed.
    pub seed: u64,
}

impl RunOrigin {
    /// The run of `plan` on this machine, starting now, by a binary of
    /// `git_revision`.
    pub fn here(plan: &JobPlan, git_revision: &str) -> Self {
        Self {
            git_revision: git_revision.to_owned(),
            started: utc_time(SystemTime::now()),
            machine: this_machine(),
            job: Some(PlannedJob {
                name: plan.name.clone(),
                workload: plan.model.kind().to_owned(),
                policy: plan.policy.as_str().to_owned(),
                pattern: plan.pattern.name().to_owned(),
                workers: plan.workers,
                iterations: plan.iterations,
                seed: plan.seed,
            }),
        }
    }

    /// Writes `machine.json` into the run directory `dir` (atomically).
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        crate::fsutil::write_atomic(&dir.join(ORIGIN_FILE), &json)
    }

    /// The `machine.json` of `dir`, if it has a readable one.
    pub fn read(dir: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(dir.join(ORIGIN_FILE)).ok()?;
        serde_json::from_str(&text).ok()
    }
}
