//! `forestall-compute`: a worker's units, parameters, rows and control
//! messages in; gradient slices, progress, control messages and placement
//! requests out. The logic lives in [`ComputeState`]; this module wires its
//! ports.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::InputCapability;
use timely::dataflow::{Scope, Stream};

use super::Builder;
use crate::run::context::owned_inputs;
use crate::run::context::JobContext;
use crate::run::holdings::{Delivery, PlacementUpdate};
use crate::run::messages::{Control, GradSlice, Progress, ShardParams};
use crate::run::oplog::OperatorClock;
use crate::run::placement::placement_flow;
use crate::run::sink::SinkEvent;
use crate::run::worker::{Caps, ComputeState, Emit, PendingVersion};

/// The compute operator's inputs: parameters, control, rows, placement.
const ROWS_INPUT: usize = 2;
const PLACEMENT_INPUT: usize = 3;

/// Builds worker `index`'s compute operator over `params`; returns its
/// gradient slices and progress reports. Its control messages loop back
/// into it, and its placement requests go to the placement collection,
/// whose deliveries come back as rows.
pub(super) fn build<'s>(
    scope: Scope<'s, u64>,
    cx: &Arc<JobContext>,
    index: u32,
    sink: &Sender<SinkEvent>,
    clock: Option<Rc<RefCell<OperatorClock>>>,
    params: Stream<'s, u64, Vec<ShardParams>>,
) -> (
    Stream<'s, u64, Vec<GradSlice>>,
    Stream<'s, u64, Vec<Progress>>,
) {
    let mut builder = OperatorBuilder::new("forestall-compute".to_owned(), scope);
    let info = builder.operator_info();
    if let Some(clock) = &clock {
        clock.borrow_mut().watch(info.global_id);
    }
    let activator = scope.activator_for(Rc::clone(&info.address));
    let mut params_in = builder.new_input(params, Exchange::new(|m: &ShardParams| m.target as u64));
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
    let (rows, initial) = owned_inputs(cx, index);
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
    let mut state = ComputeState::new(index, Arc::clone(cx), sink.clone(), clock);
    let stop_sink = sink.clone();
    let emit_cx = Arc::clone(cx);
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
            let settled = |i: usize| frontiers[i].frontier().first().copied().unwrap_or(u64::MAX);
            state
                .holdings
                .settle_before(settled(ROWS_INPUT).min(settled(PLACEMENT_INPUT)));
            params_in
                .for_each(|cap, data| receive_params(&mut state, (index, &stop_sink), &cap, data));
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
                        let sent_us = emit_cx.now_us();
                        grads
                            .session(cap)
                            .give_iterator(slices.into_iter().map(|mut s| {
                                s.sent_us = sent_us;
                                s
                            }))
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
    (grads, progress)
}

/// Files shards of a parameter version under `cap` with the version's
/// capabilities (the first shard to arrive makes them), and how long each
/// from another host took.
fn receive_params(
    state: &mut ComputeState,
    (index, sink): (u32, &Sender<SinkEvent>),
    cap: &InputCapability<u64>,
    data: &mut Vec<ShardParams>,
) {
    let Some(&version) = cap.least() else {
        return;
    };
    let shards = state.cx.shards.len();
    let idle = state.idle();
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
            late: Vec::new(),
        });
    // A shard that arrives while a unit computes waited behind it here, not
    // in a link; only what an idle worker receives is timed.
    let now_us = idle.then(|| state.cx.now_us());
    for msg in data.drain(..) {
        if let (Some(now_us), true) = (
            now_us,
            msg.sent_us > 0 && !state.cx.same_host(msg.shard, index),
        ) {
            entry
                .late
                .push((msg.shard, now_us.saturating_sub(msg.sent_us)));
        }
        if let Some(end) = msg.stop_at {
            super::agree_to_stop(&state.cx, sink, end);
        }
        let slot = &mut entry.shards[msg.shard as usize];
        if slot.is_none() {
            entry.received += 1;
        }
        *slot = Some(msg.values);
    }
}
