//! Benchmark pipelines as written: which jobs to sweep over which values.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::spec::{Overrides, Setting};

/// A pipeline file: `[bench]`, one `[[sweep]]` per group of runs, and the
/// `[[peer]]`s run beside them.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PipelineSpec {
    /// `[bench]`.
    pub bench: BenchSection,
    /// The sweeps, run in order.
    #[serde(rename = "sweep")]
    pub sweeps: Vec<SweepSpec>,
    /// The PyTorch peers run beside the sweeps (`[[peer]]`, none by default).
    #[serde(rename = "peer", default)]
    pub peers: Vec<PeerSpec>,
}

/// `[bench]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BenchSection {
    /// Name of the pipeline; names its results directory.
    pub name: String,
    /// What the pipeline measures, for the report.
    #[serde(default)]
    pub about: String,
}

/// One `[[sweep]]`: every combination of its lists is one run per seed.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// Name of the sweep.
    pub name: String,
    /// Job file, relative to the pipeline file.
    pub job: String,
    /// Seeds; each combination runs once per seed.
    pub seeds: Vec<u64>,
    /// Worker counts.
    #[serde(default)]
    pub workers: Vec<u32>,
    /// Straggler pattern for every run of the sweep.
    pub pattern: Option<String>,
    /// Injected delays, percent.
    #[serde(default)]
    pub delay_percent: Vec<f64>,
    /// Slowdown probabilities.
    #[serde(default)]
    pub probability: Vec<f64>,
    /// Power-law exponents.
    #[serde(default)]
    pub alpha: Vec<f64>,
    /// Policies; every combination runs once per policy (default: the job's).
    #[serde(default)]
    pub policies: Vec<String>,
    /// Iterations per run.
    pub iterations: Option<u64>,
    /// Paced mode for every run (ns per row).
    pub pace_ns_per_row: Option<u64>,
    /// `"plain"`: also time the same job in a plain loop without timely;
    /// `"burn"` (cnn jobs): also train it in a plain burn loop with burn's own
    /// Adam (the peer check).
    pub reference: Option<String>,
    /// Report time per iteration relative to this sweep's runs with the same
    /// workers.
    pub relative_to: Option<String>,
    /// Report time per iteration relative to this policy's runs in the same
    /// sweep with the same workers (e.g. "ideal").
    pub relative_to_policy: Option<String>,
    /// Report the time each run took to reach this test accuracy
    /// (`time_to_accuracy_s`), next to its time per iteration.
    pub target_accuracy: Option<f64>,
    /// Run each job as this many local processes (timely's cluster mode over
    /// loopback, `workers / processes` threads each); absent: threads in the
    /// bench's own process.
    #[serde(default)]
    pub processes: Vec<u32>,
    /// Run each job as this many hosts in network namespaces (root), one
    /// process each with `workers / hosts` threads, authenticated by a token,
    /// each writing into its own output directory and gathering the trace
    /// into process 0's (`--gather`); the row records the slowest handshake
    /// (`start_ms`) and the gather (`gather_s`).
    #[serde(default)]
    pub hosts: Vec<u32>,
    /// `[checkpoint] every` for every run of the sweep.
    pub checkpoint_every: Option<u64>,
    /// With `processes`: kill process 1 with SIGKILL once this iteration is
    /// reported and let the launcher restart the job from its newest
    /// checkpoint (`recovery_s`: kill to the restarted job's first iteration).
    pub kill_at_iteration: Option<u64>,
    /// Pin every run of the sweep to these CPUs, as `taskset -c` takes them
    /// (`"0"`, `"0,1"`, `"0-3"`).
    pub cpus: Option<String>,
    /// Job-file keys set for every run of the sweep, as `--set` takes them
    /// (`["data.split_seed=2", "model.l2=0.1"]`).
    #[serde(default)]
    pub set: Vec<String>,
    /// Job-file keys varied over the sweep, each a list of values; every
    /// combination is a run (per seed, policy, …): `vary = {
    /// "policy.group_size" = [1, 2, 4, 8] }`.
    #[serde(default)]
    pub vary: std::collections::BTreeMap<String, Vec<toml::Value>>,
}

impl SweepSpec {
    /// The sweep's `set`, parsed; an error names the sweep and the entry.
    pub fn settings(&self) -> Result<Vec<Setting>, String> {
        self.set
            .iter()
            .map(|w| Setting::parse(w).map_err(|e| format!("sweep '{}': set: {e}", self.name)))
            .collect()
    }

    /// Every combination of the sweep's `vary` values, keys in order (one
    /// empty combination without `vary`); an error names the sweep and key.
    pub fn variations(&self) -> Result<Vec<Vec<Setting>>, String> {
        let mut combos: Vec<Vec<Setting>> = vec![Vec::new()];
        for (key, values) in &self.vary {
            if values.is_empty() {
                return Err(format!(
                    "sweep '{}': vary: '{key}' has no values",
                    self.name
                ));
            }
            let settings = values
                .iter()
                .map(|v| {
                    Setting::parse(&format!("{key}={v}"))
                        .map_err(|e| format!("sweep '{}': vary: {e}", self.name))
                })
                .collect::<Result<Vec<_>, _>>()?;
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    settings.iter().map(move |s| {
                        let mut c = c.clone();
                        c.push(s.clone());
                        c
                    })
                })
                .collect();
        }
        Ok(combos)
    }

    /// Every run of the sweep, in a stable order (workers, probability, delay,
    /// seed, policy): a seed's policies run back to back, so a machine whose
    /// speed drifts over the sweep (a shared VM) shifts every policy alike
    /// instead of whichever runs last.
    pub fn runs(&self, pipeline_dir: &Path) -> Vec<RunSpec> {
        let opt = |v: &[f64]| -> Vec<Option<f64>> {
            if v.is_empty() {
                vec![None]
            } else {
                v.iter().copied().map(Some).collect()
            }
        };
        let workers: Vec<Option<u32>> = if self.workers.is_empty() {
            vec![None]
        } else {
            self.workers.iter().copied().map(Some).collect()
        };
        // (processes, on namespaced hosts)
        let processes: Vec<(Option<u32>, bool)> =
            if self.processes.is_empty() && self.hosts.is_empty() {
                vec![(None, false)]
            } else {
                let local = self.processes.iter().map(|&p| (Some(p), false));
                local
                    .chain(self.hosts.iter().map(|&h| (Some(h), true)))
                    .collect()
            };
        let policies: Vec<Option<String>> = if self.policies.is_empty() {
            vec![None]
        } else {
            self.policies.iter().cloned().map(Some).collect()
        };
        // checked when the pipeline is read
        let variations = self.variations().unwrap_or_else(|_| vec![Vec::new()]);
        let mut emitted = std::collections::HashSet::new();
        let mut runs = Vec::new();
        for (&w, &(processes, namespaced)) in workers
            .iter()
            .flat_map(|w| processes.iter().map(move |p| (w, p)))
        {
            for probability in opt(&self.probability) {
                for alpha in opt(&self.alpha) {
                    for delay in opt(&self.delay_percent) {
                        for varied in &variations {
                            for &seed in &self.seeds {
                                for policy in &policies {
                                    // A policy knob varies only for the
                                    // policies that take it; the others run
                                    // once, as the sweep's baseline.
                                    let varied: Vec<Setting> = varied
                                        .iter()
                                        .filter(|s| {
                                            s.section != "policy"
                                                || policy.as_deref().is_none_or(|p| {
                                                    crate::spec::validate::policy_takes(p, &s.key)
                                                })
                                        })
                                        .cloned()
                                        .collect();
                                    let label = varied
                                        .iter()
                                        .map(Setting::word)
                                        .collect::<Vec<_>>()
                                        .join(", ");
                                    let key = (
                                        w,
                                        (processes, namespaced),
                                        probability.map(f64::to_bits),
                                        alpha.map(f64::to_bits),
                                        delay.map(f64::to_bits),
                                        seed,
                                        policy.clone(),
                                        label.clone(),
                                    );
                                    if !emitted.insert(key) {
                                        continue;
                                    }
                                    runs.push(RunSpec {
                                        sweep: self.name.clone(),
                                        job: pipeline_dir.join(&self.job),
                                        overrides: Overrides {
                                            workers: w,
                                            iterations: self.iterations,
                                            seed: Some(seed),
                                            pattern: self.pattern.clone(),
                                            probability,
                                            delay_percent: delay,
                                            alpha,
                                            policy: policy.clone(),
                                            pace_ns_per_row: self.pace_ns_per_row,
                                            out: None,
                                            checkpoint_every: self.checkpoint_every,
                                            // checked when the pipeline is read
                                            set: [
                                                self.settings().unwrap_or_default(),
                                                varied.clone(),
                                            ]
                                            .concat(),
                                        },
                                        processes,
                                        namespaced,
                                        kill_at: self.kill_at_iteration,
                                        cpus: self
                                            .cpus
                                            .as_deref()
                                            .and_then(|c| super::pin::parse_cpus(c).ok()),
                                        plain_reference: self.reference.as_deref() == Some("plain"),
                                        burn_reference: self.reference.as_deref() == Some("burn"),
                                        target_accuracy: self.target_accuracy,
                                        varied: label,
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
        runs
    }
}

/// One run of a sweep: the job and what to override in it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSpec {
    /// Sweep name.
    pub sweep: String,
    /// Job file.
    pub job: PathBuf,
    /// Overrides applied to the job.
    pub overrides: Overrides,
    /// Also run the plain loop.
    pub plain_reference: bool,
    /// Also run the plain burn loop (cnn).
    pub burn_reference: bool,
    /// Test accuracy whose time to reach is reported.
    pub target_accuracy: Option<f64>,
    /// Run as this many local processes (none: threads in the bench).
    pub processes: Option<u32>,
    /// With `processes`: each on a host in a network namespace.
    pub namespaced: bool,
    /// Kill process 1 at this iteration (launched runs).
    pub kill_at: Option<u64>,
    /// The CPUs the run is pinned to (none: wherever the bench may run).
    pub cpus: Option<Vec<usize>>,
    /// The sweep's `vary` values of this run, as `KEY=VALUE, …` (empty:
    /// none).
    pub varied: String,
}

/// One `[[peer]]` as written.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PeerSpec {
    /// Name of the peer, unique in the pipeline.
    pub name: String,
    /// The Python script, relative to the pipeline file.
    pub script: String,
    /// `single` or `ddp`.
    pub kind: String,
    /// The sweep whose data, seeds, learning rate, target accuracy (and, for
    /// `ddp`, workers, pattern, pace and iterations) the peer mirrors.
    pub sweep: String,
    /// `single`: torch threads (default 1).
    pub threads: Option<u32>,
    /// Images per step (`single`) or per unit (`ddp`); default 32.
    pub batch: Option<u32>,
    /// `single`: optimiser steps (default: the sweep's iterations × units
    /// per iteration, so that it sees as many images as the sweep's runs).
    pub steps: Option<u64>,
    /// `single`: steps between evaluations on the whole test set (default 16).
    pub eval_every: Option<u64>,
    /// `ddp`: units per rank per iteration (default 2).
    pub units: Option<u32>,
    /// Pin the script to these CPUs, as `taskset -c` takes them (`"0"`).
    pub cpus: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_and_namespaced_hosts_are_layouts_of_one_sweep() {
        let pipeline: PipelineSpec = toml::from_str(
            r#"
            [bench]
            name = "hosts"
            [[sweep]]
            name = "both"
            job = "job.toml"
            seeds = [1]
            processes = [2]
            hosts = [4]
            "#,
        )
        .expect("a valid pipeline");
        let layouts: Vec<(Option<u32>, bool)> = pipeline.sweeps[0]
            .runs(Path::new("."))
            .iter()
            .map(|r| (r.processes, r.namespaced))
            .collect();
        assert_eq!(layouts, [(Some(2), false), (Some(4), true)]);
    }

    #[test]
    fn a_sweeps_settings_go_to_every_run_and_a_bad_one_is_named() {
        let pipeline: PipelineSpec = toml::from_str(
            r#"
            [bench]
            name = "set"
            [[sweep]]
            name = "split-2"
            job = "job.toml"
            seeds = [1, 2]
            set = ["data.split_seed=2", "model.optimizer=sgd"]
            [[sweep]]
            name = "bad"
            job = "job.toml"
            seeds = [1]
            set = ["split_seed=2"]
            "#,
        )
        .expect("a valid pipeline");
        let runs = pipeline.sweeps[0].runs(Path::new("."));
        assert_eq!(runs.len(), 2);
        for run in &runs {
            let words: Vec<String> = run.overrides.set.iter().map(Setting::word).collect();
            assert_eq!(words, ["data.split_seed=2", "model.optimizer=\"sgd\""]);
        }
        let e = pipeline.sweeps[1].settings().unwrap_err();
        assert!(
            e.contains("sweep 'bad': set:") && e.contains("SECTION.KEY"),
            "{e}"
        );
    }

    #[test]
    fn every_combination_of_a_sweeps_vary_values_is_a_run() {
        let pipeline: PipelineSpec = toml::from_str(
            r#"
            [bench]
            name = "vary"
            [[sweep]]
            name = "groups"
            job = "job.toml"
            seeds = [1]
            policies = ["bsp", "flexrr"]
            set = ["model.l2=0.1"]
            vary = { "policy.group_size" = [2, 4], "policy.follow_up_units" = [1] }
            [[sweep]]
            name = "empty"
            job = "job.toml"
            seeds = [1]
            vary = { "policy.group_size" = [] }
            "#,
        )
        .expect("a valid pipeline");
        let runs = pipeline.sweeps[0].runs(Path::new("."));
        let seen: Vec<(String, String, Vec<String>)> = runs
            .iter()
            .map(|r| {
                (
                    r.overrides.policy.clone().expect("a policy"),
                    r.varied.clone(),
                    r.overrides.set.iter().map(Setting::word).collect(),
                )
            })
            .collect();
        let combo = |g: u32| format!("policy.follow_up_units=1, policy.group_size={g}");
        let set = |g: u32| {
            vec![
                "model.l2=0.1".to_owned(),
                "policy.follow_up_units=1".to_owned(),
                format!("policy.group_size={g}"),
            ]
        };
        // bsp takes neither knob: it runs once, with the sweep's `set` only
        assert_eq!(
            seen,
            [
                (
                    "bsp".to_owned(),
                    String::new(),
                    vec!["model.l2=0.1".to_owned()]
                ),
                ("flexrr".to_owned(), combo(2), set(2)),
                ("flexrr".to_owned(), combo(4), set(4)),
            ]
        );
        let e = pipeline.sweeps[1].variations().unwrap_err();
        assert!(
            e.contains("sweep 'empty': vary: 'policy.group_size' has no values"),
            "{e}"
        );
    }

    #[test]
    fn a_seeds_policies_run_back_to_back() {
        let sweep: PipelineSpec = toml::from_str(
            r#"
            [bench]
            name = "order"
            [[sweep]]
            name = "s"
            job = "job.toml"
            workers = [2, 4]
            policies = ["bsp", "forestall"]
            seeds = [1, 2]
            "#,
        )
        .expect("a valid pipeline");
        let order: Vec<(Option<u32>, u64, String)> = sweep.sweeps[0]
            .runs(Path::new("."))
            .into_iter()
            .map(|r| {
                (
                    r.overrides.workers,
                    r.overrides.seed.expect("a seed"),
                    r.overrides.policy.expect("a policy"),
                )
            })
            .collect();
        let expected: Vec<(Option<u32>, u64, String)> = [
            (2, 1, "bsp"),
            (2, 1, "forestall"),
            (2, 2, "bsp"),
            (2, 2, "forestall"),
            (4, 1, "bsp"),
            (4, 1, "forestall"),
            (4, 2, "bsp"),
            (4, 2, "forestall"),
        ]
        .into_iter()
        .map(|(w, s, p)| (Some(w), s, p.to_owned()))
        .collect();
        assert_eq!(order, expected);
    }
}
