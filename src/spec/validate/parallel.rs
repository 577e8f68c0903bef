//! `[parallel]`: the CNN's layers cut into pipeline stages over the
//! workers ([`StageLayout`]).

use super::super::job::JobSpec;
use super::context::Context;
use super::Result;
use crate::pipeline::{best_cut, Schedule, StageCost, StageLayout};
use crate::spec::plan::{AVAILABLE_POLICIES, DEFAULT_WORKERS};
use crate::workload::cnn::net::stages::{LAYERS, LAYER_COSTS};
use crate::workload::ModelPlan;

/// The default stage count: two convolutions dominate the net's cost, so
/// two stages split it evenly.
pub const DEFAULT_STAGES: u32 = 2;

/// The stages a spec asks for (1 without `[parallel]`): how many workers
/// share one replica's data.
pub(super) fn stages_asked(spec: &JobSpec) -> u32 {
    spec.parallel
        .as_ref()
        .map_or(1, |p| p.stages.unwrap_or(DEFAULT_STAGES))
}

/// Checks `[parallel]` against the model, the worker count and the
/// policy's name, before the data is looked at (a layout's mistakes are
/// reported whether or not the dataset is there).
pub(super) fn check_parallel(
    cx: &Context<'_>,
    spec: &JobSpec,
    model: &ModelPlan,
) -> Result<Option<StageLayout>> {
    let workers = spec.workers.count.unwrap_or(DEFAULT_WORKERS);
    let policy = spec.policy.name.as_deref().unwrap_or("bsp");
    let Some(section) = &spec.parallel else {
        if policy == "rebalance-stages" {
            return Err(cx.invalid(
                "policy",
                "name",
                "'rebalance-stages' moves layers between pipeline stages; add a [parallel] section \
                 (the CNN cut into stages) or choose a data-parallel policy",
            ));
        }
        return Ok(None);
    };
    let invalid = |key: &str, message: String| cx.invalid("parallel", key, message);
    if !matches!(model, ModelPlan::Cnn { .. }) {
        return Err(invalid(
            "stages",
            format!(
                "pipeline stages cut the CNN's layers, and [model] kind = \"{}\" has none to cut; \
                 use kind = \"cnn\" or drop [parallel]",
                model.kind()
            ),
        ));
    }
    let stages = section.stages.unwrap_or(DEFAULT_STAGES);
    let layers = LAYERS.len() as u32;
    if stages == 0 || stages > layers {
        return Err(invalid(
            "stages",
            format!("must be in 1..={layers}, one layer at least a stage (the net's layers: {}; got {stages})", LAYERS.join(", ")),
        ));
    }
    if stages > workers {
        return Err(invalid(
            "stages",
            format!("{stages} stages need at least {stages} workers, one a stage ([workers] count is {workers})"),
        ));
    }
    if !workers.is_multiple_of(stages) {
        return Err(invalid(
            "stages",
            format!("[workers] count {workers} is not divisible by {stages} stages: the workers are stages × replicas"),
        ));
    }
    let replicas = workers / stages;
    if let Some(r) = section.replicas.filter(|&r| r != replicas) {
        return Err(invalid(
            "replicas",
            format!("{workers} workers in {stages} stages make {replicas} replicas, not {r}"),
        ));
    }
    let schedule = match &section.schedule {
        Some(name) => name
            .parse::<Schedule>()
            .map_err(|e| invalid("schedule", e.to_string()))?,
        None => Schedule::OneFOneB,
    };
    let bounds = match &section.cut {
        Some(names) => named_cut(names, stages).map_err(|m| invalid("cut", m))?,
        None => default_cut(stages, schedule),
    };
    // (an unknown name is the policy's own check's to report)
    // (`rapid-reassign` moves whole units between the replicas)
    let pipelined = ["bsp", "ideal", "rebalance-stages", "rapid-reassign"];
    if AVAILABLE_POLICIES.contains(&policy) && !pipelined.contains(&policy) {
        return Err(cx.invalid(
            "policy",
            "name",
            format!(
                "'{policy}' moves data-parallel units between workers; a pipeline runs under bsp, rebalance-stages, rapid-reassign (units between replicas) or ideal"
            ),
        ));
    }
    if spec.workers.shards.is_some() {
        return Err(cx.invalid(
            "workers",
            "shards",
            "a pipeline cuts the parameter shards at its stages' boundaries (one per worker); leave shards unset",
        ));
    }
    Ok(Some(StageLayout {
        stages,
        replicas,
        bounds,
        schedule,
    }))
}

/// The layer bounds of a cut given by the layers stages 1.. begin at.
fn named_cut(names: &[String], stages: u32) -> std::result::Result<Vec<usize>, String> {
    if names.len() + 1 != stages as usize {
        return Err(format!(
            "{stages} stages are cut at {} layers (the first layer of each stage after the first), got {}",
            stages - 1,
            names.len()
        ));
    }
    let mut bounds = vec![0];
    for name in names {
        let Some(at) = LAYERS.iter().position(|l| l == name) else {
            return Err(format!(
                "'{name}' names no layer; the net's layers are {}",
                LAYERS.join(", ")
            ));
        };
        if at <= *bounds.last().expect("starts at 0") {
            return Err(format!(
                "'{name}' does not begin a stage after the one before: the cut lists layers in order, \
                 each stage after the first beginning at a later one than conv1 and the one before"
            ));
        }
        bounds.push(at);
    }
    bounds.push(LAYERS.len());
    Ok(bounds)
}

/// The cut that makes an iteration shortest on equal workers for the
/// layers' measured costs ([`LAYER_COSTS`]).
fn default_cut(stages: u32, schedule: Schedule) -> Vec<usize> {
    let costs: Vec<StageCost> = LAYER_COSTS
        .iter()
        .map(|&(forward, backward)| StageCost { forward, backward })
        .collect();
    // enough micro-batches for any schedule; the cut hardly depends on it
    let micro = 4 * stages;
    let (cut, _) = best_cut(&costs, &vec![1.0; stages as usize], schedule, (micro, 0.0))
        .expect("1 ≤ stages ≤ layers, equal positive speeds");
    let mut bounds: Vec<usize> = cut.iter().map(|r| r.start).collect();
    bounds.push(LAYERS.len());
    bounds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cut_of_two_stages_is_after_conv2() {
        assert_eq!(default_cut(2, Schedule::OneFOneB), [0, 2, 5]);
        assert_eq!(default_cut(1, Schedule::GPipe), [0, 5]);
        assert_eq!(default_cut(5, Schedule::GPipe), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_named_cut_lists_later_layers_in_order() {
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(named_cut(&names(&["conv3"]), 2), Ok(vec![0, 2, 5]));
        assert_eq!(
            named_cut(&names(&["conv2", "lstm"]), 3),
            Ok(vec![0, 1, 3, 5])
        );
        assert!(named_cut(&names(&["pool9"]), 2)
            .unwrap_err()
            .contains("'pool9' names no layer"));
        assert!(named_cut(&names(&["conv1"]), 2)
            .unwrap_err()
            .contains("'conv1'"));
        assert!(named_cut(&names(&["lstm", "conv2"]), 3)
            .unwrap_err()
            .contains("'conv2'"));
        assert!(named_cut(&names(&[]), 2).unwrap_err().contains("got 0"));
    }
}
