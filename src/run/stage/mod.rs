//! One worker's side of a pipeline iteration (`[parallel]`): the state
//! behind the stage operator.
//!
//! Worker `w` is stage `s` of replica `r` ([`StageLayout::place`]). It
//! holds iteration `t`'s capabilities from the moment it has every shard
//! of its stage in version `t` until its schedule's passes of `t` are all
//! run. It runs one pass per activation, in [`Schedule::order`]: a forward
//! waits for its micro-batch's activation from stage `s − 1` (the first
//! stage reads the rows), a backward for the activation gradient from
//! stage `s + 1` (the last stage starts from the loss). Each pass's
//! output leaves when the pass is over: after its compute, stretched by
//! the injected slowdown (and, paced, to its nominal time). A unit's
//! gradient on the stage's coordinates is the in-order fold of its
//! micro-batches' and goes to the stage's shard owners at its last
//! micro-batch's backward; the first stage carries the unit's loss (passed
//! back with the gradients) on shard 0.
//!
//! [`Schedule::order`]: crate::pipeline::Schedule::order

mod epoch;
mod eval;
pub mod ops_file;
mod placing;
mod steal;

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use timely::dataflow::operators::Capability;

pub use self::epoch::StageCaps;
use self::epoch::{micro_batches, StageEpoch, UnitFold};
use self::eval::{EvalRound, EvalThread};
use self::steal::ListState;
use super::context::JobContext;
use super::messages::{GradSlice, Progress, StageMessage, StageTiming, StageTraffic, StealMessage};
use super::sink::{wants_eval, SinkEvent};
use crate::inject::Stretch;
use crate::ops::OpKind;
use crate::pipeline::{Measured, Pass, Placement, StageLayout};
use crate::policy::PolicyPlan;
use crate::trace::{UnitAction, UnitRecord, WorkerRecord};
use crate::workload::staged::{Activation, StageBatch, Staged};
use crate::workload::{Draws, Update};

/// Where the stage operator's output goes.
pub struct StageEmit<'a> {
    /// Gradient slices, to the shard owners.
    pub grads: &'a mut dyn FnMut(&Capability<u64>, Vec<GradSlice>),
    /// Progress, to worker 0.
    pub progress: &'a mut dyn FnMut(&Capability<u64>, Progress),
    /// Activations and their gradients, to the neighbour stages.
    pub traffic: &'a mut dyn FnMut(&Capability<u64>, StageMessage),
}

/// A parameter version whose shards are arriving.
struct Pending {
    caps: StageCaps,
    shards: BTreeMap<u32, Vec<f64>>,
}

/// A pass computed whose output waits for the pass's stretched end.
struct Due {
    at: Instant,
    traffic: Option<StageTraffic>,
    slices: Vec<GradSlice>,
}

/// The stage operator's state on one worker.
pub struct StageWorker {
    worker: u32,
    replica: u32,
    stage: u32,
    layout: StageLayout,
    /// The job.
    pub cx: Arc<JobContext>,
    sink: Sender<SinkEvent>,
    /// Where each replica's layers and partitions are this iteration.
    placement: Placement,
    /// `rebalance-stages`: the placement follows the measured speeds.
    rebalance: bool,
    /// Every stage worker's measurements, by iteration and worker.
    timings: BTreeMap<u64, BTreeMap<u32, Measured>>,
    /// The slowdowns the iteration before last showed, by replica and stage.
    seen: Option<Vec<Vec<f64>>>,
    /// `rapid-reassign` and `rebalance-stages`: replicas take units from
    /// each other within an iteration (see `steal`).
    steals: bool,
    /// Messages about units, by iteration, until it runs here.
    steal_inbox: BTreeMap<u64, Vec<StealMessage>>,
    /// Under `steals`, the iteration's list while it may change.
    list: Option<ListState>,
    /// The shards this worker is sent.
    reads: Vec<u32>,
    /// Capabilities for the first iteration, from the operator's construction.
    pub initial: Option<StageCaps>,
    pending: BTreeMap<u64, Pending>,
    latest: Option<(u64, StageCaps, Arc<Vec<f64>>)>,
    next_iteration: u64,
    epoch: Option<StageEpoch>,
    due: Option<Due>,
    /// Activations and their gradients that arrived, by (iteration,
    /// micro-batch, forward, evaluation).
    inbox: BTreeMap<(u64, u32, bool, bool), (StageTraffic, u64)>,
    /// This worker's shares of versions' evaluations under way.
    evals: Vec<EvalRound>,
    /// Their inference thread (started with the first; None inside when
    /// the OS refused one: then they run on the worker).
    eval_thread: Option<Option<EvalThread>>,
    finished: bool,
}

impl StageWorker {
    /// The state of `worker` in the job's pipeline.
    pub fn new(worker: u32, cx: Arc<JobContext>, sink: Sender<SinkEvent>) -> Self {
        let layout = cx
            .plan
            .parallel
            .clone()
            .expect("a stage worker runs a pipeline's job");
        let (replica, stage) = layout.place(worker);
        let units_per_partition = cx.partitioning.units_per_partition();
        let even = Placement::even(
            &layout.bounds,
            layout.replicas,
            (cx.plan.partitions, units_per_partition),
        );
        let placement = placing::resumed(&cx, worker, &sink, even);
        let reads = (0..cx.shards.len() as u32)
            .filter(|&k| cx.reads_shard(worker, k))
            .collect();
        Self {
            worker,
            replica,
            stage,
            layout,
            placement,
            rebalance: cx.plan.policy == PolicyPlan::RebalanceStages,
            timings: BTreeMap::new(),
            seen: None,
            steals: matches!(
                cx.plan.policy,
                PolicyPlan::RapidReassign(_) | PolicyPlan::RebalanceStages
            ),
            steal_inbox: BTreeMap::new(),
            list: None,
            reads,
            sink,
            initial: None,
            pending: BTreeMap::new(),
            latest: None,
            next_iteration: cx.first_iteration(),
            epoch: None,
            due: None,
            inbox: BTreeMap::new(),
            evals: Vec::new(),
            eval_thread: None,
            finished: false,
            cx,
        }
    }

    /// Files a shard of version `version` (its capabilities from `caps`).
    pub fn on_shard(
        &mut self,
        version: u64,
        shard: u32,
        values: Vec<f64>,
        caps: impl FnOnce() -> StageCaps,
    ) {
        let entry = self.pending.entry(version).or_insert_with(|| Pending {
            caps: caps(),
            shards: BTreeMap::new(),
        });
        entry.shards.insert(shard, values);
    }

    /// Files an activation or its gradient from a neighbour stage, or a
    /// stage worker's measurements.
    pub fn on_message(&mut self, message: StageMessage) {
        match message {
            StageMessage::Traffic(message) => {
                let key = (
                    message.iteration,
                    message.micro,
                    message.forward,
                    message.eval,
                );
                self.inbox.insert(key, (message, self.cx.now_us()));
            }
            StageMessage::Timing(t) => {
                let measured = Measured {
                    pass_us: t.pass_us as f64,
                    rows: t.rows as f64,
                };
                self.timings
                    .entry(t.iteration)
                    .or_default()
                    .insert(t.from, measured);
            }
            StageMessage::Steal(m) => self.file_steal(m),
        }
    }

    /// Runs what can run now: complete versions, the pass whose output is
    /// due, the next pass whose input is here, the next iteration.
    pub fn step(&mut self, emit: &mut StageEmit<'_>) {
        self.assemble_versions();
        self.pump_evals(emit);
        loop {
            if let Some(due) = self.due.take() {
                if due.at > Instant::now() {
                    self.due = Some(due);
                    return;
                }
                self.release(due, emit);
            }
            self.serve_steals(emit);
            if let Some(epoch) = &self.epoch {
                if self.at_limit() {
                    // the list may still grow: the first stage asks
                    if self.stage == 0 && self.ask_or_close(emit) {
                        continue;
                    }
                    return;
                }
                if epoch.passes.is_empty() {
                    self.report(emit);
                    continue;
                }
                if !self.run_pass() {
                    return; // waiting for a neighbour
                }
                continue;
            }
            if !self.try_begin(emit) {
                return;
            }
        }
    }

    /// How long until the operator should run again without new input
    /// (a pass's output due, or its evaluation thread's answers to collect).
    pub fn wake_in(&self) -> Option<Duration> {
        let due = (self.due.as_ref()).map(|d| d.at.saturating_duration_since(Instant::now()));
        let polling = self.evals.iter().any(|r| r.outstanding > 0);
        match (due, polling) {
            (Some(d), true) => Some(d.min(EVAL_POLL)),
            (None, true) => Some(EVAL_POLL),
            (due, false) => due,
        }
    }

    /// Every version whose shards this worker reads are all here, in
    /// order; the newest becomes `latest`.
    fn assemble_versions(&mut self) {
        if let Some(caps) = self.initial.take() {
            let first = self.cx.first_iteration();
            let caps = if first == 0 {
                caps
            } else {
                caps.delayed(first)
            };
            self.install(first, caps, Arc::clone(&self.cx.initial_params));
        }
        while let Some((&v, p)) = self.pending.first_key_value() {
            if p.shards.len() < self.reads.len() {
                break;
            }
            let p = self.pending.remove(&v).expect("present");
            let mut params = vec![0.0; self.cx.dims];
            for (k, values) in p.shards {
                params[self.cx.shards[k as usize].clone()].copy_from_slice(&values);
            }
            self.install(v, p.caps, Arc::new(params));
        }
    }

    fn install(&mut self, version: u64, caps: StageCaps, params: Arc<Vec<f64>>) {
        crate::run::stop::boundary();
        if self.worker == 0 {
            let _ = self.sink.send(SinkEvent::Params {
                version,
                values: Arc::clone(&params),
            });
        }
        self.latest = Some((version, caps, params));
    }

    /// Begins the next iteration if its version is here (or ends the run
    /// at the final version); whether it did either.
    fn try_begin(&mut self, emit: &mut StageEmit<'_>) -> bool {
        if self.finished {
            return false;
        }
        let Some((version, _, _)) = &self.latest else {
            return false;
        };
        let end = self.cx.end_version();
        if *version >= end {
            // the final model's evaluation (it holds its own capabilities)
            let (v, caps, params) = self.latest.as_ref().expect("checked above");
            let round = self.eval_round(*v, caps, Arc::clone(params));
            self.evals.push(round);
            self.finish(emit);
            return true;
        }
        if *version < self.next_iteration || !self.place(*version) {
            return false;
        }
        let (version, caps, params) = self.latest.take().expect("checked above");
        let t = version;
        self.next_iteration = t + 1;
        if self.cx.host_worker(self.worker) == self.worker {
            self.cx
                .iteration_now
                .store(t, std::sync::atomic::Ordering::Relaxed);
        }
        let ready_us = self.cx.now_us();
        self.began(t, ready_us);
        (emit.progress)(
            &caps.progress,
            Progress::Ready {
                worker: self.worker,
                iteration: t,
                ready_us,
                stop: self.cx.stop.asked() && self.cx.stop.at().is_none(),
            },
        );
        let mut of_partition = BTreeMap::new();
        let units: Vec<_> = (self.placement.units[self.replica as usize].iter())
            .map(|&(p, u)| {
                let all = of_partition
                    .entry(p)
                    .or_insert_with(|| self.cx.partitioning.units(t, p));
                all[u as usize].clone()
            })
            .collect();
        let layers = self.placement.layers(self.replica, self.stage);
        let coords = staged(&self.cx).layer_params(layers.clone());
        let micro = micro_batches(&units, self.cx.plan.micro_batch as usize);
        let micro_count = micro.len();
        let passes = self
            .layout
            .schedule
            .order(self.layout.stages, self.stage, micro.len() as u32)
            .expect("validation checks the schedule against the micro-batches");
        self.epoch = Some(StageEpoch {
            iteration: t,
            layers,
            coords,
            params: Arc::clone(&params),
            folds: (0..units.len()).map(|_| None).collect(),
            units,
            micro,
            passes: passes.into(),
            tapes: BTreeMap::new(),
            held: BTreeMap::new(),
            losses: BTreeMap::new(),
            records: Vec::new(),
            ready_us,
            last_end_us: ready_us,
            compute_us: 0,
            delay_us: 0,
            max_slowdown: 1.0,
            bytes_sent: 0,
            kept: (0, 0),
            ops: Vec::new(),
            free_us: ready_us,
            pass_began_us: ready_us,
            caps: caps.delayed(t),
        });
        if self.steals {
            let (stages, schedule) = (self.layout.stages, self.layout.schedule);
            let micro = micro_count as u32;
            self.list = Some(ListState::new(schedule, (stages, self.stage), micro));
        }
        if wants_eval(t, self.cx.plan.eval_every, end) {
            let round = self.eval_round(t, &caps, Arc::clone(&params));
            self.evals.push(round);
        }
        // keep the version for the run's end (its capabilities too)
        self.latest = Some((version, caps, params));
        true
    }

    /// Tells the sink this worker began `t` (at a checkpoint iteration,
    /// with the partitions it holds).
    fn began(&self, t: u64, job_us: u64) {
        let placement = self.cx.is_checkpoint(t).then(|| {
            (0..self.cx.plan.partitions)
                .filter(|&p| self.cx.owners[p as usize] == self.worker)
                .map(|p| (p, self.worker))
                .collect()
        });
        let _ = self.sink.send(SinkEvent::Began {
            worker: self.worker,
            iteration: t,
            job_us,
            history: None,
            placement,
        });
    }

    /// The final version is here: every iteration is reduced.
    fn finish(&mut self, emit: &mut StageEmit<'_>) {
        let Some((_, caps, _)) = self.latest.take() else {
            return;
        };
        let ready_us = self.cx.now_us();
        let end = self.cx.end_version();
        if self.cx.is_checkpoint(end) {
            self.began(end, ready_us);
        }
        (emit.progress)(
            &caps.progress,
            Progress::Ready {
                worker: self.worker,
                iteration: end,
                ready_us,
                stop: false,
            },
        );
        self.finished = true;
        self.pending.clear();
        // the evaluations' activations may still arrive
        self.inbox.retain(|k, _| k.3);
    }

    /// Runs the next pass if its input is here; whether it ran.
    fn run_pass(&mut self) -> bool {
        let epoch = self.epoch.as_mut().expect("called within an iteration");
        let t = epoch.iteration;
        let pass = *epoch.passes.front().expect("checked by the caller");
        let last = self.layout.is_last(self.stage);
        let (m, forward) = match pass {
            Pass::Forward(m) => (m, true),
            Pass::Backward(m) => (m, false),
        };
        // the first stage's forward reads rows; the last's backward the loss
        let needs_input = if forward { self.stage > 0 } else { !last };
        let input = match needs_input {
            true => match self.inbox.remove(&(t, m, forward, false)) {
                Some((message, arrived_us)) => {
                    // the receive was issued when the worker was free for it
                    let kind = if forward {
                        OpKind::ForwardRecv
                    } else {
                        OpKind::BackwardRecv
                    };
                    let from = epoch.free_us;
                    let who = (self.worker, self.replica, self.stage);
                    epoch.record_op(who, (kind, m), (from, arrived_us.max(from)));
                    Some(message)
                }
                None => return false,
            },
            false => None,
        };
        epoch.passes.pop_front();
        self.count_pass(pass);
        let due = if forward {
            self.forward(m, input)
        } else {
            self.backward(m, input)
        };
        let epoch = self.epoch.as_mut().expect("still within the iteration");
        let (start_us, end_us) = (epoch.free_us, self.cx.us_since_start(due.at));
        let who = (self.worker, self.replica, self.stage);
        let (pass_kind, send_kind) = match forward {
            true => (OpKind::ForwardCompute, OpKind::ForwardSend),
            false => (OpKind::BackwardCompute, OpKind::BackwardSend),
        };
        let began = epoch.pass_began_us;
        epoch.record_op(who, (pass_kind, m), (began.max(start_us), end_us));
        if let Some(traffic) = &due.traffic {
            // handed to the exchange when the pass is over
            epoch.record_op(who, (send_kind, m), (end_us, end_us));
            epoch.bytes_sent += traffic.wire_bytes();
        }
        epoch.free_us = end_us;
        epoch.bytes_sent += due.slices.iter().map(GradSlice::wire_bytes).sum::<u64>();
        self.due = Some(due);
        true
    }

    /// The forward of micro-batch `m` from `input` (None: the rows).
    fn forward(&mut self, m: u32, input: Option<StageTraffic>) -> Due {
        let cx = Arc::clone(&self.cx);
        let epoch = self.epoch.as_mut().expect("within an iteration");
        let layers = epoch.layers.clone();
        let batch = &epoch.micro[m as usize];
        let source = cx.workload.data().source();
        let activation = input.map(|msg| Activation {
            values: msg.values,
            shape: msg.shape,
        });
        // what it keeps at its boundaries: the input it got (the first
        // stage: the images, as f32) and the output it sends
        let input_bytes = activation.as_ref().map_or(
            (batch.rows.len() * cx.workload.data().feature_names.len() * 4) as u64,
            |a| a.bytes() as u64,
        );
        let (started, start_us) = (Instant::now(), cx.now_us());
        epoch.pass_began_us = start_us;
        let unit = batch.unit;
        let rows = batch.rows.len();
        let forward = staged(&cx)
            .stage_forward(
                &epoch.params,
                layers,
                activation.as_ref(),
                StageBatch {
                    source: &source,
                    rows: &batch.rows,
                    draws: Draws {
                        seed: cx.plan.seed,
                        iteration: epoch.iteration,
                    },
                },
            )
            .expect("a stage's input has the cut's shape (the stage before runs the same layout)");
        let compute = started.elapsed();
        let traffic = forward.output.as_ref().map(|out| StageTraffic {
            to: self.layout.worker(self.replica, self.stage + 1),
            iteration: epoch.iteration,
            micro: m,
            forward: true,
            eval: false,
            values: out.values.clone(),
            shape: out.shape,
            loss_sum: 0.0,
        });
        if let Some(loss) = forward.loss_sum {
            epoch.losses.insert(m, loss);
        }
        let output_bytes = forward.output.as_ref().map_or(0, |a| a.bytes() as u64);
        epoch.keep(m, forward, input_bytes + output_bytes);
        let mut fold = epoch.folds[unit]
            .take()
            .unwrap_or_else(|| UnitFold::new(start_us));
        let stretch = self.stretch((start_us, compute), rows, Pass::Forward(m), &mut fold);
        self.pass_over(started, compute, stretch);
        self.epoch.as_mut().expect("within an iteration").folds[unit] = Some(fold);
        Due {
            at: started + stretch.span.max(compute),
            traffic,
            slices: Vec::new(),
        }
    }

    /// The backward of micro-batch `m` from `input` (None: the loss).
    fn backward(&mut self, m: u32, input: Option<StageTraffic>) -> Due {
        let cx = Arc::clone(&self.cx);
        let epoch = self.epoch.as_mut().expect("within an iteration");
        let forward = epoch
            .take(m)
            .expect("a schedule runs a micro-batch's forward before its backward");
        let (loss_sum, d_output) = match input {
            Some(msg) => (
                msg.loss_sum,
                Some(Activation {
                    values: msg.values,
                    shape: msg.shape,
                }),
            ),
            None => (epoch.losses.remove(&m).unwrap_or(0.0), None),
        };
        let (started, start_us) = (Instant::now(), cx.now_us());
        epoch.pass_began_us = start_us;
        let gradient = staged(&cx)
            .stage_backward(forward, d_output.as_ref())
            .expect("an activation gradient has its activation's shape");
        let compute = started.elapsed();
        let traffic = gradient.d_input.map(|d| StageTraffic {
            to: self.layout.worker(self.replica, self.stage - 1),
            iteration: epoch.iteration,
            micro: m,
            forward: false,
            eval: false,
            values: d.values,
            shape: d.shape,
            loss_sum,
        });
        let batch = &epoch.micro[m as usize];
        let (unit, rows, closes) = (batch.unit, batch.rows.len(), batch.closes_unit);
        let dims = epoch.coords.len();
        let mut fold = epoch.folds[unit]
            .take()
            .expect("the unit's forward began it");
        fold.grad.add(&Update::Dense(gradient.grad), dims);
        fold.loss_sum += loss_sum;
        fold.rows += rows as u32;
        fold.micro += 1;
        let stretch = self.stretch((start_us, compute), rows, Pass::Backward(m), &mut fold);
        let at = started + stretch.span.max(compute);
        self.pass_over(started, compute, stretch);
        let epoch = self.epoch.as_mut().expect("within an iteration");
        let slices = if closes {
            let end_us = cx.us_since_start(at);
            let slices = self.unit_slices(unit, &fold);
            self.record_unit(unit, &fold, end_us, &slices);
            slices
        } else {
            epoch.folds[unit] = Some(fold);
            Vec::new()
        };
        Due {
            at,
            traffic,
            slices,
        }
    }

    /// How long a pass of `rows` rows that computed for `compute` from
    /// `start_us` lasts: its compute (paced: its share of the nominal time
    /// per row) stretched by the injected slowdown; counted into `fold`.
    fn stretch(
        &self,
        (start_us, compute): (u64, Duration),
        rows: usize,
        pass: Pass,
        fold: &mut UnitFold,
    ) -> Stretch {
        let base = match self.cx.plan.pace_ns_per_row {
            0 => compute,
            ns => {
                let layers = self.epoch.as_ref().map_or(0..0, |e| e.layers.clone());
                let share = pass_share(staged(&self.cx), layers, pass);
                Duration::from_nanos((ns as f64 * rows as f64 * share) as u64)
            }
        };
        let epoch = self.epoch.as_ref().expect("within an iteration");
        let stretch = self
            .cx
            .schedule
            .stretch(self.worker, epoch.iteration, start_us, base);
        fold.compute_us += compute.as_micros() as u64;
        fold.delay_us += stretch.span.saturating_sub(compute).as_micros() as u64;
        fold.slowdown = fold.slowdown.max(stretch.slowdown);
        stretch
    }

    /// Counts a pass that began at `started` into the iteration.
    fn pass_over(&mut self, started: Instant, compute: Duration, stretch: Stretch) {
        let end = started + stretch.span.max(compute);
        let end_us = self.cx.us_since_start(end);
        let epoch = self.epoch.as_mut().expect("within an iteration");
        epoch.compute_us += compute.as_micros() as u64;
        epoch.delay_us += stretch.span.saturating_sub(compute).as_micros() as u64;
        epoch.max_slowdown = epoch.max_slowdown.max(stretch.slowdown);
        epoch.last_end_us = epoch.last_end_us.max(end_us);
    }

    /// A unit's gradient on this stage's coordinates, cut along the shards
    /// it meets: whole slices, or parts where its layers hold only some of
    /// a shard's coordinates (after a re-cut). The first stage's slice of
    /// shard 0 (which always holds `conv1`'s first coordinates) carries the
    /// loss.
    fn unit_slices(&self, unit: usize, fold: &UnitFold) -> Vec<GradSlice> {
        let epoch = self.epoch.as_ref().expect("within an iteration");
        let key = epoch.units[unit].key;
        let coords = &epoch.coords;
        (self.cx.shards.iter().enumerate())
            .filter_map(|(k, range)| {
                let (from, to) = (range.start.max(coords.start), range.end.min(coords.end));
                (from < to).then(|| {
                    let whole = (from, to) == (range.start, range.end);
                    GradSlice {
                        owner: k as u32,
                        iteration: epoch.iteration,
                        partition: key.partition,
                        unit: key.unit,
                        executor: self.worker,
                        rows: fold.rows,
                        loss_sum: if k == 0 && self.stage == 0 {
                            fold.loss_sum
                        } else {
                            0.0
                        },
                        update: fold.grad.slice(from - coords.start..to - coords.start),
                        substitute: false,
                        stop_at: self.cx.stop.at(),
                        sent_us: 0,
                        span: (!whole).then(|| ((from - range.start) as u32, (to - from) as u32)),
                        piece: None,
                    }
                })
            })
            .collect()
    }

    /// The unit's row of this stage: the first stage's counts the unit
    /// (`assigned`); the other stages' hold their part (`split`).
    fn record_unit(&mut self, unit: usize, fold: &UnitFold, end_us: u64, slices: &[GradSlice]) {
        let process = self.cx.process_of(self.worker);
        let epoch = self.epoch.as_mut().expect("within an iteration");
        let key = epoch.units[unit].key;
        let owner = self.cx.owners[key.partition as usize];
        epoch.records.push(UnitRecord {
            iteration: epoch.iteration,
            worker: self.worker,
            process,
            partition: key.partition,
            unit: key.unit,
            owner,
            executor: self.worker,
            start_us: fold.start_us,
            end_us,
            compute_us: fold.compute_us,
            wait_us: 0,
            rows: fold.rows,
            bytes_sent: slices.iter().map(GradSlice::wire_bytes).sum(),
            action: match self.stage {
                0 if !self.placement.units[self.replica as usize]
                    .contains(&(key.partition, key.unit)) =>
                {
                    UnitAction::Reassigned // taken from another replica
                }
                0 => UnitAction::Assigned,
                _ => UnitAction::Split,
            },
            gt_slowdown: fold.slowdown,
            gt_delay_us: fold.delay_us,
            micro_batches: fold.micro,
            send_us: 0,
            gt_link_mbps: 0.0,
        });
    }

    /// Sends a pass's output, its stretched end reached.
    fn release(&mut self, due: Due, emit: &mut StageEmit<'_>) {
        let Some(epoch) = &self.epoch else {
            return;
        };
        if let Some(traffic) = due.traffic {
            (emit.traffic)(&epoch.caps.traffic, StageMessage::Traffic(traffic));
        }
        if !due.slices.is_empty() {
            (emit.grads)(&epoch.caps.grads, due.slices);
        }
    }

    /// Every pass of the iteration has run: reports to worker 0 and hands
    /// the unit rows to the sink; the iteration's capabilities drop.
    fn report(&mut self, emit: &mut StageEmit<'_>) {
        let epoch = self.epoch.take().expect("called within an iteration");
        self.list = None;
        let units = epoch.records.len() as u32;
        let record = WorkerRecord {
            process: self.cx.process_of(self.worker),
            units,
            rows: epoch.micro.iter().map(|b| b.rows.len() as u64).sum(),
            compute_us: epoch.compute_us,
            bytes_sent: epoch.bytes_sent,
            gt_slowdown: epoch.max_slowdown,
            gt_delay_us: epoch.delay_us,
            ..WorkerRecord::single_unit(
                epoch.iteration,
                self.worker,
                epoch.ready_us,
                epoch.last_end_us,
            )
        };
        let _ = self.sink.send(SinkEvent::StageMemory {
            worker: self.worker,
            stage: self.stage,
            activations: epoch.kept.0 as u32,
            bytes: epoch.kept.1,
        });
        if self.rebalance {
            // every stage worker decides the next placement from everyone's
            let timing = |to| {
                StageMessage::Timing(StageTiming {
                    to,
                    from: self.worker,
                    iteration: epoch.iteration,
                    pass_us: epoch.compute_us + epoch.delay_us,
                    rows: record.rows,
                })
            };
            for to in 0..self.cx.plan.workers {
                (emit.traffic)(&epoch.caps.traffic, timing(to));
            }
        }
        (emit.progress)(&epoch.caps.progress, Progress::Ops(epoch.ops));
        (emit.progress)(&epoch.caps.progress, Progress::Finished(record));
        let _ = self.sink.send(SinkEvent::Units(epoch.records));
    }
}

/// How often a worker whose evaluation thread has batches looks for its
/// answers.
const EVAL_POLL: Duration = Duration::from_millis(20);

/// The model's stages (validation admits `[parallel]` only for one).
fn staged(cx: &JobContext) -> &dyn Staged {
    cx.workload
        .staged()
        .expect("validation admits [parallel] only for a model with layers")
}

/// The share of the whole model's forward and backward that `pass` of
/// `layers` stands for, by the layers' measured costs.
fn pass_share(staged: &dyn Staged, layers: Range<usize>, pass: Pass) -> f64 {
    let costs = staged.layer_costs();
    let total: f64 = costs.iter().map(|(f, b)| f + b).sum();
    let part: f64 = costs[layers]
        .iter()
        .map(|&(f, b)| {
            if matches!(pass, Pass::Forward(_)) {
                f
            } else {
                b
            }
        })
        .sum();
    if total > 0.0 {
        part / total
    } else {
        0.0
    }
}
