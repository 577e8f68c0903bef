//! The test set's evaluation through a pipeline's stages. At every version
//! the job evaluates (every `[model] eval_every` iterations, the last, and
//! the final model), each replica scores its share of the workload's test
//! batches (batch i on replica i mod R): its first stage reads the rows,
//! each stage runs its layers' inference ([`Staged::stage_scores`]) and
//! sends the activation on, and its last stage sends the batch's scores to
//! worker 0's sink, which puts the evaluation together
//! ([`crate::run::staged_eval`]). The scores have the bits of the whole
//! model's evaluation.
//!
//! Like the data-parallel evaluator ([`crate::run::evaluator`]), a stage
//! worker's inference runs off the training's clock, on a thread of the
//! lowest priority: the stage operator hands it each batch whose input is
//! here and sends on what it returns, while the iterations go on. A round
//! holds its version's capabilities until its last batch is sent. If the
//! thread fails, the round is dropped with a warning and the sink
//! evaluates that version whole.
//!
//! [`Staged::stage_scores`]: crate::workload::staged::Staged::stage_scores

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::Arc;

use timely::dataflow::operators::Capability;

use super::epoch::StageCaps;
use super::{staged, StageEmit, StageWorker};
use crate::run::messages::{Progress, StageMessage, StageTraffic};
use crate::workload::staged::{Activation, StageScores};
use crate::workload::Workload;

/// One stage worker's share of one version's evaluation.
pub struct EvalRound {
    /// The parameter version.
    pub version: u64,
    /// Activations to the next stage.
    pub traffic: Capability<u64>,
    /// Scores to worker 0.
    pub progress: Capability<u64>,
    /// The version's parameters.
    pub params: Arc<Vec<f64>>,
    /// The layers this stage worker holds.
    pub layers: Range<usize>,
    /// The test batches its replica scores and this worker has not handed
    /// to its thread yet, by index.
    pub waiting: VecDeque<(u32, Vec<u32>)>,
    /// Batches handed over and not yet back.
    pub outstanding: u32,
}

/// One batch's inference.
pub struct EvalJob {
    /// The version.
    pub version: u64,
    /// The batch.
    pub batch: u32,
    /// The stage's layers.
    pub layers: Range<usize>,
    /// The version's parameters.
    pub params: Arc<Vec<f64>>,
    /// The stage before's activation (None: the first stage reads the rows).
    pub input: Option<Activation>,
    /// The batch's test rows.
    pub rows: Vec<u32>,
}

/// What came back of a job: its version, batch and output (an error's
/// text when the stage could not run it).
pub type EvalDone = (u64, u32, Result<StageScores, String>);

/// A stage worker's inference thread.
pub struct EvalThread {
    to: Sender<EvalJob>,
    from: Receiver<EvalDone>,
}

impl EvalThread {
    /// Starts the thread for `workload`'s stages (None: the OS refused one).
    pub fn start(workload: Arc<dyn Workload>, worker: u32) -> Option<Self> {
        let (to, jobs) = channel::<EvalJob>();
        let (done, from) = channel();
        let spawned = std::thread::Builder::new()
            .name(format!("forestall-stage-eval-{worker}"))
            .spawn(move || {
                crate::run::evaluator::lower_priority();
                for job in jobs {
                    if done.send(run(&*workload, job)).is_err() {
                        return;
                    }
                }
            });
        match spawned {
            Ok(_) => Some(Self { to, from }),
            Err(e) => {
                tracing::warn!(
                    worker,
                    "no stage evaluation thread ({e}): scoring on the worker"
                );
                None
            }
        }
    }

    /// Hands `job` over; gives it back if the thread is gone.
    pub fn submit(&self, job: EvalJob) -> Result<(), EvalJob> {
        self.to.send(job).map_err(|e| e.0)
    }

    /// What the thread finished (non-blocking); Err when it is gone.
    pub fn ready(&self) -> Result<Vec<EvalDone>, Vec<EvalDone>> {
        let mut out = Vec::new();
        loop {
            match self.from.try_recv() {
                Ok(done) => out.push(done),
                Err(TryRecvError::Empty) => return Ok(out),
                Err(TryRecvError::Disconnected) => return Err(out),
            }
        }
    }
}

/// A job's inference.
pub fn run(workload: &dyn Workload, job: EvalJob) -> EvalDone {
    let out = match workload.staged() {
        Some(staged) => {
            let source = workload.data().source();
            staged
                .stage_scores(
                    &job.params,
                    job.layers,
                    job.input.as_ref(),
                    (&source, &job.rows),
                )
                .map_err(|e| e.to_string())
        }
        None => Err("the model has no stages".to_owned()),
    };
    (job.version, job.batch, out)
}

impl StageWorker {
    /// This worker's share of version `version`'s evaluation, on the
    /// layers it holds now.
    pub(super) fn eval_round(
        &self,
        version: u64,
        caps: &StageCaps,
        params: Arc<Vec<f64>>,
    ) -> EvalRound {
        let all = staged(&self.cx).test_batches();
        EvalRound {
            version,
            traffic: caps.traffic.delayed(&version),
            progress: caps.progress.delayed(&version),
            params,
            layers: self.placement.layers(self.replica, self.stage),
            waiting: replica_batches(all, self.replica, self.layout.replicas),
            outstanding: 0,
        }
    }

    /// Hands the evaluation thread every batch whose input is here, sends
    /// on what it finished, and ends the rounds that are done.
    pub(super) fn pump_evals(&mut self, emit: &mut StageEmit<'_>) {
        if self.evals.is_empty() {
            return;
        }
        let cx = Arc::clone(&self.cx);
        let worker = self.worker;
        let thread = self
            .eval_thread
            .get_or_insert_with(|| EvalThread::start(Arc::clone(&cx.workload), worker));
        let mut done = Vec::new();
        for round in &mut self.evals {
            let mut still = VecDeque::new();
            while let Some((batch, rows)) = round.waiting.pop_front() {
                let input = match self.stage {
                    0 => None,
                    _ => match self.inbox.remove(&(round.version, batch, true, true)) {
                        Some((message, _)) => Some(Activation {
                            values: message.values,
                            shape: message.shape,
                        }),
                        None => {
                            still.push_back((batch, rows));
                            continue;
                        }
                    },
                };
                let job = EvalJob {
                    version: round.version,
                    batch,
                    layers: round.layers.clone(),
                    params: Arc::clone(&round.params),
                    input,
                    rows,
                };
                round.outstanding += 1;
                let refused = match thread {
                    Some(t) => t.submit(job).err(),
                    None => Some(job),
                };
                if let Some(job) = refused {
                    done.push(run(&*cx.workload, job));
                }
            }
            round.waiting = still;
        }
        let lost = match thread.as_ref().map(EvalThread::ready) {
            Some(Ok(more)) => {
                done.extend(more);
                false
            }
            Some(Err(more)) => {
                done.extend(more);
                true
            }
            None => false,
        };
        if lost {
            *thread = None;
        }
        for (version, batch, out) in done {
            self.send_scores(version, batch, out, emit);
        }
        if lost {
            tracing::warn!(
                worker,
                "the stage evaluation thread is gone: the sink evaluates the rest whole"
            );
            self.evals.retain(|r| r.outstanding == 0);
        }
        self.evals
            .retain(|r| !(r.waiting.is_empty() && r.outstanding == 0));
    }

    /// Sends one batch's inference on: its activation to the next stage, or
    /// its scores to worker 0.
    fn send_scores(
        &mut self,
        version: u64,
        batch: u32,
        out: Result<StageScores, String>,
        emit: &mut StageEmit<'_>,
    ) {
        let Some(at) = self.evals.iter().position(|r| r.version == version) else {
            return;
        };
        let round = &mut self.evals[at];
        round.outstanding = round.outstanding.saturating_sub(1);
        match out {
            Ok(StageScores::Activation(a)) => {
                let traffic = StageTraffic {
                    to: self.layout.worker(self.replica, self.stage + 1),
                    iteration: version,
                    micro: batch,
                    forward: true,
                    eval: true,
                    values: a.values,
                    shape: a.shape,
                    loss_sum: 0.0,
                };
                (emit.traffic)(&round.traffic, StageMessage::Traffic(traffic));
            }
            Ok(StageScores::Scores(scores)) => {
                let message = Progress::Scores {
                    version,
                    batch,
                    scores,
                };
                (emit.progress)(&round.progress, message);
            }
            Err(e) => {
                tracing::warn!(version, batch, "a stage could not score a test batch: {e}");
                self.evals.remove(at);
            }
        }
    }
}

/// The test batches replica `replica` of `replicas` scores: batch i when
/// i mod `replicas` is `replica`, with its index.
pub fn replica_batches(
    all: Vec<Vec<u32>>,
    replica: u32,
    replicas: u32,
) -> VecDeque<(u32, Vec<u32>)> {
    (0u32..)
        .zip(all)
        .filter(|(i, _)| i % replicas.max(1) == replica)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replicas_share_every_batch_once() {
        let all: Vec<Vec<u32>> = (0..5).map(|i| vec![i * 10, i * 10 + 1]).collect();
        let mut seen: Vec<u32> = (0..2)
            .flat_map(|r| replica_batches(all.clone(), r, 2))
            .map(|(i, rows)| {
                assert_eq!(rows, all[i as usize]);
                i
            })
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, [0, 1, 2, 3, 4]);
        assert_eq!(replica_batches(all.clone(), 0, 1).len(), 5);
        assert!(
            replica_batches(all, 6, 8).is_empty(),
            "more replicas than batches"
        );
    }
}
