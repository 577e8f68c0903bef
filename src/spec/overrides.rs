//! The job file's values a command line may replace (`forestall run --workers
//! 8 …`): one flag each, mapped to its `[section] key` in one table that
//! applies them, names them in messages and passes them on to launched
//! processes.

use clap::Args;

use super::job::{JobSpec, StragglerSection};
use super::settings::Setting;

/// Values given on the command line; each replaces the job file's value.
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct Overrides {
    /// Number of timely workers (threads).
    #[arg(long)]
    pub workers: Option<u32>,
    /// Training iterations.
    #[arg(long)]
    pub iterations: Option<u64>,
    /// Seed of partitioning, sampling and the straggler schedule.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Straggler pattern: none, slow-worker, disrupted-machine, power-law,
    /// persistent, slow-link. Changing the pattern drops the file's knobs of the old one.
    #[arg(long)]
    pub pattern: Option<String>,
    /// Injected delay in percent (slow-worker, disrupted-machine).
    #[arg(long = "delay", value_name = "DELAY")]
    pub delay_percent: Option<f64>,
    /// Probability of a slowdown (slow-worker, disrupted-machine).
    #[arg(long)]
    pub probability: Option<f64>,
    /// Exponent α of the power-law pattern.
    #[arg(long)]
    pub alpha: Option<f64>,
    /// Mitigation policy.
    #[arg(long)]
    pub policy: Option<String>,
    /// Paced mode: nominal ns of work per row on a dedicated core (0 = native speed).
    #[arg(long = "pace", value_name = "NS_PER_ROW")]
    pub pace_ns_per_row: Option<u64>,
    /// Checkpoint every N iterations and at the end (0: never; default: the
    /// job file's checkpoint every, or 50).
    #[arg(long, value_name = "N")]
    pub checkpoint_every: Option<u64>,
    /// Output directory (default: runs/JOB-NAME/UTC-TIME).
    #[arg(long)]
    pub out: Option<String>,
    /// Any job-file key, e.g. `--set data.split_seed=2 --set model.l2=0.1`
    /// (repeatable; applied before the flags above).
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE", value_parser = Setting::parse)]
    pub set: Vec<Setting>,
}

/// One override: its flag, the `[section] key` of the job file it replaces,
/// its value as a command-line word (`None`: not given), and how it is put
/// into a spec.
struct Mapping {
    flag: &'static str,
    section: &'static str,
    key: &'static str,
    word: fn(&Overrides) -> Option<String>,
    set: fn(&Overrides, &mut JobSpec),
}

/// Every override, in the order they are applied (the pattern before its
/// knobs).
const MAPPINGS: &[Mapping] = &[
    Mapping {
        flag: "workers",
        section: "workers",
        key: "count",
        word: |o| o.workers.map(|v| v.to_string()),
        set: |o, s| s.workers.count = o.workers.or(s.workers.count),
    },
    Mapping {
        flag: "iterations",
        section: "job",
        key: "iterations",
        word: |o| o.iterations.map(|v| v.to_string()),
        set: |o, s| s.job.iterations = o.iterations.or(s.job.iterations),
    },
    Mapping {
        flag: "seed",
        section: "job",
        key: "seed",
        word: |o| o.seed.map(|v| v.to_string()),
        set: |o, s| s.job.seed = o.seed.or(s.job.seed),
    },
    Mapping {
        flag: "pattern",
        section: "straggler",
        key: "pattern",
        word: |o| o.pattern.clone(),
        set: |o, s| {
            if let Some(p) = &o.pattern {
                if s.straggler.pattern.as_deref() != Some(p.as_str()) {
                    s.straggler = StragglerSection {
                        pattern: Some(p.clone()),
                        ..Default::default()
                    };
                }
            }
        },
    },
    Mapping {
        flag: "delay",
        section: "straggler",
        key: "delay_percent",
        word: |o| o.delay_percent.map(|v| v.to_string()),
        set: |o, s| s.straggler.delay_percent = o.delay_percent.or(s.straggler.delay_percent),
    },
    Mapping {
        flag: "probability",
        section: "straggler",
        key: "probability",
        word: |o| o.probability.map(|v| v.to_string()),
        set: |o, s| s.straggler.probability = o.probability.or(s.straggler.probability),
    },
    Mapping {
        flag: "alpha",
        section: "straggler",
        key: "alpha",
        word: |o| o.alpha.map(|v| v.to_string()),
        set: |o, s| s.straggler.alpha = o.alpha.or(s.straggler.alpha),
    },
    Mapping {
        flag: "policy",
        section: "policy",
        key: "name",
        word: |o| o.policy.clone(),
        set: |o, s| s.policy.name = o.policy.clone().or(s.policy.name.take()),
    },
    Mapping {
        flag: "pace",
        section: "workers",
        key: "pace_ns_per_row",
        word: |o| o.pace_ns_per_row.map(|v| v.to_string()),
        set: |o, s| s.workers.pace_ns_per_row = o.pace_ns_per_row.or(s.workers.pace_ns_per_row),
    },
    Mapping {
        flag: "checkpoint-every",
        section: "checkpoint",
        key: "every",
        word: |o| o.checkpoint_every.map(|v| v.to_string()),
        set: |o, s| s.checkpoint.every = o.checkpoint_every.or(s.checkpoint.every),
    },
    Mapping {
        flag: "out",
        section: "job",
        key: "out",
        word: |o| o.out.clone(),
        set: |o, s| s.job.out = o.out.clone().or(s.job.out.take()),
    },
];

impl Overrides {
    /// The overrides as `forestall run` flags, but for `--workers` and
    /// `--out` (a launcher sets those).
    pub fn words(&self) -> Vec<String> {
        MAPPINGS
            .iter()
            .filter(|m| !matches!(m.flag, "workers" | "out"))
            .filter_map(|m| Some([format!("--{}", m.flag), (m.word)(self)?]))
            .chain(self.set.iter().map(|s| ["--set".to_owned(), s.word()]))
            .flatten()
            .collect()
    }

    /// Applies the overrides to `spec`.
    pub fn apply(&self, spec: &mut JobSpec) {
        for m in MAPPINGS {
            (m.set)(self, spec);
        }
    }

    /// Whether `[section] key` was given on the command line.
    pub fn touches(&self, section: &str, key: &str) -> bool {
        MAPPINGS
            .iter()
            .any(|m| m.section == section && m.key == key && (m.word)(self).is_some())
            || self
                .set
                .iter()
                .any(|s| s.section == section && s.key == key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        overrides: Overrides,
    }

    /// Every flag parses into its field, passes on as the same words, and
    /// names the key it replaces.
    #[test]
    fn flags_round_trip_through_words_and_name_their_keys() {
        let words = [
            "--iterations",
            "7",
            "--seed",
            "3",
            "--pattern",
            "slow-worker",
            "--delay",
            "250",
            "--probability",
            "0.5",
            "--alpha",
            "1.5",
            "--policy",
            "flexrr",
            "--pace",
            "900",
            "--checkpoint-every",
            "5",
        ];
        let parsed = Cli::try_parse_from(
            ["forestall", "--workers", "4", "--out", "o"]
                .into_iter()
                .chain(words),
        )
        .expect("parses")
        .overrides;
        assert_eq!(parsed.delay_percent, Some(250.0));
        assert_eq!(parsed.pace_ns_per_row, Some(900));
        assert_eq!(parsed.words(), words.map(String::from));
        for (section, key) in [
            ("workers", "count"),
            ("straggler", "delay_percent"),
            ("workers", "pace_ns_per_row"),
            ("checkpoint", "every"),
            ("job", "out"),
        ] {
            assert!(parsed.touches(section, key), "[{section}] {key}");
        }
        assert!(!Overrides::default().touches("job", "seed"));
        let mut spec = JobSpec::default();
        parsed.apply(&mut spec);
        assert_eq!(spec.straggler.delay_percent, Some(250.0));
        assert_eq!(spec.workers.count, Some(4));
        assert_eq!(spec.job.out.as_deref(), Some("o"));
    }
}
