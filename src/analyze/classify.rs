//! Each worker's straggling classified, with its evidence.
//!
//! A worker is *slow* in an iteration when its busy time exceeds the
//! iteration's median by more than the threshold. Then:
//!
//! - **structural**: slow in at least half of its iterations because it has a
//!   larger share of the work — its rows are above the median worker's by as
//!   much as its time (time per row within the threshold of the median), or
//!   every worker of its group (a pipeline stage) is slow with it;
//! - **persistent**: slow in at least half of its iterations otherwise;
//! - **transient**: slow in some iterations, fewer than half;
//! - **none**: never slow.

use serde::Serialize;

use crate::stats::median;

/// A worker's kind of straggling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Straggling {
    /// Never slow.
    None,
    /// Slow in fewer than half of its iterations.
    Transient,
    /// Slow in at least half, at normal work share.
    Persistent,
    /// Slow in at least half, because of a larger share of the work.
    Structural,
}

impl Straggling {
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Straggling::None => "none",
            Straggling::Transient => "transient",
            Straggling::Persistent => "persistent",
            Straggling::Structural => "structural",
        }
    }
}

/// What the classification of one worker rests on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    /// Iterations the worker has a row in.
    pub iterations: usize,
    /// Iterations it was slow in.
    pub slow: usize,
    /// Longest run of consecutive slow iterations.
    pub longest_streak: usize,
    /// Median over its iterations of busy / the iteration's median busy.
    pub median_ratio: f64,
    /// Median of rows / the iteration's median rows (None: no rows recorded).
    pub rows_ratio: Option<f64>,
    /// Share of its group's workers slow in at least half of their iterations
    /// (None: no groups).
    pub group_slow_share: Option<f64>,
}

/// Per-worker slow flags and ratios: `ratios[w]` holds (iteration index,
/// busy ratio, rows ratio) for each iteration w has a row in.
pub fn classify(
    ratios: &[(usize, f64, Option<f64>)],
    threshold: f64,
    group_slow_share: Option<f64>,
) -> (Straggling, Evidence) {
    let slow_flags: Vec<bool> = ratios.iter().map(|r| r.1 > 1.0 + threshold).collect();
    let slow = slow_flags.iter().filter(|&&s| s).count();
    let mut longest_streak = 0;
    let mut streak = 0;
    let mut last_index = None;
    for (r, &s) in ratios.iter().zip(&slow_flags) {
        let consecutive = last_index.is_some_and(|l: usize| r.0 == l + 1);
        streak = match (s, consecutive) {
            (true, true) => streak + 1,
            (true, false) => 1,
            (false, _) => 0,
        };
        longest_streak = longest_streak.max(streak);
        last_index = Some(r.0);
    }
    let mut busy: Vec<f64> = ratios.iter().map(|r| r.1).collect();
    let median_ratio = median(&mut busy);
    let mut rows: Vec<f64> = ratios.iter().filter_map(|r| r.2).collect();
    let rows_ratio = (!rows.is_empty()).then(|| median(&mut rows));
    let evidence = Evidence {
        iterations: ratios.len(),
        slow,
        longest_streak,
        median_ratio,
        rows_ratio,
        group_slow_share,
    };
    let class = if slow == 0 {
        Straggling::None
    } else if 2 * slow < ratios.len() {
        Straggling::Transient
    } else {
        let by_rows =
            rows_ratio.is_some_and(|r| r > 1.0 + threshold && median_ratio / r <= 1.0 + threshold);
        let by_group = group_slow_share.is_some_and(|s| s >= 1.0);
        if by_rows || by_group {
            Straggling::Structural
        } else {
            Straggling::Persistent
        }
    };
    (class, evidence)
}

impl Evidence {
    /// One sentence for people.
    pub fn sentence(&self, class: Straggling, threshold: f64) -> String {
        if class == Straggling::None {
            return format!(
                "never slow (> {:.2}× the iteration median) in {} iterations, median {:.2}×",
                1.0 + threshold,
                self.iterations,
                self.median_ratio
            );
        }
        let mut s = format!(
            "slow (> {:.2}× the iteration median) in {} of {} iterations (longest run {}), median {:.2}×",
            1.0 + threshold,
            self.slow,
            self.iterations,
            self.longest_streak,
            self.median_ratio
        );
        match (class, self.rows_ratio, self.group_slow_share) {
            (Straggling::Structural, Some(r), _) if r > 1.0 + threshold => s.push_str(&format!(
                "; {r:.2}× the median rows: a larger share of the work"
            )),
            (Straggling::Structural, _, Some(_)) => {
                s.push_str("; every worker of its stage is as slow: the stage's share of the model")
            }
            (Straggling::Persistent, Some(r), _) => s.push_str(&format!(
                "; {r:.2}× the median rows: it is slower, not busier"
            )),
            _ => {}
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(busy: &[f64], rows: Option<f64>) -> Vec<(usize, f64, Option<f64>)> {
        busy.iter()
            .enumerate()
            .map(|(i, &b)| (i, b, rows))
            .collect()
    }

    #[test]
    fn the_four_kinds() {
        let t = 0.25;
        assert_eq!(
            classify(&series(&[1.0, 1.1, 0.9], Some(1.0)), t, None).0,
            Straggling::None
        );
        let (c, e) = classify(&series(&[1.0, 3.0, 1.0, 1.0], Some(1.0)), t, None);
        assert_eq!((c, e.slow, e.longest_streak), (Straggling::Transient, 1, 1));
        let (c, e) = classify(&series(&[2.0, 2.1, 1.9, 1.0], Some(1.0)), t, None);
        assert_eq!((c, e.longest_streak), (Straggling::Persistent, 3));
        // Twice the rows, twice the time: its share of the work.
        assert_eq!(
            classify(&series(&[2.0, 2.0], Some(2.0)), t, None).0,
            Straggling::Structural
        );
        // Its whole stage is slow.
        assert_eq!(
            classify(&series(&[1.5, 1.5], None), t, Some(1.0)).0,
            Straggling::Structural
        );
        assert_eq!(
            classify(&series(&[1.5, 1.5], None), t, Some(0.5)).0,
            Straggling::Persistent
        );
    }

    #[test]
    fn a_streak_is_broken_by_a_missing_iteration() {
        let ratios = vec![(0, 2.0, None), (1, 2.0, None), (3, 2.0, None)];
        assert_eq!(classify(&ratios, 0.25, None).1.longest_streak, 2);
    }
}
