//! The straggler patterns a job can inject.

use serde::Serialize;

/// A kind of straggler adversity, with its knobs (FlexRR's patterns).
///
/// Choose [`Pattern::None`] for the Ideal reference, [`Pattern::SlowWorker`] for
/// short, independent hiccups, [`Pattern::DisruptedMachine`] for correlated,
/// time-bound interference on one machine, [`Pattern::PowerLaw`] for a realistic
/// heavy-tailed spread of speeds, and [`Pattern::Persistent`] for a fixed set of
/// slow or overloaded workers.
///
/// Serialised with a `kind` tag equal to [`Pattern::name`], e.g.
/// `{"kind":"slow-worker","probability":0.1,"delay_percent":100.0}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Pattern {
    /// No injected slowdown (FlexRR's "Ideal"): every factor is 1.0.
    None,
    /// Each worker, each iteration, independently with probability `probability`,
    /// runs `1 + delay_percent / 100` times slower.
    SlowWorker {
        /// Probability in [0, 1] that a given worker is slow in a given iteration.
        probability: f64,
        /// Extra time in percent of the normal time (100 = twice as slow).
        delay_percent: f64,
    },
    /// Time is cut into windows of `period_us`; in each window, with probability
    /// `probability`, one machine chosen uniformly is disrupted for the whole window
    /// and all its workers run `1 + delay_percent / 100` times slower.
    ///
    /// Worker `w` lives on machine `w / workers_per_machine`; there are
    /// `ceil(workers / workers_per_machine)` machines. This is the only pattern
    /// that depends on time rather than on the iteration.
    DisruptedMachine {
        /// Probability in [0, 1] that a window has a disrupted machine.
        probability: f64,
        /// Length of a window in microseconds (> 0).
        period_us: u64,
        /// Extra time in percent of the normal time for the disrupted workers.
        delay_percent: f64,
        /// Workers per machine (> 0); machine of worker `w` is `w / workers_per_machine`.
        workers_per_machine: u32,
    },
    /// Per (worker, iteration), a slowdown x ≥ 1 drawn from p(x) ∝ x^−α (Pareto with
    /// x_min = 1, so P(X > x) = x^−(α−1)), capped at `max_slowdown`.
    ///
    /// FlexRR used α = 4, 7 and 11; smaller α means a heavier tail.
    PowerLaw {
        /// Exponent α (> 1) of the density.
        alpha: f64,
        /// Upper cap on the drawn slowdown (≥ 1).
        max_slowdown: f64,
    },
    /// The listed workers are `factor` times slower in every iteration; with
    /// `work_share: Some(s)` they also carry share `s` of the data between them.
    ///
    /// FlexRR's "50 % of the workers carry 75 % of the work" is `workers` = the
    /// first half, `factor` = 1.0, `work_share` = `Some(0.75)`.
    Persistent {
        /// The affected workers (indices in `0..workers`).
        workers: Vec<u32>,
        /// Slowdown factor of the listed workers (1.0 = normal speed).
        factor: f64,
        /// Share in [0, 1] of the data the listed workers carry together;
        /// `None` keeps the data uniform.
        work_share: Option<f64>,
    },
    /// Each worker, each iteration, independently with probability
    /// `probability`, sends its gradients through a link limited to
    /// `link_mbps` Mbit/s; its compute is not slowed. In one process each
    /// worker is a host of its own; across processes, a process's workers
    /// share its host's link.
    SlowLink {
        /// Probability in [0, 1] that a given worker's link is slow in a
        /// given iteration.
        probability: f64,
        /// The slowed link's rate, Mbit/s (> 0).
        link_mbps: f64,
    },
}

impl Pattern {
    /// The pattern's name as written in job specs and reports: `none`,
    /// `slow-worker`, `disrupted-machine`, `power-law`, `persistent` or
    /// `slow-link`.
    pub fn name(&self) -> &'static str {
        match self {
            Pattern::None => "none",
            Pattern::SlowWorker { .. } => "slow-worker",
            Pattern::DisruptedMachine { .. } => "disrupted-machine",
            Pattern::PowerLaw { .. } => "power-law",
            Pattern::Persistent { .. } => "persistent",
            Pattern::SlowLink { .. } => "slow-link",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_spec_names() {
        let cases = [
            (Pattern::None, "none"),
            (
                Pattern::SlowWorker {
                    probability: 0.1,
                    delay_percent: 100.0,
                },
                "slow-worker",
            ),
            (
                Pattern::DisruptedMachine {
                    probability: 0.1,
                    period_us: 1_000_000,
                    delay_percent: 100.0,
                    workers_per_machine: 4,
                },
                "disrupted-machine",
            ),
            (
                Pattern::PowerLaw {
                    alpha: 4.0,
                    max_slowdown: 10.0,
                },
                "power-law",
            ),
            (
                Pattern::Persistent {
                    workers: vec![0],
                    factor: 2.0,
                    work_share: None,
                },
                "persistent",
            ),
            (
                Pattern::SlowLink {
                    probability: 0.1,
                    link_mbps: 10.0,
                },
                "slow-link",
            ),
        ];
        for (pattern, name) in cases {
            assert_eq!(pattern.name(), name);
        }
    }

    #[test]
    fn serialises_with_the_name_as_kind_tag() {
        let json = serde_json::to_value(Pattern::SlowWorker {
            probability: 0.25,
            delay_percent: 50.0,
        })
        .expect("a pattern serialises");
        assert_eq!(
            json,
            serde_json::json!({"kind": "slow-worker", "probability": 0.25, "delay_percent": 50.0})
        );
        let json = serde_json::to_value(Pattern::None).expect("a pattern serialises");
        assert_eq!(json, serde_json::json!({"kind": "none"}));
        let json = serde_json::to_value(Pattern::Persistent {
            workers: vec![0, 1],
            factor: 1.0,
            work_share: Some(0.75),
        })
        .expect("a pattern serialises");
        assert_eq!(json["kind"], "persistent");
        assert_eq!(json["work_share"], 0.75);
    }
}
