//! The straggler schedule: a pure function from (worker, iteration, time) to a slowdown.

use super::Pattern;
use crate::rng::{self, KeyedRng};

/// The largest slowdown factor a schedule ever returns.
///
/// Valid knobs stay far below it; it only bounds what extreme inputs (α barely above
/// 1 with an infinite cap, an enormous delay) would otherwise turn into an infinite
/// or overflowing unit duration.
pub const MAX_SLOWDOWN: f64 = 1.0e6;

// Stream tags keep the patterns' draws independent of each other (and of the other
// modules' uses of `rng`) for the same seed. ASCII of the pattern's name.
const STREAM_SLOW_WORKER: u64 = u64::from_be_bytes(*b"inj-slow");
const STREAM_SLOW_LINK: u64 = u64::from_be_bytes(*b"inj-link");
const STREAM_DISRUPT_FIRE: u64 = u64::from_be_bytes(*b"inj-dfir");
const STREAM_DISRUPT_PICK: u64 = u64::from_be_bytes(*b"inj-dpik");
const STREAM_POWER_LAW: u64 = u64::from_be_bytes(*b"inj-powl");

/// Which worker is how much slower, when: a [`Pattern`] made concrete by a seed and
/// a worker count.
///
/// Every answer is a pure function of (seed, pattern, worker count) and the
/// arguments, so all policies, replays and tests see the same adversity; see the
/// [module docs](crate::inject) for the contract.
///
/// # Examples
///
/// ```
/// use forestall::inject::{Pattern, StragglerSchedule};
///
/// // FlexRR: 50 % of the workers carry 75 % of the work.
/// let pattern = Pattern::Persistent { workers: vec![0, 1], factor: 1.0, work_share: Some(0.75) };
/// let schedule = StragglerSchedule::new(1, pattern, 4);
/// assert_eq!(schedule.work_weights(), Some(vec![0.375, 0.375, 0.125, 0.125]));
/// assert_eq!(schedule.slowdown(0, 3, 0), 1.0);
/// ```
#[derive(Debug, Clone)]
pub struct StragglerSchedule {
    seed: u64,
    pattern: Pattern,
    workers: u32,
    /// `Persistent`'s listed workers, sorted and deduplicated (empty otherwise).
    listed: Vec<u32>,
}

impl StragglerSchedule {
    /// The schedule of `pattern` for a job with `workers` workers, drawn from `seed`.
    pub fn new(seed: u64, pattern: Pattern, workers: u32) -> Self {
        let listed = match &pattern {
            Pattern::Persistent { workers, .. } => {
                let mut listed = workers.clone();
                listed.sort_unstable();
                listed.dedup();
                listed
            }
            _ => Vec::new(),
        };
        Self {
            seed,
            pattern,
            workers,
            listed,
        }
    }

    /// The pattern this schedule realises.
    pub fn pattern(&self) -> &Pattern {
        &self.pattern
    }

    /// The seed the schedule was drawn from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The number of workers of the job.
    pub fn workers(&self) -> u32 {
        self.workers
    }

    /// The rate `worker`'s outgoing link is limited to in `iteration`,
    /// Mbit/s (`slow-link`); None when it is not limited.
    pub fn link_mbps(&self, worker: u32, iteration: u64) -> Option<f64> {
        match &self.pattern {
            Pattern::SlowLink {
                probability,
                link_mbps,
            } => {
                let u = rng::uniform(&[self.seed, STREAM_SLOW_LINK, u64::from(worker), iteration]);
                (u < *probability).then_some(*link_mbps)
            }
            _ => None,
        }
    }

    /// How long `bytes` take through a link of `mbps` Mbit/s.
    pub fn over_link(bytes: u64, mbps: f64) -> std::time::Duration {
        std::time::Duration::from_secs_f64(bytes as f64 * 8.0 / (mbps * 1e6))
    }

    /// How many times slower `worker` runs in `iteration` at `time_us` microseconds
    /// after the job started.
    ///
    /// Always finite and in `[1.0, MAX_SLOWDOWN]`. Only
    /// [`Pattern::DisruptedMachine`] looks at `time_us`; the others look at
    /// `iteration` only.
    pub fn slowdown(&self, worker: u32, iteration: u64, time_us: u64) -> f64 {
        let factor = match &self.pattern {
            Pattern::None => 1.0,
            Pattern::SlowWorker {
                probability,
                delay_percent,
            } => {
                let u =
                    rng::uniform(&[self.seed, STREAM_SLOW_WORKER, u64::from(worker), iteration]);
                if u < *probability {
                    delay_factor(*delay_percent)
                } else {
                    1.0
                }
            }
            Pattern::DisruptedMachine {
                period_us,
                delay_percent,
                workers_per_machine,
                ..
            } => {
                let window = time_us / (*period_us).max(1);
                let machine = worker / (*workers_per_machine).max(1);
                if self.disrupted_machine(window) == Some(machine) {
                    delay_factor(*delay_percent)
                } else {
                    1.0
                }
            }
            Pattern::PowerLaw {
                alpha,
                max_slowdown,
            } => {
                let u = rng::uniform(&[self.seed, STREAM_POWER_LAW, u64::from(worker), iteration]);
                // Inverse CDF of the Pareto(x_min = 1, shape α − 1): P(X > x) = x^−(α−1).
                // 1 − u is in (0, 1], so x ≥ 1; it may overflow to +inf when α is barely
                // above 1, and α ≤ 1 (or NaN) has no normalisable density: both hit the cap.
                let x = if *alpha > 1.0 {
                    (1.0 - u).powf(-1.0 / (alpha - 1.0))
                } else {
                    f64::INFINITY
                };
                x.min(*max_slowdown)
            }
            Pattern::Persistent { factor, .. } => {
                if self.listed.binary_search(&worker).is_ok() {
                    *factor
                } else {
                    1.0
                }
            }
            // a slow link slows no compute
            Pattern::SlowLink { .. } => 1.0,
        };
        sanitize(factor)
    }

    /// The machine disrupted during window `window` (the time span
    /// `[window · period_us, (window + 1) · period_us)` since the job started), if any.
    ///
    /// Always `None` for patterns other than [`Pattern::DisruptedMachine`].
    pub fn disrupted_machine(&self, window: u64) -> Option<u32> {
        let Pattern::DisruptedMachine {
            probability,
            workers_per_machine,
            ..
        } = &self.pattern
        else {
            return None;
        };
        let machines = self.workers.div_ceil((*workers_per_machine).max(1));
        if machines == 0 {
            return None;
        }
        let u = rng::uniform(&[self.seed, STREAM_DISRUPT_FIRE, window]);
        if u < *probability {
            let pick =
                KeyedRng::new(&[self.seed, STREAM_DISRUPT_PICK, window]).below(u64::from(machines));
            // `below(n)` is in `0..n`, and n fits in u32.
            Some(u32::try_from(pick).unwrap_or(machines - 1))
        } else {
            None
        }
    }

    /// Relative amount of data per worker (summing to 1), when the pattern makes it
    /// uneven: [`Pattern::Persistent`] with `work_share: Some(s)` gives the listed
    /// workers `s` between them and the others `1 − s`, split evenly within each
    /// group.
    ///
    /// `None` when the data is uniform: every other pattern, no `work_share`, or a
    /// listed set that is empty or covers every worker. Listed indices outside
    /// `0..workers` are ignored; `s` is clamped to `[0, 1]`.
    pub fn work_weights(&self) -> Option<Vec<f64>> {
        let Pattern::Persistent {
            work_share: Some(share),
            ..
        } = &self.pattern
        else {
            return None;
        };
        if share.is_nan() {
            return None;
        }
        let share = share.clamp(0.0, 1.0);
        let listed = self.listed.iter().filter(|&&w| w < self.workers).count();
        let others = self.workers as usize - listed;
        if listed == 0 || others == 0 {
            return None;
        }
        let per_listed = share / listed as f64;
        let per_other = (1.0 - share) / others as f64;
        Some(
            (0..self.workers)
                .map(|w| {
                    if self.listed.binary_search(&w).is_ok() {
                        per_listed
                    } else {
                        per_other
                    }
                })
                .collect(),
        )
    }

    /// `period_us` of a [`Pattern::DisruptedMachine`] (at least 1), `None` otherwise.
    pub(crate) fn disruption_period_us(&self) -> Option<u64> {
        match &self.pattern {
            Pattern::DisruptedMachine { period_us, .. } => Some((*period_us).max(1)),
            _ => None,
        }
    }
}

/// The factor of a `delay_percent` delay: `1 + delay_percent / 100`.
fn delay_factor(delay_percent: f64) -> f64 {
    1.0 + delay_percent / 100.0
}

/// Forces a factor into `[1, MAX_SLOWDOWN]`; NaN (from NaN knobs) means no slowdown.
fn sanitize(factor: f64) -> f64 {
    if factor.is_nan() {
        1.0
    } else {
        factor.clamp(1.0, MAX_SLOWDOWN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const N: u64 = 200_000;

    /// Five binomial standard deviations of a frequency estimated from `n` draws.
    fn tolerance(p: f64, n: u64) -> f64 {
        5.0 * (p * (1.0 - p) / n as f64).sqrt() + 1e-12
    }

    fn slow_worker(probability: f64, delay_percent: f64) -> Pattern {
        Pattern::SlowWorker {
            probability,
            delay_percent,
        }
    }

    fn power_law(alpha: f64, max_slowdown: f64) -> Pattern {
        Pattern::PowerLaw {
            alpha,
            max_slowdown,
        }
    }

    fn disrupted(probability: f64, workers_per_machine: u32) -> Pattern {
        Pattern::DisruptedMachine {
            probability,
            period_us: 250_000,
            delay_percent: 150.0,
            workers_per_machine,
        }
    }

    /// `N` slowdowns over a 16-worker grid, iteration-major.
    fn draws(schedule: &StragglerSchedule) -> Vec<f64> {
        (0..N / 16)
            .flat_map(|i| (0..16).map(move |w| (w, i)))
            .map(|(w, i)| schedule.slowdown(w, i, i * 1_000))
            .collect()
    }

    #[test]
    fn none_never_slows() {
        let schedule = StragglerSchedule::new(3, Pattern::None, 16);
        assert!(draws(&schedule).iter().all(|&x| x == 1.0));
        assert_eq!(schedule.disrupted_machine(0), None);
        assert_eq!(schedule.work_weights(), None);
    }

    #[test]
    fn slow_worker_frequency_is_p_and_factor_is_exact() {
        let delay = 37.5;
        let expected_factor = 1.0 + delay / 100.0;
        for p in [0.05, 0.3, 0.5] {
            let schedule = StragglerSchedule::new(11, slow_worker(p, delay), 16);
            let xs = draws(&schedule);
            let slowed: Vec<f64> = xs.iter().copied().filter(|&x| x != 1.0).collect();
            for x in &slowed {
                assert_eq!(x.to_bits(), expected_factor.to_bits());
            }
            let freq = slowed.len() as f64 / N as f64;
            assert!(
                (freq - p).abs() < tolerance(p, N),
                "p {p}: frequency {freq}"
            );
        }
    }

    #[test]
    fn slow_worker_extremes_of_p() {
        let never = StragglerSchedule::new(5, slow_worker(0.0, 100.0), 16);
        assert!(draws(&never).iter().all(|&x| x == 1.0));
        let always = StragglerSchedule::new(5, slow_worker(1.0, 100.0), 16);
        assert!(draws(&always).iter().all(|&x| x == 2.0));
    }

    #[test]
    fn slow_workers_are_independent_of_each_other() {
        let p = 0.3;
        let schedule = StragglerSchedule::new(17, slow_worker(p, 100.0), 2);
        let both = (0..N)
            .filter(|&i| schedule.slowdown(0, i, 0) > 1.0 && schedule.slowdown(1, i, 0) > 1.0)
            .count() as f64
            / N as f64;
        assert!((both - p * p).abs() < tolerance(p * p, N), "both {both}");
    }

    /// E[min(X, c)] for P(X > x) = x^−(a−1), x ≥ 1: 1 + ∫₁ᶜ x^−(a−1) dx.
    fn capped_mean(a: f64, c: f64) -> f64 {
        1.0 + (1.0 - c.powf(-(a - 2.0))) / (a - 2.0)
    }

    /// E[min(X, c)²] = 1 + ∫₁ᶜ 2x · x^−(a−1) dx (a ≠ 3).
    fn capped_second_moment(a: f64, c: f64) -> f64 {
        1.0 + 2.0 * (1.0 - c.powf(-(a - 3.0))) / (a - 3.0)
    }

    #[test]
    fn power_law_tail_and_mean_match_pareto() {
        let cap = 1.0e9;
        for alpha in [4.0, 7.0, 11.0] {
            let schedule = StragglerSchedule::new(23, power_law(alpha, cap), 16);
            let xs = draws(&schedule);
            assert!(xs.iter().all(|&x| (1.0..=cap).contains(&x)));
            for x in [1.1, 1.25, 1.5, 2.0] {
                let expected = f64::powf(x, -(alpha - 1.0));
                let tail = xs.iter().filter(|&&v| v > x).count() as f64 / N as f64;
                assert!(
                    (tail - expected).abs() < tolerance(expected, N),
                    "alpha {alpha}: P(X > {x}) = {tail}, expected {expected}"
                );
            }
            // Uncapped mean (α − 1)/(α − 2); the cap at 1e9 changes it by < 1e-18.
            let mean = xs.iter().sum::<f64>() / N as f64;
            let expected = (alpha - 1.0) / (alpha - 2.0);
            assert!((capped_mean(alpha, cap) - expected).abs() < 1e-12);
            let var = capped_second_moment(alpha, cap) - expected * expected;
            let tol = 5.0 * (var / N as f64).sqrt();
            assert!(
                (mean - expected).abs() < tol,
                "alpha {alpha}: mean {mean}, expected {expected} ± {tol}"
            );
        }
    }

    #[test]
    fn power_law_cap_holds_and_shapes_the_mean() {
        let (alpha, cap) = (4.0, 1.5);
        let schedule = StragglerSchedule::new(29, power_law(alpha, cap), 16);
        let xs = draws(&schedule);
        assert!(xs.iter().all(|&x| (1.0..=cap).contains(&x)));
        // The mass above the cap sits on it.
        let at_cap = xs.iter().filter(|&&x| x == cap).count() as f64 / N as f64;
        let expected = f64::powf(cap, -(alpha - 1.0));
        assert!(
            (at_cap - expected).abs() < tolerance(expected, N),
            "{at_cap}"
        );
        // Known answer: E[min(X, 1.5)] = 1 + (1 − 1.5⁻²)/2 = 23/18.
        let mean = xs.iter().sum::<f64>() / N as f64;
        let m1 = capped_mean(alpha, cap);
        assert!((m1 - 23.0 / 18.0).abs() < 1e-12);
        let var = capped_second_moment(alpha, cap) - m1 * m1;
        assert!((mean - m1).abs() < 5.0 * (var / N as f64).sqrt(), "{mean}");
    }

    #[test]
    fn extreme_knobs_give_finite_factors_of_at_least_one() {
        let patterns = [
            power_law(1.0 + f64::EPSILON, 10.0),
            power_law(1.0 + f64::EPSILON, f64::INFINITY),
            power_law(1.000_001, f64::MAX),
            power_law(1.0, 10.0),
            power_law(f64::NAN, f64::NAN),
            power_law(4.0, 0.5),
            slow_worker(1.0, f64::MAX),
            slow_worker(1.0, f64::INFINITY),
            slow_worker(1.0, -500.0),
            slow_worker(1.0, f64::NAN),
            slow_worker(f64::NAN, 100.0),
            Pattern::DisruptedMachine {
                probability: 1.0,
                period_us: 0,
                delay_percent: f64::INFINITY,
                workers_per_machine: 0,
            },
            Pattern::Persistent {
                workers: vec![0, 1],
                factor: f64::INFINITY,
                work_share: Some(f64::NAN),
            },
            Pattern::Persistent {
                workers: vec![0],
                factor: 0.25,
                work_share: Some(2.0),
            },
        ];
        for pattern in patterns {
            let schedule = StragglerSchedule::new(31, pattern.clone(), 4);
            for w in 0..4 {
                for i in 0..2_000 {
                    for t in [0, 1, i * 777, u64::MAX] {
                        let x = schedule.slowdown(w, i, t);
                        assert!(
                            x.is_finite() && (1.0..=MAX_SLOWDOWN).contains(&x),
                            "{pattern:?}: slowdown({w}, {i}, {t}) = {x}"
                        );
                    }
                }
            }
            if let Some(weights) = schedule.work_weights() {
                assert!(weights.iter().all(|w| w.is_finite() && *w >= 0.0));
                assert!((weights.iter().sum::<f64>() - 1.0).abs() < 1e-12);
            }
        }
        // α barely above 1: nearly every draw is far in the tail, so the cap applies.
        let schedule = StragglerSchedule::new(37, power_law(1.0 + 1e-9, 10.0), 4);
        let at_cap = (0..1_000).filter(|&i| schedule.slowdown(0, i, 0) == 10.0);
        assert!(at_cap.count() > 990);
    }

    #[test]
    fn disrupted_windows_occur_with_probability_p() {
        for p in [0.1, 0.5] {
            let schedule = StragglerSchedule::new(41, disrupted(p, 4), 10);
            let hits = (0..N)
                .filter(|&w| schedule.disrupted_machine(w).is_some())
                .count() as f64
                / N as f64;
            assert!((hits - p).abs() < tolerance(p, N), "p {p}: {hits}");
        }
        let never = StragglerSchedule::new(41, disrupted(0.0, 4), 10);
        assert!((0..10_000).all(|w| never.disrupted_machine(w).is_none()));
        let always = StragglerSchedule::new(41, disrupted(1.0, 4), 10);
        assert!((0..10_000).all(|w| always.disrupted_machine(w).is_some()));
    }

    #[test]
    fn disrupted_machine_is_uniform_over_machines() {
        // 10 workers, 4 per machine: machines 0, 1 and the partial machine 2.
        let schedule = StragglerSchedule::new(43, disrupted(1.0, 4), 10);
        let n = 60_000;
        let mut counts = [0u64; 3];
        for window in 0..n {
            let machine = schedule.disrupted_machine(window);
            let machine = machine.expect("p = 1 disrupts every window") as usize;
            assert!(machine < 3, "machine {machine}");
            counts[machine] += 1;
        }
        for count in counts {
            let freq = count as f64 / n as f64;
            assert!(
                (freq - 1.0 / 3.0).abs() < tolerance(1.0 / 3.0, n),
                "{counts:?}"
            );
        }
    }

    #[test]
    fn disruption_slows_exactly_the_chosen_machine_for_the_whole_window() {
        let period = 250_000;
        let schedule = StragglerSchedule::new(47, disrupted(0.5, 4), 10);
        let mut disrupted_windows = 0;
        for window in 0..2_000u64 {
            let chosen = schedule.disrupted_machine(window);
            disrupted_windows += usize::from(chosen.is_some());
            let start = window * period;
            for t in [start, start + 1, start + period / 2, start + period - 1] {
                for w in 0..10u32 {
                    let expected = if chosen == Some(w / 4) { 2.5 } else { 1.0 };
                    for iteration in [0, 1, window * 7 + u64::from(w), u64::MAX] {
                        assert_eq!(
                            schedule.slowdown(w, iteration, t),
                            expected,
                            "window {window}, t {t}, worker {w}, iteration {iteration}"
                        );
                    }
                }
            }
        }
        assert!(disrupted_windows > 800 && disrupted_windows < 1_200);
    }

    #[test]
    fn persistent_slows_only_the_listed_workers_in_every_iteration() {
        let pattern = Pattern::Persistent {
            workers: vec![5, 1, 5],
            factor: 2.5,
            work_share: None,
        };
        let schedule = StragglerSchedule::new(53, pattern, 8);
        for w in 0..8 {
            let expected = if w == 1 || w == 5 { 2.5 } else { 1.0 };
            for i in 0..1_000 {
                assert_eq!(schedule.slowdown(w, i, i * 999_983), expected);
            }
        }
        assert_eq!(schedule.work_weights(), None);
    }

    #[test]
    fn persistent_work_share_sets_the_data_weights() {
        // FlexRR: the first half of the workers carries 75 % of the work.
        let flexrr = Pattern::Persistent {
            workers: (0..4).collect(),
            factor: 1.0,
            work_share: Some(0.75),
        };
        let schedule = StragglerSchedule::new(59, flexrr, 8);
        let weights = schedule.work_weights().expect("uneven data");
        assert_eq!(
            weights,
            [0.1875, 0.1875, 0.1875, 0.1875, 0.0625, 0.0625, 0.0625, 0.0625]
        );
        assert!((0..8).all(|w| schedule.slowdown(w, 3, 0) == 1.0));

        let pattern = Pattern::Persistent {
            workers: vec![2, 9, 7, 42],
            factor: 3.0,
            work_share: Some(0.5),
        };
        let schedule = StragglerSchedule::new(59, pattern, 10);
        let weights = schedule.work_weights().expect("uneven data");
        assert_eq!(weights.len(), 10);
        assert!((weights.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let listed: f64 = [2, 7, 9].iter().map(|&w| weights[w]).sum();
        assert!((listed - 0.5).abs() < 1e-12);
        assert!((weights[0] - 0.5 / 7.0).abs() < 1e-15);

        for workers in [vec![], vec![0, 1, 2, 3]] {
            let pattern = Pattern::Persistent {
                workers,
                factor: 1.0,
                work_share: Some(0.75),
            };
            assert_eq!(StragglerSchedule::new(59, pattern, 4).work_weights(), None);
        }
        let other = StragglerSchedule::new(59, slow_worker(0.5, 100.0), 4);
        assert_eq!(other.work_weights(), None);
    }

    fn all_patterns() -> Vec<Pattern> {
        vec![
            Pattern::None,
            slow_worker(0.4, 80.0),
            disrupted(0.5, 3),
            power_law(4.0, 20.0),
            Pattern::Persistent {
                workers: vec![0, 3],
                factor: 1.7,
                work_share: Some(0.6),
            },
        ]
    }

    fn grid() -> Vec<(u32, u64, u64)> {
        (0..8u32)
            .flat_map(|w| (0..500u64).map(move |i| (w, i, i * 12_345 + u64::from(w) * 7)))
            .collect()
    }

    #[test]
    fn same_inputs_give_bit_identical_output_in_any_order() {
        for pattern in all_patterns() {
            let a = StragglerSchedule::new(61, pattern.clone(), 8);
            let b = StragglerSchedule::new(61, pattern.clone(), 8);
            let points = grid();
            let forward: Vec<u64> = points
                .iter()
                .map(|&(w, i, t)| a.slowdown(w, i, t).to_bits())
                .collect();
            let mut backward: Vec<u64> = points
                .iter()
                .rev()
                .map(|&(w, i, t)| b.clone().slowdown(w, i, t).to_bits())
                .collect();
            backward.reverse();
            assert_eq!(forward, backward, "{}", pattern.name());
            let windows_a: Vec<_> = (0..500).map(|w| a.disrupted_machine(w)).collect();
            let windows_b: Vec<_> = (0..500)
                .rev()
                .map(|w| b.disrupted_machine(w))
                .rev()
                .collect();
            assert_eq!(windows_a, windows_b);
            assert_eq!(a.work_weights(), b.work_weights());
        }
    }

    #[test]
    fn a_different_seed_gives_a_different_schedule() {
        for pattern in [
            slow_worker(0.4, 80.0),
            disrupted(0.5, 3),
            power_law(4.0, 20.0),
        ] {
            let a = StragglerSchedule::new(67, pattern.clone(), 8);
            let b = StragglerSchedule::new(68, pattern.clone(), 8);
            let xs: Vec<f64> = grid()
                .iter()
                .map(|&(w, i, t)| a.slowdown(w, i, t))
                .collect();
            let ys: Vec<f64> = grid()
                .iter()
                .map(|&(w, i, t)| b.slowdown(w, i, t))
                .collect();
            assert_ne!(xs, ys, "{}", pattern.name());
        }
    }

    #[test]
    fn patterns_draw_from_independent_streams() {
        // Slow-worker with p = 1/2 against power-law above its median 2^(1/(α−1)):
        // with a shared stream they would always disagree; independent, they agree
        // half of the time.
        let slow = StragglerSchedule::new(71, slow_worker(0.5, 100.0), 16);
        let power = StragglerSchedule::new(71, power_law(4.0, 100.0), 16);
        let median = 2f64.powf(1.0 / 3.0);
        let points: Vec<(u32, u64)> = (0..N / 16)
            .flat_map(|i| (0..16).map(move |w| (w, i)))
            .collect();
        let agree = points
            .iter()
            .filter(|&&(w, i)| (slow.slowdown(w, i, 0) > 1.0) == (power.slowdown(w, i, 0) > median))
            .count() as f64
            / N as f64;
        assert!((agree - 0.5).abs() < tolerance(0.5, N), "agreement {agree}");
    }
}
