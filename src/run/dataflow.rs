//! The training dataflow: one iteration per timely epoch.
//!
//! ```text
//!   params (version t, one message per shard and worker)
//!        │ exchange by target worker
//!        ▼
//!   forestall-compute ──grad slices (t, partition, unit, shard)──► forestall-reduce
//!        │                     exchange by shard owner                │
//!        │ progress: finished t / ready for t+1 (to worker 0)          │ version t+1
//!        ▼                                                            ▼
//!   forestall-detect ──► sink                              feedback (+1) ──► params
//! ```
//!
//! The compute operator holds a capability for `t` while it has units of `t`
//! left and starts one unit per activation: it computes the unit's gradient,
//! then (`respond = "at-once"`, the default) lets the unit's injected or paced
//! remainder run on a timely timer, so a slow worker answers control messages
//! and runs its reduce operator while the unit is in flight. Version 0 (zeros) needs
//! no message: every worker starts iteration 0 from its initial capabilities.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::{Capability, ConnectLoop, Feedback};
use timely::worker::Worker;

use super::context::owned_inputs;
use super::context::JobContext;
use super::detect::ProgressTracker;
use super::holdings::{Delivery, PlacementUpdate};
use super::messages::{Control, DropDecision, GradSlice, Progress, ShardParams};
use super::oplog::register_clock;
use super::placement::placement_flow;
use super::reduce::{BackupRule, ShardReducer};
use super::sink::SinkEvent;
use super::worker::{Caps, ComputeState, Emit, PendingVersion};
use crate::policy::PolicyPlan;

type Builder<D> = CapacityContainerBuilder<Vec<D>>;

/// The compute operator's inputs: parameters, control, rows, placement.
const ROWS_INPUT: usize = 2;
const PLACEMENT_INPUT: usize = 3;

/// The reduce operator's capabilities for an open iteration `t`.
struct ReduceCaps {
    /// The next parameter version, at `t`.
    params: Capability<u64>,
    /// Shard 0's drop decisions (backup workers), at `t`.
    decisions: Capability<u64>,
}

/// Builds the dataflow on `worker`; timely runs it to completion afterwards.
pub fn build_training_dataflow(worker: &mut Worker, cx: Arc<JobContext>, sink: Sender<SinkEvent>) {
    let clock = register_clock(worker);
    let index = worker.index() as u32;
    worker.dataflow::<u64, _, _>(|scope| {
        let (loop_handle, params) = scope.feedback::<Vec<ShardParams>>(1);

        // compute
        let mut builder = OperatorBuilder::new("forestall-compute".to_owned(), scope);
        let info = builder.operator_info();
        if let Some(clock) = &clock {
            clock.borrow_mut().watch(info.global_id);
        }
        let activator = scope.activator_for(Rc::clone(&info.address));
        let mut params_in =
            builder.new_input(params, Exchange::new(|m: &ShardParams| m.target as u64));
        let (grads_out, grads) = builder.new_output::<Vec<GradSlice>>();
        let (done_out, progress) = builder.new_output::<Vec<Progress>>();
        let (control_out, control) = builder.new_output::<Vec<Control>>();
        let (placement_out, requests) = builder.new_output::<Vec<PlacementUpdate>>();
        // Control messages loop back into this operator at the same time. The
        // input is declared unconnected to every output, so the loop has no
        // zero-summary cycle: a worker answers with the capabilities it holds for
        // the iteration, never with ones the message would give it.
        let mut control_in = builder.new_input_connection(
            control,
            Exchange::new(|c: &Control| c.to as u64),
            std::iter::empty(),
        );
        // Rows reach the worker through the placement collection; like the
        // control loop, these inputs are unconnected to the outputs (requests
        // for `t + 1` come back as rows).
        let (rows, initial) = owned_inputs(&cx, index);
        let (deliveries, placement) = placement_flow(scope, rows, initial, requests);
        let owners = cx.owners.clone();
        let mut rows_in = builder.new_input_connection(
            deliveries,
            Exchange::new(|&((_, (holder, _)), _, _): &Delivery| u64::from(holder)),
            std::iter::empty(),
        );
        let mut placement_in = builder.new_input_connection(
            placement,
            Exchange::new(move |&((partition, _), _, _): &PlacementUpdate| {
                u64::from(owners[partition as usize])
            }),
            std::iter::empty(),
        );
        let mut grads_out = OutputBuilder::<u64, Builder<GradSlice>>::from(grads_out);
        let mut done_out = OutputBuilder::<u64, Builder<Progress>>::from(done_out);
        let mut control_out = OutputBuilder::<u64, Builder<Control>>::from(control_out);
        let mut placement_out = OutputBuilder::<u64, Builder<PlacementUpdate>>::from(placement_out);
        let mut state = ComputeState::new(index, Arc::clone(&cx), sink.clone(), clock);
        builder.build(move |mut caps| {
            let mut placement_cap = caps.pop().expect("four outputs");
            placement_cap.downgrade(&1);
            let control_cap = caps.pop().expect("four outputs");
            let done_cap = caps.pop().expect("four outputs");
            let grad_cap = caps.pop().expect("four outputs");
            state.initial = Some(Caps {
                grads: grad_cap,
                progress: done_cap,
                control: control_cap,
                placement: placement_cap,
            });
            move |frontiers| {
                rows_in.for_each(|_cap, data| {
                    for ((partition, (_, block)), time, diff) in data.drain(..) {
                        state.holdings.on_delivery(partition, &block, time, diff);
                    }
                });
                placement_in.for_each(|_cap, data| {
                    for ((partition, holder), time, diff) in data.drain(..) {
                        state.holdings.on_placement(partition, holder, time, diff);
                    }
                });
                let settled =
                    |i: usize| frontiers[i].frontier().first().copied().unwrap_or(u64::MAX);
                state
                    .holdings
                    .settle_before(settled(ROWS_INPUT).min(settled(PLACEMENT_INPUT)));
                params_in.for_each(|cap, data| {
                    let Some(&version) = cap.least() else {
                        return;
                    };
                    let shards = state.cx.shards.len();
                    let entry = state
                        .pending
                        .entry(version)
                        .or_insert_with(|| PendingVersion {
                            caps: Caps {
                                grads: cap.delayed(&version, 0),
                                progress: cap.delayed(&version, 1),
                                control: cap.delayed(&version, 2),
                                placement: cap.delayed(&(version + 1), 3),
                            },
                            shards: vec![None; shards],
                            received: 0,
                        });
                    for msg in data.drain(..) {
                        let slot = &mut entry.shards[msg.shard as usize];
                        if slot.is_none() {
                            entry.received += 1;
                        }
                        *slot = Some(msg.values);
                    }
                });
                let mut messages = Vec::new();
                control_in.for_each(|_cap, data| messages.append(data));
                let mut grads = grads_out.activate();
                let mut done = done_out.activate();
                let mut ctl = control_out.activate();
                let mut place = placement_out.activate();
                state.step(
                    messages,
                    &mut Emit {
                        grads: &mut |cap, slices| {
                            grads.session(cap).give_iterator(slices.into_iter())
                        },
                        progress: &mut |cap, p| done.session(cap).give(p),
                        control: &mut |cap, c| ctl.session(cap).give(c),
                        placement: &mut |cap, u| place.session(cap).give(u),
                    },
                );
                if let Some(delay) = state.wake_in() {
                    activator.activate_after(delay);
                }
            }
        });

        // reduce: this worker owns shard `index`
        let workers = cx.plan.workers;
        // A worker past the last shard owns none: nothing is sent to it.
        let range = cx.shards.get(index as usize).cloned().unwrap_or(0..0);
        let mut reducer = ShardReducer::new(
            range.clone(),
            cx.plan.partitions,
            cx.plan.units_per_partition,
            cx.partitioning.rows_per_iteration(),
            cx.plan.optimizer,
            cx.initial_params[range.clone()].to_vec(),
            range.clone().map(|j| cx.workload.penalised(j)).collect(),
        );
        if let PolicyPlan::BackupWorkers { backups } = cx.plan.policy {
            let mut units_per_owner = vec![0; workers as usize];
            for &o in &cx.owners {
                units_per_owner[o as usize] += cx.plan.units_per_partition;
            }
            reducer = reducer.with_backup(BackupRule {
                keep: workers - backups,
                owners: cx.owners.clone(),
                units_per_owner,
            });
        }
        if let PolicyPlan::DproSubstitute { .. } = cx.plan.policy {
            reducer = reducer.with_substitution();
        }
        if let Some(c) = &cx.resume {
            reducer = reducer.resume_at(
                c.iteration,
                &c.m[range.clone()],
                &c.v[range.clone()],
                c.steps,
            );
        }
        let reduce_cx = Arc::clone(&cx);
        let mut builder = OperatorBuilder::new("forestall-reduce".to_owned(), scope);
        let mut grads_in = builder.new_input(grads, Exchange::new(|g: &GradSlice| g.owner as u64));
        let (params_out, next_params) = builder.new_output::<Vec<ShardParams>>();
        let (decisions_out, decisions) = builder.new_output::<Vec<DropDecision>>();
        // Shard 0's owner tells the others which partitions an iteration drops
        // (backup workers); like the control loop, the input is unconnected.
        let mut decisions_in = builder.new_input_connection(
            decisions,
            Exchange::new(|d: &DropDecision| d.target as u64),
            std::iter::empty(),
        );
        let mut params_out = OutputBuilder::<u64, Builder<ShardParams>>::from(params_out);
        let mut decisions_out = OutputBuilder::<u64, Builder<DropDecision>>::from(decisions_out);
        let reduce_sink = sink.clone();
        builder.build(move |_caps| {
            let mut open: BTreeMap<u64, ReduceCaps> = BTreeMap::new();
            move |_frontiers| {
                grads_in.for_each(|cap, data| {
                    for slice in data.drain(..) {
                        let t = slice.iteration;
                        if reducer.offer(slice) == super::reduce::Offer::Accepted {
                            open.entry(t).or_insert_with(|| ReduceCaps {
                                params: cap.delayed(&t, 0),
                                decisions: cap.delayed(&t, 1),
                            });
                        }
                    }
                });
                decisions_in.for_each(|_cap, data| {
                    for d in data.drain(..) {
                        reducer.set_dropped(d.iteration, &d.partitions);
                    }
                });
                if index == 0 {
                    let mut out = decisions_out.activate();
                    for (&t, caps) in &open {
                        if let Some(dropped) = reducer.decide(t) {
                            let mut session = out.session(&caps.decisions);
                            for target in 1..reduce_cx.shards.len() as u32 {
                                session.give(DropDecision {
                                    target,
                                    iteration: t,
                                    partitions: dropped.clone(),
                                });
                            }
                            let _ = reduce_sink.send(SinkEvent::Dropped {
                                iteration: t,
                                partitions: dropped,
                            });
                        }
                    }
                }
                let mut out = params_out.activate();
                while let Some((&t, _)) = open.first_key_value() {
                    let Some(reduced) = reducer.try_reduce(t) else {
                        break;
                    };
                    let caps = open.remove(&t).expect("present");
                    let loss = reduced.loss_sum / reduced.rows;
                    let bad_loss = index == 0 && !loss.is_finite();
                    if bad_loss || reduced.values.iter().any(|x| !x.is_finite()) {
                        // Diverged: say so and stop producing versions; the sink
                        // stops the run.
                        let _ = reduce_sink.send(SinkEvent::Diverged {
                            iteration: t,
                            what: if bad_loss {
                                format!("the training loss is {loss}")
                            } else {
                                format!("a parameter of shard {index} is not finite")
                            },
                        });
                        break;
                    }
                    if reduce_cx.is_checkpoint(t + 1) {
                        let state = reducer.checkpoint_state(t + 1, index);
                        let _ = reduce_sink.send(SinkEvent::Shard(state));
                    }
                    let mut session = out.session(&caps.params);
                    for target in 0..workers {
                        session.give(ShardParams {
                            target,
                            version: t + 1,
                            shard: index,
                            values: reduced.values.clone(),
                        });
                    }
                    let substituted = reducer.take_substituted(t);
                    if index == 0 && !substituted.is_empty() {
                        let _ = reduce_sink.send(SinkEvent::Dropped {
                            iteration: t,
                            partitions: substituted,
                        });
                    }
                    if index == 0 {
                        // The receiver only disappears if the sink failed; the
                        // run reports that error at the end.
                        let _ = reduce_sink.send(SinkEvent::TrainLoss { iteration: t, loss });
                    }
                }
            }
        });
        next_params.connect_loop(loop_handle);

        // detect: worker 0 tracks every worker's progress
        let mut builder = OperatorBuilder::new("forestall-detect".to_owned(), scope);
        let mut progress_in = builder.new_input(progress, Exchange::new(|_: &Progress| 0));
        let detect_sink = sink.clone();
        let mut tracker = ProgressTracker::new(workers, cx.plan.laggard_threshold);
        builder.build(move |_caps| {
            move |_frontiers| {
                progress_in.for_each(|_cap, data| {
                    for message in data.drain(..) {
                        match message {
                            Progress::Finished(record) => {
                                let t = record.iteration;
                                if let Some(report) = tracker.on_finished(record) {
                                    tracing::debug!(
                                        iteration = t,
                                        laggard = ?report.laggard,
                                        lag_us = report.lag_us,
                                        "iteration closed"
                                    );
                                }
                            }
                            Progress::Ready {
                                worker,
                                iteration,
                                ready_us,
                            } => {
                                if let Some((workers, report)) =
                                    tracker.on_ready(worker, iteration, ready_us)
                                {
                                    let _ =
                                        detect_sink.send(SinkEvent::Iteration { workers, report });
                                }
                            }
                        }
                    }
                });
            }
        });
    });
}
