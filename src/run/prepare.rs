//! Before a run writes anything: the job file read, overridden and validated,
//! and its output directory chosen.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::fsutil::{fresh_dir, is_non_empty_dir, utc_stamp};
use crate::spec::{plan_job, JobPlan, Overrides, SpecError};

/// Why a run cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrepareError {
    /// The job file cannot be read or is invalid.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// `--resume` names a directory that holds no run.
    #[error("--resume {}: not the output directory of a run (it has no plan.json)", dir.display())]
    NotARun {
        /// The directory.
        dir: PathBuf,
    },
    /// The output directory holds files and replacing them was not asked for.
    #[error(
        "output directory {} already holds files; pass --force to replace it or \
         choose another --out",
        dir.display()
    )]
    OutputNotEmpty {
        /// The directory.
        dir: PathBuf,
    },
}

/// The plan and where its output goes, with every input checked.
#[derive(Debug)]
pub struct PreparedRun {
    /// The validated plan.
    pub plan: JobPlan,
    /// Output directory (not created yet).
    pub out_dir: PathBuf,
}

/// Reads `job`, applies `overrides`, validates it, and picks the output
/// directory: `resume`'s, the plan's `out` (which must be empty unless
/// `force`), or a fresh `runs/<job name>/<UTC time>`. Nothing is written.
pub fn prepare(
    job: &Path,
    overrides: &Overrides,
    force: bool,
    resume: Option<&Path>,
) -> Result<PreparedRun, PrepareError> {
    let plan = plan_job(job, overrides)?;
    if let Some(dir) = resume {
        if !dir.join("plan.json").is_file() {
            return Err(PrepareError::NotARun {
                dir: dir.to_owned(),
            });
        }
        return Ok(PreparedRun {
            plan,
            out_dir: dir.to_owned(),
        });
    }
    let out_dir = match &plan.out {
        Some(dir) => {
            if is_non_empty_dir(dir) && !force {
                return Err(PrepareError::OutputNotEmpty { dir: dir.clone() });
            }
            dir.clone()
        }
        None => fresh_dir(
            &Path::new("runs")
                .join(&plan.name)
                .join(utc_stamp(SystemTime::now())),
        ),
    };
    Ok(PreparedRun { plan, out_dir })
}
