//! `forestall whatif RUN --cut LAYER…|best`: a pipeline run's iterations as
//! they would have run with its layers cut elsewhere
//! ([`crate::ops::recut`]), from its operation trace and plan.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context};
use serde::Serialize;

use super::output::print_stdout;
use super::GlobalArgs;
use crate::ops::placements::{read_placements, PLACEMENTS_FILE};
use crate::ops::read_ops;
use crate::ops::recut::{recut_steps, NewCut, RecutStep};
use crate::pipeline::StageLayout;
use crate::report::json;
use crate::stats::mean;
use crate::workload::cnn::net::stages::{LAYERS, LAYER_COSTS};

#[derive(Serialize)]
struct Line<'a> {
    trace: String,
    cut: &'a str,
    recorded_ms: f64,
    predicted_ms: f64,
    steps: &'a [RecutStep],
}

/// The cut `--cut` names for `layout`: `best`, or the layers stages 1..
/// begin at (comma-separated).
fn parse_cut(text: &str, layout: &StageLayout) -> anyhow::Result<NewCut> {
    if text == "best" {
        return Ok(NewCut::Best);
    }
    let names: Vec<&str> = text.split(',').map(str::trim).collect();
    if names.len() + 1 != layout.stages as usize {
        bail!(
            "--cut {text}: the run has {} stages, cut at {} layers (or `best`)",
            layout.stages,
            layout.stages - 1
        );
    }
    let mut bounds = vec![0];
    for name in names {
        let Some(at) = LAYERS.iter().position(|l| *l == name) else {
            bail!(
                "--cut: '{name}' names no layer; the net's layers are {}",
                LAYERS.join(", ")
            );
        };
        if at <= *bounds.last().expect("starts at 0") {
            bail!("--cut: '{name}' does not begin a stage after the one before (list the layers in order, not conv1)");
        }
        bounds.push(at);
    }
    bounds.push(LAYERS.len());
    Ok(NewCut::At(bounds))
}

/// The pipeline layout of the run whose trace is `dir` (its plan.json
/// beside or above it).
fn layout_of(dir: &Path) -> anyhow::Result<StageLayout> {
    let plan = [dir.join("plan.json"), dir.join("../plan.json")]
        .into_iter()
        .find(|p| p.is_file())
        .with_context(|| {
            format!(
                "{}: no plan.json of its run beside or above it",
                dir.display()
            )
        })?;
    let text = std::fs::read_to_string(&plan).with_context(|| format!("{}", plan.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}", plan.display()))?;
    match value.get("parallel") {
        Some(p) => serde_json::from_value(p.clone())
            .with_context(|| format!("{}: its [parallel] layout", plan.display())),
        None => bail!(
            "{}: --cut asks about a pipeline run ([parallel]); this run trained data-parallel",
            dir.display()
        ),
    }
}

/// Runs the what-if of `cut` over every trace directory in `dirs`.
pub fn run(
    cut: &str,
    dirs: &[std::path::PathBuf],
    global: &GlobalArgs,
) -> anyhow::Result<ExitCode> {
    for dir in dirs {
        let layout = layout_of(dir)?;
        let ops_path = crate::analyze::ops_file_of(dir).with_context(|| {
            format!(
                "{}: no ops.parquet (a pipeline run writes one)",
                dir.display()
            )
        })?;
        let ops = read_ops(&ops_path)?;
        let new = parse_cut(cut, &layout)?;
        let trace_dir = ops_path.parent().unwrap_or(dir);
        let moves = read_placements(trace_dir)?;
        let fits = |b: &Vec<usize>| {
            b.len() == layout.stages as usize + 1
                && b.first() == Some(&0)
                && b.last() == Some(&LAYERS.len())
                && b.windows(2).all(|w| w[0] < w[1])
        };
        if let Some(bad) = moves
            .iter()
            .find(|e| e.cuts.len() != layout.replicas as usize || !e.cuts.iter().all(fits))
        {
            bail!(
                "{}: the placement from iteration {} ({:?}) does not fit the run's {} stages × {} replicas of {} layers",
                trace_dir.join(PLACEMENTS_FILE).display(),
                bad.iteration,
                bad.cuts,
                layout.stages,
                layout.replicas,
                LAYERS.len()
            );
        }
        let steps = recut_steps(&ops, &layout, (&LAYER_COSTS, &moves), &new);
        if steps.is_empty() {
            bail!(
                "{}: no iteration with every stage worker's passes",
                ops_path.display()
            );
        }
        let recorded = mean(steps.iter().map(|s| s.recorded_us)) / 1e3;
        let predicted = mean(steps.iter().map(|s| s.predicted_us)) / 1e3;
        if global.json {
            print_stdout(&json::line(
                "whatif-cut",
                &Line {
                    trace: dir.display().to_string(),
                    cut,
                    recorded_ms: recorded,
                    predicted_ms: predicted,
                    steps: &steps,
                },
            ));
        } else if global.quiet == 0 {
            let run_cut: Vec<String> = (0..layout.stages)
                .map(|s| LAYERS[layout.layers(s)].join("+"))
                .collect();
            print_stdout(&format!(
                "{}: {} stages × {} replicas, {}, cut {} over {} iterations",
                dir.display(),
                layout.stages,
                layout.replicas,
                layout.schedule,
                run_cut.join(" | "),
                steps.len()
            ));
            print_stdout(&format!(
                "  recorded {recorded:.1} ms/iteration; with --cut {cut}: {predicted:.1} ms ({:.3}×), the schedule's timeline at each iteration's measured stage speeds",
                predicted / recorded.max(f64::MIN_POSITIVE)
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}
