//! The load-balancing bound of real runs: the work spread over the workers in
//! proportion to their injected speed.

use crate::common::{plan, run, STRAGGLER};

/// Σ over iterations of the rows at 4 µs a row (the pace) over the combined
/// speed of three workers at full speed and one 4× slower, µs.
fn fluid_us(out: &forestall::run::RunOutput) -> f64 {
    out.iterations
        .iter()
        .map(|r| r.rows as f64 * 4.0 / 3.25)
        .sum()
}

#[test]
fn bsp_under_a_persistent_straggler_is_well_above_the_bound() {
    let out = run(&plan(&format!("{STRAGGLER}\n[policy]\nname = \"bsp\"\n")));
    let walls: u64 = out.iterations.iter().map(|r| r.wall_us).sum();
    let bound = out.bound_us as f64;
    let fluid = fluid_us(&out);
    // The bound is the fluid time plus the earliest parameter arrival of each
    // iteration (≥ 0), and rounds to the µs.
    assert!(
        bound >= fluid - out.iterations.len() as f64,
        "bound {bound} µs below the fluid {fluid} µs"
    );
    assert!(
        bound < walls as f64,
        "bound {bound} µs, iterations {walls} µs"
    );
    // The slow worker holds 1/4 of the work at 4×: BSP takes ≈ 3.25× the
    // fluid time, less the share of fixed costs.
    assert!(
        walls as f64 > 2.0 * bound,
        "bsp {walls} µs against a bound of {bound} µs"
    );
}

#[test]
fn moving_work_closes_on_the_bound() {
    let bsp = run(&plan(&format!("{STRAGGLER}\n[policy]\nname = \"bsp\"\n")));
    let moved = run(&plan(&format!(
        "{STRAGGLER}\n[policy]\nname = \"rapid-reassign\"\n"
    )));
    let ratio = |out: &forestall::run::RunOutput| {
        out.iterations.iter().map(|r| r.wall_us).sum::<u64>() as f64 / out.bound_us as f64
    };
    // the same work and speeds give the same bound, give or take the fixed part
    let (b1, b2) = (bsp.bound_us as f64, moved.bound_us as f64);
    assert!((b1 - b2).abs() < 0.25 * b1, "bounds {b1} and {b2} µs");
    assert!(
        ratio(&moved) < ratio(&bsp),
        "rapid-reassign {:.2}× the bound, bsp {:.2}×",
        ratio(&moved),
        ratio(&bsp)
    );
}

/// A disrupted window slows only the work inside it: every unit's recorded
/// slowdown and injected delay are what [`StragglerSchedule::stretch`] says
/// for its start and its undelayed (paced) length, and with windows about as
/// long as a unit some units straddle a window's edge and meet less than the
/// full factor.
#[test]
fn a_disrupted_window_slows_only_the_work_inside_it() {
    use forestall::inject::StragglerSchedule;
    use std::time::Duration;
    let p = plan(
        "[job]\niterations = 6\nseed = 4\n[data]\npartitions = 8\nunits_per_partition = 4\n\
         batch_fraction = 0.5\n[workers]\ncount = 4\npace_ns_per_row = 4000\n\
         [straggler]\npattern = \"disrupted-machine\"\nprobability = 0.5\nperiod_ms = 3\n\
         delay_percent = 400\nworkers_per_machine = 2\n[policy]\nname = \"bsp\"\n",
    );
    let schedule = StragglerSchedule::new(p.seed, p.pattern.clone(), p.workers);
    let dir = tempfile::tempdir().expect("temp dir");
    crate::common::run_in(&p, dir.path());
    let trace = forestall::trace::read_trace_dir(dir.path()).expect("trace reads");
    let mut straddled = 0;
    for u in &trace.units {
        let base = Duration::from_nanos(4_000 * u64::from(u.rows));
        let s = schedule.stretch(u.executor, u.iteration, u.start_us, base);
        assert_eq!(s.slowdown.to_bits(), u.gt_slowdown.to_bits(), "{u:?}");
        let delay = s.span.saturating_sub(base).as_micros() as u64;
        assert_eq!(delay, u.gt_delay_us, "{u:?}");
        straddled += usize::from(u.gt_slowdown > 1.0 && u.gt_slowdown < 5.0);
    }
    assert!(straddled > 0, "no unit met a window's edge");
}
