//! Checks the `[policy]` and `[predictor]` sections of a job: the policy's
//! name and knobs, and the online predictor it runs with.

use std::path::Path;

use super::context::Context;
use crate::policy::proactive::{
    ProactiveConfig, DEFAULT_CLONE_BUDGET, DEFAULT_FLOOR, DEFAULT_MIN_GAIN,
};
use crate::policy::reassign::{
    ReassignConfig, DEFAULT_CHECKPOINT, DEFAULT_FOLLOW_UP_UNITS, DEFAULT_GROUP_SIZE,
    DEFAULT_INITIAL_UNITS,
};
use crate::policy::speculate::{
    SpeculateConfig, DEFAULT_MAX_CLONE_SHARE, DEFAULT_MULTIPLIER, DEFAULT_QUANTILE,
};
use crate::policy::PolicyPlan;
use crate::spec::job::{PolicySection, PredictorSection};
use crate::spec::plan::*;
use crate::spec::Result;

/// Default SSP slack (iterations a worker may run ahead).
pub const DEFAULT_SLACK: u64 = 1;

/// The policies that take each `[policy]` knob.
const KNOB_OWNERS: [(&str, &str); 17] = [
    (
        "floor",
        "proactive or proactive-clone or forestall or forestall-ssp or dpro-substitute",
    ),
    ("threshold", "dpro-substitute"),
    (
        "min_gain",
        "proactive or proactive-clone or forestall or forestall-ssp",
    ),
    ("clone_budget", "proactive-clone"),
    ("backups", "backup-workers"),
    ("slack", "ssp or flexrr or forestall-ssp"),
    (
        "group_size",
        "rapid-reassign or flexrr or speculate or forestall or forestall-ssp",
    ),
    ("broker", "forestall"),
    ("clone_in_flight", "forestall"),
    ("rest_in_flight", "forestall"),
    ("tail_in_flight", "forestall"),
    ("checkpoint", "rapid-reassign or flexrr"),
    ("initial_units", "rapid-reassign or flexrr"),
    ("follow_up_units", "rapid-reassign or flexrr"),
    ("quantile", "speculate"),
    ("multiplier", "speculate"),
    ("max_clone_share", "speculate"),
];

/// The policies that take `[policy] key`, as "a or b or …" (empty for a key
/// no policy knob table lists: every policy takes it).
fn owners_of(key: &str) -> &'static str {
    KNOB_OWNERS
        .iter()
        .find(|(k, _)| *k == key)
        .map_or("", |(_, owners)| owners)
}

/// Whether policy `name` takes `[policy] key` (`name` itself, and keys
/// that are not policy knobs, every policy takes).
pub fn policy_takes(name: &str, key: &str) -> bool {
    let owners = owners_of(key);
    owners.is_empty() || owners.split(" or ").any(|o| o == name)
}

pub(super) fn validate_policy(
    cx: &Context<'_>,
    s: &PolicySection,
    workers: u32,
) -> Result<PolicyPlan> {
    let name = s.policy_name();
    let knobs: [(&str, bool); 17] = [
        ("floor", s.floor.is_some()),
        ("threshold", s.threshold.is_some()),
        ("min_gain", s.min_gain.is_some()),
        ("clone_budget", s.clone_budget.is_some()),
        ("backups", s.backups.is_some()),
        ("slack", s.slack.is_some()),
        ("group_size", s.group_size.is_some()),
        ("broker", s.broker.is_some()),
        ("clone_in_flight", s.clone_in_flight.is_some()),
        ("rest_in_flight", s.rest_in_flight.is_some()),
        ("tail_in_flight", s.tail_in_flight.is_some()),
        ("checkpoint", s.checkpoint.is_some()),
        ("initial_units", s.initial_units.is_some()),
        ("follow_up_units", s.follow_up_units.is_some()),
        ("quantile", s.quantile.is_some()),
        ("multiplier", s.multiplier.is_some()),
        ("max_clone_share", s.max_clone_share.is_some()),
    ];
    if let Some((key, owner)) = knobs
        .iter()
        .filter(|(_, set)| *set)
        .map(|(key, _)| (key, owners_of(key)))
        .find(|(key, _)| !policy_takes(name, key))
    {
        return Err(cx.invalid(
            "policy",
            key,
            format!("does not apply to policy '{name}' (it is a {owner} knob)"),
        ));
    }
    let group_size = match s.group_size {
        Some(g) if g == 0 || g >= workers => {
            return Err(cx.invalid(
                "policy",
                "group_size",
                format!(
                    "must be between 1 and the worker count minus one ({}) (got {g})",
                    workers.saturating_sub(1)
                ),
            ))
        }
        Some(g) => g,
        // A single worker has nobody to help: the group is empty and the run
        // behaves as bsp.
        None => DEFAULT_GROUP_SIZE.min(workers.saturating_sub(1)),
    };
    let share = |key: &str, value: Option<f64>, default: f64| -> Result<f64> {
        let v = value.unwrap_or(default);
        if v > 0.0 && v <= 1.0 {
            Ok(v)
        } else {
            Err(cx.invalid("policy", key, format!("must be in (0, 1] (got {v})")))
        }
    };
    let floor = || -> Result<f64> {
        let floor = s.floor.unwrap_or(DEFAULT_FLOOR);
        if (0.0..1.0).contains(&floor) {
            Ok(floor)
        } else {
            Err(cx.invalid(
                "policy",
                "floor",
                format!("must be in [0, 1) (got {floor})"),
            ))
        }
    };
    match name {
        "bsp" => Ok(PolicyPlan::Bsp),
        "ideal" => Ok(PolicyPlan::Ideal),
        "rebalance-stages" => Ok(PolicyPlan::RebalanceStages),
        "backup-workers" => {
            let backups = s.backups.unwrap_or(1);
            if backups == 0 || backups >= workers {
                return Err(cx.invalid(
                    "policy",
                    "backups",
                    format!(
                        "must be between 1 and the worker count minus one ({}) (got {backups})",
                        workers.saturating_sub(1)
                    ),
                ));
            }
            Ok(PolicyPlan::BackupWorkers { backups })
        }
        "ssp" => Ok(PolicyPlan::Ssp {
            slack: s.slack.unwrap_or(DEFAULT_SLACK),
        }),
        "dpro-substitute" => {
            let floor = floor()?;
            let threshold = s.threshold.unwrap_or(1.5);
            if !(threshold.is_finite() && threshold > 1.0) {
                return Err(cx.invalid(
                    "policy",
                    "threshold",
                    format!("must be a number above 1 (got {threshold})"),
                ));
            }
            Ok(PolicyPlan::DproSubstitute { floor, threshold })
        }
        "proactive" | "proactive-clone" | "forestall" | "forestall-ssp" => {
            let floor = floor()?;
            let min_gain = s.min_gain.unwrap_or(DEFAULT_MIN_GAIN);
            if !(min_gain.is_finite() && min_gain >= 0.0) {
                return Err(cx.invalid(
                    "policy",
                    "min_gain",
                    format!("must be ≥ 0 (got {min_gain})"),
                ));
            }
            let proactive = ProactiveConfig { floor, min_gain };
            if name == "proactive-clone" {
                return Ok(PolicyPlan::ProactiveClone {
                    proactive,
                    budget: share("clone_budget", s.clone_budget, DEFAULT_CLONE_BUDGET)?,
                });
            }
            let reassign = ReassignConfig {
                group_size,
                checkpoint: DEFAULT_CHECKPOINT,
                initial_units: DEFAULT_INITIAL_UNITS,
                follow_up_units: DEFAULT_FOLLOW_UP_UNITS,
                broker: s.broker.unwrap_or(true),
            };
            Ok(match name {
                "forestall" => PolicyPlan::Forestall {
                    proactive,
                    reassign,
                    clone_in_flight: s.clone_in_flight.unwrap_or(true),
                    rest_in_flight: s.rest_in_flight.unwrap_or(true),
                    tail_in_flight: s.tail_in_flight.unwrap_or(true),
                },
                "forestall-ssp" => PolicyPlan::ForestallSsp {
                    slack: s.slack.unwrap_or(DEFAULT_SLACK),
                    proactive,
                    reassign: ReassignConfig {
                        broker: false,
                        ..reassign
                    },
                },
                _ => PolicyPlan::Proactive(proactive),
            })
        }
        "rapid-reassign" | "flexrr" => {
            let checkpoint = share("checkpoint", s.checkpoint, DEFAULT_CHECKPOINT)?;
            let initial_units = s.initial_units.unwrap_or(DEFAULT_INITIAL_UNITS);
            if initial_units == 0 {
                return Err(cx.invalid("policy", "initial_units", "must be at least 1 (got 0)"));
            }
            let follow_up_units = s.follow_up_units.unwrap_or(DEFAULT_FOLLOW_UP_UNITS);
            if follow_up_units == 0 {
                return Err(cx.invalid("policy", "follow_up_units", "must be at least 1 (got 0)"));
            }
            let reassign = ReassignConfig {
                group_size,
                checkpoint,
                initial_units,
                follow_up_units,
                broker: false,
            };
            Ok(if name == "flexrr" {
                PolicyPlan::Flexrr {
                    slack: s.slack.unwrap_or(DEFAULT_SLACK),
                    reassign,
                }
            } else {
                PolicyPlan::RapidReassign(reassign)
            })
        }
        "speculate" => {
            let multiplier = s.multiplier.unwrap_or(DEFAULT_MULTIPLIER);
            if !(multiplier.is_finite() && multiplier >= 1.0) {
                return Err(cx.invalid(
                    "policy",
                    "multiplier",
                    format!("must be ≥ 1 (got {multiplier})"),
                ));
            }
            Ok(PolicyPlan::Speculate(SpeculateConfig {
                group_size,
                quantile: share("quantile", s.quantile, DEFAULT_QUANTILE)?,
                multiplier,
                max_clone_share: share(
                    "max_clone_share",
                    s.max_clone_share,
                    DEFAULT_MAX_CLONE_SHARE,
                )?,
            }))
        }
        other if PLANNED_POLICIES.contains(&other) => Err(cx.invalid(
            "policy",
            "name",
            format!(
                "policy '{other}' is not implemented yet; available: {}",
                AVAILABLE_POLICIES.join(", ")
            ),
        )),
        other => Err(cx.invalid(
            "policy",
            "name",
            format!(
                "unknown policy '{other}'; accepted: {}",
                AVAILABLE_POLICIES.join(", ")
            ),
        )),
    }
}

pub(super) fn validate_predictor(
    cx: &Context<'_>,
    s: &PredictorSection,
    base_dir: &Path,
    policy: &PolicyPlan,
) -> Result<Option<PredictorPlan>> {
    let name = match s.name.as_deref() {
        Some(name) => name,
        // A proactive policy cannot work without one.
        None if policy.predicts() => "sustained",
        None => {
            if let Some(key) = [
                ("alpha", s.alpha.is_some()),
                ("k", s.k.is_some()),
                ("window", s.window.is_some()),
                ("model", s.model.is_some()),
            ]
            .iter()
            .find_map(|(k, set)| set.then_some(*k))
            {
                return Err(cx.invalid("predictor", key, "set without [predictor] name"));
            }
            return Ok(None);
        }
    };
    if s.alpha.is_some() && name != "ewma" {
        return Err(cx.invalid(
            "predictor",
            "alpha",
            format!("does not apply to predictor '{name}' (it is an ewma knob)"),
        ));
    }
    if s.k.is_some() && name != "sustained" {
        return Err(cx.invalid(
            "predictor",
            "k",
            format!("does not apply to predictor '{name}' (it is a sustained knob)"),
        ));
    }
    if s.window.is_some() && name != "median" {
        return Err(cx.invalid(
            "predictor",
            "window",
            format!("does not apply to predictor '{name}' (it is a median knob)"),
        ));
    }
    if s.model.is_some() && name != "lstm" && name != "auto" {
        return Err(cx.invalid(
            "predictor",
            "model",
            format!("does not apply to predictor '{name}' (it is an lstm and auto knob)"),
        ));
    }
    match name {
        "last" => Ok(Some(PredictorPlan::Last)),
        "sustained" => {
            let k = s.k.unwrap_or(2);
            if k == 0 {
                return Err(cx.invalid("predictor", "k", "must be at least 1 (got 0)"));
            }
            Ok(Some(PredictorPlan::Sustained { k }))
        }
        "median" => {
            let window = s.window.unwrap_or(crate::predict::DEFAULT_MEDIAN_WINDOW);
            if window == 0 {
                return Err(cx.invalid("predictor", "window", "must be at least 1 (got 0)"));
            }
            Ok(Some(PredictorPlan::Median { window }))
        }
        "ewma" => {
            let alpha = s.alpha.unwrap_or(crate::predict::DEFAULT_EWMA_ALPHA);
            if !(alpha > 0.0 && alpha <= 1.0) {
                return Err(cx.invalid(
                    "predictor",
                    "alpha",
                    format!("must be in (0, 1] (got {alpha})"),
                ));
            }
            Ok(Some(PredictorPlan::Ewma { alpha }))
        }
        "lstm" => {
            let Some(model) = &s.model else {
                return Err(cx.invalid(
                    "predictor",
                    "name",
                    "lstm needs `model = \"DIR\"`, a directory from `forestall predictor train`",
                ));
            };
            let model = base_dir.join(model);
            if let Err(e) = crate::predict::LstmPredictor::load(&model) {
                return Err(cx.invalid("predictor", "model", e.to_string()));
            }
            Ok(Some(PredictorPlan::Lstm { model }))
        }
        "auto" => {
            let model = s.model.as_ref().map(|m| base_dir.join(m));
            if let Some(model) = &model {
                if let Err(e) = crate::predict::LstmPredictor::load(model) {
                    return Err(cx.invalid("predictor", "model", e.to_string()));
                }
            }
            Ok(Some(PredictorPlan::Auto { model }))
        }
        other => Err(cx.invalid(
            "predictor",
            "name",
            format!(
                "unknown predictor '{other}'; accepted: {}",
                PREDICTORS.join(", ")
            ),
        )),
    }
}

impl PolicySection {
    fn policy_name(&self) -> &str {
        self.name.as_deref().unwrap_or("bsp")
    }
}
