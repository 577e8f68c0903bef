//! The replay of one iteration on small hand-made lists.

use super::*;
use crate::policy::{peer_agent, PolicyPlan, ReassignConfig};
use crate::whatif::replay_iteration;

/// Four workers with 8 units of 100 rows each; worker 3 takes 4 µs a row,
/// the others 1 µs.
fn timings() -> IterationTimings {
    let us_per_row = vec![1.0, 1.0, 1.0, 4.0];
    let own = (0..4u32)
        .map(|w| {
            (0..8)
                .map(|u| TimedUnit {
                    key: UnitKey {
                        partition: w,
                        unit: u,
                    },
                    rows: 100,
                    owner_us: (100.0 * us_per_row[w as usize]) as u64,
                    micro_batches: 1,
                    rest: false,
                    piece: false,
                })
                .collect()
        })
        .collect();
    IterationTimings {
        iteration: 0,
        own,
        us_per_row,
        overhead_us: 0,
    }
}

/// One unit a worker in `micro_batches` micro-batches: worker 3's takes
/// 800 µs, the others' 100 µs.
fn one_slowed_unit(micro_batches: u32) -> IterationTimings {
    let mut t = timings();
    for (w, own) in t.own.iter_mut().enumerate() {
        own.truncate(1);
        own[0].owner_us = if w == 3 { 800 } else { 100 };
        own[0].micro_batches = micro_batches;
    }
    t.us_per_row = vec![1.0, 1.0, 1.0, 8.0];
    t
}

/// `forestall`, copying units in flight (and handing over their rests and
/// tails) or not.
fn forestall(clone_in_flight: bool) -> PolicyPlan {
    PolicyPlan::Forestall {
        proactive: crate::policy::ProactiveConfig::default(),
        reassign: ReassignConfig::default(),
        clone_in_flight,
        rest_in_flight: true,
        tail_in_flight: true,
    }
}

/// `forestall` handing over rests and copies, not tails.
fn forestall_without_tails() -> PolicyPlan {
    match forestall(true) {
        PolicyPlan::Forestall {
            proactive,
            reassign,
            clone_in_flight,
            rest_in_flight,
            ..
        } => PolicyPlan::Forestall {
            proactive,
            reassign,
            clone_in_flight,
            rest_in_flight,
            tail_in_flight: false,
        },
        other => other,
    }
}

fn agents(policy: &PolicyPlan) -> Vec<Option<PeerAgent>> {
    (0..4).map(|w| peer_agent(policy, w, 4, 4)).collect()
}

/// Every one of the `units` units executed, each once.
fn once_each(r: &Replayed, units: usize) {
    let mut keys: Vec<UnitKey> = r.executed.iter().map(|&(k, _)| k).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(
        (keys.len(), r.executed.len()),
        (units, units),
        "once each: {r:?}"
    );
}

fn exactly_once(r: &Replayed) {
    once_each(r, 32);
}

#[test]
fn bsp_replays_to_the_slowest_workers_sum() {
    let r = replay_iteration(&timings(), &mut agents(&PolicyPlan::Bsp), 10, &[]);
    exactly_once(&r);
    assert_eq!(r.makespan_us, 8 * 400);
    assert_eq!(r.finish_us[..3], [800, 800, 800]);
    assert_eq!((r.reassigned, r.messages), (0, 0));
}

#[test]
fn rapid_reassign_moves_the_slow_workers_tail() {
    let policy = PolicyPlan::RapidReassign(ReassignConfig::default());
    let r = replay_iteration(&timings(), &mut agents(&policy), 10, &[]);
    exactly_once(&r);
    assert!(r.reassigned > 0 && r.messages > 0);
    // 32 units of work at speeds 1, 1, 1, 1/4 balance at 32·100/3.25 ≈ 985 µs;
    // whole units and the 75 % checkpoint leave some of the gain (1200 µs).
    assert!(r.makespan_us < 1300, "{r:?}");
    assert!(r
        .executed
        .iter()
        .all(|&(k, w)| k.partition == w || k.partition == 3));
}

#[test]
fn clones_race_and_each_unit_counts_once() {
    let policy = PolicyPlan::Speculate(crate::policy::SpeculateConfig {
        group_size: 3,
        quantile: 0.5,
        multiplier: 1.5,
        max_clone_share: 0.5,
    });
    let bsp = replay_iteration(&timings(), &mut agents(&PolicyPlan::Bsp), 10, &[]);
    let r = replay_iteration(&timings(), &mut agents(&policy), 10, &[]);
    exactly_once(&r);
    assert!(r.reassigned > 0, "a clone finished first: {r:?}");
    assert!(
        r.makespan_us < bsp.makespan_us,
        "{} vs {}",
        r.makespan_us,
        bsp.makespan_us
    );

    // A plan's clones, sent as the iteration begins (proactive-clone): the
    // slow worker's last 4 units are copied to worker 0, which finishes
    // them first; worker 3 skips its copies.
    let planned = [(3, 0, ControlKind::Clone { count: 4 })];
    let r = replay_iteration(&timings(), &mut agents(&PolicyPlan::Bsp), 10, &planned);
    exactly_once(&r);
    assert_eq!(r.reassigned, 4);
    assert!(r.makespan_us <= 4 * 400 + 2 * 10, "{r:?}");
    assert!(r.wasted >= 1, "worker 3 skipped or dropped copies: {r:?}");
    // The copies go last first: worker 0 starts where worker 3 ends.
    let copies: Vec<u32> = r
        .executed
        .iter()
        .filter(|&&(k, w)| w == 0 && k.partition == 3)
        .map(|(k, _)| k.unit)
        .collect();
    assert_eq!(copies, [7, 6, 5, 4]);
}

#[test]
fn forestall_copies_a_unit_slowed_in_flight_and_stops_the_loser() {
    let t = one_slowed_unit(1);
    let without = replay_iteration(&t, &mut agents(&forestall(false)), 10, &[]);
    assert_eq!((without.makespan_us, without.reassigned), (800, 0));
    assert_eq!(without.wasted, 0);

    let r = replay_iteration(&t, &mut agents(&forestall(true)), 10, &[]);
    once_each(&r, 4);
    // The idle workers' offers reach worker 3 at 110 µs, before its unit
    // has run 1.5 of their units: they wait, and at 151 µs the fastest
    // (worker 0) gets a copy, at 161 µs, done at 261 µs; worker 3 stops
    // its own when told, its compute in vain.
    let &(key, by) = r.executed.last().expect("four units");
    assert_eq!((key.partition, by), (3, 0), "{r:?}");
    assert_eq!(r.makespan_us, 261);
    assert_eq!((r.reassigned, r.wasted), (1, 1));
    assert_eq!(r.finish_us[0], 261);
}

#[test]
fn forestall_hands_over_the_rest_of_a_unit_slowed_in_flight() {
    // As above, each unit in 8 micro-batches: worker 3's end every 100 µs.
    let t = one_slowed_unit(8);
    let r = replay_iteration(&t, &mut agents(&forestall_without_tails()), 10, &[]);
    once_each(&r, 4);
    // The first offer reaches worker 3 at 110 µs, one micro-batch done
    // (770 µs expected left against the helper's 87.5 for the other 7):
    // the rest, 88 of its 100 rows, goes to that helper (at 120 µs) and
    // ends there at 208 µs; nothing is computed twice (a copy ended at 261).
    let &(key, by) = r.executed.last().expect("four units");
    assert_eq!(key.partition, 3, "{r:?}");
    assert_ne!(by, 3, "{r:?}");
    assert_eq!(r.makespan_us, 120 + 88);
    assert_eq!(r.finish_us[by as usize], 208);
    assert_eq!((r.reassigned, r.wasted), (1, 0));
    assert_eq!(r.finish_us[3], 0, "worker 3 finished no unit");
}

#[test]
fn forestall_hands_over_the_tail_of_a_unit_slowed_in_flight() {
    // As above, with tails: the first offer reaches worker 3 at 110 µs, its
    // first micro-batch ended at 100 and the second in flight until 200.
    // It goes on with that one and hands the 6 not begun to the helper (at
    // 120 µs, 12.5 µs each: done at 195); its own piece ends at 200 and
    // counts the unit. The rest would have ended at 208 (the micro-batch
    // in flight recomputed there).
    let t = one_slowed_unit(8);
    let rests = replay_iteration(&t, &mut agents(&forestall_without_tails()), 10, &[]);
    assert_eq!(rests.makespan_us, 208);
    let r = replay_iteration(&t, &mut agents(&forestall(true)), 10, &[]);
    once_each(&r, 4);
    assert_eq!(
        r.executed.last().map(|e| e.1),
        Some(3),
        "worker 3 ends its unit: {r:?}"
    );
    assert_eq!((r.makespan_us, r.finish_us[3]), (200, 200));
    let helper = (0..3).find(|&w| r.finish_us[w] > 100).expect("a helper");
    assert_eq!(r.finish_us[helper], 195);
    assert_eq!(
        (r.reassigned, r.wasted),
        (0, 0),
        "nothing moved whole or computed twice"
    );
}

#[test]
fn replay_is_deterministic() {
    let policy = PolicyPlan::RapidReassign(ReassignConfig::default());
    let a = replay_iteration(&timings(), &mut agents(&policy), 7, &[]);
    let b = replay_iteration(&timings(), &mut agents(&policy), 7, &[]);
    assert_eq!(a, b);
}

#[test]
fn forestall_copies_a_handed_over_unit_slowed_at_its_helper() {
    // Worker 0's one unit was handed to worker 3 as the iteration began (a
    // plan), and worker 3 computes it 8× slower than its owner would: a
    // unit handed over is not final, so an idle peer's offer gets a copy.
    let mut t = timings();
    for (w, own) in t.own.iter_mut().enumerate() {
        own.truncate(usize::from(w != 3));
    }
    t.us_per_row = vec![1.0, 1.0, 1.0, 8.0];
    let policy = forestall(true);
    let planned = [(0, 3, ControlKind::Planned { count: 1 })];
    let bsp = replay_iteration(&t, &mut agents(&PolicyPlan::Bsp), 10, &planned);
    assert_eq!(bsp.makespan_us, 10 + 800, "worker 3 computes it: {bsp:?}");

    let r = replay_iteration(&t, &mut agents(&policy), 10, &planned);
    once_each(&r, 3);
    let (_, by) = r
        .executed
        .iter()
        .find(|(k, _)| k.partition == 0)
        .expect("worker 0's unit");
    assert_ne!(*by, 3, "a copy came first: {r:?}");
    assert!(r.makespan_us < 400, "{r:?}");
    assert!(r.wasted >= 1, "worker 3 stopped its copy: {r:?}");
}

#[test]
fn forestall_passes_on_units_a_slowed_helper_holds_queued() {
    // Worker 0's three units were handed to worker 3 as the iteration began
    // (a plan), and worker 3 computes them 8× slower: idle peers' offers
    // take the two it has not begun (and a copy of the one in flight).
    let mut t = timings();
    for (w, own) in t.own.iter_mut().enumerate() {
        own.truncate(match w {
            0 => 3,
            3 => 0,
            _ => 1,
        });
    }
    t.us_per_row = vec![1.0, 1.0, 1.0, 8.0];
    let policy = forestall(true);
    let planned = [(0, 3, ControlKind::Planned { count: 3 })];
    let bsp = replay_iteration(&t, &mut agents(&PolicyPlan::Bsp), 10, &planned);
    assert_eq!(
        bsp.makespan_us,
        10 + 3 * 800,
        "worker 3 computes all: {bsp:?}"
    );

    let r = replay_iteration(&t, &mut agents(&policy), 10, &planned);
    once_each(&r, 5);
    let elsewhere = r
        .executed
        .iter()
        .filter(|(k, w)| k.partition == 0 && *w != 3)
        .count();
    assert_eq!(elsewhere, 3, "all three left the slow helper: {r:?}");
    assert!(r.makespan_us < 500, "{r:?}");
}

/// 64 workers with 4 units of 100 rows in `micro_batches` micro-batches
/// each, workers 3, 17, 40, 41 and 60 5× slower (500 µs a unit), replayed
/// for two iterations (the second with a usual pace) under `forestall`:
/// the second iteration.
fn five_stragglers_of_64(micro_batches: u32) -> Replayed {
    let n = 64u32;
    let slow = [3, 17, 40, 41, 60];
    let us_per_row: Vec<f64> = (0..n)
        .map(|w| if slow.contains(&w) { 5.0 } else { 1.0 })
        .collect();
    let own = (0..n)
        .map(|w| {
            (0..4)
                .map(|u| TimedUnit {
                    key: UnitKey {
                        partition: w,
                        unit: u,
                    },
                    rows: 100,
                    owner_us: (100.0 * us_per_row[w as usize]) as u64,
                    micro_batches,
                    rest: false,
                    piece: false,
                })
                .collect()
        })
        .collect();
    let mut t = IterationTimings {
        iteration: 0,
        own,
        us_per_row,
        overhead_us: 0,
    };
    // (with its broker, as a job's `forestall` has it)
    let policy = match forestall(true) {
        PolicyPlan::Forestall {
            proactive,
            reassign,
            clone_in_flight,
            rest_in_flight,
            tail_in_flight,
        } => PolicyPlan::Forestall {
            proactive,
            reassign: ReassignConfig {
                broker: true,
                ..reassign
            },
            clone_in_flight,
            rest_in_flight,
            tail_in_flight,
        },
        other => other,
    };
    let mut agents: Vec<Option<PeerAgent>> = (0..n).map(|w| peer_agent(&policy, w, n, n)).collect();
    replay_iteration(&t, &mut agents, 10, &[]);
    t.iteration = 1;
    replay_iteration(&t, &mut agents, 10, &[])
}

#[test]
fn the_broker_cuts_a_stragglers_units_into_micro_batches_for_many_peers() {
    // Units of 2 micro-batches move whole: the stragglers' units land
    // whole on peers, one each.
    let whole = five_stragglers_of_64(2);
    once_each(&whole, 256);
    // Units of 4: the broker balances micro-batches, the stragglers' units
    // not begun go in pieces to many peers, and the tails of their units in
    // flight too: the iteration ends sooner.
    let cut = five_stragglers_of_64(4);
    once_each(&cut, 256);
    // (the fluid bound: 256 units at 60 units per 100 µs, 427 µs; with
    // the broker's orders of whole units only, 600)
    assert_eq!((whole.makespan_us, cut.makespan_us), (500, 450));
}
