//! The markdown a benchmark run leaves behind: README.md (how it was made) and
//! summary.md (the tables). Rendering only.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use std::path::{Path, PathBuf};

use super::kind::RunKind;
use super::machine::Machine;
use super::results::BenchRow;
use super::spec::{PipelineSpec, SweepSpec};
use crate::report::plot::{write_bar_plot, write_line_plot, BarPlot, LinePlot, Series};

/// Mean and sample standard deviation.
fn mean_sd(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let mean = values.iter().sum::<f64>() / n;
    let var = if values.len() > 1 {
        values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// README.md of a results directory.
pub fn readme(
    spec: &PipelineSpec,
    command: &str,
    git_revision: &str,
    date: &str,
    machine: &Machine,
    runs: usize,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Benchmark `{}` — {date}\n", spec.bench.name);
    if !spec.bench.about.is_empty() {
        let _ = writeln!(s, "{}\n", spec.bench.about.trim());
    }
    let _ = writeln!(s, "| | |\n|---|---|");
    let _ = writeln!(s, "| command | `{command}` |");
    let _ = writeln!(s, "| git revision | `{git_revision}` |");
    let _ = writeln!(s, "| date (UTC) | {date} |");
    let _ = writeln!(s, "| host | {} |", machine.host);
    let _ = writeln!(
        s,
        "| CPU | {} ({} cores available) |",
        machine.cpu, machine.cores
    );
    let _ = writeln!(s, "| memory | {:.1} GiB |", machine.memory_gib);
    let _ = writeln!(s, "| OS | {} |", machine.os);
    let _ = writeln!(s, "| rustc | {} (release profile) |", machine.rustc);
    let _ = writeln!(s, "| runs | {runs} |\n");
    let _ = writeln!(
        s,
        "Files: `summary.md` (tables), `raw.parquet` (one row per run), `plot-*.svg|png` \
         (time per iteration against delay). Per-run traces are written under `traces/` and \
         not committed.\n\nThis machine is shared and noisy: \
         compare ratios measured within this run, not absolute times across runs."
    );
    s
}

/// Runs that differ only in their seed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct GroupKey {
    kind: RunKind,
    policy: String,
    workers: u32,
    probability: u64,
    alpha: u64,
    delay: u64,
    /// The sweep's `vary` values.
    settings: String,
}

impl GroupKey {
    /// The policy, with the sweep's `vary` values when it has any.
    fn label(&self) -> String {
        match self.settings.as_str() {
            "" => self.policy.clone(),
            s => format!("{} ({s})", self.policy),
        }
    }
}

fn group<'a>(rows: &[&'a BenchRow]) -> BTreeMap<GroupKey, Vec<&'a BenchRow>> {
    let mut groups: BTreeMap<GroupKey, Vec<&BenchRow>> = BTreeMap::new();
    for r in rows {
        groups
            .entry(GroupKey {
                kind: r.kind,
                policy: r.policy.clone(),
                workers: r.workers,
                probability: r.probability.to_bits(),
                alpha: r.alpha.to_bits(),
                delay: r.delay_percent.to_bits(),
                settings: r.settings.clone(),
            })
            .or_default()
            .push(r);
    }
    groups
}

fn mean_of(rows: &[&BenchRow], f: impl Fn(&BenchRow) -> f64) -> f64 {
    mean_sd(&rows.iter().map(|r| f(r)).collect::<Vec<_>>()).0
}

/// The time per iteration a sweep's rows of `kind` and `policy` are
/// compared with, for `workers`: the same kind's runs of the baseline
/// policy, or the timely runs of the baseline sweep (its runs of `policy`
/// when it has some, so that like is compared with like).
fn baseline(
    sweep: &SweepSpec,
    rows: &[BenchRow],
    kind: RunKind,
    workers: u32,
    policy: &str,
) -> Option<(String, f64)> {
    let (label, chosen): (String, Vec<&BenchRow>) = if let Some(p) = &sweep.relative_to_policy {
        (
            format!("`{p}`"),
            rows.iter()
                .filter(|r| r.sweep == sweep.name && r.policy == *p)
                .filter(|r| r.kind == kind && r.workers == workers)
                .collect(),
        )
    } else if let Some(name) = &sweep.relative_to {
        let of_sweep: Vec<&BenchRow> = rows
            .iter()
            .filter(|r| &r.sweep == name)
            .filter(|r| r.kind.is_timely() && r.workers == workers)
            .collect();
        let same_policy: Vec<&BenchRow> = of_sweep
            .iter()
            .copied()
            .filter(|r| r.policy == policy)
            .collect();
        (
            format!("`{name}`"),
            if same_policy.is_empty() {
                of_sweep
            } else {
                same_policy
            },
        )
    } else if sweep.reference.is_some() {
        (
            "plain loop".to_owned(),
            rows.iter()
                .filter(|r| r.sweep == sweep.name && r.kind == RunKind::Plain)
                .collect(),
        )
    } else {
        return None;
    };
    (!chosen.is_empty()).then(|| (label, mean_of(&chosen, |r| r.time_per_iteration_ms)))
}

/// DPro-SM's straggler mitigation of a policy with mean time `t` per
/// iteration: 1 − (t − t_ideal) / (t_bsp − t_ideal), against the `bsp` and
/// `ideal` rows of the same settings (None without both, or when bsp is not
/// measurably slower than ideal).
fn mitigation(groups: &BTreeMap<GroupKey, Vec<&BenchRow>>, key: &GroupKey, t: f64) -> Option<f64> {
    // bsp and ideal of the same varied values, or (a policy knob varied
    // only for the policies that take it) the sweep's single runs of them
    let of = |policy: &str| {
        let k = GroupKey {
            policy: policy.to_owned(),
            ..key.clone()
        };
        let plain = GroupKey {
            settings: String::new(),
            ..k.clone()
        };
        groups
            .get(&k)
            .or_else(|| groups.get(&plain))
            .map(|g| mean_of(g, |r| r.time_per_iteration_ms))
    };
    let (bsp, ideal) = (of("bsp")?, of("ideal")?);
    (key.kind.is_timely() && bsp - ideal > 0.02 * ideal).then(|| 1.0 - (t - ideal) / (bsp - ideal))
}

/// summary.md: one table per sweep, with ratios where the pipeline asks.
pub fn summary(spec: &PipelineSpec, rows: &[BenchRow]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# {} — summary\n", spec.bench.name);
    for sweep in &spec.sweeps {
        let mine: Vec<&BenchRow> = rows.iter().filter(|r| r.sweep == sweep.name).collect();
        if mine.is_empty() {
            continue;
        }
        let _ = writeln!(s, "## {}\n", sweep.name);
        let first = mine[0];
        let _ = writeln!(
            s,
            "job `{}`, {} iterations, pattern `{}`, pace {} ns/row{}, seeds {:?}{}\n",
            first.job,
            first.iterations,
            first.pattern,
            first.pace_ns_per_row,
            if first.pace_ns_per_row == 0 {
                " (native speed)"
            } else {
                " (paced)"
            },
            sweep.seeds,
            if first.cpus.is_empty() {
                String::new()
            } else {
                format!(", pinned to CPU {}", first.cpus)
            }
        );
        if !sweep.set.is_empty() {
            let _ = writeln!(s, "set: `{}`\n", sweep.set.join("`, `"));
        }
        let label = mine
            .first()
            .and_then(|r| baseline(sweep, rows, r.kind, r.workers, &r.policy))
            .map_or_else(|| "—".to_owned(), |(l, _)| l);
        let _ = writeln!(
            s,
            "| kind | policy | workers | probability | α | delay % | time/iteration ms (mean ± sd) | median iteration ms | load ms | barrier wait worker-s | vs {label} | vs bound | vs whole-unit bound | mitigation | work reassigned | work cloned | converged at iteration | time to converge s | test acc | time to target acc s | digests equal | checkpoint every | kill → first iteration s |"
        );
        let _ = writeln!(
            s,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        let groups = group(&mine);
        for (key, group) in &groups {
            let t: Vec<f64> = group.iter().map(|r| r.time_per_iteration_ms).collect();
            let (mean, sd) = mean_sd(&t);
            let mitigation = mitigation(&groups, key, mean)
                .map_or("—".to_owned(), |m| format!("{:.0} %", 100.0 * m));
            let ratio = baseline(sweep, rows, key.kind, key.workers, &key.policy)
                .filter(|_| key.kind.is_timely() || sweep.relative_to_policy.is_none())
                .map_or("—".to_owned(), |(_, b)| format!("{:.3}×", mean / b));
            let vs = |bound: fn(&BenchRow) -> Option<f64>| {
                let bounds: Vec<f64> = group.iter().copied().filter_map(bound).collect();
                if bounds.len() == group.len() && bounds.iter().all(|&b| b > 0.0) {
                    format!(
                        "{:.3}×",
                        mean / (bounds.iter().sum::<f64>() / bounds.len() as f64)
                    )
                } else {
                    "—".to_owned()
                }
            };
            let vs_bound = vs(|r| r.bound_iteration_ms);
            let vs_unit_bound = vs(|r| r.unit_bound_iteration_ms);
            let converged: Vec<&BenchRow> = group
                .iter()
                .copied()
                .filter(|r| r.converged_iteration.is_some())
                .collect();
            let (conv_it, conv_s) = if converged.len() == group.len() {
                (
                    format!(
                        "{:.1}",
                        mean_of(&converged, |r| r.converged_iteration.unwrap_or(0) as f64)
                    ),
                    format!(
                        "{:.2}",
                        mean_of(&converged, |r| r.converged_s.unwrap_or(0.0))
                    ),
                )
            } else {
                (
                    format!("{} of {} runs", converged.len(), group.len()),
                    "—".to_owned(),
                )
            };
            let reached: Vec<f64> = group.iter().filter_map(|r| r.time_to_accuracy_s).collect();
            let to_target = match group[0].target_accuracy {
                None => "—".to_owned(),
                Some(_) if reached.len() == group.len() => {
                    format!("{:.1}", reached.iter().sum::<f64>() / reached.len() as f64)
                }
                Some(_) => format!("{} of {} runs", reached.len(), group.len()),
            };
            let recoveries: Vec<f64> = group.iter().filter_map(|r| r.recovery_s).collect();
            let recovery = if recoveries.is_empty() {
                "—".to_owned()
            } else {
                format!(
                    "{:.2}",
                    recoveries.iter().sum::<f64>() / recoveries.len() as f64
                )
            };
            let every = match group[0].checkpoint_every {
                0 => "off".to_owned(),
                k => k.to_string(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {mean:.2} ± {sd:.2} | {:.2} | {:.1} | {:.3} | {ratio} | {vs_bound} | {vs_unit_bound} | {mitigation} | {:.1} % | {:.1} % | {conv_it} | {conv_s} | {:.4} | {to_target} | {} | {every} | {recovery} |",
                key.kind,
                key.label(),
                key.workers,
                group[0].probability,
                group[0].alpha,
                group[0].delay_percent,
                mean_of(group, |r| r.median_iteration_ms),
                mean_of(group, |r| r.load_ms),
                mean_of(group, |r| r.barrier_wait_s),
                100.0 * mean_of(group, |r| r.work_reassigned),
                100.0 * mean_of(group, |r| r.work_cloned),
                mean_of(group, |r| r.test_accuracy),
                if !group.iter().all(|r| r.bsp_semantics) {
                    "n/a (not BSP)"
                } else if group.iter().all(|r| r.digest_matches) {
                    "yes"
                } else {
                    "NO"
                }
            );
        }
        let _ = writeln!(s);
        workload_metrics(&mut s, &groups);
        host_costs(&mut s, &groups);
        if rows.iter().any(|r| r.bubble.is_some()) {
            throughput(&mut s, &groups);
        }
    }
    s
}

/// A bench with pipeline runs: each group's images per second, bytes sent
/// per iteration and (pipelines) bubble, mean over its runs.
fn throughput(s: &mut String, groups: &BTreeMap<GroupKey, Vec<&BenchRow>>) {
    let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let lines: Vec<String> = groups
        .iter()
        .map(|(key, group)| {
            let images = mean(group.iter().filter_map(|r| r.rows_per_s).collect());
            let sent = mean(
                group
                    .iter()
                    .filter_map(|r| r.mb_sent_per_iteration)
                    .collect(),
            );
            let bubble = mean(group.iter().filter_map(|r| r.bubble).collect());
            format!(
                "- {} {} W = {}: {} images/s, {} MB sent per iteration{}",
                key.kind,
                key.label(),
                key.workers,
                images.map_or("—".to_owned(), |v| format!("{v:.1}")),
                sent.map_or("—".to_owned(), |v| format!("{v:.2}")),
                bubble.map_or(String::new(), |b| format!(", bubble {:.1} %", 100.0 * b))
            )
        })
        .collect();
    let _ = writeln!(
        s,
        "Throughput and traffic (images per second over the iterations' span; bytes the \
         workers sent: gradient slices, and a pipeline's activations and their gradients, \
         not the parameter versions; a pipeline's bubble, mean over its stages):\n"
    );
    for line in lines {
        let _ = writeln!(s, "{line}");
    }
    let _ = writeln!(s);
}

/// Runs on namespaced hosts: the slowest handshake at start and the
/// gather's time, per group, mean over its runs.
fn host_costs(s: &mut String, groups: &BTreeMap<GroupKey, Vec<&BenchRow>>) {
    let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let lines: Vec<String> = groups
        .iter()
        .filter_map(|(key, group)| {
            let start = mean(group.iter().filter_map(|r| r.start_ms).collect())?;
            let gather = mean(group.iter().filter_map(|r| r.gather_s).collect());
            Some(format!(
                "- {} {} W = {}: slowest handshake {start:.1} ms (clock exchange included), \
                 gather {}",
                key.kind,
                key.label(),
                key.workers,
                gather.map_or("—".to_owned(), |g| format!("{:.0} ms", g * 1000.0))
            ))
        })
        .collect();
    if !lines.is_empty() {
        let _ = writeln!(
            s,
            "Start and end across hosts (mean over the runs):\n\n{}\n",
            lines.join("\n")
        );
    }
}

/// The workloads' own final metrics (e.g. `rmse`), per group, mean over its
/// runs: a list under the table, when any run has them.
fn workload_metrics(s: &mut String, groups: &BTreeMap<GroupKey, Vec<&BenchRow>>) {
    let mut lines = Vec::new();
    for (key, group) in groups {
        let per_run: Vec<BTreeMap<String, f64>> = group.iter().map(|r| r.metrics()).collect();
        let Some(names) = per_run
            .first()
            .map(|m| m.keys().cloned().collect::<Vec<_>>())
        else {
            continue;
        };
        let values: Vec<String> = names
            .iter()
            .filter_map(|name| {
                let v: Vec<f64> = per_run
                    .iter()
                    .filter_map(|m| m.get(name).copied())
                    .collect();
                (v.len() == per_run.len())
                    .then(|| format!("{name} {:.4}", v.iter().sum::<f64>() / v.len() as f64))
            })
            .collect();
        if !values.is_empty() {
            lines.push(format!(
                "- {} {} W = {}: {}",
                key.kind,
                key.label(),
                key.workers,
                values.join(", ")
            ));
        }
    }
    if !lines.is_empty() {
        let _ = writeln!(
            s,
            "The workload's own final metrics on the evaluation rows (mean over the runs):\n\n{}\n",
            lines.join("\n")
        );
    }
}

/// A sweep that does not vary the delay: one bar per policy (mean over seeds
/// and the sweep's other settings), relative to its baseline when it has one.
fn bar_plot(spec: &PipelineSpec, sweep: &SweepSpec, rows: &[BenchRow], dir: &Path) -> Vec<PathBuf> {
    let mine: Vec<&BenchRow> = rows
        .iter()
        .filter(|r| r.sweep == sweep.name && r.kind.is_timely())
        .collect();
    let mut by_policy: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut relative = false;
    for r in &mine {
        let y = match baseline(sweep, rows, r.kind, r.workers, &r.policy) {
            Some((_, b)) => {
                relative = true;
                r.time_per_iteration_ms / b
            }
            None => r.time_per_iteration_ms,
        };
        let mut label = match r.kind.layout() {
            Some(layout) => format!("{} {layout}", r.policy),
            None => r.policy.clone(),
        };
        if !r.settings.is_empty() {
            label = format!("{label} ({})", r.settings);
        }
        by_policy.entry(label).or_default().push(y);
    }
    if by_policy.len() < 2 {
        return Vec::new();
    }
    let plot = BarPlot {
        title: format!("{}: {}", spec.bench.name, sweep.name),
        y_label: if relative {
            "time per iteration / baseline".into()
        } else {
            "time per iteration (ms)".into()
        },
        bars: by_policy
            .into_iter()
            .map(|(p, ys)| (p, mean_sd(&ys).0))
            .collect(),
    };
    match write_bar_plot(&dir.join(format!("plot-{}", sweep.name)), &plot) {
        Ok(written) => written,
        Err(e) => {
            tracing::warn!("{e}");
            Vec::new()
        }
    }
}

/// One plot per sweep that varies the delay: time per iteration (relative to the
/// sweep's baseline when it has one) against delay, one line per policy.
pub fn plots(spec: &PipelineSpec, rows: &[BenchRow], dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for sweep in &spec.sweeps {
        if sweep.delay_percent.len() < 2 {
            files.extend(bar_plot(spec, sweep, rows, dir));
            continue;
        }
        let mine: Vec<&BenchRow> = rows
            .iter()
            .filter(|r| r.sweep == sweep.name && r.kind.is_timely())
            .collect();
        let mut lines: BTreeMap<(String, u32), Vec<(f64, f64)>> = BTreeMap::new();
        let mut relative = false;
        for (key, group) in &group(&mine) {
            let mean = mean_of(group, |r| r.time_per_iteration_ms);
            let y = match baseline(sweep, rows, key.kind, key.workers, &key.policy) {
                Some((_, b)) => {
                    relative = true;
                    mean / b
                }
                None => mean,
            };
            lines
                .entry((key.label(), key.workers))
                .or_default()
                .push((group[0].delay_percent, y));
        }
        let multi_workers = lines
            .keys()
            .map(|k| k.1)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            > 1;
        let series = lines
            .into_iter()
            .map(|((policy, workers), mut points)| {
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                Series {
                    label: if multi_workers {
                        format!("{policy} (W={workers})")
                    } else {
                        policy
                    },
                    points,
                }
            })
            .collect();
        let plot = LinePlot {
            title: format!("{}: {}", spec.bench.name, sweep.name),
            x_label: "injected delay (%)".into(),
            y_label: if relative {
                "time per iteration / baseline".into()
            } else {
                "time per iteration (ms)".into()
            },
            series,
        };
        match write_line_plot(&dir.join(format!("plot-{}", sweep.name)), &plot) {
            Ok(mut written) => files.append(&mut written),
            Err(e) => tracing::warn!("{e}"),
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_sd() {
        let (m, sd) = mean_sd(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(m, 2.5);
        assert!((sd - 1.2909944487358056).abs() < 1e-12);
        assert_eq!(mean_sd(&[]), (0.0, 0.0));
    }
}
