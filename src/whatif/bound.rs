//! The load-balancing bounds of a replayed iteration, computed as the run's
//! bounds (`run::bound`) are, to the bit, at a cost that does not grow with
//! the units when many workers share a speed.
//!
//! The bound with whole units places every unit where it finishes earliest:
//! worker `w`'s k-th unit ends at `c_w` added k times (its cost per unit), and
//! the makespan is the largest of the `units` earliest such ends, that is,
//! the `units`-th smallest of them all. Workers of the same cost have the
//! same ends, so they are merged as one class of that many workers: a
//! trace of 10,000 workers at two speeds takes a few thousand steps an
//! iteration instead of a heap of 10,000 workers stepped for every unit.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The fluid bound of `work` on workers of these `speeds` (work per unit of
/// time) and the bound with the work cut into `units` equal units (never
/// below the fluid one); zero without speed.
pub(super) fn fluid_and_whole(work: f64, units: u64, speeds: &[f64]) -> (f64, f64) {
    let speed: f64 = speeds.iter().sum();
    if speed <= 0.0 {
        return (0.0, 0.0);
    }
    let fluid = work / speed;
    let whole = if units > 0 {
        whole_units_makespan(units, work / units as f64, speeds).max(fluid)
    } else {
        fluid
    };
    (fluid, whole)
}

/// The makespan of `units` units of `unit_us` nominal work each on workers
/// of these `speeds`, each unit placed where it finishes earliest.
fn whole_units_makespan(units: u64, unit_us: f64, speeds: &[f64]) -> f64 {
    // Costs are ≥ 0, so their bits order like the numbers.
    let mut costs: Vec<u64> = speeds
        .iter()
        .filter(|&&s| s > 0.0)
        .map(|s| (unit_us / s).to_bits())
        .collect();
    if costs.is_empty() {
        return 0.0;
    }
    costs.sort_unstable();
    // (cost, workers at that cost).
    let mut classes: Vec<(u64, u64)> = Vec::new();
    for c in costs {
        match classes.last_mut() {
            Some((cost, n)) if *cost == c => *n += 1,
            _ => classes.push((c, 1)),
        }
    }
    // Each class's next end; ends only grow, so the one popped last is the
    // largest.
    let mut next: BinaryHeap<Reverse<(u64, usize)>> = classes
        .iter()
        .enumerate()
        .map(|(j, &(c, _))| Reverse((c, j)))
        .collect();
    let mut placed = 0u64;
    loop {
        let Some(Reverse((end, j))) = next.pop() else {
            return 0.0;
        };
        let (cost, workers) = classes[j];
        placed += workers;
        let end = f64::from_bits(end);
        if placed >= units {
            return end;
        }
        next.push(Reverse(((end + f64::from_bits(cost)).to_bits(), j)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit for bit what the run's bound computes, at speeds shared by many
    /// workers, all different, or a mix; with more and fewer units than
    /// workers, and workers without speed.
    #[test]
    fn the_same_bounds_as_the_runs_to_the_bit() {
        let draw = |k: u64, i: u64| crate::rng::uniform(&[77, k, i]);
        for case in 0..60u64 {
            let workers = 1 + (draw(case, 0) * 300.0) as u64;
            let distinct = 1 + (draw(case, 1) * 6.0) as u64;
            let speeds: Vec<f64> = (0..workers)
                .map(|w| match case % 3 {
                    // A few speeds shared by many.
                    0 => 1.0 / (10.0 + 40.0 * ((w * 7 + case) % distinct) as f64),
                    // Every worker its own.
                    1 => draw(case, 100 + w) * 0.3,
                    // Shared speeds, some workers without.
                    _ if w % 5 == 0 => 0.0,
                    _ => 0.1 / (1.0 + ((w + case) % distinct) as f64 * 0.37),
                })
                .collect();
            let units = (draw(case, 2) * 5.0 * workers as f64) as u64;
            let work = draw(case, 3) * 1e6;
            let ours = fluid_and_whole(work, units, &speeds);
            let runs = crate::run::bound::fluid_and_whole(work, units, &speeds);
            assert_eq!(
                (ours.0.to_bits(), ours.1.to_bits()),
                (runs.0.to_bits(), runs.1.to_bits()),
                "case {case}: {workers} workers, {units} units"
            );
        }
        assert_eq!(fluid_and_whole(10.0, 4, &[0.0, 0.0]), (0.0, 0.0));
        assert_eq!(
            fluid_and_whole(0.0, 4, &[1.0, 2.0]),
            crate::run::bound::fluid_and_whole(0.0, 4, &[1.0, 2.0])
        );
    }
}
