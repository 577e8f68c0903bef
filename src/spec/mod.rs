//! Job specifications: a TOML file as written ([`JobSpec`]) is checked and
//! resolved into a [`JobPlan`]; command-line overrides are applied in between.
//!
//! ```
//! let toml = r#"
//!     [job]
//!     iterations = 5
//!     [workers]
//!     count = 2
//! "#;
//! let spec = forestall::spec::parse_job(toml, None)?;
//! let plan = forestall::spec::validate(&spec, toml, None)?;
//! assert_eq!(plan.workers, 2);
//! assert_eq!(plan.partitions, forestall::spec::DEFAULT_PARTITIONS);
//! # Ok::<(), forestall::spec::SpecError>(())
//! ```

pub mod job;
pub mod plan;
pub mod validate;
mod validate_policy;

use std::path::{Path, PathBuf};

pub use job::JobSpec;
pub use plan::*;
pub use validate::{pattern_from_toml, policy_named, policy_with_model, validate};

/// A job file that cannot be used, with the place and the reason.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// The file could not be read.
    #[error("failed to read job file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not match the job schema.
    #[error("{origin}: {message}")]
    Parse {
        /// File name (or `<job>` for text).
        origin: String,
        /// toml's message, which names the line and the key.
        message: String,
    },
    /// A value is missing, out of range or unknown.
    #[error("{origin}{line}: [{section}] {key}: {message}", line = line.map(|l| format!(":{l}")).unwrap_or_default())]
    Invalid {
        /// File name (or `<job>` for text, `command line` for a flag).
        origin: String,
        /// 1-based line of the key, when it is in the file.
        line: Option<usize>,
        /// Table of the key.
        section: String,
        /// The key.
        key: String,
        /// What is wrong and what is accepted.
        message: String,
    },
}

/// Result type of this module.
pub type Result<T, E = SpecError> = std::result::Result<T, E>;

/// Parses job text; `path` is used in messages only.
pub fn parse_job(text: &str, path: Option<&Path>) -> Result<JobSpec> {
    toml::from_str(text).map_err(|e| SpecError::Parse {
        origin: origin(path),
        message: e.to_string().trim_end().replace('\n', "\n  "),
    })
}

/// Reads and parses a job file. Returns the spec and the file's text (for line
/// numbers in later messages).
pub fn read_job_file(path: &Path) -> Result<(JobSpec, String)> {
    let text = std::fs::read_to_string(path).map_err(|source| SpecError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ok((parse_job(&text, Some(path))?, text))
}

fn origin(path: Option<&Path>) -> String {
    path.map_or_else(|| "<job>".to_owned(), |p| p.display().to_string())
}

/// Values given on the command line; each replaces the file's value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// `--workers`.
    pub workers: Option<u32>,
    /// `--iterations`.
    pub iterations: Option<u64>,
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--pattern`. Changing the pattern drops the file's knobs of the old one.
    pub pattern: Option<String>,
    /// `--probability`.
    pub probability: Option<f64>,
    /// `--delay` (percent).
    pub delay_percent: Option<f64>,
    /// `--alpha` (power-law exponent).
    pub alpha: Option<f64>,
    /// `--policy`.
    pub policy: Option<String>,
    /// `--pace` (ns per row).
    pub pace_ns_per_row: Option<u64>,
    /// `--out`.
    pub out: Option<String>,
    /// `--checkpoint-every`.
    pub checkpoint_every: Option<u64>,
}

impl Overrides {
    /// The overrides as `forestall run` flags, but for `--workers` and
    /// `--out` (a launcher sets those).
    pub fn words(&self) -> Vec<String> {
        let mut words = Vec::new();
        let mut push = |flag: &str, value: Option<String>| {
            if let Some(v) = value {
                words.push(format!("--{flag}"));
                words.push(v);
            }
        };
        push("iterations", self.iterations.map(|v| v.to_string()));
        push("seed", self.seed.map(|v| v.to_string()));
        push("pattern", self.pattern.clone());
        push("delay", self.delay_percent.map(|v| v.to_string()));
        push("probability", self.probability.map(|v| v.to_string()));
        push("alpha", self.alpha.map(|v| v.to_string()));
        push("policy", self.policy.clone());
        push("pace", self.pace_ns_per_row.map(|v| v.to_string()));
        push(
            "checkpoint-every",
            self.checkpoint_every.map(|v| v.to_string()),
        );
        words
    }

    /// Applies the overrides to `spec`.
    pub fn apply(&self, spec: &mut JobSpec) {
        if let Some(w) = self.workers {
            spec.workers.count = Some(w);
        }
        if let Some(i) = self.iterations {
            spec.job.iterations = Some(i);
        }
        if let Some(s) = self.seed {
            spec.job.seed = Some(s);
        }
        if let Some(p) = &self.pattern {
            if spec.straggler.pattern.as_deref() != Some(p.as_str()) {
                spec.straggler = job::StragglerSection {
                    pattern: Some(p.clone()),
                    ..Default::default()
                };
            }
        }
        if let Some(p) = self.probability {
            spec.straggler.probability = Some(p);
        }
        if let Some(d) = self.delay_percent {
            spec.straggler.delay_percent = Some(d);
        }
        if let Some(a) = self.alpha {
            spec.straggler.alpha = Some(a);
        }
        if let Some(p) = &self.policy {
            spec.policy.name = Some(p.clone());
        }
        if let Some(p) = self.pace_ns_per_row {
            spec.workers.pace_ns_per_row = Some(p);
        }
        if let Some(o) = &self.out {
            spec.job.out = Some(o.clone());
        }
        if let Some(e) = self.checkpoint_every {
            spec.checkpoint.every = Some(e);
        }
    }
}
