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
pub mod overrides;
pub mod plan;
pub mod settings;
pub mod validate;

use std::path::{Path, PathBuf};

pub use job::JobSpec;
pub use overrides::Overrides;
pub use plan::*;
pub use settings::Setting;
pub use validate::{
    check_against_data, pattern_from_toml, policy_named, policy_with_model, unit_sizes, validate,
};

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

impl SpecError {
    /// The error for `[section] key` of a validated `plan`, found wrong only
    /// once its data was loaded or its compute measured: it points at the
    /// key's line in the job file the plan came from, when it can.
    pub fn in_plan(plan: &JobPlan, section: &str, key: &str, message: String) -> Self {
        let text = plan
            .source
            .as_deref()
            .and_then(|p| std::fs::read_to_string(p).ok());
        SpecError::Invalid {
            origin: origin(plan.source.as_deref()),
            line: text
                .as_deref()
                .and_then(|t| validate::locate(t, section, key)),
            section: section.to_owned(),
            key: key.to_owned(),
            message,
        }
    }
}

/// Result type of this module.
pub type Result<T, E = SpecError> = std::result::Result<T, E>;

/// Parses job text; `path` is used in messages only.
pub fn parse_job(text: &str, path: Option<&Path>) -> Result<JobSpec> {
    toml::from_str(text).map_err(|e| SpecError::Parse {
        origin: origin(path),
        message: parse_message(&e),
    })
}

/// A TOML error as a message, its lines indented under the first.
pub(crate) fn parse_message(e: &toml::de::Error) -> String {
    e.to_string().trim_end().replace('\n', "\n  ")
}

/// Reads and parses a job file. Returns the spec and the file's text (for line
/// numbers in later messages).
pub fn read_job_file(path: &Path) -> Result<(JobSpec, String)> {
    read_job_file_with(path, &[])
}

/// Reads and parses a job file with `settings` put in (see [`settings`]).
pub fn read_job_file_with(path: &Path, settings: &[Setting]) -> Result<(JobSpec, String)> {
    let text = std::fs::read_to_string(path).map_err(|source| SpecError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ok((settings::parse_job_with(&text, Some(path), settings)?, text))
}

/// The plan of the job file at `path` as the command line gives it: read
/// with `overrides.set` put in, the other overrides applied, validated.
pub fn plan_job(path: &Path, overrides: &Overrides) -> Result<JobPlan> {
    let (mut spec, text) = read_job_file_with(path, &overrides.set)?;
    overrides.apply(&mut spec);
    validate::validate_with(&spec, &text, Some(path), overrides)
}

pub(crate) fn origin(path: Option<&Path>) -> String {
    path.map_or_else(|| "<job>".to_owned(), |p| p.display().to_string())
}
