//! What a tune ranks by: the training time until a configuration's
//! evaluations reach a target (`--target accuracy=0.85`, `rmse<=0.95`).

use std::fmt;

use crate::bench::peers::first_of_two_at_or_above;
use crate::trace::IterationRecord;
use crate::workload::Evaluation;

/// Which way a metric improves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Higher is better: the target is reached at or above the value.
    AtLeast,
    /// Lower is better: the target is reached at or below the value.
    AtMost,
}

/// A metric of the evaluation rows and the value to reach.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Target {
    /// `accuracy`, `loss`, or one of the workload's own metrics (`auc`,
    /// `rmse`, …) as the run's evaluations name them.
    pub metric: String,
    /// Which way it improves.
    pub direction: Direction,
    /// The value to reach.
    pub value: f64,
}

/// Metrics whose direction `METRIC=VALUE` implies.
const HIGHER_BETTER: [&str; 3] = ["accuracy", "auc", "balanced_accuracy"];
const LOWER_BETTER: [&str; 3] = ["loss", "rmse", "log_loss"];

impl Target {
    /// Parses `METRIC=VALUE` (a known metric's own direction), `METRIC>=VALUE`
    /// or `METRIC<=VALUE`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (metric, direction, value) = if let Some((m, v)) = text.split_once(">=") {
            (m, Some(Direction::AtLeast), v)
        } else if let Some((m, v)) = text.split_once("<=") {
            (m, Some(Direction::AtMost), v)
        } else if let Some((m, v)) = text.split_once('=') {
            (m, None, v)
        } else {
            return Err(format!(
                "'{text}' is not METRIC=VALUE (e.g. accuracy=0.85, rmse<=0.95)"
            ));
        };
        let metric = metric.trim();
        if metric.is_empty()
            || !metric
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!("'{text}': '{metric}' is not a metric name"));
        }
        let value: f64 = value
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| format!("'{text}': '{}' is not a number", value.trim()))?;
        let direction = match direction {
            Some(d) => d,
            None if HIGHER_BETTER.contains(&metric) => Direction::AtLeast,
            None if LOWER_BETTER.contains(&metric) => Direction::AtMost,
            None => {
                return Err(format!(
                    "'{text}': which way does {metric} improve? Write {metric}>={value} or {metric}<={value}"
                ))
            }
        };
        Ok(Self {
            metric: metric.to_owned(),
            direction,
            value,
        })
    }

    /// The metric's value in an evaluation, if it has it.
    pub fn read(
        &self,
        accuracy: f64,
        loss: f64,
        metrics: &dyn Fn(&str) -> Option<f64>,
    ) -> Option<f64> {
        match self.metric.as_str() {
            "accuracy" => Some(accuracy),
            "loss" | "log_loss" => Some(loss),
            name => metrics(name),
        }
    }

    /// Whether `a` is better than `b` for this metric (NaN is never better).
    pub fn better(&self, a: f64, b: f64) -> bool {
        match self.direction {
            Direction::AtLeast => a > b || (b.is_nan() && !a.is_nan()),
            Direction::AtMost => a < b || (b.is_nan() && !a.is_nan()),
        }
    }

    /// `value` as "higher is better" (negated for a lower-is-better metric).
    fn upward(&self, value: f64) -> f64 {
        match self.direction {
            Direction::AtLeast => value,
            Direction::AtMost => -value,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.direction {
            Direction::AtLeast => ">=",
            Direction::AtMost => "<=",
        };
        write!(f, "{}{op}{}", self.metric, self.value)
    }
}

/// One evaluation of a run: the training seconds before it (Σ of the
/// iterations' wall times up to the parameters it scored) and the metric.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Point {
    /// Iterations trained before the scored parameters.
    pub iteration: u64,
    /// Training seconds before them.
    pub seconds: f64,
    /// The metric's value.
    pub value: f64,
}

/// The evaluations of a run's `rows` and of its final parameters (scored
/// after the last row), as points of `target`'s metric. Time counts only the
/// iterations' own wall time, so a run continued from a checkpoint adds up
/// as one that never stopped.
pub fn points(
    target: &Target,
    rows: &[IterationRecord],
    final_eval: Option<&Evaluation>,
) -> Vec<Point> {
    let mut seconds = 0.0;
    let mut out = Vec::new();
    for r in rows {
        if let (Some(acc), Some(loss)) = (r.test_accuracy, r.test_loss) {
            let metrics = |name: &str| r.test_metrics.get(name).copied();
            if let Some(value) = target.read(acc, loss, &metrics) {
                out.push(Point {
                    iteration: r.iteration,
                    seconds,
                    value,
                });
            }
        }
        seconds += r.wall_us as f64 / 1e6;
    }
    if let Some(e) = final_eval {
        let metrics = |name: &str| e.metrics.get(name).copied();
        if let Some(value) = target.read(e.accuracy, e.log_loss, &metrics) {
            out.push(Point {
                iteration: rows.last().map_or(0, |r| r.iteration + 1),
                seconds,
                value,
            });
        }
    }
    out
}

/// The first point of two consecutive evaluations that reach the target
/// (the bench's rule for time to accuracy): one lucky evaluation does not
/// count.
pub fn reached(target: &Target, points: &[Point]) -> Option<Point> {
    let values: Vec<f64> = points.iter().map(|p| target.upward(p.value)).collect();
    first_of_two_at_or_above(&values, target.upward(target.value)).map(|i| points[i])
}

/// The best value among `points`, if any.
pub fn best(target: &Target, points: &[Point]) -> Option<f64> {
    points
        .iter()
        .map(|p| p.value)
        .filter(|v| !v.is_nan())
        .reduce(|a, b| if target.better(b, a) { b } else { a })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(values: &[f64]) -> Vec<Point> {
        values
            .iter()
            .enumerate()
            .map(|(i, &value)| Point {
                iteration: i as u64,
                seconds: i as f64,
                value,
            })
            .collect()
    }

    #[test]
    fn targets_parse_with_their_direction() {
        let t = Target::parse("accuracy=0.85").unwrap();
        assert_eq!(
            (t.metric.as_str(), t.direction, t.value),
            ("accuracy", Direction::AtLeast, 0.85)
        );
        assert_eq!(
            Target::parse("rmse=0.9").unwrap().direction,
            Direction::AtMost
        );
        assert_eq!(
            Target::parse("loglik>=-8").unwrap().direction,
            Direction::AtLeast
        );
        assert_eq!(
            Target::parse(" auc <= 0.5").unwrap().direction,
            Direction::AtMost
        );
        assert_eq!(
            Target::parse("accuracy>=0.8").unwrap().to_string(),
            "accuracy>=0.8"
        );
        for bad in [
            "accuracy",
            "accuracy=",
            "accuracy=high",
            "=0.5",
            "x y=1",
            "loglik=-8",
            "accuracy=NaN",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_target_needs_two_evaluations_in_a_row() {
        let t = Target::parse("accuracy=0.8").unwrap();
        assert_eq!(
            reached(&t, &pts(&[0.5, 0.81, 0.7, 0.82, 0.85])).map(|p| p.iteration),
            Some(3)
        );
        assert_eq!(reached(&t, &pts(&[0.5, 0.81, 0.7])), None);
        let t = Target::parse("rmse=1.0").unwrap();
        assert_eq!(
            reached(&t, &pts(&[1.5, 0.99, 0.98])).map(|p| p.iteration),
            Some(1)
        );
        assert_eq!(best(&t, &pts(&[1.5, f64::NAN, 0.98, 1.2])), Some(0.98));
    }
}
