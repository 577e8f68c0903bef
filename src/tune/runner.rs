//! Runs a planned tune: each segment (a configuration trained up to a rung)
//! is a `forestall run` process in the configuration's own run directory,
//! continuing from its own checkpoint. Each finished segment is appended to
//! `segments.jsonl` at once, so a tune run again into the same directory
//! skips what is done and continues where it stopped: the decisions are
//! pure functions of the segments' outcomes, so they come out the same.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::halving::{keep, rank, Outcome};
use super::target::points;
use super::{Strategy, TuneError, TunePlan};
use crate::bench::machine::Machine;
use crate::checkpoint::store;
use crate::trace::reader::read_iterations;
use crate::workload::Evaluation;

/// The file that says which tune a directory holds.
pub const MANIFEST: &str = "tune.json";
/// One line per finished segment.
pub const SEGMENTS: &str = "segments.jsonl";

/// What a tune directory holds (`tune.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneManifest {
    /// The job file.
    pub job: String,
    /// [`TunePlan::hash`].
    pub tune_hash: String,
    /// Git revision of the binary that ran it.
    pub git_revision: String,
    /// UTC time it started.
    pub started: String,
    /// The command line.
    pub command: String,
    /// The strategy.
    pub strategy: Strategy,
    /// The target, e.g. `accuracy>=0.85`.
    pub target: String,
    /// The rungs' iterations.
    pub rungs: Vec<u64>,
    /// Every configuration: its tuned values.
    pub configs: Vec<String>,
    /// The machine.
    pub machine: Machine,
}

/// A finished segment, as `segments.jsonl` keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// The configuration.
    pub config: usize,
    /// The iteration it trained up to.
    pub stop_after: u64,
    /// Wall seconds the segment took (its process, loading included).
    pub wall_s: f64,
    /// What the configuration's run had measured by then.
    pub outcome: Outcome,
}

/// What happened, for the progress line.
#[derive(Debug, Clone)]
pub enum Event<'a> {
    /// A segment starts.
    Starting {
        /// The configuration.
        config: usize,
        /// Its tuned values.
        label: &'a str,
        /// Up to this iteration.
        stop_after: u64,
        /// From this checkpoint, if it continues.
        from: Option<u64>,
    },
    /// A segment ended.
    Done(&'a Segment),
    /// A segment was done by an earlier, interrupted tune.
    Kept(&'a Segment),
    /// The budget is spent: no segment starts any more.
    BudgetSpent {
        /// Seconds spent.
        spent_s: f64,
    },
}

/// How a tune ended.
#[derive(Debug, Clone)]
pub struct TuneResult {
    /// Each configuration's latest outcome (`None`: never run).
    pub outcomes: Vec<Option<Outcome>>,
    /// Configurations best first (those run).
    pub ranking: Vec<usize>,
    /// Whether the budget stopped it before the strategy ended.
    pub budget_spent: bool,
    /// Seconds its segments took, this and earlier sessions together.
    pub spent_s: f64,
}

/// Runs `tune` into `out` with the `forestall` binary `exe`, as `command`
/// (for the manifest), telling `events` what happens.
pub fn run_tune(
    tune: &TunePlan,
    out: &Path,
    exe: &Path,
    manifest: TuneManifest,
    verbose_children: bool,
    mut events: impl FnMut(Event<'_>),
) -> Result<TuneResult, TuneError> {
    let kept = open_dir(out, &manifest)?;
    let mut state = State {
        tune,
        out,
        exe,
        kept,
        outcomes: vec![None; tune.configs.len()],
        trained: vec![0; tune.configs.len()],
        spent_s: 0.0,
        budget_spent: false,
        verbose_children,
    };
    // What earlier sessions spent counts against the budget.
    state.spent_s = state.kept.iter().map(|s| s.wall_s).sum();
    let target = &tune.spec.target;
    let mut alive: Vec<usize> = tune.order.clone();
    for (i, &rung) in tune.rungs.iter().enumerate() {
        for &c in &alive {
            if state.trained[c] >= rung {
                continue;
            }
            if !state.segment(c, rung, &mut events)? {
                break;
            }
        }
        if state.budget_spent {
            break;
        }
        if tune.spec.strategy == Strategy::Halving && i + 1 < tune.rungs.len() {
            let ranked = rank(target, &alive, &state.outcomes);
            alive = ranked[..keep(alive.len())].to_vec();
        }
    }
    let run: Vec<usize> = (0..tune.configs.len())
        .filter(|&c| state.outcomes[c].is_some())
        .collect();
    Ok(TuneResult {
        ranking: rank(target, &run, &state.outcomes),
        outcomes: state.outcomes,
        budget_spent: state.budget_spent,
        spent_s: state.spent_s,
    })
}

struct State<'a> {
    tune: &'a TunePlan,
    out: &'a Path,
    exe: &'a Path,
    kept: Vec<Segment>,
    outcomes: Vec<Option<Outcome>>,
    trained: Vec<u64>,
    spent_s: f64,
    budget_spent: bool,
    verbose_children: bool,
}

impl State<'_> {
    /// Trains configuration `c` up to `stop_after` (or takes the segment an
    /// earlier session finished). False when the budget is spent.
    fn segment(
        &mut self,
        c: usize,
        stop_after: u64,
        events: &mut impl FnMut(Event<'_>),
    ) -> Result<bool, TuneError> {
        if let Some(done) = self
            .kept
            .iter()
            .find(|s| s.config == c && s.stop_after == stop_after)
            .cloned()
        {
            events(Event::Kept(&done));
            self.record(done);
            return Ok(true);
        }
        if let Some(budget) = self.tune.spec.budget_s {
            if self.spent_s >= budget {
                self.budget_spent = true;
                events(Event::BudgetSpent {
                    spent_s: self.spent_s,
                });
                return Ok(false);
            }
        }
        let config = &self.tune.configs[c];
        let dir = TunePlan::config_dir(self.out, c);
        let hash = config.plan.hash();
        let from = store::newest_valid(&dir, &hash, config.plan.workers, None, &mut |_| {})
            .map(|cp| cp.iteration)
            .filter(|&at| at < stop_after);
        events(Event::Starting {
            config: c,
            label: &config.label,
            stop_after,
            from,
        });
        let started = Instant::now();
        let failed = self.run_process(c, &dir, stop_after, from)?;
        let wall_s = started.elapsed().as_secs_f64();
        let mut outcome = read_outcome(&self.tune.spec.target, &dir, failed);
        if let Some(before) = &self.outcomes[c] {
            // The earlier segment's final evaluation scored the parameters
            // this one started from; the continued run's trace does not
            // evaluate them again.
            outcome.merge_earlier(before);
        }
        let segment = Segment {
            config: c,
            stop_after,
            wall_s,
            outcome,
        };
        append_segment(self.out, &segment)?;
        self.spent_s += wall_s;
        events(Event::Done(&segment));
        self.record(segment);
        Ok(true)
    }

    fn record(&mut self, s: Segment) {
        // A failed configuration trains no further.
        self.trained[s.config] = if s.outcome.failed.is_some() {
            u64::MAX
        } else {
            s.stop_after
        };
        self.outcomes[s.config] = Some(s.outcome);
    }

    /// Runs the segment's process; `Some(reason)` when it failed.
    fn run_process(
        &self,
        c: usize,
        dir: &Path,
        stop_after: u64,
        from: Option<u64>,
    ) -> Result<Option<String>, TuneError> {
        let config = &self.tune.configs[c];
        let spec = &self.tune.spec;
        let log_path = self.out.join("logs").join(format!("{c:03}.log"));
        let io = |path: &Path, e: std::io::Error| TuneError::Io {
            path: path.to_owned(),
            message: e.to_string(),
        };
        std::fs::create_dir_all(log_path.parent().expect("has a parent"))
            .map_err(|e| io(&log_path, e))?;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| io(&log_path, e))?;
        let mut command = Command::new(self.exe);
        command.arg("--no-progress");
        if !self.verbose_children {
            command.arg("-q");
        }
        command
            .arg("run")
            .arg(&spec.job)
            .args(spec.overrides.words());
        if let Some(w) = spec.overrides.workers {
            command.args(["--workers", &w.to_string()]);
        }
        for s in &config.settings {
            command.args(["--set", &s.word()]);
        }
        if stop_after < self.tune.iterations {
            command.args(["--stop-after", &stop_after.to_string()]);
        }
        match from {
            Some(_) => command.arg("--resume").arg(dir),
            None => command.arg("--out").arg(dir).arg("--force"),
        };
        // A tune killed outright (SIGKILL, the OOM killer) must not leave its
        // run behind, still writing into the directory that the tune, run
        // again, continues in: the run dies with the tune.
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            // SAFETY: prctl is async-signal-safe; the closure touches no
            // memory of the parent.
            unsafe {
                command.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let status = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.try_clone().map_err(|e| io(&log_path, e))?)
            .status()
            .map_err(|e| io(self.exe, e))?;
        Ok(match status.code() {
            Some(0) => None,
            Some(3) => Some("diverged".into()),
            _ => Some(format!(
                "{} (see {})",
                last_error_line(&log_path).unwrap_or_else(|| format!("exited with {status}")),
                log_path.display()
            )),
        })
    }
}

/// The last `error:` line of a log.
fn last_error_line(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .rev()
        .find(|l| l.starts_with("error:"))
        .map(|l| l.trim_start_matches("error:").trim().to_owned())
}

/// What a configuration's run directory holds: its evaluations from the
/// trace and the final model's from its summary.
fn read_outcome(target: &super::Target, dir: &Path, failed: Option<String>) -> Outcome {
    let rows = read_iterations(&dir.join("trace"), &mut None).unwrap_or_default();
    let summary: Option<serde_json::Value> = std::fs::read_to_string(dir.join("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .filter(|_| failed.is_none());
    let final_eval = summary.as_ref().and_then(|s| {
        Some(Evaluation {
            accuracy: s["test_accuracy"].as_f64()?,
            log_loss: s["test_log_loss"].as_f64()?,
            metrics: s["test_metrics"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| {
                            Some((k.strip_prefix("test_")?.to_owned(), v.as_f64()?))
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
    });
    Outcome {
        iterations: rows.len() as u64,
        points: points(target, &rows, final_eval.as_ref()),
        failed,
    }
}

/// Prepares `out`: a new directory gets the manifest; one holding this
/// tune (same hash and revision) gives back its finished segments; anything
/// else is refused.
fn open_dir(out: &Path, manifest: &TuneManifest) -> Result<Vec<Segment>, TuneError> {
    let path = out.join(MANIFEST);
    let io = |p: &Path, e: std::io::Error| TuneError::Io {
        path: p.to_owned(),
        message: e.to_string(),
    };
    if crate::fsutil::is_non_empty_dir(out) {
        let text = std::fs::read_to_string(&path).map_err(|_| TuneError::Io {
            path: out.to_owned(),
            message: format!("holds files but no {MANIFEST}: not a tune; choose another --out"),
        })?;
        let old: TuneManifest = serde_json::from_str(&text).map_err(|e| TuneError::Io {
            path: path.clone(),
            message: format!("unreadable ({e})"),
        })?;
        if old.tune_hash != manifest.tune_hash || old.git_revision != manifest.git_revision {
            return Err(TuneError::Io {
                path: out.to_owned(),
                message: format!(
                    "holds another tune ({} at git {}; this is {} at git {}): its runs cannot be \
                     continued by this one; choose another --out",
                    &old.tune_hash[..12.min(old.tune_hash.len())],
                    old.git_revision,
                    &manifest.tune_hash[..12],
                    manifest.git_revision
                ),
            });
        }
        return read_segments(&out.join(SEGMENTS));
    }
    std::fs::create_dir_all(out).map_err(|e| io(out, e))?;
    let json = serde_json::to_vec_pretty(manifest).expect("a manifest serialises");
    crate::fsutil::write_atomic(&path, &json).map_err(|e| io(&path, e))?;
    Ok(Vec::new())
}

/// The segments of `segments.jsonl`; a torn last line (an interrupted
/// append) is dropped, so that segment runs again.
fn read_segments(path: &PathBuf) -> Result<Vec<Segment>, TuneError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(TuneError::Io {
                path: path.clone(),
                message: e.to_string(),
            })
        }
    };
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

fn append_segment(out: &Path, segment: &Segment) -> Result<(), TuneError> {
    let path = out.join(SEGMENTS);
    let mut line = serde_json::to_string(segment).expect("a segment serialises");
    line.push('\n');
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| {
            f.write_all(line.as_bytes())?;
            f.sync_all()
        })
        .map_err(|e| TuneError::Io {
            path,
            message: e.to_string(),
        })
}
