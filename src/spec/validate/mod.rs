//! Checks a `JobSpec` and resolves it into a `JobPlan`.

use std::path::{Path, PathBuf};

mod context;
mod model;
mod parallel;
mod policy;
mod units;

pub use context::locate;
use context::Context;
use model::{check_model, check_optimizer, lda_updates, ModelDefaults};
pub use policy::{policy_takes, DEFAULT_SLACK};
use policy::{validate_policy, validate_predictor};
pub use units::{check_against_data, unit_sizes};

use super::job::{JobSpec, StragglerSection};
use super::plan::*;
use super::{Overrides, Result, SpecError};
use crate::data::{DataConfig, Sampling};
use crate::inject::Pattern;

/// The dataset used when a job names none: the Adult census data committed
/// under `data/`.
pub const DEFAULT_DATASET: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/adult.parquet");

/// The largest injected delay, percent (100× slower).
pub const MAX_DELAY_PERCENT: f64 = 9_900.0;
/// The largest slowdown factor a pattern may name.
pub const MAX_SLOWDOWN: f64 = 100.0;
/// The most iterations a job may run.
pub const MAX_ITERATIONS: u64 = 10_000_000;
/// The slowest pace, ns per row.
pub const MAX_PACE_NS_PER_ROW: u64 = 1_000_000_000;

/// "dataset file … does not exist", with the command that fetches it when
/// forestall knows one.
fn missing_dataset_message(path: &Path) -> String {
    match crate::data::fetch::fetch_hint(path) {
        Some(command) => format!(
            "dataset file {} does not exist; `{command}` fetches it",
            path.display()
        ),
        None => match crate::data::synth::synth_hint(path) {
            Some(command) => format!(
                "dataset file {} does not exist; `{command}` makes it",
                path.display()
            ),
            None => format!("dataset file {} does not exist", path.display()),
        },
    }
}

/// `slow-link`'s default rate of a slowed link, Mbit/s.
const DEFAULT_LINK_MBPS: f64 = 100.0;

const PATTERNS: &str = "none, slow-worker, disrupted-machine, power-law, persistent, slow-link";

/// Checks `spec` (parsed from `text`, read from `path`) and resolves it.
pub fn validate(spec: &JobSpec, text: &str, path: Option<&Path>) -> Result<JobPlan> {
    validate_with(spec, text, path, &Overrides::default())
}

/// Like [`validate`], for a spec to which `overrides` were applied: a bad value
/// that came from a flag is reported as coming from the command line.
///
/// The sections are checked in the order their values depend on each other:
/// the job, the model (the data's defaults depend on it), the data, the
/// optimiser, the workers (and the replicas, bounded by them), the straggler
/// pattern, the policy and its predictor, then detection, traces and
/// checkpoints.
pub fn validate_with(
    spec: &JobSpec,
    text: &str,
    path: Option<&Path>,
    overrides: &Overrides,
) -> Result<JobPlan> {
    let cx = Context {
        text,
        path,
        overrides,
    };
    let base_dir = path
        .and_then(Path::parent)
        .map(Path::to_owned)
        .unwrap_or_default();
    let (name, iterations) = check_job(&cx, spec, path)?;
    let (model, defaults) = check_model(&cx, spec)?;
    let parallel = parallel::check_parallel(&cx, spec, &model)?;
    let data = check_data(&cx, spec, &model, &defaults, &base_dir)?;
    let (optimizer, eval_every) = check_optimizer(&cx, spec, &defaults)?;
    let workers = check_workers(&cx, spec, data.partitions)?;
    let (pattern, disruptor) = validate_pattern(&cx, &spec.straggler, workers.count)?;
    let policy = validate_policy(&cx, &spec.policy, workers.count)?;
    let (model, optimizer) = lda_updates(model, optimizer, &policy);
    let respond = check_respond(&cx, spec)?;
    let predictor = validate_predictor(&cx, &spec.predictor, &base_dir, &policy)?;
    let (laggard_threshold, part_iterations) = check_detect_and_trace(&cx, spec)?;
    check_checkpoint(&cx, spec, iterations)?;

    Ok(JobPlan {
        name,
        seed: spec.job.seed.unwrap_or(DEFAULT_SEED),
        iterations,
        data: data.config,
        partitions: data.partitions,
        units_per_partition: data.units_per_partition,
        micro_batch: data.micro_batch,
        batch_fraction: data.batch_fraction,
        sampling: data.sampling,
        partition_by: data.partition_by,
        replicas: workers.replicas,
        model,
        optimizer,
        eval_every,
        workers: workers.count,
        pace_ns_per_row: workers.pace_ns_per_row,
        grad_bucket_bytes: workers.grad_bucket_kib * 1024,
        shards: spec.workers.shards,
        pattern,
        disruptor,
        policy,
        predictor,
        control_delay: spec.policy.control_delay.unwrap_or(0),
        respond,
        laggard_threshold,
        part_iterations,
        checkpoint_every: spec.checkpoint.every.unwrap_or(DEFAULT_CHECKPOINT_EVERY),
        out: spec.job.out.as_ref().map(PathBuf::from),
        source: path.map(Path::to_owned),
        parallel,
    })
}

/// `[job]`: the name (default: the file's stem) and the iterations.
fn check_job(cx: &Context<'_>, spec: &JobSpec, path: Option<&Path>) -> Result<(String, u64)> {
    let name = spec.job.name.clone().unwrap_or_else(|| {
        path.and_then(Path::file_stem)
            .map_or_else(|| "job".to_owned(), |s| s.to_string_lossy().into_owned())
    });
    if name.is_empty() || name.contains(['/', '\\']) {
        return Err(cx.invalid(
            "job",
            "name",
            format!("'{name}' must be non-empty and contain no path separators"),
        ));
    }
    let iterations = spec.job.iterations.unwrap_or(DEFAULT_ITERATIONS);
    if iterations == 0 {
        return Err(cx.invalid("job", "iterations", "must be at least 1 (got 0)"));
    }
    if iterations > MAX_ITERATIONS {
        return Err(cx.invalid(
            "job",
            "iterations",
            format!("must be in 1..={MAX_ITERATIONS} (got {iterations})"),
        ));
    }
    Ok((name, iterations))
}

/// What `[data]` resolves to before the workers are known.
struct CheckedData {
    config: DataConfig,
    partitions: u32,
    units_per_partition: u32,
    micro_batch: u32,
    batch_fraction: f64,
    sampling: Sampling,
    partition_by: Option<String>,
}

/// `[data]`: the dataset file (relative to the job file) and how it is cut.
fn check_data(
    cx: &Context<'_>,
    spec: &JobSpec,
    model: &ModelPlan,
    defaults: &ModelDefaults,
    base_dir: &Path,
) -> Result<CheckedData> {
    let data_path = match &spec.data.path {
        Some(p) => base_dir.join(p),
        None => PathBuf::from(defaults.dataset),
    };
    if !data_path.is_file() {
        return Err(cx.invalid("data", "path", missing_dataset_message(&data_path)));
    }
    // An image file is recorded by checksum: which copy the job trains on.
    let checksums = if matches!(model, ModelPlan::Cnn { .. }) {
        Some(crate::data::fetch::checksums(&data_path).map_err(|e| {
            cx.invalid(
                "data",
                "path",
                format!("cannot read {}: {e}", data_path.display()),
            )
        })?)
    } else {
        None
    };
    let test_fraction = spec.data.test_fraction.unwrap_or(DEFAULT_TEST_FRACTION);
    if !(test_fraction > 0.0 && test_fraction < 1.0) {
        return Err(cx.invalid(
            "data",
            "test_fraction",
            format!("must be strictly between 0 and 1 (got {test_fraction})"),
        ));
    }
    if let Some(v) = spec.data.validation_fraction {
        if !(v > 0.0 && v < 1.0) {
            return Err(cx.invalid(
                "data",
                "validation_fraction",
                format!("must be strictly between 0 and 1 (got {v})"),
            ));
        }
    }
    let partitions = spec.data.partitions.unwrap_or(DEFAULT_PARTITIONS);
    if partitions == 0 {
        return Err(cx.invalid("data", "partitions", "must be at least 1 (got 0)"));
    }
    let units_per_partition = spec
        .data
        .units_per_partition
        .unwrap_or(DEFAULT_UNITS_PER_PARTITION);
    if units_per_partition == 0 {
        return Err(cx.invalid("data", "units_per_partition", "must be at least 1 (got 0)"));
    }
    let micro_batch = spec.data.micro_batch.unwrap_or(0);
    if spec.data.micro_batch == Some(0) {
        return Err(cx.invalid(
            "data",
            "micro_batch",
            "must be at least 1 row (got 0); leave it out to compute each unit at once",
        ));
    }
    let batch_fraction = spec.data.batch_fraction.unwrap_or(1.0);
    if !(batch_fraction > 0.0 && batch_fraction <= 1.0) {
        return Err(cx.invalid(
            "data",
            "batch_fraction",
            format!("must be in (0, 1] (got {batch_fraction})"),
        ));
    }
    let partition_by = match spec.data.partition_by.as_deref() {
        Some(column) if column.trim().is_empty() => {
            return Err(cx.invalid(
                "data",
                "partition_by",
                "must name a categorical column (got an empty name)",
            ));
        }
        column => column.map(str::to_owned),
    };
    let sampling = match spec.data.sampling.as_deref() {
        None => Sampling::Independent,
        Some(name) => Sampling::from_name(name).ok_or_else(|| {
            cx.invalid(
                "data",
                "sampling",
                format!(
                    "unknown sampling {name:?}; expected one of: {}",
                    Sampling::NAMES.join(", ")
                ),
            )
        })?,
    };
    Ok(CheckedData {
        config: DataConfig {
            path: data_path,
            label: spec
                .data
                .label
                .clone()
                .unwrap_or_else(|| defaults.label.into()),
            positive: spec
                .data
                .positive
                .clone()
                .unwrap_or_else(|| defaults.positive.into()),
            drop: spec.data.drop.clone().unwrap_or_default(),
            test_fraction,
            checksums,
            split_seed: spec.data.split_seed,
            validation_fraction: spec.data.validation_fraction,
        },
        partitions,
        units_per_partition,
        micro_batch,
        batch_fraction,
        sampling,
        partition_by,
    })
}

/// What `[workers]` resolves to, with `[data] replicas` (bounded by the
/// worker count).
struct CheckedWorkers {
    count: u32,
    pace_ns_per_row: u64,
    grad_bucket_kib: u64,
    replicas: u32,
}

/// `[workers]`: the count (at most one per partition), pacing, gradient
/// buckets and shards; and `[data] replicas`.
fn check_workers(cx: &Context<'_>, spec: &JobSpec, partitions: u32) -> Result<CheckedWorkers> {
    let workers = spec.workers.count.unwrap_or(DEFAULT_WORKERS);
    if workers == 0 {
        return Err(cx.invalid("workers", "count", "must be at least 1 (got 0)"));
    }
    // a pipeline's replicas hold the data, each over its stages' workers
    let stages = parallel::stages_asked(spec);
    let holders = if stages > 0 && workers.is_multiple_of(stages) {
        workers / stages
    } else {
        workers
    };
    if holders > partitions {
        let who = if stages > 1 {
            format!("{holders} replicas of {stages} stages")
        } else {
            format!("{workers} workers")
        };
        return Err(cx.invalid(
            "workers",
            "count",
            format!(
                "{who} but only {partitions} partitions: every {} needs at \
                 least one partition; lower the count or raise [data] partitions",
                if stages > 1 { "replica" } else { "worker" }
            ),
        ));
    }
    let pace_ns_per_row = spec.workers.pace_ns_per_row.unwrap_or(0);
    if pace_ns_per_row > MAX_PACE_NS_PER_ROW {
        return Err(cx.invalid(
            "workers",
            "pace_ns_per_row",
            format!("must be in 0..={MAX_PACE_NS_PER_ROW} (1 s per row; got {pace_ns_per_row})"),
        ));
    }
    let grad_bucket_kib = spec
        .workers
        .grad_bucket_kib
        .unwrap_or(DEFAULT_GRAD_BUCKET_KIB);
    if grad_bucket_kib > MAX_GRAD_BUCKET_KIB {
        return Err(cx.invalid(
            "workers",
            "grad_bucket_kib",
            format!("must be in 0..={MAX_GRAD_BUCKET_KIB} (1 GiB; got {grad_bucket_kib})"),
        ));
    }
    if let Some(shards) = spec.workers.shards {
        if shards == 0 || shards > workers {
            return Err(cx.invalid(
                "workers",
                "shards",
                format!("must be in 1..={workers} (one owner per shard, among the workers; got {shards})"),
            ));
        }
    }
    let replicas = spec
        .data
        .replicas
        .unwrap_or(DEFAULT_REPLICAS.min(workers.saturating_sub(1)));
    if replicas >= workers.max(1) && spec.data.replicas.is_some() {
        return Err(cx.invalid(
            "data",
            "replicas",
            format!(
                "at most the worker count minus one ({}) extra holders exist (got {replicas})",
                workers.saturating_sub(1)
            ),
        ));
    }
    Ok(CheckedWorkers {
        count: workers,
        pace_ns_per_row,
        grad_bucket_kib,
        replicas,
    })
}

/// `[policy] respond`: when a worker acts on a control message.
fn check_respond(cx: &Context<'_>, spec: &JobSpec) -> Result<Respond> {
    Ok(match spec.policy.respond.as_deref().unwrap_or("at-once") {
        "at-once" => Respond::AtOnce,
        "between-units" => Respond::BetweenUnits,
        other => {
            return Err(cx.invalid(
                "policy",
                "respond",
                format!("unknown value '{other}'; accepted: at-once, between-units"),
            ))
        }
    })
}

/// `[detect] laggard_threshold` and `[trace] part_iterations`.
fn check_detect_and_trace(cx: &Context<'_>, spec: &JobSpec) -> Result<(f64, u64)> {
    let laggard_threshold = spec
        .detect
        .laggard_threshold
        .unwrap_or(DEFAULT_LAGGARD_THRESHOLD);
    if !(laggard_threshold.is_finite() && laggard_threshold >= 0.0) {
        return Err(cx.invalid(
            "detect",
            "laggard_threshold",
            format!("must be ≥ 0 (got {laggard_threshold})"),
        ));
    }
    let part_iterations = spec
        .trace
        .part_iterations
        .unwrap_or(DEFAULT_PART_ITERATIONS);
    if part_iterations == 0 {
        return Err(cx.invalid("trace", "part_iterations", "must be at least 1 (got 0)"));
    }
    Ok((laggard_threshold, part_iterations))
}

/// `[checkpoint] every`: at most the job's iterations.
fn check_checkpoint(cx: &Context<'_>, spec: &JobSpec, iterations: u64) -> Result<()> {
    if spec.checkpoint.every.is_some_and(|e| e > iterations) {
        return Err(cx.invalid(
            "checkpoint",
            "every",
            format!(
                "must be in 0..={iterations} (0 = no checkpoints; the job has {iterations} iterations, got {})",
                spec.checkpoint.every.unwrap_or(0)
            ),
        ));
    }
    Ok(())
}

/// The policy `name` with its default knobs, and its predictor (`predictor`,
/// or the policy's default), for `workers` workers: what a job file with only
/// `[policy] name = "…"` (and `[predictor] name = "…"`) runs.
pub fn policy_named(
    name: &str,
    predictor: Option<&str>,
    workers: u32,
) -> Result<(crate::policy::PolicyPlan, Option<PredictorPlan>)> {
    policy_with_model(name, predictor, None, workers)
}

/// [`policy_named`], with the predictor's `model` directory (for `lstm`
/// and `auto`; relative to the working directory).
pub fn policy_with_model(
    name: &str,
    predictor: Option<&str>,
    model: Option<&Path>,
    workers: u32,
) -> Result<(crate::policy::PolicyPlan, Option<PredictorPlan>)> {
    let text = format!("[policy]\nname = {name:?}\n");
    // The names come from flags (`--policy`, `--predictor`): messages point
    // there, not at a line of this text.
    let overrides = Overrides {
        policy: Some(name.to_owned()),
        set: predictor
            .map(|p| super::Setting {
                section: "predictor".to_owned(),
                key: "name".to_owned(),
                value: toml::Value::String(p.to_owned()),
            })
            .into_iter()
            .collect(),
        ..Overrides::default()
    };
    let cx = Context {
        text: &text,
        path: None,
        overrides: &overrides,
    };
    let section = super::job::PolicySection {
        name: Some(name.to_owned()),
        ..Default::default()
    };
    let policy = validate_policy(&cx, &section, workers)?;
    let section = super::job::PredictorSection {
        name: predictor.map(str::to_owned),
        model: model.map(|m| m.display().to_string()),
        ..Default::default()
    };
    let predictor = validate_predictor(&cx, &section, Path::new("."), &policy)?;
    Ok((policy, predictor))
}

/// The straggler pattern of a `[straggler]` section written as TOML `text`
/// (`pattern = "slow-worker"`, `probability = 0.1`, …) for `workers` workers.
pub fn pattern_from_toml(text: &str, workers: u32) -> Result<Pattern> {
    #[derive(serde::Deserialize)]
    struct Only {
        #[serde(default)]
        straggler: StragglerSection,
    }
    let text = format!("[straggler]\n{text}");
    let only: Only = toml::from_str(&text).map_err(|e| SpecError::Parse {
        origin: "the pattern's knobs".into(),
        message: e.message().to_owned(),
    })?;
    let overrides = Overrides::default();
    let cx = Context {
        text: &text,
        path: None,
        overrides: &overrides,
    };
    Ok(validate_pattern(&cx, &only.straggler, workers)?.0)
}

fn validate_pattern(
    cx: &Context<'_>,
    s: &StragglerSection,
    workers: u32,
) -> Result<(Pattern, DisruptorMode)> {
    let name = s.pattern.as_deref().unwrap_or("none");
    let given: Vec<(&str, bool)> = vec![
        ("probability", s.probability.is_some()),
        ("delay_percent", s.delay_percent.is_some()),
        ("period_ms", s.period_ms.is_some()),
        ("workers_per_machine", s.workers_per_machine.is_some()),
        ("disruptor", s.disruptor.is_some()),
        ("alpha", s.alpha.is_some()),
        ("max_slowdown", s.max_slowdown.is_some()),
        ("workers", s.workers.is_some()),
        ("factor", s.factor.is_some()),
        ("work_share", s.work_share.is_some()),
        ("link_mbps", s.link_mbps.is_some()),
    ];
    let applies: &[&str] = match name {
        "none" => &[],
        "slow-worker" => &["probability", "delay_percent"],
        "disrupted-machine" => &[
            "probability",
            "delay_percent",
            "period_ms",
            "workers_per_machine",
            "disruptor",
        ],
        "power-law" => &["alpha", "max_slowdown"],
        "persistent" => &["workers", "factor", "work_share"],
        "slow-link" => &["probability", "link_mbps", "disruptor"],
        other => {
            return Err(cx.invalid(
                "straggler",
                "pattern",
                format!("unknown pattern '{other}'; accepted: {PATTERNS}"),
            ))
        }
    };
    if let Some((key, _)) = given.iter().find(|(k, set)| *set && !applies.contains(k)) {
        let keys = if applies.is_empty() {
            "none".to_owned()
        } else {
            applies.join(", ")
        };
        return Err(cx.invalid(
            "straggler",
            key,
            format!("does not apply to pattern '{name}' (its keys: {keys})"),
        ));
    }
    let probability = |default: f64| -> Result<f64> {
        let p = s.probability.unwrap_or(default);
        if (0.0..=1.0).contains(&p) {
            Ok(p)
        } else {
            Err(cx.invalid(
                "straggler",
                "probability",
                format!("must be in [0, 1] (got {p})"),
            ))
        }
    };
    let delay = |default: f64| -> Result<f64> {
        let d = s.delay_percent.unwrap_or(default);
        if d.is_finite() && (0.0..=MAX_DELAY_PERCENT).contains(&d) {
            Ok(d)
        } else {
            Err(cx.invalid(
                "straggler",
                "delay_percent",
                format!("must be in [0, {MAX_DELAY_PERCENT}] (at most 100× slower; got {d})"),
            ))
        }
    };
    let mut disruptor = DisruptorMode::Emulated;
    let pattern = match name {
        "none" => Pattern::None,
        "slow-worker" => Pattern::SlowWorker {
            probability: probability(0.1)?,
            delay_percent: delay(400.0)?,
        },
        "disrupted-machine" => {
            let period_ms = s.period_ms.unwrap_or(DEFAULT_PERIOD_MS);
            if period_ms == 0 || period_ms > 3_600_000 {
                return Err(cx.invalid(
                    "straggler",
                    "period_ms",
                    format!("must be in 1..=3600000 (one hour; got {period_ms})"),
                ));
            }
            let per_machine = s
                .workers_per_machine
                .unwrap_or(DEFAULT_WORKERS_PER_MACHINE.min(workers));
            if per_machine == 0 || per_machine > workers {
                return Err(cx.invalid(
                    "straggler",
                    "workers_per_machine",
                    format!("must be between 1 and the worker count {workers} (got {per_machine})"),
                ));
            }
            disruptor = match s.disruptor.as_deref().unwrap_or("emulated") {
                "emulated" => DisruptorMode::Emulated,
                "cpu" => DisruptorMode::Cpu,
                other => {
                    return Err(cx.invalid(
                        "straggler",
                        "disruptor",
                        format!("unknown disruptor '{other}'; accepted: emulated, cpu"),
                    ))
                }
            };
            Pattern::DisruptedMachine {
                probability: probability(0.2)?,
                period_us: period_ms * 1000,
                delay_percent: delay(400.0)?,
                workers_per_machine: per_machine,
            }
        }
        "slow-link" => {
            let mbps = s.link_mbps.unwrap_or(DEFAULT_LINK_MBPS);
            if !(mbps.is_finite() && mbps > 0.0 && mbps <= 1e6) {
                return Err(cx.invalid(
                    "straggler",
                    "link_mbps",
                    format!("must be in (0, 1000000] Mbit/s (got {mbps})"),
                ));
            }
            disruptor = match s.disruptor.as_deref().unwrap_or("emulated") {
                "emulated" => DisruptorMode::Emulated,
                "tc" => DisruptorMode::Tc,
                other => {
                    return Err(cx.invalid(
                        "straggler",
                        "disruptor",
                        format!(
                            "unknown disruptor '{other}' for slow-link; accepted: emulated, tc"
                        ),
                    ))
                }
            };
            Pattern::SlowLink {
                probability: probability(0.1)?,
                link_mbps: mbps,
            }
        }
        "power-law" => {
            let alpha = s.alpha.unwrap_or(4.0);
            if !(alpha.is_finite() && alpha > 1.0 && alpha <= 100.0) {
                return Err(cx.invalid(
                    "straggler",
                    "alpha",
                    format!("must be in (1, 100] (> 1 for p(x) ∝ x^-α to be a distribution; got {alpha})"),
                ));
            }
            let max_slowdown = s.max_slowdown.unwrap_or(DEFAULT_MAX_SLOWDOWN);
            if !(max_slowdown.is_finite() && (1.0..=MAX_SLOWDOWN).contains(&max_slowdown)) {
                return Err(cx.invalid(
                    "straggler",
                    "max_slowdown",
                    format!("must be in [1, {MAX_SLOWDOWN}] (got {max_slowdown})"),
                ));
            }
            Pattern::PowerLaw {
                alpha,
                max_slowdown,
            }
        }
        _ => {
            // persistent: default is FlexRR's skew, the first half carry 75 % of the data.
            let default_workers: Vec<u32> = (0..workers.div_ceil(2)).collect();
            let slow = s.workers.clone().unwrap_or(default_workers);
            if slow.is_empty() {
                return Err(cx.invalid("straggler", "workers", "must name at least one worker"));
            }
            if let Some(w) = slow.iter().find(|&&w| w >= workers) {
                return Err(cx.invalid(
                    "straggler",
                    "workers",
                    format!("worker {w} does not exist (workers are 0..{workers})"),
                ));
            }
            let mut dedup = slow.clone();
            dedup.sort_unstable();
            dedup.dedup();
            if dedup.len() != slow.len() {
                return Err(cx.invalid("straggler", "workers", "lists a worker twice"));
            }
            let factor = s
                .factor
                .unwrap_or(if s.work_share.is_some() || s.workers.is_none() {
                    1.0
                } else {
                    2.0
                });
            if !(factor.is_finite() && (1.0..=MAX_SLOWDOWN).contains(&factor)) {
                return Err(cx.invalid(
                    "straggler",
                    "factor",
                    format!("must be in [1, {MAX_SLOWDOWN}] (got {factor})"),
                ));
            }
            let work_share = match (s.work_share, s.workers.is_none() && s.factor.is_none()) {
                (Some(share), _) => Some(share),
                (None, true) => Some(0.75),
                (None, false) => None,
            };
            if let Some(share) = work_share {
                if !(share > 0.0 && share < 1.0) {
                    return Err(cx.invalid(
                        "straggler",
                        "work_share",
                        format!("must be strictly between 0 and 1 (got {share})"),
                    ));
                }
                if slow.len() as u32 == workers {
                    return Err(cx.invalid(
                        "straggler",
                        "work_share",
                        "needs at least one worker outside [straggler] workers",
                    ));
                }
            }
            Pattern::Persistent {
                workers: dedup,
                factor,
                work_share,
            }
        }
    };
    Ok((pattern, disruptor))
}

#[cfg(test)]
mod tests;
