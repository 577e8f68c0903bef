//! `forestall-detect`: worker 0 tracks every worker's progress
//! ([`ProgressTracker`]) and hands each closed iteration's records and
//! laggard report to the sink.

use std::collections::BTreeMap;
use std::sync::mpsc::Sender;

use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::{Scope, Stream};

use crate::run::context::JobContext;
use crate::run::detect::ProgressTracker;
use crate::run::messages::Progress;
use crate::run::sink::SinkEvent;

/// Builds the detect operator over every worker's `progress` (all routed
/// to worker 0).
pub(super) fn build<'s>(
    scope: Scope<'s, u64>,
    cx: &std::sync::Arc<JobContext>,
    sink: &Sender<SinkEvent>,
    progress: Stream<'s, u64, Vec<Progress>>,
    transit: super::Transit,
) {
    let mut builder = OperatorBuilder::new("forestall-detect".to_owned(), scope);
    let mut progress_in = builder.new_input(progress, Exchange::new(|_: &Progress| 0));
    let sink = sink.clone();
    let mut tracker = ProgressTracker::new(cx.plan.workers, cx.plan.laggard_threshold);
    let cx = std::sync::Arc::clone(cx);
    // (iteration, shard owner) → the longest transit of the owner's version
    // after that iteration to a worker on another host.
    let mut params_late: BTreeMap<(u64, u32), u64> = BTreeMap::new();
    builder.build(move |_caps| {
        move |_frontiers| {
            progress_in.for_each(|_cap, data| {
                for message in data.drain(..) {
                    if let Progress::Ready { stop: true, .. } = message {
                        // another process was asked to stop: shard 0's
                        // owner (this worker) fixes where
                        cx.stop.ask();
                    }
                    on_progress(&mut tracker, &sink, message, (&transit, &mut params_late));
                }
            });
        }
    });
}

/// One worker's progress report.
fn on_progress(
    tracker: &mut ProgressTracker,
    sink: &Sender<SinkEvent>,
    message: Progress,
    (transit, params_late): (&super::Transit, &mut BTreeMap<(u64, u32), u64>),
) {
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
            ..
        } => {
            if let Some((mut workers, report)) = tracker.on_ready(worker, iteration, ready_us) {
                // every slice of the closed iteration has reached shard 0
                let mut t = transit.borrow_mut();
                for r in &mut workers {
                    r.transit_us = t.remove(&(r.iteration, r.worker)).unwrap_or(0);
                    let key = (r.iteration, r.worker);
                    r.params_transit_us = params_late.remove(&key).unwrap_or(0);
                }
                // reports of versions some worker skipped (under slack)
                if let Some(closed) = workers.iter().map(|r| r.iteration).max() {
                    params_late.retain(|&(i, _), _| i > closed);
                }
                let _ = sink.send(SinkEvent::Iteration { workers, report });
            }
        }
        Progress::Ops(ops) => {
            let _ = sink.send(SinkEvent::Ops(ops));
        }
        Progress::Scores {
            version,
            batch,
            scores,
        } => {
            let _ = sink.send(SinkEvent::Scores {
                version,
                batch,
                scores,
            });
        }
        Progress::ParamsIn { version, late, .. } => {
            let Some(after) = version.checked_sub(1) else {
                return;
            };
            for (shard, us) in late {
                let at = params_late.entry((after, shard)).or_default();
                *at = (*at).max(us);
            }
        }
    }
}
