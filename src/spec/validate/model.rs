//! `[model]`: the kind, its knobs and the defaults it brings, and the
//! optimiser.

use super::context::Context;
use super::DEFAULT_DATASET;
use crate::policy::PolicyPlan;
use crate::spec::job::JobSpec;
use crate::spec::plan::*;
use crate::spec::Result;
use crate::workload::lda::LdaUpdates;
use crate::workload::{OptimizerConfig, OptimizerKind};

/// What a job of each model kind uses when it does not say.
pub(super) struct ModelDefaults {
    pub(super) dataset: &'static str,
    pub(super) label: &'static str,
    pub(super) positive: &'static str,
    pub(super) learning_rate: f64,
    pub(super) l2: f64,
}

impl ModelDefaults {
    fn of(kind: &str) -> Option<Self> {
        Some(match kind {
            "logistic" => Self {
                dataset: DEFAULT_DATASET,
                label: "income",
                positive: ">50K",
                learning_rate: DEFAULT_LEARNING_RATE,
                l2: DEFAULT_L2,
            },
            "softmax" => Self {
                dataset: concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist.parquet"),
                label: "label",
                positive: "",
                learning_rate: DEFAULT_SOFTMAX_LEARNING_RATE,
                l2: DEFAULT_L2,
            },
            "cnn" => Self {
                dataset: concat!(env!("CARGO_MANIFEST_DIR"), "/data/pneumoniamnist.npz"),
                label: "",
                positive: "",
                learning_rate: DEFAULT_CNN_LEARNING_RATE,
                l2: 0.0,
            },
            "lda" => Self {
                dataset: concat!(env!("CARGO_MANIFEST_DIR"), "/data/reuters.parquet"),
                label: "",
                positive: "",
                // not used: LDA adds its count deltas
                learning_rate: 1.0,
                l2: 0.0,
            },
            "mf" => Self {
                dataset: concat!(env!("CARGO_MANIFEST_DIR"), "/data/movielens-100k.parquet"),
                label: "rating",
                positive: "",
                learning_rate: DEFAULT_MF_LEARNING_RATE,
                l2: DEFAULT_MF_L2,
            },
            _ => return None,
        })
    }
}

/// `[model] kind` and its knobs, with the defaults the kind brings (and the
/// `[data]` keys a cnn's image file makes meaningless).
pub(super) fn check_model(cx: &Context<'_>, spec: &JobSpec) -> Result<(ModelPlan, ModelDefaults)> {
    let kind = spec.model.kind.as_deref().unwrap_or("logistic");
    let defaults = ModelDefaults::of(kind).ok_or_else(|| {
        cx.invalid(
            "model",
            "kind",
            format!(
                "unknown model '{kind}'; accepted: {}",
                MODEL_KINDS.join(", ")
            ),
        )
    })?;
    let model = match kind {
        "softmax" => ModelPlan::Softmax,
        "cnn" => ModelPlan::Cnn {
            class_weighting: match spec.model.class_weighting.as_deref() {
                None | Some("balanced") => ClassWeighting::Balanced,
                Some("none") => ClassWeighting::None,
                Some(other) => {
                    return Err(cx.invalid(
                        "model",
                        "class_weighting",
                        format!("unknown weighting '{other}'; accepted: balanced, none"),
                    ))
                }
            },
            dropout: match spec.model.dropout.unwrap_or(0.0) {
                d if (0.0..1.0).contains(&d) => d,
                d => {
                    return Err(cx.invalid(
                        "model",
                        "dropout",
                        format!("must be at least 0 and below 1 (got {d})"),
                    ))
                }
            },
        },
        "mf" => ModelPlan::Mf {
            rank: match spec.model.rank.unwrap_or(DEFAULT_MF_RANK) {
                0 => return Err(cx.invalid("model", "rank", "must be at least 1 (got 0)")),
                r if r > MAX_MF_RANK => {
                    return Err(cx.invalid(
                        "model",
                        "rank",
                        format!("must be at most {MAX_MF_RANK} (got {r})"),
                    ))
                }
                r => r,
            },
            // checked with the optimiser's knobs
            l2: spec.model.l2.unwrap_or(defaults.l2),
        },
        "lda" => check_lda(cx, spec)?,
        _ => ModelPlan::Logistic,
    };
    let only = |key: &str, set: bool, kinds: &[&str]| {
        if set && !kinds.contains(&kind) {
            return Err(cx.invalid(
                "model",
                key,
                format!(
                    "applies to model kind {} only (this job trains {kind})",
                    kinds.join(" and ")
                ),
            ));
        }
        Ok(())
    };
    only("topics", spec.model.topics.is_some(), &["lda"])?;
    only("alpha", spec.model.alpha.is_some(), &["lda"])?;
    only("beta", spec.model.beta.is_some(), &["lda"])?;
    only(
        "optimizer",
        spec.model.optimizer.is_some(),
        &["logistic", "softmax", "cnn", "mf"],
    )?;
    only(
        "learning_rate",
        spec.model.learning_rate.is_some(),
        &["logistic", "softmax", "cnn", "mf"],
    )?;
    only(
        "l2",
        spec.model.l2.is_some(),
        &["logistic", "softmax", "cnn", "mf"],
    )?;
    only("rank", spec.model.rank.is_some(), &["mf"])?;
    only(
        "class_weighting",
        spec.model.class_weighting.is_some(),
        &["cnn"],
    )?;
    only("dropout", spec.model.dropout.is_some(), &["cnn"])?;
    // The `[data]` keys of a table's labels and split mean nothing to a cnn
    // (its .npz file holds the labels and the split; a validation slice of
    // its training images it takes) or to lda (the sampler
    // fits, and is scored on, the whole corpus; a unit sweeps its documents
    // whole, so no micro-batches either).
    let why = match kind {
        "cnn" => Some("its .npz file holds the labels and the train/test split"),
        "lda" => Some(
            "a unit sweeps its documents whole, and the sampler fits the whole corpus \
             (it is evaluated by its joint likelihood)",
        ),
        _ => None,
    };
    if let Some(why) = why {
        let keys = [
            ("label", spec.data.label.is_some()),
            ("positive", spec.data.positive.is_some()),
            ("drop", spec.data.drop.is_some()),
            ("test_fraction", spec.data.test_fraction.is_some()),
            ("split_seed", spec.data.split_seed.is_some()),
            (
                "validation_fraction",
                kind == "lda" && spec.data.validation_fraction.is_some(),
            ),
            (
                "micro_batch",
                kind == "lda" && spec.data.micro_batch.is_some(),
            ),
        ];
        if let Some((key, _)) = keys.iter().find(|(_, set)| *set) {
            return Err(cx.invalid(
                "data",
                key,
                format!("does not apply to model kind {kind}: {why}"),
            ));
        }
    }
    Ok((model, defaults))
}

/// `[model]`'s optimiser knobs (the kind's defaults where unset) and how often
/// the model is evaluated.
pub(super) fn check_optimizer(
    cx: &Context<'_>,
    spec: &JobSpec,
    defaults: &ModelDefaults,
) -> Result<(OptimizerConfig, u64)> {
    let learning_rate = spec.model.learning_rate.unwrap_or(defaults.learning_rate);
    if !(learning_rate.is_finite() && learning_rate > 0.0) {
        return Err(cx.invalid(
            "model",
            "learning_rate",
            format!("must be a positive number (got {learning_rate})"),
        ));
    }
    let l2 = spec.model.l2.unwrap_or(defaults.l2);
    if !(l2.is_finite() && l2 >= 0.0) {
        return Err(cx.invalid("model", "l2", format!("must be ≥ 0 (got {l2})")));
    }
    let kind = match spec.model.optimizer.as_deref() {
        None if spec.model.kind.as_deref() == Some("lda") => OptimizerKind::Add,
        None => OptimizerKind::Adam,
        Some(name) => OptimizerKind::from_name(name).ok_or_else(|| {
            cx.invalid(
                "model",
                "optimizer",
                format!(
                    "unknown optimizer '{name}' (known: {})",
                    OptimizerKind::NAMES.join(", ")
                ),
            )
        })?,
    };
    let eval_every = spec.model.eval_every.unwrap_or(1);
    if eval_every == 0 {
        return Err(cx.invalid("model", "eval_every", "must be at least 1 (got 0)"));
    }
    let optimizer = OptimizerConfig {
        kind,
        learning_rate,
        beta1: 0.9,
        beta2: 0.999,
        epsilon: 1e-8,
        l2,
    };
    Ok((optimizer, eval_every))
}

/// `[model]` of an `lda` job: K at least 1, α and β positive.
fn check_lda(cx: &Context<'_>, spec: &JobSpec) -> Result<ModelPlan> {
    let topics = spec.model.topics.unwrap_or(DEFAULT_LDA_TOPICS);
    if topics == 0 || topics > MAX_LDA_TOPICS {
        return Err(cx.invalid(
            "model",
            "topics",
            format!("must be in 1..={MAX_LDA_TOPICS} (got {topics})"),
        ));
    }
    let prior = |key: &str, value: Option<f64>, default: f64| {
        let v = value.unwrap_or(default);
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(cx.invalid("model", key, format!("must be a positive number (got {v})")))
        }
    };
    Ok(ModelPlan::Lda {
        topics,
        alpha: prior("alpha", spec.model.alpha, DEFAULT_LDA_ALPHA)?,
        beta: prior("beta", spec.model.beta, DEFAULT_LDA_BETA)?,
        // set from the policy once it is known
        updates: LdaUpdates::Deltas,
    })
}

/// An `lda` model under a policy without BSP semantics (stale reads, dropped
/// or substituted units) writes its tokens' topics instead of sending deltas
/// relative to the topics it read, which a newer version would not match
/// ([`LdaUpdates::Topics`]); every other model and policy is as checked.
pub(super) fn lda_updates(
    model: ModelPlan,
    optimizer: OptimizerConfig,
    policy: &PolicyPlan,
) -> (ModelPlan, OptimizerConfig) {
    match model {
        ModelPlan::Lda {
            topics,
            alpha,
            beta,
            ..
        } if !policy.keeps_bsp_semantics() => (
            ModelPlan::Lda {
                topics,
                alpha,
                beta,
                updates: LdaUpdates::Topics,
            },
            OptimizerConfig {
                kind: OptimizerKind::Set,
                ..optimizer
            },
        ),
        model => (model, optimizer),
    }
}
