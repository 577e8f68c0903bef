//! The markdown a benchmark run leaves behind: README.md (how it was made) and
//! summary.md (the tables). Rendering only.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::machine::Machine;
use super::results::BenchRow;
use super::spec::PipelineSpec;

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
        "Files: `summary.md` (tables), `raw.parquet` (one row per run). Per-run traces are \
         written under `traces/` and not committed.\n\nThis machine is shared and noisy: \
         compare ratios measured within this run, not absolute times across runs."
    );
    s
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
            "job `{}`, {} iterations, pattern `{}`, pace {} ns/row{}, seeds {:?}\n",
            first.job,
            first.iterations,
            first.pattern,
            first.pace_ns_per_row,
            if first.pace_ns_per_row == 0 {
                " (native speed)"
            } else {
                " (paced)"
            },
            sweep.seeds
        );
        // group by everything but the seed
        type Key = (String, u32, u64, u64); // kind, workers, probability bits, delay bits
        let mut groups: BTreeMap<Key, Vec<&BenchRow>> = BTreeMap::new();
        for r in &mine {
            groups
                .entry((
                    r.kind.clone(),
                    r.workers,
                    r.probability.to_bits(),
                    r.delay_percent.to_bits(),
                ))
                .or_default()
                .push(r);
        }
        let baseline = |workers: u32| -> Option<f64> {
            let name = sweep.relative_to.as_ref()?;
            let v: Vec<f64> = rows
                .iter()
                .filter(|r| &r.sweep == name && r.kind == "timely" && r.workers == workers)
                .map(|r| r.time_per_iteration_ms)
                .collect();
            (!v.is_empty()).then(|| mean_sd(&v).0)
        };
        let plain_mean = {
            let v: Vec<f64> = mine
                .iter()
                .filter(|r| r.kind == "plain")
                .map(|r| r.time_per_iteration_ms)
                .collect();
            (!v.is_empty()).then(|| mean_sd(&v).0)
        };
        let _ = writeln!(
            s,
            "| kind | workers | probability | delay % | time/iteration ms (mean ± sd) | median iteration ms | barrier wait worker-s | vs {} | test acc | digests equal |",
            sweep
                .relative_to
                .as_deref()
                .map_or_else(|| if plain_mean.is_some() { "plain loop".to_owned() } else { "—".to_owned() }, |n| format!("`{n}`"))
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
        for ((kind, workers, _, _), group) in &groups {
            let t: Vec<f64> = group.iter().map(|r| r.time_per_iteration_ms).collect();
            let (mean, sd) = mean_sd(&t);
            let med = mean_sd(
                &group
                    .iter()
                    .map(|r| r.median_iteration_ms)
                    .collect::<Vec<_>>(),
            )
            .0;
            let wait = mean_sd(&group.iter().map(|r| r.barrier_wait_s).collect::<Vec<_>>()).0;
            let acc = mean_sd(&group.iter().map(|r| r.test_accuracy).collect::<Vec<_>>()).0;
            let ratio = baseline(*workers)
                .or(if kind == "timely" { plain_mean } else { None })
                .map_or("—".to_owned(), |b| format!("{:.3}×", mean / b));
            let all_equal = group.iter().all(|r| r.digest_matches);
            let _ = writeln!(
                s,
                "| {kind} | {workers} | {} | {} | {mean:.2} ± {sd:.2} | {med:.2} | {wait:.3} | {ratio} | {acc:.4} | {} |",
                group[0].probability,
                group[0].delay_percent,
                if all_equal { "yes" } else { "NO" }
            );
        }
        let _ = writeln!(s);
    }
    s
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
