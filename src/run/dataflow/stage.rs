//! `forestall-stage`: a pipeline stage worker's parameters and its
//! neighbours' activations and gradients in; gradient slices, progress and
//! its own activations and gradients out. The logic lives in
//! [`StageWorker`]; this module wires its ports.

use std::rc::Rc;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::{Scope, Stream};

use super::Builder;
use crate::run::context::JobContext;
use crate::run::messages::{GradSlice, Progress, ShardParams, StageMessage};
use crate::run::sink::SinkEvent;
use crate::run::stage::{StageCaps, StageEmit, StageWorker};

/// Builds worker `index`'s stage operator over `params`; returns its
/// gradient slices and progress reports. Its activations and their
/// gradients loop back into the stage operators of its replica.
pub(super) fn build<'s>(
    scope: Scope<'s, u64>,
    cx: &Arc<JobContext>,
    index: u32,
    sink: &Sender<SinkEvent>,
    params: Stream<'s, u64, Vec<ShardParams>>,
) -> (
    Stream<'s, u64, Vec<GradSlice>>,
    Stream<'s, u64, Vec<Progress>>,
) {
    let mut builder = OperatorBuilder::new("forestall-stage".to_owned(), scope);
    let activator = scope.activator_for(Rc::clone(&builder.operator_info().address));
    let mut params_in = builder.new_input(params, Exchange::new(|m: &ShardParams| m.target as u64));
    let (grads_out, grads) = builder.new_output::<Vec<GradSlice>>();
    let (progress_out, progress) = builder.new_output::<Vec<Progress>>();
    let (traffic_out, traffic) = builder.new_output::<Vec<StageMessage>>();
    // Activations and gradients loop back at the same time; like the
    // compute operator's control loop, the input is unconnected to every
    // output, so the loop has no zero-summary cycle: a stage sends with the
    // capabilities it holds for the iteration.
    let mut traffic_in = builder.new_input_connection(
        traffic,
        Exchange::new(|m: &StageMessage| u64::from(m.to())),
        std::iter::empty(),
    );
    let mut grads_out = OutputBuilder::<u64, Builder<GradSlice>>::from(grads_out);
    let mut progress_out = OutputBuilder::<u64, Builder<Progress>>::from(progress_out);
    let mut traffic_out = OutputBuilder::<u64, Builder<StageMessage>>::from(traffic_out);
    let mut state = StageWorker::new(index, Arc::clone(cx), sink.clone());
    let sink = sink.clone();
    builder.build(move |mut caps| {
        let traffic = caps.pop().expect("three outputs");
        let progress = caps.pop().expect("three outputs");
        let grads = caps.pop().expect("three outputs");
        state.initial = Some(StageCaps {
            grads,
            progress,
            traffic,
        });
        move |_frontiers| {
            params_in.for_each(|cap, data| {
                let Some(&version) = cap.least() else {
                    return;
                };
                for msg in data.drain(..) {
                    if let Some(end) = msg.stop_at {
                        super::agree_to_stop(&state.cx, &sink, end);
                    }
                    state.on_shard(version, msg.shard, msg.values, || StageCaps {
                        grads: cap.delayed(&version, 0),
                        progress: cap.delayed(&version, 1),
                        traffic: cap.delayed(&version, 2),
                    });
                }
            });
            traffic_in.for_each(|_cap, data| {
                for msg in data.drain(..) {
                    state.on_message(msg);
                }
            });
            let mut grads = grads_out.activate();
            let mut progress = progress_out.activate();
            let mut traffic = traffic_out.activate();
            let now_cx = Arc::clone(&state.cx);
            state.step(&mut StageEmit {
                grads: &mut |cap, slices| {
                    let sent_us = now_cx.now_us();
                    grads
                        .session(cap)
                        .give_iterator(slices.into_iter().map(|mut s| {
                            s.sent_us = sent_us;
                            s
                        }))
                },
                progress: &mut |cap, p| progress.session(cap).give(p),
                traffic: &mut |cap, m| traffic.session(cap).give(m),
            });
            if let Some(delay) = state.wake_in() {
                activator.activate_after(delay);
            }
        }
    });
    (grads, progress)
}
