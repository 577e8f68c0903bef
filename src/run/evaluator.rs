//! Test-set evaluations off the training's clock: a thread of the lowest
//! priority the OS has (Linux `SCHED_IDLE`) that scores parameter versions
//! while the cores would otherwise be idle.
//!
//! Evaluating beside the workers on the sink's thread takes a core from them
//! whenever every core is busy (W = 2 native on 2 cores: an evaluation of the
//! CNN's 624 test images costs about as much CPU as 5 iterations). A PyTorch
//! script stops its clock while it evaluates; here the training goes on at its
//! own pace and the evaluations fill the gaps (the barrier waits, and the time
//! after the last iteration). The sink still assembles its rows in order, so a
//! row waits for its evaluation.
//!
//! Versions wait in memory until they are scored. Past [`PENDING_BUDGET`]
//! bytes of waiting parameters, the sink scores the next version itself, at
//! its own priority, as before: a long job that evaluates often never holds
//! more than the budget.

use std::collections::BTreeMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::workload::{Evaluation, Workload};

/// Bytes of parameter versions that may wait for the evaluator (256 MiB):
/// about 100 versions of the CNN's 306,753 parameters.
pub const PENDING_BUDGET: usize = 256 << 20;

/// The evaluator thread, its queue and its answers.
pub struct Evaluator {
    workload: Arc<dyn Workload>,
    to: Option<Sender<(u64, Arc<Vec<f64>>)>>,
    from: Receiver<(u64, Evaluation)>,
    thread: Option<JoinHandle<()>>,
    /// The versions sent and not yet answered (kept until answered, so none
    /// is lost if the thread dies).
    pending: BTreeMap<u64, Arc<Vec<f64>>>,
    budget: usize,
}

impl Evaluator {
    /// Starts the thread for `workload`, with at most `budget` bytes of
    /// versions waiting. Without a thread (the OS refused one) every version
    /// is scored by the caller.
    pub fn start(workload: Arc<dyn Workload>, budget: usize) -> Self {
        let (to, queue) = channel::<(u64, Arc<Vec<f64>>)>();
        let (answer, from) = channel();
        let w = Arc::clone(&workload);
        let thread = std::thread::Builder::new()
            .name("forestall-evaluator".into())
            .spawn(move || {
                lower_priority();
                for (version, params) in queue {
                    let eval = w.evaluate(&params);
                    if answer.send((version, eval)).is_err() {
                        return;
                    }
                }
            });
        let thread = match thread {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!("no evaluator thread ({e}): evaluating on the sink's thread");
                None
            }
        };
        Self {
            workload,
            to: thread.as_ref().map(|_| to),
            from,
            thread,
            pending: BTreeMap::new(),
            budget,
        }
    }

    /// Scores `params` (version `version`): queued for the evaluator, or, with
    /// the budget spent or no thread, now on this thread (returned).
    pub fn submit(&mut self, version: u64, params: Arc<Vec<f64>>) -> Option<Evaluation> {
        let waiting: usize = self.pending.values().map(|p| p.len() * 8).sum();
        if waiting + params.len() * 8 > self.budget {
            return Some(self.workload.evaluate(&params));
        }
        let Some(to) = &self.to else {
            return Some(self.workload.evaluate(&params));
        };
        match to.send((version, Arc::clone(&params))) {
            Ok(()) => {
                self.pending.insert(version, params);
                None
            }
            Err(_) => {
                self.to = None;
                Some(self.workload.evaluate(&params))
            }
        }
    }

    /// The evaluations finished so far (non-blocking).
    pub fn ready(&mut self) -> Vec<(u64, Evaluation)> {
        let mut done = Vec::new();
        while let Ok((version, eval)) = self.from.try_recv() {
            self.pending.remove(&version);
            done.push((version, eval));
        }
        done
    }

    /// Every evaluation still owed: the thread's, waited for, then (if the
    /// thread died) the rest scored on this thread.
    pub fn finish(&mut self) -> Vec<(u64, Evaluation)> {
        self.to = None;
        let mut done = Vec::new();
        while !self.pending.is_empty() {
            let Ok((version, eval)) = self.from.recv() else {
                break;
            };
            self.pending.remove(&version);
            done.push((version, eval));
        }
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::warn!(
                    "the evaluator thread panicked: evaluating the rest on the sink's thread"
                );
            }
        }
        for (version, params) in std::mem::take(&mut self.pending) {
            done.push((version, self.workload.evaluate(&params)));
        }
        done
    }
}

/// Puts the calling thread at the lowest priority: `SCHED_IDLE` on Linux
/// (runs only when a core has nothing else to run), else nice 19.
pub(crate) fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; `param` is valid for the call.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0 {
            return;
        }
    }
    // SAFETY: `setpriority` on the calling thread (who 0) has no memory effects.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
    if rc != 0 {
        tracing::debug!(
            "evaluator keeps its priority: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{Dataset, SparseRows};
    use crate::workload::logistic::LogisticRegression;

    /// Logistic regression on 8 rows of (bias, x), x = row index, label x ≥ 4.
    fn workload() -> Arc<dyn Workload> {
        let n = 8usize;
        let rows = SparseRows {
            offsets: (0..=n).map(|r| 2 * r).collect(),
            indices: (0..n).flat_map(|_| [0, 1]).collect(),
            values: (0..n).flat_map(|r| [1.0, r as f64 - 3.5]).collect(),
        };
        Arc::new(LogisticRegression::new(Dataset {
            rows,
            labels: (0..n).map(|r| f64::from(u8::from(r >= 4))).collect(),
            train: (0..n as u32).collect(),
            test: (0..n as u32).collect(),
            feature_names: vec!["bias".into(), "x".into()],
        }))
    }

    fn versions() -> Vec<(u64, Arc<Vec<f64>>)> {
        (0..20u64)
            .map(|v| {
                (
                    v,
                    Arc::new(vec![0.1 * v as f64 - 1.0, 0.3 - 0.05 * v as f64]),
                )
            })
            .collect()
    }

    fn bits(e: &Evaluation) -> (u64, u64) {
        (e.log_loss.to_bits(), e.accuracy.to_bits())
    }

    #[test]
    fn every_version_is_scored_once_as_the_caller_would() {
        let w = workload();
        let mut evaluator = Evaluator::start(Arc::clone(&w), PENDING_BUDGET);
        let mut got = Vec::new();
        for (v, params) in versions() {
            assert!(
                evaluator.submit(v, params).is_none(),
                "queued, not scored inline"
            );
            got.extend(evaluator.ready());
        }
        got.extend(evaluator.finish());
        got.sort_by_key(|(v, _)| *v);
        let expected: Vec<(u64, (u64, u64))> = versions()
            .iter()
            .map(|(v, p)| (*v, bits(&w.evaluate(p))))
            .collect();
        let got: Vec<(u64, (u64, u64))> = got.iter().map(|(v, e)| (*v, bits(e))).collect();
        assert_eq!(got, expected);
        assert!(evaluator.finish().is_empty(), "nothing owed twice");
    }

    #[test]
    fn past_the_budget_the_caller_scores_the_version() {
        let w = workload();
        // a version here is 16 bytes: none fits
        let mut evaluator = Evaluator::start(Arc::clone(&w), 15);
        for (v, params) in versions() {
            let e = evaluator
                .submit(v, Arc::clone(&params))
                .expect("scored by the caller");
            assert_eq!(bits(&e), bits(&w.evaluate(&params)));
        }
        assert!(evaluator.finish().is_empty());
    }
}
