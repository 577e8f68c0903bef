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

mod compute;
mod detect;
mod reduce;
mod stage;

use std::sync::mpsc::Sender;
use std::sync::Arc;

use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::{ConnectLoop, Feedback};
use timely::worker::Worker;

use super::context::JobContext;
use super::messages::ShardParams;
use super::oplog::register_clock;
use super::sink::SinkEvent;

/// The container builder of the operators' outputs.
type Builder<D> = CapacityContainerBuilder<Vec<D>>;

/// The longest time a gradient slice of worker `w` in iteration `t` took to
/// reach shard 0's owner on another host, µs, by `(t, w)`.
pub(crate) type Transit =
    std::rc::Rc<std::cell::RefCell<std::collections::BTreeMap<(u64, u32), u64>>>;

/// Takes `end` as the job's agreed final version ([`crate::run::stop`]);
/// the first in the process to learn it tells the sink.
fn agree_to_stop(cx: &JobContext, sink: &Sender<SinkEvent>, end: u64) {
    if cx.stop.agree(end) {
        tracing::info!("the job stops at iteration {end} (a stop was asked)");
        let _ = sink.send(SinkEvent::Stop { end });
    }
}

/// Builds the dataflow on `worker`; timely runs it to completion afterwards.
/// Each operator is built in its own module: `compute`, `reduce` and
/// `detect` (under `run/dataflow/`).
pub fn build_training_dataflow(worker: &mut Worker, cx: Arc<JobContext>, sink: Sender<SinkEvent>) {
    let clock = register_clock(worker);
    let index = worker.index() as u32;
    worker.dataflow::<u64, _, _>(|scope| {
        let (loop_handle, params) = scope.feedback::<Vec<ShardParams>>(1);
        // a pipeline's stage workers, or data-parallel workers
        let (grads, progress) = match &cx.plan.parallel {
            Some(_) => stage::build(scope, &cx, index, &sink, params),
            None => compute::build(scope, &cx, index, &sink, clock, params),
        };
        // shard 0's owner measures how long each worker's gradients took to
        // arrive; worker 0's detect puts that into the worker rows (both
        // operators run on worker 0's thread)
        let transit = Transit::default();
        let next_params = reduce::build(scope, &cx, (index, &transit), &sink, grads);
        next_params.connect_loop(loop_handle);
        detect::build(scope, &cx, &sink, progress, transit);
    });
}
