//! A bench against an earlier run of the same pipeline (`--baseline DIR`):
//! which rows moved beyond the spread between seeds.
//!
//! A row is one line of the summary table: the runs of a sweep that differ
//! only in their seed (same kind, policy, workers, probability, α, delay).
//! For each measure (time per iteration, test accuracy) the row's mean over
//! its seeds is compared with the baseline's, and the row **moved** when
//!
//! ```text
//! |mean_new − mean_baseline| > max(range_new, range_baseline, floor)
//! ```
//!
//! where a range is max − min over the row's seeds in that bench (0 with one
//! seed), and the floor is [`TIME_FLOOR`] × the baseline mean for time and
//! [`ACCURACY_FLOOR`] for accuracy: the seeds show how much the measure
//! varies by chance on that machine, and a move within that is noise. A row
//! that is slower or less accurate beyond it is a regression.

use std::collections::BTreeMap;

use serde::Serialize;

use super::results::BenchRow;

/// The smallest move in time per iteration that counts, relative to the
/// baseline's mean (2 %).
pub const TIME_FLOOR: f64 = 0.02;
/// The smallest move in test accuracy that counts (0.005).
pub const ACCURACY_FLOOR: f64 = 0.005;

/// What identifies a row across benches.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct RowKey {
    /// Sweep.
    pub sweep: String,
    /// Kind.
    pub kind: String,
    /// Policy.
    pub policy: String,
    /// Workers.
    pub workers: u32,
    /// Probability (as written).
    pub probability: String,
    /// α (as written).
    pub alpha: String,
    /// Delay % (as written).
    pub delay_percent: String,
}

impl RowKey {
    fn of(r: &BenchRow) -> Self {
        Self {
            sweep: r.sweep.clone(),
            kind: r.kind.label(),
            policy: r.policy.clone(),
            workers: r.workers,
            probability: r.probability.to_string(),
            alpha: r.alpha.to_string(),
            delay_percent: r.delay_percent.to_string(),
        }
    }
}

/// Which way a measure went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Within the spread.
    Within,
    /// Better beyond it (faster, more accurate).
    Improved,
    /// Worse beyond it (slower, less accurate).
    Regressed,
}

/// One measure of one row against the baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Moved {
    /// The row.
    #[serde(flatten)]
    pub key: RowKey,
    /// `time_per_iteration_ms` or `test_accuracy`.
    pub measure: &'static str,
    /// Baseline mean over its seeds.
    pub baseline_mean: f64,
    /// This bench's mean over its seeds.
    pub mean: f64,
    /// The largest move that counts as noise: max(ranges, floor).
    pub allowed: f64,
    /// Seeds in the baseline and in this bench.
    pub seeds: (usize, usize),
    /// The verdict.
    pub verdict: Verdict,
}

/// This bench against the baseline.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BaselineComparison {
    /// Every measure of every row both benches have.
    pub rows: Vec<Moved>,
    /// Rows only this bench has.
    pub only_new: Vec<RowKey>,
    /// Rows only the baseline has.
    pub only_baseline: Vec<RowKey>,
}

impl BaselineComparison {
    /// Whether any row regressed.
    pub fn regressed(&self) -> bool {
        self.rows.iter().any(|m| m.verdict == Verdict::Regressed)
    }
}

/// A measure compared: its name, how to read it, whether lower is better.
type Measure = (&'static str, fn(&BenchRow) -> f64, bool);

fn time_per_iteration(r: &BenchRow) -> f64 {
    r.time_per_iteration_ms
}

fn test_accuracy(r: &BenchRow) -> f64 {
    r.test_accuracy
}

/// The measures a row is compared by.
const MEASURES: [Measure; 2] = [
    ("time_per_iteration_ms", time_per_iteration, true),
    ("test_accuracy", test_accuracy, false),
];

fn groups(rows: &[BenchRow]) -> BTreeMap<RowKey, Vec<&BenchRow>> {
    let mut g: BTreeMap<RowKey, Vec<&BenchRow>> = BTreeMap::new();
    for r in rows {
        g.entry(RowKey::of(r)).or_default().push(r);
    }
    g
}

fn mean_range(values: &[f64]) -> (f64, f64) {
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    let (lo, hi) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    (mean, if values.len() > 1 { hi - lo } else { 0.0 })
}

/// Compares `rows` with `baseline` by the rule in the module docs.
pub fn compare_with_baseline(rows: &[BenchRow], baseline: &[BenchRow]) -> BaselineComparison {
    let (new, old) = (groups(rows), groups(baseline));
    let mut out = BaselineComparison::default();
    for (key, now) in &new {
        let Some(before) = old.get(key) else {
            out.only_new.push(key.clone());
            continue;
        };
        for (measure, value, lower_is_better) in MEASURES {
            let a: Vec<f64> = before.iter().map(|r| value(r)).collect();
            let b: Vec<f64> = now.iter().map(|r| value(r)).collect();
            let ((mean_a, range_a), (mean_b, range_b)) = (mean_range(&a), mean_range(&b));
            if !(mean_a.is_finite() && mean_b.is_finite()) {
                continue;
            }
            let floor = if lower_is_better {
                TIME_FLOOR * mean_a.abs()
            } else {
                ACCURACY_FLOOR
            };
            let allowed = range_a.max(range_b).max(floor);
            let delta = mean_b - mean_a;
            let verdict = if delta.abs() <= allowed {
                Verdict::Within
            } else if (delta > 0.0) == lower_is_better {
                Verdict::Regressed
            } else {
                Verdict::Improved
            };
            out.rows.push(Moved {
                key: key.clone(),
                measure,
                baseline_mean: mean_a,
                mean: mean_b,
                allowed,
                seeds: (a.len(), b.len()),
                verdict,
            });
        }
    }
    out.only_baseline = old
        .keys()
        .filter(|k| !new.contains_key(*k))
        .cloned()
        .collect();
    out
}

/// The comparison as Markdown: the rows that moved (all rows with
/// `all`), then the rows only one bench has.
pub fn to_markdown(c: &BaselineComparison, baseline: &str, all: bool) -> String {
    use std::fmt::Write as _;
    let mut s = format!(
        "## Against the baseline {baseline}\n\nA row moved when its mean over the seeds changed by more than the larger range between seeds of the two benches (or {:.0} % of the time, {ACCURACY_FLOOR} of accuracy).\n\n",
        TIME_FLOOR * 100.0
    );
    let shown: Vec<&Moved> = c
        .rows
        .iter()
        .filter(|m| all || m.verdict != Verdict::Within)
        .collect();
    let moved = c
        .rows
        .iter()
        .filter(|m| m.verdict != Verdict::Within)
        .count();
    let _ = writeln!(
        s,
        "{moved} of {} measures moved beyond the spread.\n",
        c.rows.len()
    );
    if !shown.is_empty() {
        s.push_str("| sweep | kind | policy | workers | probability | α | delay % | measure | baseline | now | change | allowed | verdict |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for m in shown {
            let k = &m.key;
            let change = if m.baseline_mean != 0.0 {
                format!("{:+.1} %", 100.0 * (m.mean / m.baseline_mean - 1.0))
            } else {
                format!("{:+.4}", m.mean - m.baseline_mean)
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {:.4} | {:.4} | {change} | ±{:.4} | {} |",
                k.sweep,
                k.kind,
                k.policy,
                k.workers,
                k.probability,
                k.alpha,
                k.delay_percent,
                m.measure,
                m.baseline_mean,
                m.mean,
                m.allowed,
                match m.verdict {
                    Verdict::Within => "within the spread",
                    Verdict::Improved => "IMPROVED",
                    Verdict::Regressed => "REGRESSED",
                }
            );
        }
        s.push('\n');
    }
    let list = |keys: &[RowKey]| {
        keys.iter()
            .map(|k| format!("{}/{} {} W={}", k.sweep, k.kind, k.policy, k.workers))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !c.only_new.is_empty() {
        let _ = writeln!(s, "Rows the baseline lacks: {}.\n", list(&c.only_new));
    }
    if !c.only_baseline.is_empty() {
        let _ = writeln!(s, "Rows this bench lacks: {}.\n", list(&c.only_baseline));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::RunKind;

    fn row(seed: u64, time: f64, accuracy: f64) -> BenchRow {
        BenchRow {
            sweep: "s".into(),
            kind: RunKind::Timely,
            job: "j".into(),
            workers: 4,
            policy: "bsp".into(),
            pattern: "none".into(),
            delay_percent: 0.0,
            probability: 0.0,
            alpha: 0.0,
            seed,
            pace_ns_per_row: 0,
            iterations: 10,
            time_per_iteration_ms: time,
            load_ms: 0.0,
            median_iteration_ms: 0.0,
            bound_iteration_ms: None,
            unit_bound_iteration_ms: None,
            barrier_wait_s: 0.0,
            work_reassigned: 0.0,
            work_cloned: 0.0,
            converged_iteration: None,
            converged_s: None,
            test_accuracy: accuracy,
            workload: "logistic".into(),
            target_accuracy: None,
            time_to_accuracy_s: None,
            test_metrics: String::new(),
            settings: String::new(),
            params_sha256: String::new(),
            digest_matches: true,
            bsp_semantics: true,
            processes: 1,
            checkpoint_every: 0,
            rows_per_s: None,
            bubble: None,
            mb_sent_per_iteration: None,
            cpus: String::new(),
            recovery_s: None,
            start_ms: None,
            gather_s: None,
        }
    }

    #[test]
    fn a_row_moves_only_beyond_the_spread_between_seeds() {
        let base = [row(1, 10.0, 0.80), row(2, 12.0, 0.80)]; // range 2 ms
                                                             // mean 11 → 12.5: 1.5 ms < range 2: within
        let c = compare_with_baseline(&[row(1, 12.0, 0.80), row(2, 13.0, 0.80)], &base);
        assert_eq!(c.rows[0].verdict, Verdict::Within);
        assert_eq!(c.rows[0].allowed, 2.0);
        // mean 11 → 14: 3 ms > 2: slower, a regression
        let c = compare_with_baseline(&[row(1, 14.0, 0.80), row(2, 14.0, 0.80)], &base);
        assert_eq!(c.rows[0].verdict, Verdict::Regressed);
        assert!(c.regressed());
        // mean 11 → 8.5: faster
        let c = compare_with_baseline(&[row(1, 8.0, 0.80), row(2, 9.0, 0.80)], &base);
        assert_eq!(c.rows[0].verdict, Verdict::Improved);
        assert!(!c.regressed());
        // one seed each: the floor (2 % of 10 ms = 0.2 ms) decides
        let c = compare_with_baseline(&[row(1, 10.1, 0.8)], &[row(1, 10.0, 0.8)]);
        assert_eq!(c.rows[0].verdict, Verdict::Within);
        let c = compare_with_baseline(&[row(1, 10.3, 0.79)], &[row(1, 10.0, 0.8)]);
        assert_eq!(c.rows[0].verdict, Verdict::Regressed);
        // accuracy: 0.01 lower beyond the 0.005 floor
        assert_eq!(c.rows[1].measure, "test_accuracy");
        assert_eq!(c.rows[1].verdict, Verdict::Regressed);
    }

    #[test]
    fn rows_only_one_bench_has_are_listed() {
        let mut other = row(1, 10.0, 0.8);
        other.policy = "flexrr".into();
        let c = compare_with_baseline(&[row(1, 10.0, 0.8), other], &[row(1, 10.0, 0.8)]);
        assert_eq!(c.only_new.len(), 1);
        assert_eq!(c.only_new[0].policy, "flexrr");
        assert!(c.only_baseline.is_empty());
        let md = to_markdown(&c, "old", false);
        assert!(
            md.contains("Rows the baseline lacks: s/timely flexrr W=4."),
            "{md}"
        );
    }
}
