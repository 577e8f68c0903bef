//! Line plots (SVG and PNG) with plotters: one line per series, points marked;
//! and bar plots, one bar per label.
//!
//! Text is set in DejaVu Sans, compiled into the binary (`assets/fonts/`, with
//! its license): plotters' `ab_glyph` backend knows only the fonts registered
//! with it, so no plot reads a system font.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

/// DejaVu Sans 2.37 (Bitstream Vera license; see `assets/fonts/`).
pub const EMBEDDED_FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// The family every plot's text is set in: the embedded font, registered
/// under this name.
pub const FONT_FAMILY: &str = "sans-serif";

/// One line of a plot.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// What to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct LinePlot {
    /// Title.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
}

/// Registers [`EMBEDDED_FONT`] as [`FONT_FAMILY`] with plotters, once per
/// process; every drawing calls this first.
pub(crate) fn ensure_font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        register_font(FONT_FAMILY, FontStyle::Normal, EMBEDDED_FONT)
            .map_err(|_| "the embedded font (DejaVu Sans) is not a readable TrueType font".into())
    })
    .clone()
}

/// The palette every plot draws its series in, in order.
pub(crate) const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    plot: &LinePlot,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let points = plot.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, y) in points {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 > 0.0 { y1 * 1.08 } else { 1.0 };
    let mut chart = ChartBuilder::on(&root)
        .caption(&plot.title, (FONT_FAMILY, 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(x0..x1, 0.0..y1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(plot.x_label.as_str())
        .y_desc(plot.y_label.as_str())
        .draw()
        .map_err(err)?;
    for (i, s) in plot.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(s.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// One bar per label.
#[derive(Debug, Clone, PartialEq)]
pub struct BarPlot {
    /// Title.
    pub title: String,
    /// Y axis label.
    pub y_label: String,
    /// (label, value), left to right.
    pub bars: Vec<(String, f64)>,
}

fn draw_bars<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    plot: &BarPlot,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let n = plot.bars.len().max(1) as u32;
    let top = plot.bars.iter().map(|b| b.1).fold(0.0f64, f64::max);
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    let mut chart = ChartBuilder::on(&root)
        .caption(&plot.title, (FONT_FAMILY, 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d((0u32..n).into_segmented(), 0.0..top)
        .map_err(err)?;
    let names: Vec<String> = plot.bars.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(names.len())
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_desc(plot.y_label.as_str())
        .draw()
        .map_err(err)?;
    chart
        .draw_series(
            Histogram::vertical(&chart)
                .style(COLORS[0].filled())
                .margin(12)
                .data(plot.bars.iter().enumerate().map(|(i, b)| (i as u32, b.1))),
        )
        .map_err(err)?;
    root.present().map_err(err)
}

/// Draws `plot` to `stem.svg` and `stem.png`; returns the files written.
pub fn write_line_plot(stem: &Path, plot: &LinePlot) -> Result<Vec<PathBuf>, String> {
    write_both(stem, |root| draw(root, plot), |root| draw(root, plot))
}

/// Draws a bar plot to `stem.svg` and `stem.png`; returns the files written.
pub fn write_bar_plot(stem: &Path, plot: &BarPlot) -> Result<Vec<PathBuf>, String> {
    write_both(
        stem,
        |root| draw_bars(root, plot),
        |root| draw_bars(root, plot),
    )
}

type Area<'a, DB> = DrawingArea<DB, plotters::coord::Shift>;

fn write_both(
    stem: &Path,
    svg_draw: impl FnOnce(Area<'_, SVGBackend<'_>>) -> Result<(), String>,
    png_draw: impl FnOnce(Area<'_, BitMapBackend<'_>>) -> Result<(), String>,
) -> Result<Vec<PathBuf>, String> {
    ensure_font()?;
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    let drawn = svg_draw(SVGBackend::new(&svg, (800, 500)).into_drawing_area())
        .map_err(|e| format!("cannot draw {}: {e}", svg.display()))
        .and_then(|()| {
            png_draw(BitMapBackend::new(&png, (800, 500)).into_drawing_area())
                .map_err(|e| format!("cannot draw {}: {e}", png.display()))
        });
    if let Err(e) = drawn {
        let _ = std::fs::remove_file(&svg);
        let _ = std::fs::remove_file(&png);
        return Err(e);
    }
    Ok(vec![svg, png])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_svg_and_png() {
        let dir = tempfile::tempdir().unwrap();
        let plot = LinePlot {
            title: "t".into(),
            x_label: "delay %".into(),
            y_label: "ms".into(),
            series: vec![Series {
                label: "bsp".into(),
                points: vec![(0.0, 1.0), (100.0, 2.0)],
            }],
        };
        let files = write_line_plot(&dir.path().join("p"), &plot).unwrap();
        assert_eq!(files.len(), 2);
        let svg = std::fs::read_to_string(dir.path().join("p.svg")).unwrap();
        assert!(svg.contains("<svg") && svg.contains("bsp"));
        let png = std::fs::read(dir.path().join("p.png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        let bars = BarPlot {
            title: "b".into(),
            y_label: "x".into(),
            bars: vec![("bsp".into(), 1.5), ("forestall".into(), 1.0)],
        };
        let files = write_bar_plot(&dir.path().join("b"), &bars).unwrap();
        assert_eq!(files.len(), 2);
        let svg = std::fs::read_to_string(dir.path().join("b.svg")).unwrap();
        assert!(svg.contains("forestall"));
    }

    /// Text is drawn with the embedded font: a caption leaves dark pixels in
    /// a PNG, and a family nobody registered is refused rather than looked up
    /// on the system.
    #[test]
    fn text_is_set_in_the_embedded_font() {
        ensure_font().expect("the embedded font parses");
        let (w, h) = (200u32, 60u32);
        let mut pixels = vec![0u8; (w * h * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut pixels, (w, h)).into_drawing_area();
            root.fill(&WHITE).expect("fill");
            root.draw_text(
                "forestall 42",
                &(FONT_FAMILY, 24).into_font().color(&BLACK),
                (5, 15),
            )
            .expect("the registered family draws");
            root.present().expect("present");
        }
        let dark = pixels.chunks_exact(3).filter(|p| p[0] < 128).count();
        assert!(dark > 100, "only {dark} dark pixels: no text was drawn");
        let mut blank = vec![0u8; (w * h * 3) as usize];
        let root = BitMapBackend::with_buffer(&mut blank, (w, h)).into_drawing_area();
        let unregistered = root.draw_text(
            "x",
            &("no-such-family-on-any-system", 24)
                .into_font()
                .color(&BLACK),
            (5, 15),
        );
        assert!(unregistered.is_err(), "an unregistered family drew text");
    }
}
