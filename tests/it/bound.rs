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
