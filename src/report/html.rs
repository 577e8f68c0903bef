//! One self-contained page (and the same content in Markdown) for a run, a
//! bench or an analysed trace: the summary table, the loss, accuracy and
//! iteration-time curves, a worker × iteration heatmap of time per unit, the
//! laggard timeline, and a bench's policy comparison.
//! Plots are inline SVG drawn with plotters; the page loads nothing else.

use plotters::prelude::*;

use super::curves::{curve_svg, Curve, RunCurves};
use super::plot::Series;
use crate::analyze::{Analysis, Observed, MISSING};

/// Most worker rows and iteration columns a heatmap draws; larger traces are
/// binned (the mean of each bin).
pub const HEATMAP_MAX: (usize, usize) = (64, 200);

/// One trace's section of the page.
#[derive(Debug, Clone)]
pub struct TraceSection {
    /// Its analysis.
    pub analysis: Analysis,
    /// Heatmap cells: rows are workers (or bins of workers), columns
    /// iterations (or bins), values busy time over the column's median.
    pub heatmap: Vec<Vec<f64>>,
    /// What a heatmap row and column hold (1 unless binned).
    pub bin: (usize, usize),
    /// (iteration's position in the trace, laggard) of each iteration with one.
    pub laggards: Vec<(u64, u32)>,
    /// Its loss, accuracy and iteration-time curves.
    pub curves: RunCurves,
}

/// Busy time of every (worker, iteration), binned, as a ratio to each
/// column's median (with a worker's units equal in size, its time per unit
/// relative to the others').
pub fn heatmap(observed: &Observed) -> (Vec<Vec<f64>>, (usize, usize)) {
    let (w, n) = (observed.workers, observed.iterations.len());
    let wb = w.div_ceil(HEATMAP_MAX.0).max(1);
    let ib = n.div_ceil(HEATMAP_MAX.1).max(1);
    let (rows, cols) = (w.div_ceil(wb), n.div_ceil(ib));
    let mut sum = vec![vec![0.0; cols]; rows];
    let mut count = vec![vec![0u32; cols]; rows];
    for (i, busy) in observed.busy.iter().enumerate() {
        for (worker, &b) in busy.iter().enumerate() {
            if b == MISSING {
                continue;
            }
            sum[worker / wb][i / ib] += b as f64;
            count[worker / wb][i / ib] += 1;
        }
    }
    let mut grid: Vec<Vec<f64>> = sum
        .iter()
        .zip(&count)
        .map(|(s, c)| {
            s.iter()
                .zip(c)
                .map(|(&s, &c)| if c == 0 { f64::NAN } else { s / f64::from(c) })
                .collect()
        })
        .collect();
    for col in 0..cols {
        let mut values: Vec<f64> = grid
            .iter()
            .map(|r| r[col])
            .filter(|v| v.is_finite())
            .collect();
        let median = crate::stats::median(&mut values);
        for row in &mut grid {
            row[col] = if median > 0.0 { row[col] / median } else { 1.0 };
        }
    }
    (grid, (wb, ib))
}

/// A cell's colour: white at the median, red at 3× and beyond, blue below.
fn shade(ratio: f64) -> RGBColor {
    if !ratio.is_finite() {
        return RGBColor(220, 220, 220);
    }
    let mix = |a: u8, b: u8, t: f64| {
        (f64::from(a) + (f64::from(b) - f64::from(a)) * t.clamp(0.0, 1.0)) as u8
    };
    if ratio >= 1.0 {
        let t = (ratio - 1.0) / 2.0;
        RGBColor(mix(255, 200, t), mix(255, 20, t), mix(255, 20, t))
    } else {
        let t = (1.0 - ratio) * 2.0;
        RGBColor(mix(255, 60, t), mix(255, 110, t), mix(255, 220, t))
    }
}

/// The heatmap as SVG.
pub fn heatmap_svg(section: &TraceSection) -> Result<String, String> {
    let grid = &section.heatmap;
    let rows = grid.len().max(1);
    let cols = grid.first().map_or(1, Vec::len).max(1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, (120 + rows * 10).min(800) as u32))
            .into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (wb, ib) = section.bin;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "busy time ÷ the iteration's median (red: slower, blue: faster)",
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0..cols, 0..rows)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc(if ib > 1 {
                format!("iteration (bins of {ib})")
            } else {
                "iteration".into()
            })
            .y_desc(if wb > 1 {
                format!("worker (bins of {wb})")
            } else {
                "worker".into()
            })
            .x_label_formatter(&|c| (c * ib).to_string())
            .y_label_formatter(&|r| (r * wb).to_string())
            .draw()
            .map_err(err)?;
        chart
            .draw_series(grid.iter().enumerate().flat_map(|(r, row)| {
                row.iter()
                    .enumerate()
                    .map(move |(c, &v)| Rectangle::new([(c, r), (c + 1, r + 1)], shade(v).filled()))
            }))
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// The laggard timeline as SVG: which worker was the laggard, per iteration.
pub fn timeline_svg(section: &TraceSection) -> Result<String, String> {
    let workers = section.analysis.workers.max(1);
    let last = section.analysis.iterations.max(1) as u64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 280)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("laggard per iteration", ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0u64..last, 0u32..workers as u32)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("iteration (position in the trace)")
            .y_desc("worker")
            .draw()
            .map_err(err)?;
        chart
            .draw_series(
                section
                    .laggards
                    .iter()
                    .map(|&(i, w)| Circle::new((i, w), 3, RGBColor(200, 20, 20).filled())),
            )
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> String {
    e.to_string()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A Markdown pipe table as an HTML table (other lines as paragraphs).
pub fn markdown_to_html(md: &str) -> String {
    let mut out = String::new();
    let mut in_table = false;
    for line in md.lines() {
        let t = line.trim();
        if t.starts_with('|') {
            let cells: Vec<&str> = t.trim_matches('|').split('|').map(str::trim).collect();
            if cells
                .iter()
                .all(|c| c.chars().all(|ch| ch == '-' || ch == ':') && !c.is_empty())
            {
                continue;
            }
            if !in_table {
                out.push_str("<table>\n");
                in_table = true;
            }
            out.push_str("<tr>");
            for c in cells {
                out.push_str(&format!("<td>{}</td>", escape(c)));
            }
            out.push_str("</tr>\n");
        } else {
            if in_table {
                out.push_str("</table>\n");
                in_table = false;
            }
            if let Some(h) = t.strip_prefix("# ") {
                out.push_str(&format!("<h3>{}</h3>\n", escape(h)));
            } else if let Some(h) = t.strip_prefix("## ") {
                out.push_str(&format!("<h4>{}</h4>\n", escape(h)));
            } else if !t.is_empty() {
                out.push_str(&format!("<p>{}</p>\n", escape(t)));
            }
        }
    }
    if in_table {
        out.push_str("</table>\n");
    }
    out
}

/// The per-worker table in Markdown.
pub fn worker_table(a: &Analysis) -> String {
    let mut md = String::from(
        "| worker | median unit ms | p95 ms | p99 ms | laggard | barrier wait | class | S_w | share of S |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut order: Vec<_> = a.per_worker.iter().collect();
    order.sort_by(|x, y| {
        y.share_of_slowdown
            .total_cmp(&x.share_of_slowdown)
            .then(x.worker.cmp(&y.worker))
    });
    for w in order.iter().take(32) {
        md.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.0} % | {:.0} % | {} | {:.3} | {:.0} % |\n",
            w.worker,
            w.median_unit_us / 1e3,
            w.p95_unit_us / 1e3,
            w.p99_unit_us / 1e3,
            w.laggard_share * 100.0,
            w.barrier_wait_share * 100.0,
            w.class.as_str(),
            w.slowdown,
            w.share_of_slowdown * 100.0
        ));
    }
    if order.len() > 32 {
        md.push_str(&format!(
            "\n{} more workers: `forestall analyze --json` lists all.\n",
            order.len() - 32
        ));
    }
    md
}

/// The summary of one trace in Markdown.
pub fn trace_summary(a: &Analysis) -> String {
    format!(
        "| trace | job | workers | iterations | S | mean iteration ms | ideal ms | iterations with stragglers |\n|---|---|---|---|---|---|---|---|\n| {} | {} | {} | {} | {:.3} | {:.2} | {:.2} | {} |\n",
        a.trace,
        a.job_id,
        a.workers,
        a.iterations,
        a.slowdown,
        a.actual_iteration_us / 1e3,
        a.ideal_iteration_us / 1e3,
        a.iterations_with_stragglers
    )
}

/// The curves in Markdown: first and last value of each, and the best
/// accuracy.
pub fn curves_md(c: &RunCurves) -> String {
    if c.is_empty() {
        return String::new();
    }
    let ends = |p: &[(f64, f64)], digits: usize| match (p.first(), p.last()) {
        (Some(a), Some(b)) => format!(
            "{:.digits$} at iteration {} → {:.digits$} at iteration {}",
            a.1, a.0, b.1, b.0
        ),
        _ => "—".to_owned(),
    };
    let best = c
        .accuracy
        .iter()
        .copied()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or("—".to_owned(), |(i, a)| {
            format!("{a:.4} at iteration {i}")
        });
    let times: Vec<f64> = c.iteration_ms.iter().map(|p| p.1).collect();
    let [median, p95] = crate::stats::quantiles(&times, [0.5, 0.95]);
    format!(
        "\n| curve | values |\n|---|---|\n| training loss | {} |\n| test accuracy | {} (best {best}) |\n| iteration time ms | median {median:.2}, p95 {p95:.2} over {} iterations |\n",
        ends(&c.loss, 4),
        ends(&c.accuracy, 4),
        times.len()
    )
}

/// The page and its Markdown twin.
pub fn render(
    title: &str,
    sections: &[TraceSection],
    bench_md: Option<&str>,
    model: &[String],
) -> Result<(String, String), String> {
    if !sections.is_empty() {
        super::plot::ensure_font()?;
    }
    let mut md = format!("# {title}\n\n");
    let mut html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>body{{font-family:sans-serif;margin:2em;max-width:1000px}}table{{border-collapse:collapse;margin:1em 0}}td{{border:1px solid #ccc;padding:2px 8px;font-size:13px}}</style></head><body>\n<h1>{}</h1>\n",
        escape(title),
        escape(title)
    );
    if !model.is_empty() {
        // what the workload says of the trained model (LDA: its topics)
        let list: String = model.iter().map(|l| format!("- {l}\n")).collect();
        md.push_str(&format!("## The trained model\n\n{list}\n"));
        html.push_str("<section id=\"model\"><h2>The trained model</h2>\n<ul>\n");
        for line in model {
            html.push_str(&format!("<li>{}</li>\n", escape(line)));
        }
        html.push_str("</ul></section>\n");
    }
    if let Some(bench) = bench_md {
        md.push_str("## Policies compared (bench results)\n\n");
        md.push_str(bench);
        md.push('\n');
        html.push_str("<section id=\"policies\"><h2>Policies compared (bench results)</h2>\n");
        html.push_str(&markdown_to_html(bench));
        html.push_str("</section>\n");
    }
    for (k, s) in sections.iter().enumerate() {
        let a = &s.analysis;
        md.push_str(&format!("## Trace {}\n\n", a.trace));
        md.push_str(&trace_summary(a));
        md.push('\n');
        md.push_str(&worker_table(a));
        md.push_str(&curves_md(&s.curves));
        md.push_str(
            "\n(The page report.html holds the curves, the heatmap and the laggard timeline.)\n\n",
        );
        html.push_str(&format!("<section><h2>Trace {}</h2>\n", escape(&a.trace)));
        html.push_str(&markdown_to_html(&trace_summary(a)));
        html.push_str(&markdown_to_html(&worker_table(a)));
        for curve in Curve::ALL {
            let points = curve.of(&s.curves);
            if points.is_empty() {
                continue;
            }
            let series = [Series {
                label: a.trace.clone(),
                points: points.to_vec(),
            }];
            let id = if k == 0 {
                curve.id().to_owned()
            } else {
                format!("{}-{k}", curve.id())
            };
            html.push_str(&format!(
                "<div class=\"curve\" id=\"{id}\">{}</div>\n",
                curve_svg(curve, &series)?
            ));
        }
        let id = if k == 0 {
            "heatmap".to_owned()
        } else {
            format!("heatmap-{k}")
        };
        html.push_str(&format!(
            "<div class=\"heatmap\" id=\"{id}\">{}</div>\n",
            heatmap_svg(s)?
        ));
        html.push_str(&format!(
            "<div class=\"timeline\" id=\"timeline-{k}\">{}</div>\n",
            timeline_svg(s)?
        ));
        if let Some(p) = &a.online_predictions {
            let line = format!(
                "The run's online predictor: {} predictions of a worker's time per unit, MAE {:.1} ms, MAPE {:.1} %.",
                p.predictions,
                p.mae_us / 1e3,
                p.mape * 100.0
            );
            md.push_str(&line);
            md.push_str("\n\n");
            html.push_str(&format!(
                "<p id=\"predictions-{k}\">{}</p>\n",
                escape(&line)
            ));
        }
        if let Some(ops) = &a.operations {
            let line = format!(
                "Operation replay: replay error {:.1} %, M_W {:.1} %, M_S {:.1} %.",
                ops.replay_error * 100.0,
                ops.m_w.removed * 100.0,
                ops.m_s.removed * 100.0
            );
            md.push_str(&line);
            md.push_str("\n\n");
            html.push_str(&format!("<p>{}</p>\n", escape(&line)));
        }
        html.push_str("</section>\n");
    }
    html.push_str("</body></html>\n");
    Ok((html, md))
}
