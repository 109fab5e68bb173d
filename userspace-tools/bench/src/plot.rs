//! SVG plots with plotters' SVG backend. Text is emitted as SVG `<text>` elements and laid out with
//! plotters' built-in size estimate, so no font files or fontconfig are needed (static builds work).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::error::{Error, Result};
use crate::record::{DirtyResults, GcResults, LatencyResults, SweepResults};
use crate::report::ResultSet;
use crate::units::fmt_size;

/// Distinguishable line colours (Tableau 10).
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// One line: name and (x, y) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

fn perr<E: std::fmt::Debug>(e: E) -> Error {
    Error::msg(format!("plotting: {e:?}"))
}

fn bounds(series: &[Series]) -> Option<(f64, f64, f64, f64)> {
    let pts = series.iter().flat_map(|s| s.points.iter());
    let mut b: Option<(f64, f64, f64, f64)> = None;
    for &(x, y) in pts {
        if !x.is_finite() || !y.is_finite() {
            continue;
        }
        b = Some(match b {
            None => (x, x, y, y),
            Some((x0, x1, y0, y1)) => (x0.min(x), x1.max(x), y0.min(y), y1.max(y)),
        });
    }
    b
}

/// Axes: `log_x`/`log_y` pick logarithmic scales (non-positive values are dropped there);
/// `x_bytes` draws x on a log2 scale with size labels.
pub struct Axes<'a> {
    pub title: &'a str,
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    pub log_x: bool,
    pub log_y: bool,
    /// Scatter (points only) instead of lines with markers.
    pub scatter: bool,
    /// Formats x tick labels (block sizes as "4k" ...).
    pub x_bytes: bool,
}

/// Draws `series` into an SVG file. Returns Ok(false) when there is nothing to draw.
pub fn line_chart(path: &Path, axes: &Axes, series: &[Series]) -> Result<bool> {
    // Byte-sized x values (block sizes) are drawn at log2(x) on a linear axis, so that the ticks fall
    // on powers of two and read "4k", "64k", "1M" instead of plotters' powers of ten.
    let bytes = axes.x_bytes;
    let log_x = axes.log_x && !bytes;
    let series: Vec<Series> = series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            points: s
                .points
                .iter()
                .copied()
                .filter(|&(x, y)| x.is_finite() && y.is_finite() && ((!axes.log_x && !bytes) || x > 0.0) && (!axes.log_y || y > 0.0))
                .map(|(x, y)| if bytes { (x.log2(), y) } else { (x, y) })
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    let Some((x0, x1, y0, y1)) = bounds(&series) else {
        return Ok(false);
    };
    let (x0, x1) = if log_x {
        (x0 / 1.5, x1 * 1.5)
    } else if bytes {
        (x0.floor() - 0.5, x1.ceil() + 0.5)
    } else {
        pad(x0.min(0.0), x1)
    };
    // Headroom above the data for the legend box in the upper right corner.
    let (y0, y1) = if axes.log_y { (y0 / 1.5, y1 * 6.0) } else { pad(y0.min(0.0), y1 + (y1 - y0.min(0.0)) * 0.25) };
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(perr)?;
    let mut b = ChartBuilder::on(&root);
    b.caption(axes.title, ("sans-serif", 22)).margin(12).x_label_area_size(44).y_label_area_size(70);
    // The four scale combinations are distinct types in plotters.
    macro_rules! draw {
        ($xr:expr, $yr:expr) => {{
            let mut chart = b.build_cartesian_2d($xr, $yr).map_err(perr)?;
            let xfmt = |v: &f64| if bytes { fmt_size(2f64.powf(v.round()).min(1e18) as u64) } else { format_num(*v) };
            let n_xlabels = if bytes { ((x1 - x0).round() as usize).clamp(2, 24) } else { 10 };
            let yfmt = |v: &f64| format_num(*v);
            chart.configure_mesh().x_labels(n_xlabels).x_desc(axes.x_desc).y_desc(axes.y_desc).x_label_formatter(&xfmt).y_label_formatter(&yfmt).draw().map_err(perr)?;
            for (i, s) in series.iter().enumerate() {
                let color = COLORS[i % COLORS.len()].to_rgba();
                if axes.scatter {
                    chart
                        .draw_series(s.points.iter().map(|&p| Circle::new(p, 2, color.filled())))
                        .map_err(perr)?
                        .label(s.name.clone())
                        .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
                } else {
                    chart
                        .draw_series(LineSeries::new(s.points.iter().copied(), color.stroke_width(2)))
                        .map_err(perr)?
                        .label(s.name.clone())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
                    chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(perr)?;
                }
            }
            chart.configure_series_labels().background_style(WHITE.mix(0.85)).border_style(BLACK).position(SeriesLabelPosition::UpperRight).draw().map_err(perr)?;
        }};
    }
    match (log_x, axes.log_y) {
        (true, true) => draw!((x0..x1).log_scale(), (y0..y1).log_scale()),
        (true, false) => draw!((x0..x1).log_scale(), y0..y1),
        (false, true) => draw!(x0..x1, (y0..y1).log_scale()),
        (false, false) => draw!(x0..x1, y0..y1),
    }
    root.present().map_err(perr)?;
    Ok(true)
}

fn pad(lo: f64, hi: f64) -> (f64, f64) {
    if hi > lo {
        (lo, hi + (hi - lo) * 0.08)
    } else {
        (lo - 1.0, hi + 1.0)
    }
}

fn format_num(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(0.01..1e6).contains(&a) {
        format!("{v:.0e}")
    } else if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// All plots of a result set into `out`; returns the files written.
pub fn plot_all(set: &ResultSet, reference: &str, out: &Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let mut emit = |name: &str, axes: Axes, series: Vec<Series>| -> Result<()> {
        let p = out.join(name);
        if line_chart(&p, &axes, &series)? {
            written.push(p);
        }
        Ok(())
    };

    // Throughput vs block size, per mode (write and read), one line per filesystem.
    let sweeps: BTreeMap<String, SweepResults> = set.labels_for("sweep", reference).into_iter().filter_map(|l| Some((l.clone(), set.get("sweep", &l)?.results_as().ok()?))).collect();
    let modes: std::collections::BTreeSet<String> = sweeps.values().flat_map(|r| r.points.iter().map(|p| p.mode.clone())).collect();
    for m in modes {
        let mut series = Vec::new();
        for (l, r) in &sweeps {
            for (ph, w) in [("write", true), ("read", false)] {
                let pts = r.points.iter().filter(|p| p.mode == m).filter_map(|p| Some((p.block_size as f64, if w { p.write.mb_s } else { p.read.mb_s }?))).collect();
                series.push(Series { name: format!("{l} {ph}"), points: pts });
            }
        }
        let title = format!("Sequential throughput vs block size ({m})");
        emit(&format!("sweep-{m}.svg"), Axes { title: &title, x_desc: "block size", y_desc: "MB/s", log_x: true, log_y: false, scatter: false, x_bytes: true }, series)?;
    }

    // Overwrite throughput vs block size, clean and each dirty level.
    let mut series = Vec::new();
    for l in set.labels_for("dirty", reference) {
        let Some(r) = set.get("dirty", &l).and_then(|r| r.results_as::<DirtyResults>().ok()) else { continue };
        let mut levels: Vec<(String, f64)> = Vec::new();
        for p in &r.points {
            if !levels.iter().any(|x| x.0 == p.state && x.1 == p.fill) {
                levels.push((p.state.clone(), p.fill));
            }
        }
        for (st, f) in levels {
            let pts = r.points.iter().filter(|p| p.state == st && p.fill == f).filter_map(|p| Some((p.block_size as f64, p.overwrite.mb_s?))).collect();
            let name = if st == "clean" { format!("{l} clean") } else { format!("{l} dirty {:.0}%", f * 100.0) };
            series.push(Series { name, points: pts });
        }
    }
    emit("dirty.svg", Axes { title: "Overwrite throughput, clean vs dirty", x_desc: "block size", y_desc: "MB/s", log_x: true, log_y: false, scatter: false, x_bytes: true }, series)?;

    // Latency histogram, log-log: x = bucket upper bound (µs), y = count.
    let mut series = Vec::new();
    for l in set.labels_for("latency", reference) {
        let Some(r) = set.get("latency", &l).and_then(|r| r.results_as::<LatencyResults>().ok()) else { continue };
        let pts = r.histogram.iter().filter(|b| b.count > 0).map(|b| (b.hi_us as f64, b.count as f64)).collect();
        series.push(Series { name: l.clone(), points: pts });
    }
    emit("latency-histogram.svg", Axes { title: "Write latency histogram (log2 buckets)", x_desc: "latency, bucket upper bound (µs)", y_desc: "writes", log_x: true, log_y: true, scatter: false, x_bytes: false }, series)?;

    // GC scatter: throughput of each window over time.
    let mut series = Vec::new();
    for l in set.labels_for("gc", reference) {
        let Some(r) = set.get("gc", &l).and_then(|r| r.results_as::<GcResults>().ok()) else { continue };
        series.push(Series { name: l.clone(), points: r.windows.iter().map(|w| (w.t_s, w.mb_s)).collect() });
    }
    emit("gc-scatter.svg", Axes { title: "Overwrite throughput per window (GC fluctuation)", x_desc: "time (s)", y_desc: "MB/s", log_x: false, log_y: false, scatter: true, x_bytes: false }, series)?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_text_without_fonts() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.svg");
        let s = vec![Series { name: "ferrofs write".into(), points: vec![(4096.0, 2.0), (65536.0, 10.0), (1048576.0, 20.0)] }];
        let axes = Axes { title: "Title here", x_desc: "block size", y_desc: "MB/s", log_x: true, log_y: false, scatter: false, x_bytes: true };
        assert!(line_chart(&p, &axes, &s).unwrap());
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(svg.contains("<text"), "no text elements");
        for t in ["Title here", "ferrofs write", "MB/s", "block size", "64k"] {
            assert!(svg.contains(t), "missing {t:?}");
        }
        // Log-log and scatter variants, and empty input.
        let axes = Axes { title: "h", x_desc: "x", y_desc: "y", log_x: true, log_y: true, scatter: true, x_bytes: false };
        assert!(line_chart(&p, &axes, &[Series { name: "a".into(), points: vec![(1.0, 1.0), (0.0, 5.0), (8.0, 100.0)] }]).unwrap());
        assert!(!line_chart(&p, &axes, &[Series { name: "a".into(), points: vec![(0.0, 1.0)] }]).unwrap());
        assert!(!line_chart(&p, &axes, &[]).unwrap());
        // One point only: degenerate ranges must not fail.
        let axes = Axes { title: "one", x_desc: "x", y_desc: "y", log_x: false, log_y: false, scatter: true, x_bytes: false };
        assert!(line_chart(&p, &axes, &[Series { name: "a".into(), points: vec![(0.0, 0.0)] }]).unwrap());
    }

    #[test]
    fn number_format() {
        assert_eq!(format_num(0.0), "0");
        assert_eq!(format_num(12.5), "12.5");
        assert_eq!(format_num(250.4), "250");
        assert_eq!(format_num(0.25), "0.25");
        assert_eq!(format_num(1e7), "1e7");
    }
}
