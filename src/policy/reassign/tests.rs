//! The rapid-reassignment agent's rules, one message at a time.

use super::*;

fn agent(me: u32) -> ReassignAgent {
    ReassignAgent::new(me, helper_group(me, 4, 4, 3), ReassignConfig::default())
}

/// The count of the one `Assign` to `to` in `out` (panics on anything else).
fn assigned(out: &[(u32, ControlKind)], to: u32) -> u32 {
    match out {
        [(peer, ControlKind::Assign { count })] if *peer == to => *count,
        other => panic!("expected one Assign to {to}: {other:?}"),
    }
}

#[test]
fn groups_prefer_other_processes() {
    // 2 processes × 2 threads: worker 0's helpers start in process 1
    assert_eq!(helper_group(0, 4, 2, 2), vec![2, 3]);
    assert_eq!(helper_group(3, 4, 2, 2), vec![1, 0]);
    // one process: the next workers in the ring
    assert_eq!(helper_group(2, 4, 4, 3), vec![3, 0, 1]);
    // groups never exceed W - 1 and never contain the worker
    assert_eq!(helper_group(1, 2, 2, 4), vec![0]);
    assert!(helper_group(0, 1, 1, 4).is_empty());
}

/// A worker's reporters are exactly the workers whose group holds it, in
/// one process (the closed form) and in several.
#[test]
fn reporters_are_the_workers_whose_group_holds_it() {
    assert_eq!(reporters(2, 10, 10, 3), vec![9, 0, 1]);
    assert_eq!(reporters(1, 4, 4, 3), vec![2, 3, 0]);
    for (workers, per_process, size) in [(10, 10, 3), (12, 3, 4), (8, 4, 8), (5, 5, 8), (1, 1, 4)] {
        for w in 0..workers {
            let mut got = reporters(w, workers, per_process, size);
            got.sort_unstable();
            let want: Vec<u32> = (0..workers)
                .filter(|&v| helper_group(v, workers, per_process, size).contains(&w))
                .collect();
            assert_eq!(
                got, want,
                "{w} of {workers}, {per_process} a process, groups of {size}"
            );
        }
    }
}

/// Under a policy that copies units in flight, an idle worker offers help
/// to the peers that report to it and have not reported, not to its own
/// group (which reports to others), and to a reporter holding units handed
/// to it; one done with its own list and holding none gets no offer.
#[test]
fn idle_offers_go_to_silent_reporters_then_to_holders() {
    let mut a = ReassignAgent::new(5, helper_group(5, 10, 10, 2), ReassignConfig::default())
        .with_silent_offers(true, reporters(5, 10, 10, 2));
    a.begin(0, 1);
    a.observe(None, 0, 0, 0);
    let done = |queued| ControlKind::Progress {
        done: 1,
        total: 1,
        queued,
        unit_us: 100,
    };
    // Worker 4 reported done with nothing queued; worker 3 is silent.
    a.on_message(4, &done(0), 0);
    let out = a.on_idle(100, 0);
    assert_eq!(out, vec![(3, 0, ControlKind::Offer { unit_us: 100 })]);
    a.on_message(3, &ControlKind::Decline, 0);
    // Worker 4 reports again: done, but units were handed to it.
    a.on_message(4, &done(2), 0);
    let out = a.on_idle(100, 0);
    assert_eq!(out, vec![(4, 0, ControlKind::Offer { unit_us: 100 })]);
    a.on_message(4, &ControlKind::Decline, 0);
    assert!(a.on_idle(100, 0).is_empty(), "every reporter declined");
}

#[test]
fn reports_at_the_checkpoint_and_at_the_end() {
    let mut a = agent(0);
    a.begin(0, 8);
    let done = |a: &mut ReassignAgent, left: usize| {
        a.observe(None, 0, left, 0);
        a.on_own_unit_done(100)
    };
    for k in 0..5 {
        assert!(done(&mut a, 7 - k).is_empty());
    }
    let at_75 = done(&mut a, 2);
    assert_eq!(at_75.len(), 3);
    assert_eq!(
        at_75[0].1,
        ControlKind::Progress {
            done: 6,
            total: 8,
            queued: 0,
            unit_us: 100
        }
    );
    assert!(done(&mut a, 1).is_empty());
    let end = done(&mut a, 0);
    assert_eq!(
        end[0].1,
        ControlKind::Progress {
            done: 8,
            total: 8,
            queued: 0,
            unit_us: 100
        }
    );
}

/// A worker 5× slower than its 3 helpers, with 41 units left while each has
/// 12: all finish together at T = (41 + 3·12) / (1/500 + 3/100) = 2406 µs,
/// by when it finishes 4.8 of its own: it keeps the 4 it finishes by then
/// (a slow worker's unit left over costs more than a helper's) and the 3
/// helpers share the other 37: 13 each, rounded up.
#[test]
fn a_slow_worker_gives_enough_units_to_finish_together() {
    let mut slow = agent(1);
    slow.begin(0, 48);
    for _ in 0..7 {
        slow.on_own_unit_done(500);
    }
    let progress = ControlKind::Progress {
        done: 36,
        total: 48,
        queued: 0,
        unit_us: 100,
    };
    assert_eq!(
        slow.on_message(2, &progress, 41),
        vec![(2, ControlKind::Assign { count: 13 })]
    );
    // equal speeds, a unit apart: nothing moves (no churn)
    let mut even = agent(1);
    even.begin(0, 8);
    even.on_own_unit_done(100);
    let ahead = ControlKind::Progress {
        done: 2,
        total: 8,
        queued: 0,
        unit_us: 100,
    };
    assert!(even.on_message(2, &ahead, 7).is_empty());
}

/// Before its first unit ends, a worker knows only that the unit in
/// flight has run this long: 2000 µs against a peer's 100 is slow enough
/// to give, and with a unit in flight it may give its whole list.
#[test]
fn a_unit_in_flight_says_how_slow_a_worker_is() {
    let offer = ControlKind::Offer { unit_us: 100 };
    let given = |running_us| {
        let mut w = agent(1);
        w.begin(0, 8);
        w.observe(Some(running_us), 0, 0, 0);
        assigned(&w.on_message(3, &offer, 7), 3)
    };
    // 50 µs in, it may be faster than the helper, which may be asking its
    // 2 other peers too: it gives its part of what a helper twice as slow
    // takes off three such workers (7 − 300/50 = 1); 2000 µs in, it is 20×
    // slower: it keeps none and each of the 3 helpers gets a third
    assert_eq!(given(50), 1);
    assert_eq!(given(2000), 3);
    // everything may go while a unit is in flight; nothing without one
    let mut last = agent(1);
    last.begin(0, 2);
    last.on_own_unit_done(5000);
    last.observe(Some(100), 0, 0, 0);
    assert_eq!(
        last.on_message(3, &offer, 1),
        vec![(3, ControlKind::Assign { count: 1 })]
    );
    last.observe(None, 0, 0, 0);
    assert_eq!(
        last.on_message(3, &offer, 1),
        vec![(3, ControlKind::Decline)]
    );
}

/// Units given away stop counting as the giver's own, so its report at
/// the end still comes once it has done what it kept.
#[test]
fn units_given_away_leave_the_giver_s_total() {
    let mut slow = agent(1);
    slow.begin(0, 8);
    slow.on_own_unit_done(500);
    let offer = ControlKind::Offer { unit_us: 100 };
    let given = assigned(&slow.on_message(3, &offer, 7), 3);
    let kept = 7 - given;
    let mut reports = Vec::new();
    for _ in 0..kept {
        reports = slow.on_own_unit_done(500);
    }
    assert!(
        reports.iter().any(|(_, k)| matches!(
            k,
            ControlKind::Progress { done, total, .. } if done == total
        )),
        "the end report after {kept} kept units: {reports:?}"
    );
}

/// A worker as fast as the reporter but with more work (a stale plan)
/// may be one of many givers: it gives its part, the group's peers not
/// heard from counted as givers too; a straggler gives its whole share.
#[test]
fn a_loaded_worker_gives_its_part_a_straggler_all_of_its_share() {
    let ahead = report(3, 4, 100);
    let part = assigned(&begun(30, 100).on_message(2, &ahead, 29), 2);
    let whole = assigned(&begun(30, 500).on_message(2, &ahead, 29), 2);
    assert!(part >= 1 && part < whole, "part {part}, whole {whole}");
}

/// A peer's report: `done` of `total` own units, nothing queued.
fn report(done: u32, total: u32, unit_us: u64) -> ControlKind {
    ControlKind::Progress {
        done,
        total,
        queued: 0,
        unit_us,
    }
}

/// Worker 1's agent after its first of `own` units, which took `unit_us`.
fn begun(own: u32, unit_us: u64) -> ReassignAgent {
    let mut a = agent(1);
    a.begin(0, own);
    a.on_own_unit_done(unit_us);
    a
}

/// A straggler near the end of its list gives its share, at least
/// `initial_units` when it is the one giver; when the group's others may
/// give to the same peer too, its share alone (workers slow for good, each
/// giving `initial_units` to the first peer to report, buried it).
#[test]
fn a_straggler_among_givers_gives_its_share_without_the_floor() {
    let ahead = report(2, 4, 100);
    // 3 left at 200 µs a unit, the peer 2 at 100: with the group's 3
    // helpers all would finish at 257 µs, by when it does 1 of its own; its
    // share of the other 2 among 3 helpers is 1.
    let mut straggler = begun(4, 200);
    // The group's other two peers are not heard from: they may give too.
    assert_eq!(assigned(&straggler.on_message(2, &ahead, 3), 2), 1);
    // Heard from and not behind the peer, it is the one giver: at least
    // `initial_units`.
    let mut alone = begun(4, 200);
    for peer in [0, 3] {
        assert!(alone.on_message(peer, &report(2, 4, 200), 3).is_empty());
    }
    assert_eq!(assigned(&alone.on_message(2, &ahead, 3), 2), 2);
}

/// A peer slower per unit than all our work left takes nothing.
#[test]
fn an_offer_from_a_slower_peer_is_declined() {
    let mut w = agent(1);
    w.begin(0, 8);
    w.on_own_unit_done(100);
    let slow_offer = ControlKind::Offer { unit_us: 900 };
    assert_eq!(
        w.on_message(3, &slow_offer, 5),
        vec![(3, ControlKind::Decline)]
    );
}

#[test]
fn a_slow_worker_keeps_its_last_unit_and_a_peer_behind_gets_nothing() {
    let mut slow = agent(1);
    slow.begin(0, 8);
    slow.on_own_unit_done(500);
    let done = ControlKind::Progress {
        done: 8,
        total: 8,
        queued: 0,
        unit_us: 100,
    };
    assert!(slow.on_message(3, &done, 1).is_empty());
    let offer = ControlKind::Offer { unit_us: 100 };
    assert_eq!(
        slow.on_message(3, &offer, 1),
        vec![(3, ControlKind::Decline)]
    );
    // 3 idle helpers, 10 left at 5× the time: T = 10 / (1/500 + 3/100) = 312.5,
    // each helper takes 3.1 → 3
    assert_eq!(
        slow.on_message(3, &offer, 10),
        vec![(3, ControlKind::Assign { count: 3 })]
    );
    let mut fast = agent(2);
    fast.begin(0, 8);
    for _ in 0..7 {
        fast.on_own_unit_done(100);
    }
    let behind = ControlKind::Progress {
        done: 1,
        total: 8,
        queued: 0,
        unit_us: 500,
    };
    assert!(fast.on_message(1, &behind, 1).is_empty());
}

#[test]
fn an_idle_helper_offers_to_the_peer_furthest_behind_one_at_a_time() {
    let p = |done| ControlKind::Progress {
        done,
        total: 8,
        queued: 0,
        unit_us: 100,
    };
    let mut h = agent(0);
    h.begin(0, 2);
    h.on_own_unit_done(100);
    h.on_own_unit_done(100);
    h.on_message(1, &p(6), 0);
    h.on_message(3, &p(2), 0);
    h.on_message(2, &p(8), 0);
    let offer = ControlKind::Offer { unit_us: 100 };
    assert_eq!(h.on_idle(100, 0), vec![(3, 0, offer.clone())]);
    assert!(h.on_idle(100, 0).is_empty(), "one outstanding offer");
    h.on_message(3, &ControlKind::Decline, 0);
    assert_eq!(h.on_idle(100, 0), vec![(1, 0, offer.clone())]);
    h.on_message(1, &ControlKind::Assign { count: 1 }, 0);
    assert_eq!(h.on_idle(100, 0), vec![(1, 0, offer)]);
}

/// An offer the iteration's end left unanswered is not waited on in the
/// next: the worker offers help again (with or without slack).
#[test]
fn an_offer_left_unanswered_does_not_outlive_its_iteration() {
    let p = |done| ControlKind::Progress {
        done,
        total: 8,
        queued: 0,
        unit_us: 100,
    };
    let offer = ControlKind::Offer { unit_us: 100 };
    for slack in [0, 2] {
        let mut h = agent(0).with_slack(slack);
        h.begin(0, 2);
        h.on_own_unit_done(100);
        h.on_own_unit_done(100);
        h.on_message(3, &p(2), 0);
        assert_eq!(h.on_idle(100, 0), vec![(3, 0, offer.clone())]);
        // iteration 0 is reduced before 3 answers
        h.begin(1, 2);
        h.on_own_unit_done(100);
        h.on_own_unit_done(100);
        h.on_message(1, &p(3), 0);
        assert_eq!(
            h.on_idle(100, 1),
            vec![(1, 1, offer.clone())],
            "slack {slack}"
        );
    }
}

/// Under SSP a helper in iteration 5 that is blocked offers help with the
/// oldest open iteration, 4, to the peer that reported being behind there.
#[test]
fn a_helper_ahead_offers_help_with_the_oldest_open_iteration() {
    let mut h = agent(0);
    h.begin(4, 2);
    h.on_own_unit_done(100);
    h.on_own_unit_done(100);
    h.on_message(
        3,
        &ControlKind::Progress {
            done: 1,
            total: 8,
            queued: 0,
            unit_us: 500,
        },
        0,
    );
    h.begin(5, 2);
    h.on_own_unit_done(100);
    h.on_own_unit_done(100);
    h.note_progress(4, 2, 8, 8);
    let offer = ControlKind::Offer { unit_us: 100 };
    assert_eq!(h.on_idle(100, 4), vec![(3, 4, offer.clone())]);
    h.on_reply(4, 3, &ControlKind::Decline);
    assert!(h.on_idle(100, 4).is_empty(), "nobody else is behind");
    // once iteration 4 is reduced it is no longer offered
    assert!(h.on_idle(100, 5).is_empty());
    // and once the current one is reduced (the worker waits to begin the
    // next), there is nothing to offer at all
    assert!(h.on_idle(100, 6).is_empty());
}

/// Without slack no iteration but the current one is open: an agent told so
/// forgets the reports of the iteration it left (and so keeps no history).
#[test]
fn without_slack_reports_of_a_left_iteration_are_forgotten() {
    let behind = ControlKind::Progress {
        done: 1,
        total: 8,
        queued: 0,
        unit_us: 500,
    };
    for (slack, remembered) in [(1, true), (0, false)] {
        let mut h = agent(0).with_slack(slack);
        h.begin(4, 2);
        h.on_message(3, &behind, 0);
        h.begin(5, 2);
        h.on_own_unit_done(100);
        h.on_own_unit_done(100);
        let offers = h.on_idle(100, 4);
        assert_eq!(!offers.is_empty(), remembered, "slack {slack}: {offers:?}");
    }
}

/// Peers' units queued ahead of a helper's own list count in its work left:
/// loaded with a straggler's units, it hands its own tail to a peer that
/// went idle; without them it would keep it.
#[test]
fn peers_units_queued_ahead_count_in_a_helper_s_work_left() {
    let idle = ControlKind::Progress {
        done: 8,
        total: 8,
        queued: 0,
        unit_us: 100,
    };
    let mut helper = agent(1);
    helper.begin(0, 8);
    for _ in 0..6 {
        helper.on_own_unit_done(100);
    }
    helper.observe(None, 0, 0, 0);
    assert!(
        helper.on_message(2, &idle, 2).is_empty(),
        "two own units left"
    );
    helper.observe(None, 6, 0, 0);
    assert!(
        !helper.on_message(3, &idle, 2).is_empty(),
        "six queued ahead of them"
    );
}

fn broker_agent(me: u32, workers: u32) -> ReassignAgent {
    let config = ReassignConfig {
        broker: true,
        ..ReassignConfig::default()
    };
    ReassignAgent::new(me, helper_group(me, workers, workers, 3), config).with_broker(workers)
}

/// Under a broker every worker reports its pace once, after its first own
/// unit, to worker 0; the last pace in makes worker 0 tell the slow worker
/// whom to give how many, and the slow worker gives them as assignments
/// (its own total shrinking, at most what is left).
#[test]
fn the_broker_hears_every_pace_once_and_orders_the_slow_worker_to_give() {
    let mut agents: Vec<ReassignAgent> = (0..4).map(|w| broker_agent(w, 4)).collect();
    for a in agents.iter_mut() {
        a.begin(0, 16);
    }
    let mut at_0 = Vec::new();
    for (w, unit_us) in [(1u32, 100u64), (2, 100), (3, 500)] {
        let a = &mut agents[w as usize];
        a.observe(None, 0, 15, unit_us);
        let out = a.on_own_unit_done(unit_us);
        let paces: Vec<_> = out
            .iter()
            .filter(|(_, k)| matches!(k, ControlKind::Pace { .. }))
            .collect();
        assert_eq!(paces.len(), 1, "worker {w}: {out:?}");
        assert_eq!(paces[0].0, 0, "to worker 0");
        at_0.push((w, paces[0].1.clone(), unit_us));
        a.observe(None, 0, 14, 2 * unit_us);
        let again = a.on_own_unit_done(unit_us);
        assert!(
            !again
                .iter()
                .any(|(_, k)| matches!(k, ControlKind::Pace { .. })),
            "once per iteration"
        );
    }
    // Worker 0 reports into its own broker, then hears the others.
    agents[0].observe(None, 0, 15, 100);
    assert!(agents[0]
        .on_own_unit_done(100)
        .iter()
        .all(|(_, k)| !matches!(k, ControlKind::Give { .. })));
    let mut orders = Vec::new();
    for (w, pace, now) in at_0 {
        agents[0].observe(Some(10), 0, 0, now);
        orders.extend(agents[0].on_message(w, &pace, 14));
    }
    assert!(!orders.is_empty());
    assert!(
        orders
            .iter()
            .all(|(to, k)| *to == 3 && matches!(k, ControlKind::Give { .. })),
        "{orders:?}"
    );
    // The slow worker gives what it is told, from what it still has.
    let slow = &mut agents[3];
    slow.observe(Some(100), 0, 0, 600);
    let mut given = 0;
    for (_, order) in &orders {
        given += assigned(&slow.on_message(0, order, 14 - given as usize), {
            let ControlKind::Give { to, .. } = order else {
                unreachable!()
            };
            *to
        });
    }
    assert!(given >= 6, "gave {given}");
    // Told to give more than it has, it gives what is left.
    let greedy = ControlKind::Give {
        to: 1,
        count: 99,
        cut: 0,
    };
    assert_eq!(assigned(&slow.on_message(0, &greedy, 2), 1), 2);
    // An order in micro-batches: whole units, then a cut of the next (from
    // the list, or the unit in flight once the list is empty), which its
    // worker carries out.
    let mut cut = |count, cut, left| {
        let give = ControlKind::Give { to: 2, count, cut };
        slow.on_message(0, &give, left)
    };
    assert_eq!(
        cut(1, 3, 4),
        [
            (2, ControlKind::Assign { count: 1 }),
            (2, ControlKind::Cut { count: 3 })
        ]
    );
    assert_eq!(cut(0, 3, 0), [(2, ControlKind::Cut { count: 3 })]);
    assert_eq!(cut(0, 0, 4), []);
}

/// Under a broker a peer re-reports when it slows down, so an idle worker
/// does not offer help to one whose last report says it is done before a
/// unit of its could be: it offers to the one with work left, and to the
/// other not at all.
#[test]
fn under_the_broker_an_idle_worker_skips_a_peer_about_to_finish() {
    let report = |done, total| ControlKind::Progress {
        done,
        total,
        queued: 0,
        unit_us: 100,
    };
    let offers = |out: Vec<(u32, u64, ControlKind)>| -> Vec<u32> {
        out.into_iter()
            .filter(|(_, _, k)| matches!(k, ControlKind::Offer { .. }))
            .map(|(to, _, _)| to)
            .collect()
    };
    let mut h = broker_agent(5, 8);
    h.begin(0, 2);
    h.observe(None, 0, 1, 100);
    h.on_own_unit_done(100);
    h.observe(None, 0, 0, 1_000);
    // peer 2: two units of 100 µs left; peer 3: seven
    h.on_message(2, &report(2, 4), 0);
    h.on_message(3, &report(1, 8), 0);
    h.observe(None, 0, 0, 1_150);
    h.on_own_unit_done(100);
    assert_eq!(offers(h.on_idle(100, 0)), vec![3]);
    h.on_message(3, &ControlKind::Decline, 0);
    assert!(offers(h.on_idle(100, 0)).is_empty(), "2 is about done");
    // without the broker peer 2 is offered help as FlexRR's helpers do
    let mut plain = agent(1);
    plain.begin(0, 1);
    plain.on_own_unit_done(100);
    plain.on_message(2, &report(2, 4), 0);
    assert_eq!(offers(plain.on_idle(100, 0)), vec![2]);
}

/// Without a broker nobody reports a pace.
#[test]
fn without_a_broker_no_pace_is_sent() {
    let mut a = agent(1);
    a.begin(0, 4);
    a.observe(None, 0, 0, 0);
    assert!(a
        .on_own_unit_done(100)
        .iter()
        .all(|(_, k)| !matches!(k, ControlKind::Pace { .. })));
    assert!(a
        .on_idle(100, 0)
        .iter()
        .all(|(_, _, k)| !matches!(k, ControlKind::Pace { .. })));
}

/// A peer through its own list but with units queued ahead (handed over by
/// others) is not idle: its report says so, and a loaded worker gives it
/// only what evens out with that work, not what it would give an idle peer.
#[test]
fn a_peer_with_queued_units_is_not_taken_for_idle() {
    let report = |queued| ControlKind::Progress {
        done: 8,
        total: 8,
        queued,
        unit_us: 100,
    };
    let given = |queued| {
        let mut giver = agent(1);
        giver.begin(0, 16);
        for _ in 0..4 {
            giver.observe(None, 0, 12, 0);
            giver.on_own_unit_done(100);
        }
        giver.observe(None, 0, 12, 0);
        match giver.on_message(2, &report(queued), 12).as_slice() {
            [] => 0,
            [(2, ControlKind::Assign { count })] => *count,
            other => panic!("{other:?}"),
        }
    };
    assert!(given(0) >= 3, "an idle peer gets a share: {}", given(0));
    assert!(given(6) < given(0), "{} vs {}", given(6), given(0));
    assert_eq!(given(12), 0, "a peer with as much work left gets none");
}

/// Under the broker a straggler that may be one of several givers to the
/// peer that reported gives its part of a balance with all its helpers, not
/// its whole share: in a neighbourhood with several stragglers, each giving
/// its whole share to the first peer to report buried that peer (64 workers
/// on 2 cores, whose contention slows several neighbours at once). Alone, or
/// without the broker, it gives its whole share as before. A straggler
/// [`BROKERED_SLOWER`] times slower than the peer, whose pace the broker
/// heard that slow, gives nothing: the broker places its share.
#[test]
fn under_the_broker_one_of_several_stragglers_gives_its_part() {
    let progress = ControlKind::Progress {
        done: 36,
        total: 48,
        queued: 0,
        unit_us: 100,
    };
    let slow = |mut a: ReassignAgent, unit_us| {
        a.begin(0, 48);
        for _ in 0..7 {
            a.observe(None, 0, 41, 0);
            a.on_own_unit_done(unit_us);
        }
        a.observe(None, 0, 41, 0);
        a
    };
    // Worker 1, 2.5× slower than peer 2, with 41 units left; peers 3 and 0
    // not heard from yet: three may give to 2, and 2 is one of three
    // helpers. T = (3·41 + 3·12) / (3/250 + 3/100) = 3786 µs, by when worker
    // 1 does 15.1 of its own: (41 − 15.1) / 3 = 8.6 for worker 2.
    let mut brokered = slow(broker_agent(1, 4), 250);
    let part = assigned(&brokered.on_message(2, &progress, 41), 2);
    assert!((8..=9).contains(&part), "{part}");
    // Without the broker: the whole share.
    let mut alone = slow(agent(1), 250);
    let whole = assigned(&alone.on_message(2, &progress, 41), 2);
    assert!(part < whole, "{part} vs {whole}");
    // 5× slower: under the broker nothing; without it the whole share (see
    // `a_slow_worker_gives_enough_units_to_finish_together`).
    let mut brokered = slow(broker_agent(1, 4), 500);
    let out = brokered.on_message(2, &progress, 41);
    assert!(
        !out.iter()
            .any(|(_, k)| matches!(k, ControlKind::Assign { .. })),
        "{out:?}"
    );
    let mut alone = slow(agent(1), 500);
    assert_eq!(assigned(&alone.on_message(2, &progress, 41), 2), 13);
}

/// A worker slowed only after it told the broker its pace still gives on
/// a report under the broker: the broker balanced it at its old pace. Not
/// heard from yet, a worker that slow gives nothing (the broker takes it
/// for a straggler).
#[test]
fn under_the_broker_a_worker_slowed_after_its_pace_still_gives() {
    let progress = ControlKind::Progress {
        done: 36,
        total: 48,
        queued: 0,
        unit_us: 100,
    };
    let gives = |a: &mut ReassignAgent| {
        a.observe(None, 0, 41, 0);
        a.on_message(2, &progress, 41)
            .iter()
            .any(|(_, k)| matches!(k, ControlKind::Assign { .. }))
    };
    // Paced at 100 µs after its first unit, then 5× slow.
    let mut a = broker_agent(1, 4);
    a.begin(0, 48);
    a.observe(None, 0, 47, 0);
    a.on_own_unit_done(100);
    for k in 0..6 {
        a.observe(None, 0, 46 - k, 0);
        a.on_own_unit_done(100 + 400 * (k as u64 + 1) / 6 * 7 / 6);
    }
    assert!(gives(&mut a));
    // Not paced yet, its first unit in flight for 600 µs: nothing.
    let mut b = broker_agent(1, 4);
    b.begin(0, 48);
    b.observe(Some(600), 0, 47, 600);
    assert!(!b
        .on_message(2, &progress, 47)
        .iter()
        .any(|(_, k)| matches!(k, ControlKind::Assign { .. })));
}

/// The peer a worker passes queued units on to when more are handed to it:
/// of those that reported, the one with the least work left by now, not
/// the one that handed them; what it passes counts in its view of that
/// peer; once an iteration.
#[test]
fn the_freest_peer_is_the_one_with_least_work_left_counting_units_passed() {
    let mut a = agent(0);
    a.begin(0, 8);
    let report = |done, unit_us| ControlKind::Progress {
        done,
        total: 8,
        queued: 0,
        unit_us,
    };
    // At 0: peer 1 has 4 units of 100 µs left, peer 2 has 1 of 300, peer 3 none.
    a.observe(None, 0, 8, 0);
    a.on_message(1, &report(4, 100), 8);
    a.on_message(2, &report(7, 300), 8);
    a.observe(None, 0, 8, 50);
    a.on_message(3, &report(8, 100), 8);
    // At 100: peer 3 free (0 µs), peer 2 200 µs, peer 1 300 µs.
    a.observe(None, 0, 8, 100);
    let (peer, taker) = a.freest_peer(u32::MAX).expect("a peer");
    assert_eq!((peer, taker.ahead_us, taker.unit_us), (3, 0, 100));
    // Not the one that handed the units.
    assert_eq!(a.freest_peer(3).map(|p| p.0), Some(2));
    // Three units passed to 3 make it 300 µs: 2 is freest.
    a.passed(3, 3);
    assert_eq!(
        a.freest_peer(u32::MAX).map(|p| (p.0, p.1.ahead_us)),
        Some((2, 200))
    );
    // Once it passed units on to such a peer, none until the next
    // iteration.
    a.forwarded();
    assert!(a.freest_peer(u32::MAX).is_none());
    a.begin(1, 8);
    a.observe(None, 0, 8, 200);
    a.on_message(3, &report(4, 100), 8);
    assert_eq!(a.freest_peer(u32::MAX).map(|p| p.0), Some(3));
    // Nobody reported: none.
    assert!(agent(1).freest_peer(u32::MAX).is_none());
}

/// Under the broker a worker slowed after its report at the mark reports
/// again as soon as a unit shows it (its time per unit 1.5-fold since it
/// last reported), not only at its last unit; without the broker
/// (FlexRR's protocol) it does not.
#[test]
fn a_worker_slowed_after_its_mark_reports_at_once_under_the_broker() {
    let progress_reports = |a: &mut ReassignAgent, unit_us: u64, left: usize| {
        a.observe(None, 0, left, 0);
        a.on_own_unit_done(unit_us)
            .into_iter()
            .filter(|(_, k)| matches!(k, ControlKind::Progress { .. }))
            .count()
    };
    for broker in [true, false] {
        let mut a = if broker { broker_agent(1, 4) } else { agent(1) };
        a.begin(0, 12);
        let mut reports = 0;
        for k in 0..9 {
            reports += progress_reports(&mut a, 100, 11 - k);
        }
        assert_eq!(reports, 3, "the mark, to each of 3 peers");
        // Slowed: 140 µs (under 1.5-fold) says nothing; 500 µs does.
        assert_eq!(progress_reports(&mut a, 140, 2), 0);
        let slowed = progress_reports(&mut a, 500, 1);
        assert_eq!(slowed, if broker { 3 } else { 0 }, "broker {broker}");
        // Again only once it grows 1.5-fold more; the end is reported anyway.
        assert_eq!(progress_reports(&mut a, 500, 0), 3);
    }
}

/// Under the broker, a worker that hears from a peer well behind it (more
/// than two of its own units) answers once with its own progress, so the
/// peer can give it units now; a peer about level gets nothing, and without
/// the broker nobody answers.
#[test]
fn a_report_from_a_peer_far_behind_is_answered_once_with_ours() {
    let behind = ControlKind::Progress {
        done: 8,
        total: 12,
        queued: 0,
        unit_us: 500,
    };
    let level = ControlKind::Progress {
        done: 8,
        total: 12,
        queued: 0,
        unit_us: 100,
    };
    for broker in [true, false] {
        let mut a = if broker { broker_agent(2, 4) } else { agent(2) };
        a.begin(0, 12);
        for k in 0..9 {
            a.observe(None, 0, 11 - k, 0);
            a.on_own_unit_done(100);
        }
        a.observe(None, 0, 3, 0);
        assert!(a.on_message(3, &level, 3).is_empty());
        let out = a.on_message(1, &behind, 3);
        if broker {
            assert_eq!(
                out,
                vec![(
                    1,
                    ControlKind::Progress {
                        done: 9,
                        total: 12,
                        queued: 0,
                        unit_us: 100
                    }
                )]
            );
        } else {
            assert!(out.is_empty(), "{out:?}");
        }
        assert!(a.on_message(1, &behind, 3).is_empty(), "once an iteration");
    }
}

/// Under the broker a worker gives nothing to a peer that is slowed itself
/// (over `SLOW_PACE` times the median pace of the peers that reported):
/// the units could not be handed on from there. Two workers of a disrupted
/// machine would otherwise balance with each other; without the broker
/// (FlexRR's protocol) they still do.
#[test]
fn no_gift_to_a_peer_slowed_itself_under_the_broker() {
    // Fast peers with as much work left as we have: no gift to them.
    let fast = ControlKind::Progress {
        done: 2,
        total: 32,
        queued: 0,
        unit_us: 100,
    };
    let slowed = ControlKind::Progress {
        done: 9,
        total: 12,
        queued: 0,
        unit_us: 500,
    };
    for broker in [true, false] {
        let config = ReassignConfig {
            broker,
            ..ReassignConfig::default()
        };
        let mut a = ReassignAgent::new(4, (0..8).filter(|&w| w != 4).collect(), config);
        a.begin(0, 12);
        for k in 0..4 {
            a.observe(None, 0, 11 - k, 0);
            a.on_own_unit_done(100);
        }
        a.observe(None, 0, 7, 0);
        a.on_own_unit_done(500);
        let mut left = 6;
        for peer in [0, 1, 2] {
            a.observe(None, 0, left, 0);
            for (_, sent) in a.on_message(peer, &fast, left) {
                if let ControlKind::Assign { count } = sent {
                    left -= count as usize;
                }
            }
        }
        assert_eq!(left, 6);
        // Worker 5, slowed like us with 3 left, against our 3+ at 500 µs.
        a.observe(None, 0, left, 0);
        let out = a.on_message(5, &slowed, left);
        let to_5 = out
            .iter()
            .any(|(to, k)| *to == 5 && matches!(k, ControlKind::Assign { .. }));
        assert_eq!(to_5, !broker, "broker {broker}: {out:?} ({left} left)");
    }
}
