//! `forestall tune`: the seeds' automatic hyperparameter tuning as a batch
//! of ordinary runs.
//!
//! [`plan_tune`] turns a job and its `--over` lists into configurations,
//! each a validated plan (every one is checked before anything is written);
//! [`runner`] trains them as `forestall run` processes, each in its own run
//! directory with its own traces, under the job's injected pattern, scoring
//! them on a validation slice of the training data (never the test part).
//! Successive halving ([`halving`]) gives every configuration a few
//! iterations and lets the better half continue *from its own checkpoint*
//! (`forestall run --resume … --stop-after …`); the random strategy trains a
//! seeded sample to the end. The ranking is by training time to the target
//! ([`target`]); [`report`] writes it with a plot.

pub mod halving;
pub mod report;
pub mod runner;
pub mod space;
pub mod target;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::data::DataError;
use crate::fsutil::hex;
use crate::spec::{
    check_against_data, load_workload, partitioning_for, plan_job, JobPlan, Overrides, Setting,
    SpecError,
};
pub use space::Over;
pub use target::Target;

/// The share of the training rows a tune evaluates on when the job names no
/// `[data] validation_fraction`.
pub const DEFAULT_VALIDATION_FRACTION: f64 = 0.1;

/// How the configurations are searched.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Successive halving: every configuration trains a few iterations, the
    /// better half continues, until one trains to the job's end.
    Halving,
    /// A seeded random sample of the configurations, each trained to the end.
    Random,
}

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct TuneSpec {
    /// The job file.
    pub job: PathBuf,
    /// The job's values given on the command line, for every configuration.
    pub overrides: Overrides,
    /// The keys tuned and their values.
    pub overs: Vec<Over>,
    /// How the configurations are searched.
    pub strategy: Strategy,
    /// Random strategy: how many configurations (default: all, in a random
    /// order).
    pub samples: Option<usize>,
    /// What the configurations race to.
    pub target: Target,
    /// Seconds of training the tune may spend (its runs' wall time).
    pub budget_s: Option<f64>,
    /// Halving: the fewest iterations a rung trains.
    pub min_iterations: u64,
}

/// One configuration, planned.
#[derive(Debug, Clone)]
pub struct Config {
    /// Its place in the grid.
    pub index: usize,
    /// The settings it adds to the job (the tuned values, then the
    /// validation slice if the tune adds one).
    pub settings: Vec<Setting>,
    /// The tuned values as `key=value` words.
    pub label: String,
    /// Its validated plan.
    pub plan: JobPlan,
}

/// A tune ready to run: every configuration validated against the job and
/// its data.
#[derive(Debug, Clone)]
pub struct TunePlan {
    /// What the user asked for.
    pub spec: TuneSpec,
    /// Every configuration of the grid.
    pub configs: Vec<Config>,
    /// The job's iterations (every configuration's).
    pub iterations: u64,
    /// Halving: the iterations of each rung. Random: the job's iterations.
    pub rungs: Vec<u64>,
    /// Random: the configurations in the order they run. Halving: all.
    pub order: Vec<usize>,
}

/// Why a tune cannot start or go on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TuneError {
    /// The tune's own settings are wrong.
    #[error("{0}")]
    Invalid(String),
    /// A configuration's job does not validate.
    #[error("configuration {label}: {source}")]
    Config {
        /// The configuration.
        label: String,
        /// What is wrong with it.
        #[source]
        source: Box<SpecError>,
    },
    /// The job's data cannot be loaded.
    #[error("cannot load the dataset of {job}")]
    Data {
        /// The job file.
        job: PathBuf,
        /// Why.
        #[source]
        source: DataError,
    },
    /// A file of the tune could not be written or read.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

fn invalid(message: impl Into<String>) -> TuneError {
    TuneError::Invalid(message.into())
}

/// Plans `spec`: every configuration's job validated and checked against its
/// data, the rungs or the sample, and the budget checked against the least
/// one run can take. Nothing is written.
pub fn plan_tune(spec: TuneSpec) -> Result<TunePlan, TuneError> {
    if spec.overs.is_empty() {
        return Err(invalid(
            "nothing to tune: give at least one --over SECTION.KEY=V1,V2,…",
        ));
    }
    for (i, over) in spec.overs.iter().enumerate() {
        if spec.overs[..i].iter().any(|o| o.name() == over.name()) {
            return Err(invalid(format!("--over {} is given twice", over.name())));
        }
        if spec
            .overrides
            .set
            .iter()
            .any(|s| s.section == over.section && s.key == over.key)
            || spec.overrides.touches(&over.section, &over.key)
        {
            return Err(invalid(format!(
                "{} is both set on the command line and tuned by --over; drop one",
                over.name()
            )));
        }
    }
    if let Some(b) = spec.budget_s {
        if !(b.is_finite() && b > 0.0) {
            return Err(invalid(format!(
                "--budget {b}: must be a positive number of seconds"
            )));
        }
    }
    let base = plan_config(&spec, &[], "the job")?;
    if base.model.kind() == "lda" {
        return Err(invalid(format!(
            "{}: LDA fits and scores the whole corpus; there is no held-out slice to tune it on",
            spec.job.display()
        )));
    }
    let validation = match base.data.validation_fraction {
        Some(_) => None,
        None => Some(Setting {
            section: "data".into(),
            key: "validation_fraction".into(),
            value: toml::Value::Float(DEFAULT_VALIDATION_FRACTION),
        }),
    };
    let grid = space::grid(&spec.overs);
    let mut configs = Vec::with_capacity(grid.len());
    for (index, mut settings) in grid.into_iter().enumerate() {
        let label = space::label(&settings);
        settings.extend(validation.clone());
        let plan = plan_config(&spec, &settings, &label)?;
        configs.push(Config {
            index,
            settings,
            label,
            plan,
        });
    }
    if let Some(c) = configs
        .iter()
        .find(|c| c.plan.iterations != base.iterations)
    {
        return Err(invalid(format!(
            "configuration {}: tuning the number of iterations is not a tune of the model; \
             every configuration runs the job's iterations",
            c.label
        )));
    }
    let iterations = base.iterations;
    let (rungs, order) = match spec.strategy {
        Strategy::Halving => (
            halving::rungs(configs.len(), iterations, spec.min_iterations),
            (0..configs.len()).collect(),
        ),
        Strategy::Random => {
            let samples = spec.samples.unwrap_or(configs.len());
            if samples == 0 {
                return Err(invalid("--samples must be at least 1"));
            }
            (
                vec![iterations],
                halving::sample(configs.len(), samples, base.seed),
            )
        }
    };
    let tune = TunePlan {
        spec,
        configs,
        iterations,
        rungs,
        order,
    };
    check_data_and_budget(&tune)?;
    Ok(tune)
}

/// The job with the command line's overrides and `settings` put in,
/// validated.
fn plan_config(spec: &TuneSpec, settings: &[Setting], label: &str) -> Result<JobPlan, TuneError> {
    let mut overrides = spec.overrides.clone();
    overrides.set.extend_from_slice(settings);
    plan_job(&spec.job, &overrides).map_err(|source| TuneError::Config {
        label: label.to_owned(),
        source: Box::new(source),
    })
}

/// Loads each distinct dataset once and checks every configuration against
/// it; then checks that the budget covers the least the first run can
/// take: a paced job's paced compute of its first rung, or an unpaced job's
/// compute of it at the pace of one unit's gradient measured here (CPU
/// time on one thread, spread over the job's workers and this machine's
/// cores: a lower bound, so no budget a run could meet is refused).
fn check_data_and_budget(tune: &TunePlan) -> Result<(), TuneError> {
    let mut loaded = HashMap::new();
    let mut measured: HashMap<String, (f64, u32)> = HashMap::new();
    let mut least_s = f64::INFINITY;
    for c in &tune.configs {
        let key = format!("{:?} {:?}", c.plan.data, c.plan.model);
        let workload = match loaded.get(&key) {
            Some(w) => std::sync::Arc::clone(w),
            None => {
                let w = load_workload(&c.plan).map_err(|source| TuneError::Data {
                    job: tune.spec.job.clone(),
                    source,
                })?;
                loaded.insert(key.clone(), std::sync::Arc::clone(&w));
                w
            }
        };
        check_against_data(&c.plan, workload.data()).map_err(|source| TuneError::Config {
            label: c.label.clone(),
            source: Box::new(source),
        })?;
        let rows = partitioning_for(&c.plan, workload.data()).rows_per_iteration();
        let (ns_per_row, parallel) = match c.plan.pace_ns_per_row {
            0 if tune.spec.budget_s.is_some() => {
                let at = format!("{key} {}", c.plan.micro_batch);
                let (ns, cores) = *measured.entry(at).or_insert_with(|| {
                    let pace = crate::run::pace::measure(&c.plan, workload.as_ref());
                    (pace.ns_per_row, pace.cores)
                });
                (ns, c.plan.workers.min(cores))
            }
            0 => continue,
            ns => (ns as f64, c.plan.workers),
        };
        let per_iteration_s = rows as f64 * ns_per_row / 1e9 / f64::from(parallel.max(1));
        least_s = least_s.min(per_iteration_s * tune.rungs[0] as f64);
    }
    if let Some(budget) = tune.spec.budget_s {
        if least_s.is_finite() && budget < least_s {
            return Err(invalid(format!(
                "--budget {budget} s is below one run: the first rung ({} iterations) of the \
                 quickest configuration needs at least {least_s:.1} s (at the job's pace, or \
                 unpaced at the compute of its units measured on this machine)",
                tune.rungs[0]
            )));
        }
    }
    Ok(())
}

impl TunePlan {
    /// SHA-256 (hex) of what decides the tune's runs and choices: every
    /// configuration's plan hash, the strategy, the rungs or sample, and the
    /// target. The budget is not in it: a tune resumed with a larger budget
    /// goes on.
    pub fn hash(&self) -> String {
        let mut h = Sha256::new();
        for c in &self.configs {
            h.update(c.plan.hash().as_bytes());
            h.update(b"\n");
        }
        h.update(
            format!(
                "{:?} {:?} {:?} {}",
                self.spec.strategy, self.rungs, self.order, self.spec.target
            )
            .as_bytes(),
        );
        hex(&h.finalize())
    }

    /// The run directory of configuration `index` under `out`.
    pub fn config_dir(out: &Path, index: usize) -> PathBuf {
        out.join("configs").join(format!("{index:03}"))
    }
}
