//! `forestall-reduce`: worker `index` owns shard `index`. Gradient slices in;
//! the shard's next parameter version out, to every worker, once every unit
//! of the iteration is in ([`ShardReducer`]). Shard 0's owner also decides
//! which partitions an iteration drops under backup workers and tells the
//! other owners.

use std::collections::BTreeMap;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::Capability;
use timely::dataflow::{Scope, Stream};

use super::Builder;
use crate::inject::StragglerSchedule;
use crate::policy::PolicyPlan;
use crate::run::context::JobContext;
use crate::run::messages::{DropDecision, GradSlice, ShardParams};
use crate::run::reduce::{BackupRule, Offer, Reduced, ShardReducer};
use crate::run::sink::SinkEvent;

/// The reduce operator's capabilities for an open iteration `t`.
struct ReduceCaps {
    /// The next parameter version, at `t`.
    params: Capability<u64>,
    /// Shard 0's drop decisions (backup workers), at `t`.
    decisions: Capability<u64>,
}

/// Builds worker `index`'s reduce operator over `grads`; returns the next
/// parameter versions of its shard.
pub(super) fn build<'s>(
    scope: Scope<'s, u64>,
    cx: &Arc<JobContext>,
    (index, transit): (u32, &super::Transit),
    sink: &Sender<SinkEvent>,
    grads: Stream<'s, u64, Vec<GradSlice>>,
) -> Stream<'s, u64, Vec<ShardParams>> {
    let transit = std::rc::Rc::clone(transit);
    let workers = cx.plan.workers;
    let mut reducer = shard_reducer(cx, index);
    let mut parts =
        crate::run::parts::Parts::new(cx.shards.get(index as usize).map_or(0, |r| r.len()));
    let reduce_cx = Arc::clone(cx);
    let mut builder = OperatorBuilder::new("forestall-reduce".to_owned(), scope);
    let activator = scope.activator_for(std::rc::Rc::clone(&builder.operator_info().address));
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
    let sink = sink.clone();
    builder.build(move |_caps| {
        let mut open: BTreeMap<u64, ReduceCaps> = BTreeMap::new();
        // Versions a slow link holds: (when they leave, capability, copies).
        let mut held: Vec<(Instant, Capability<u64>, Vec<ShardParams>)> = Vec::new();
        move |_frontiers| {
            grads_in.for_each(|cap, data| {
                let now_us = (index == 0).then(|| reduce_cx.now_us());
                for slice in data.drain(..) {
                    let Some(slice) = parts.add(slice) else {
                        continue;
                    };
                    let remote = !reduce_cx.same_host(slice.executor, 0) && slice.sent_us > 0;
                    if let (Some(now_us), true) = (now_us, remote) {
                        let took = now_us.saturating_sub(slice.sent_us);
                        let mut t = transit.borrow_mut();
                        let at = t.entry((slice.iteration, slice.executor)).or_default();
                        *at = (*at).max(took);
                    }
                    if let Some(end) = slice.stop_at {
                        super::agree_to_stop(&reduce_cx, &sink, end);
                    }
                    let t = slice.iteration;
                    if reducer.offer(slice) == Offer::Accepted {
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
                        let _ = sink.send(SinkEvent::Dropped {
                            iteration: t,
                            partitions: dropped,
                        });
                    }
                }
            }
            let mut out = params_out.activate();
            let now = Instant::now();
            for (_, cap, copies) in held.extract_if(.., |(due, _, _)| *due <= now) {
                out.session(&cap).give_iterator(copies.into_iter());
            }
            // (woken early, or by another input: wake again when the next is due)
            if let Some(next) = held.iter().map(|(due, _, _)| *due).min() {
                activator.activate_after(next.saturating_duration_since(now));
            }
            while let Some((&t, _)) = open.first_key_value() {
                let Some(mut reduced) = reducer.try_reduce(t) else {
                    break;
                };
                let caps = open.remove(&t).expect("present");
                if let Some(diverged) = divergence(&reduced, index, t) {
                    // Diverged: say so and stop producing versions; the sink
                    // stops the run.
                    let _ = sink.send(diverged);
                    break;
                }
                if index == 0 {
                    let (slack, end) = (reduce_cx.plan.policy.slack(), reduce_cx.end_version());
                    if let Some(at) = reduce_cx.stop.decide(t + 1, slack, end) {
                        super::agree_to_stop(&reduce_cx, &sink, at);
                    }
                }
                if reduce_cx.is_checkpoint(t + 1) {
                    let state = reducer.checkpoint_state(t + 1, index);
                    let _ = sink.send(SinkEvent::Shard(state));
                }
                let stop_at = reduce_cx.stop.at();
                let sent_us = reduce_cx.now_us();
                let len = reduced.values.len();
                let targets: Vec<u32> = (0..workers)
                    .filter(|&target| reduce_cx.reads_shard(target, index))
                    .collect();
                // A copy for each reader, the last one the version itself.
                let mut values = std::mem::take(&mut reduced.values);
                let mut copies = Vec::with_capacity(targets.len());
                for (k, &target) in targets.iter().enumerate() {
                    let values = match k + 1 == targets.len() {
                        true => std::mem::take(&mut values),
                        false => values.clone(),
                    };
                    copies.push(ShardParams {
                        target,
                        version: t + 1,
                        shard: index,
                        values,
                        stop_at,
                        sent_us,
                    });
                }
                // A slow link out of this owner's host (emulated) holds the
                // version for as long as its copies for other hosts take.
                let hold = link_hold(&reduce_cx, index, t, len);
                if hold.is_zero() {
                    out.session(&caps.params).give_iterator(copies.into_iter());
                } else {
                    activator.activate_after(hold);
                    held.push((Instant::now() + hold, caps.params, copies));
                }
                let substituted = reducer.take_substituted(t);
                if index == 0 && !substituted.is_empty() {
                    let _ = sink.send(SinkEvent::Dropped {
                        iteration: t,
                        partitions: substituted,
                    });
                }
                if index == 0 {
                    // The receiver only disappears if the sink failed; the
                    // run reports that error at the end.
                    let loss = reduced.loss_sum / reduced.rows;
                    let _ = sink.send(SinkEvent::TrainLoss { iteration: t, loss });
                }
            }
        }
    });
    next_params
}

/// How long shard `index`'s version after iteration `t` (`len`
/// coordinates) is held by an emulated slow link out of its owner's host:
/// the time its copies for the workers on other hosts take through it.
fn link_hold(cx: &JobContext, index: u32, t: u64, len: usize) -> Duration {
    let Some(mbps) = cx.emulated_link(index, t) else {
        return Duration::ZERO;
    };
    let away = (0..cx.plan.workers)
        .filter(|&w| !cx.same_host(w, index))
        .count() as u64;
    StragglerSchedule::over_link(away * ShardParams::wire_bytes(len), mbps)
}

/// The reducer of shard `index` (none past the last shard: nothing is sent
/// to it), with the policy's rules and the checkpoint's state, if resumed.
fn shard_reducer(cx: &JobContext, index: u32) -> ShardReducer {
    let workers = cx.plan.workers;
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
    reducer
}

/// The event that stops a run whose iteration `t` diverged: a loss (shard
/// 0's owner reads it) or a parameter of shard `index` that is not finite.
fn divergence(reduced: &Reduced, index: u32, t: u64) -> Option<SinkEvent> {
    let loss = reduced.loss_sum / reduced.rows;
    let bad_loss = index == 0 && !loss.is_finite();
    if !bad_loss && reduced.values.iter().all(|x| x.is_finite()) {
        return None;
    }
    Some(SinkEvent::Diverged {
        iteration: t,
        what: if bad_loss {
            format!("the training loss is {loss}")
        } else {
            format!("a parameter of shard {index} is not finite")
        },
    })
}
