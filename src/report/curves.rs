//! A run's curves over its iterations: training loss, test accuracy and
//! iteration time, read from the iterations table of its trace, and drawn as
//! inline SVG with one line per run (a report draws one run, `forestall
//! compare` several on the same axes).

use std::path::Path;

use plotters::prelude::*;

use super::plot::Series;
use crate::trace::{read_iterations, IterationRecord};

/// The three curves of one run, x = iteration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunCurves {
    /// Training loss of every iteration.
    pub loss: Vec<(f64, f64)>,
    /// Test accuracy of the evaluated iterations.
    pub accuracy: Vec<(f64, f64)>,
    /// Iteration wall time (first ready to last finish), ms.
    pub iteration_ms: Vec<(f64, f64)>,
}

impl RunCurves {
    /// The curves of `records` (sorted by iteration).
    pub fn from_records(records: &[IterationRecord]) -> Self {
        let x = |r: &IterationRecord| r.iteration as f64;
        Self {
            loss: records
                .iter()
                .filter(|r| r.train_loss.is_finite())
                .map(|r| (x(r), r.train_loss))
                .collect(),
            accuracy: records
                .iter()
                .filter_map(|r| r.test_accuracy.map(|a| (x(r), a)))
                .collect(),
            iteration_ms: records
                .iter()
                .map(|r| (x(r), r.wall_us as f64 / 1000.0))
                .collect(),
        }
    }

    /// The curves of the trace directory `trace_dir` (its iterations table
    /// only, part by part).
    pub fn read(trace_dir: &Path) -> crate::trace::Result<Self> {
        let records = read_iterations(trace_dir, &mut None)?;
        Ok(Self::from_records(&records))
    }

    /// Whether there is nothing to draw.
    pub fn is_empty(&self) -> bool {
        self.loss.is_empty() && self.accuracy.is_empty() && self.iteration_ms.is_empty()
    }
}

/// Which curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    /// Training loss.
    Loss,
    /// Test accuracy.
    Accuracy,
    /// Iteration time.
    IterationTime,
}

impl Curve {
    /// All three, in the order a page shows them.
    pub const ALL: [Curve; 3] = [Curve::Loss, Curve::Accuracy, Curve::IterationTime];

    /// Title and y axis label.
    pub fn labels(self) -> (&'static str, &'static str) {
        match self {
            Curve::Loss => ("training loss", "loss"),
            Curve::Accuracy => ("test accuracy", "accuracy"),
            Curve::IterationTime => ("iteration time", "ms"),
        }
    }

    /// The element id of its plot on a page.
    pub fn id(self) -> &'static str {
        match self {
            Curve::Loss => "loss",
            Curve::Accuracy => "accuracy",
            Curve::IterationTime => "iteration-time",
        }
    }

    /// Its points in `curves`.
    pub fn of(self, curves: &RunCurves) -> &[(f64, f64)] {
        match self {
            Curve::Loss => &curves.loss,
            Curve::Accuracy => &curves.accuracy,
            Curve::IterationTime => &curves.iteration_ms,
        }
    }
}

/// One curve of several runs on the same axes, as SVG (a legend names the
/// runs when there is more than one). Needs the plot font (see
/// [`super::plot`]).
pub fn curve_svg(curve: Curve, series: &[Series]) -> Result<String, String> {
    super::plot::ensure_font()?;
    let (title, y_label) = curve.labels();
    let points = || series.iter().flat_map(|s| s.points.iter().copied());
    let (mut x0, mut x1) = (f64::INFINITY, f64::NEG_INFINITY);
    let (mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY);
    for (x, y) in points() {
        (x0, x1) = (x0.min(x), x1.max(x));
        (y0, y1) = (y0.min(y), y1.max(y));
    }
    if !x0.is_finite() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    // accuracy and time from 0; the loss where it lies
    let y0 = match curve {
        Curve::Loss => y0 - 0.05 * (y1 - y0).abs().max(1e-9),
        Curve::Accuracy | Curve::IterationTime => 0.0f64.min(y0),
    };
    let y1 = if y1 > y0 {
        y1 + 0.08 * (y1 - y0)
    } else {
        y0 + 1.0
    };
    let mut svg = String::new();
    {
        let err = |e: DrawingAreaErrorKind<std::io::Error>| e.to_string();
        let root = SVGBackend::with_string(&mut svg, (960, 360)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (super::plot::FONT_FAMILY, 18))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("iteration")
            .y_desc(y_label)
            .draw()
            .map_err(err)?;
        for (i, s) in series.iter().enumerate() {
            let color = super::plot::COLORS[i % super::plot::COLORS.len()];
            let drawn = chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(err)?;
            if series.len() > 1 {
                drawn.label(s.label.as_str()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            }
            if s.points.len() <= 60 {
                chart
                    .draw_series(s.points.iter().map(|&p| Circle::new(p, 2, color.filled())))
                    .map_err(err)?;
            }
        }
        if series.len() > 1 {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curves_take_what_each_iteration_recorded() {
        let record = |i: u64, acc: Option<f64>| IterationRecord {
            iteration: i,
            start_us: 0,
            end_us: 0,
            wall_us: 1500 * (i + 1),
            train_loss: 1.0 / (i + 1) as f64,
            test_loss: None,
            test_accuracy: acc,
            test_metrics: Default::default(),
            workload: "logistic".into(),
            laggard: None,
            lag_us: 0,
            median_busy_us: 0,
            barrier_wait_us: 0,
            units: 1,
            rows: 1,
            dropped_partitions: String::new(),
        };
        let c = RunCurves::from_records(&[record(0, None), record(1, Some(0.75))]);
        assert_eq!(c.loss, vec![(0.0, 1.0), (1.0, 0.5)]);
        assert_eq!(c.accuracy, vec![(1.0, 0.75)]);
        assert_eq!(c.iteration_ms, vec![(0.0, 1.5), (1.0, 3.0)]);
        let svg = curve_svg(
            Curve::Accuracy,
            &[
                Series {
                    label: "run-a".into(),
                    points: c.accuracy.clone(),
                },
                Series {
                    label: "run-b".into(),
                    points: vec![(0.0, 0.5), (1.0, 0.7)],
                },
            ],
        )
        .unwrap();
        assert!(svg.contains("<svg") && svg.contains("run-b") && svg.contains("test accuracy"));
    }
}
