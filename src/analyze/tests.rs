use super::*;

/// `busy[i][w]` with rows 10 each and walls = the longest busy + `overhead`.
fn observed(busy: Vec<Vec<u64>>, overhead: u64) -> Observed {
    let n = busy[0].len();
    Observed {
        workers: n,
        iterations: (0..busy.len() as u64).collect(),
        wall: busy
            .iter()
            .map(|b| b.iter().filter(|&&x| x != MISSING).max().unwrap() + overhead)
            .collect(),
        laggard: vec![None; busy.len()],
        rows: vec![vec![10; n]; busy.len()],
        barrier: vec![vec![0; n]; busy.len()],
        unit_us: (0..n)
            .map(|w| busy.iter().map(|b| b[w] as u32).collect())
            .collect(),
        busy,
        ..Observed::default()
    }
}

#[test]
fn one_slow_worker_owns_the_slowdown() {
    let busy = vec![vec![100, 100, 100, 200]; 10];
    let a = analyze_observed("t", &observed(busy, 0), 0.25, None);
    assert!((a.slowdown - 2.0).abs() < 1e-12, "{}", a.slowdown);
    assert_eq!(a.per_worker[3].class, Straggling::Persistent);
    assert!((a.per_worker[3].share_of_slowdown - 1.0).abs() < 1e-12);
    assert_eq!(a.per_worker[0].share_of_slowdown, 0.0);
    assert_eq!(a.per_worker[0].class, Straggling::None);
    assert_eq!(a.iterations_with_stragglers, 10);
    assert_eq!(a.per_worker[3].median_unit_us, 200.0);
}

#[test]
fn overhead_beyond_the_slowest_worker_is_kept_in_the_ideal() {
    let busy = vec![vec![100, 100, 100, 200]; 4];
    let a = analyze_observed("t", &observed(busy, 100), 0.25, None);
    // actual 300, ideal 100 + 100.
    assert!((a.slowdown - 1.5).abs() < 1e-12, "{}", a.slowdown);
}

#[test]
fn a_balanced_trace_has_no_slowdown_and_a_transient_blip_is_transient() {
    let mut busy = vec![vec![100, 100, 100, 100]; 10];
    busy[4][1] = 500;
    let a = analyze_observed("t", &observed(busy, 0), 0.25, None);
    assert_eq!(a.per_worker[1].class, Straggling::Transient);
    assert_eq!(a.per_worker[1].evidence.slow, 1);
    assert_eq!(a.incidence[4].stragglers, 1);
    assert_eq!(a.iterations_with_stragglers, 1);
    assert!((a.slowdown - 1.4).abs() < 1e-12, "{}", a.slowdown);
}

#[test]
fn a_worker_missing_from_iterations_is_counted_not_fatal() {
    let mut busy = vec![vec![100, 100, 100]; 3];
    busy[1][2] = MISSING;
    let mut o = observed(busy, 0);
    o.missing_rows = 1;
    let a = analyze_observed("t", &o, 0.25, None);
    assert_eq!(a.missing_rows, 1);
    assert_eq!(a.per_worker[2].evidence.iterations, 2);
    assert!((a.slowdown - 1.0).abs() < 1e-12);
}

#[test]
fn zero_durations_do_not_divide_by_zero() {
    let busy = vec![vec![0, 0, 0]; 3];
    let a = analyze_observed("t", &observed(busy, 0), 0.25, None);
    assert_eq!(a.slowdown, 1.0);
    assert!(a.per_worker.iter().all(|w| w.slowdown.is_finite()));
}

#[test]
fn a_slow_stage_is_structural() {
    // Workers 2 and 3 form stage 1, both slow.
    let busy = vec![vec![100, 100, 200, 210]; 6];
    let a = analyze_observed("t", &observed(busy, 0), 0.25, Some(&[0, 0, 1, 1]));
    assert_eq!(a.per_worker[2].class, Straggling::Structural);
    assert_eq!(a.per_worker[3].class, Straggling::Structural);
    assert!(
        a.per_worker[2].why.contains("stage"),
        "{}",
        a.per_worker[2].why
    );
}

#[test]
fn percentiles_take_the_nearest_rank() {
    let v: Vec<u32> = (1..=100).collect();
    assert_eq!(percentile(&v, 50.0), 50.0);
    assert_eq!(percentile(&v, 95.0), 95.0);
    assert_eq!(percentile(&v, 99.0), 99.0);
    assert_eq!(percentile(&[], 50.0), 0.0);
}

#[test]
fn online_predictions_are_scored_when_present() {
    let mut o = observed(vec![vec![100, 100]; 2], 0);
    assert_eq!(
        analyze_observed("t", &o, 0.25, None).online_predictions,
        None
    );
    o.predictions = vec![(110.0, 100.0), (90.0, 100.0)];
    let s = analyze_observed("t", &o, 0.25, None)
        .online_predictions
        .expect("scored");
    assert_eq!((s.predictions, s.mae_us), (2, 10.0));
    assert!((s.mape - 0.1).abs() < 1e-12);
}

/// A link's time counts as where a slow iteration went only beyond what the
/// link takes in the worker's other iterations: a transit every iteration
/// has (a loaded machine's wake-ups) leaves a compute slowdown `compute`; a
/// transit that grows with the slowdown is `link`; a link slow in every
/// iteration has no other iteration to compare with and is `link` too.
#[test]
fn a_link_is_named_by_its_time_beyond_its_usual() {
    let mut busy = vec![vec![100, 100, 100, 100]; 10];
    let mut transit = vec![vec![0, 30, 0, 0]; 10];
    busy[3][1] = 200;
    transit[3][1] = 40;
    busy[6][2] = 200;
    transit[6][2] = 90;
    busy.iter_mut().for_each(|b| b[3] = 200);
    transit.iter_mut().for_each(|t| t[3] = 90);
    let o = Observed {
        transit,
        ..observed(busy, 0)
    };
    let a = analyze_observed("t", &o, 0.25, None);
    let verdicts: Vec<_> = a.per_worker.iter().map(|w| w.slow_in).collect();
    assert_eq!(verdicts, ["none", "compute", "link", "link"]);
    // 10 µs beyond its usual 30 of its 50 µs over the median (150)
    assert!((a.per_worker[1].link_share - 0.2).abs() < 1e-12);
}
