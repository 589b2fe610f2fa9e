//! The overview's charts, drawn as SVG with plotters from this gateway's memory (no Redis
//! read): jobs waiting and running (the refresher's samples), and tasks created,
//! completed, failed and cancelled per second (the processes' tallies, `rates.rs`), over
//! the last 15 minutes. No fonts are linked: the charts are lines only, and their legends
//! and scales are HTML beside them (`pages.rs`).

use plotters::prelude::*;

use super::rates::{Point, WINDOW};
use super::view::Sample;

/// Width and height of a drawing, in SVG units.
const SIZE: (u32, u32) = (720, 160);
/// Colours of the lines (also used by the legends, `console.css`).
pub(crate) const WAITING: RGBColor = RGBColor(0xd9, 0x77, 0x06);
pub(crate) const RUNNING: RGBColor = RGBColor(0x25, 0x63, 0xeb);
pub(crate) const CREATED: RGBColor = RGBColor(0x7c, 0x3a, 0xed);
pub(crate) const COMPLETED: RGBColor = RGBColor(0x16, 0xa3, 0x4a);
pub(crate) const FAILED: RGBColor = RGBColor(0xdc, 0x26, 0x26);
pub(crate) const CANCELLED: RGBColor = RGBColor(0x6b, 0x72, 0x80);

/// One line: its colour and its points (ms since the epoch, value).
type Line = (RGBColor, Vec<(i64, f64)>);

/// The highest value of the queue chart (the top of its scale), at least 1.
pub(crate) fn scale(samples: &[Sample]) -> u64 {
    samples
        .iter()
        .map(|s| s.waiting.max(s.running))
        .max()
        .unwrap_or(0)
        .max(1)
}

/// The highest per-second rate of the rate chart (the top of its scale), at least 1.
pub(crate) fn rate_scale(points: &[Point]) -> f64 {
    points
        .iter()
        .flat_map(|p| [p.created, p.completed, p.failed, p.cancelled])
        .fold(1.0, f64::max)
}

/// Jobs waiting and running as an SVG document; `Err` says why plotters could not draw it.
pub(crate) fn svg(samples: &[Sample], now_ms: i64) -> Result<String, ChartError> {
    let line = |value: fn(&Sample) -> u64| -> Vec<(i64, f64)> {
        samples.iter().map(|s| (s.at_ms, value(s) as f64)).collect()
    };
    draw(
        &[
            (WAITING, line(|s| s.waiting)),
            (RUNNING, line(|s| s.running)),
        ],
        scale(samples) as f64,
        now_ms,
    )
}

/// Tasks per second as an SVG document; `Err` says why plotters could not draw it.
pub(crate) fn rates_svg(points: &[Point], now_ms: i64) -> Result<String, ChartError> {
    let line = |value: fn(&Point) -> f64| -> Vec<(i64, f64)> {
        points.iter().map(|p| (p.at_ms, value(p))).collect()
    };
    draw(
        &[
            (CREATED, line(|p| p.created)),
            (COMPLETED, line(|p| p.completed)),
            (FAILED, line(|p| p.failed)),
            (CANCELLED, line(|p| p.cancelled)),
        ],
        rate_scale(points),
        now_ms,
    )
}

/// `lines` over the last [`WINDOW`], now at the right, from 0 to `top`.
/// Why a chart could not be drawn: plotters' error over its SVG backend.
pub(crate) type ChartError = plotters::drawing::DrawingAreaErrorKind<std::io::Error>;

fn draw(lines: &[Line], top: f64, now_ms: i64) -> Result<String, ChartError> {
    let span_ms = WINDOW.as_millis() as i64;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(4)
            .build_cartesian_2d(-span_ms..0i64, 0f64..top * 1.05)?;
        for (colour, points) in lines {
            chart.draw_series(LineSeries::new(
                points
                    .iter()
                    .map(|&(at, v)| ((at - now_ms).clamp(-span_ms, 0), v)),
                colour.stroke_width(2),
            ))?;
        }
        root.present()?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_is_an_svg_with_a_line_per_series() {
        let samples: Vec<Sample> = (0..10)
            .map(|i| Sample {
                at_ms: 1_000_000 + i * 2000,
                waiting: i as u64,
                running: 3,
            })
            .collect();
        let drawn = svg(&samples, 1_020_000).unwrap();
        assert!(drawn.starts_with("<svg"), "{drawn}");
        assert_eq!(drawn.matches("<polyline").count(), 2, "{drawn}");
        assert_eq!(scale(&samples), 9);
        assert!(svg(&[], 0).unwrap().starts_with("<svg"));
    }

    #[test]
    fn the_rate_chart_has_four_lines_and_a_scale_of_its_peak() {
        let points: Vec<Point> = (0..10)
            .map(|i| Point {
                at_ms: 1_000_000 + i * 10_000,
                created: f64::from(i as u8),
                completed: 2.0,
                failed: 0.5,
                cancelled: 0.0,
            })
            .collect();
        let drawn = rates_svg(&points, 1_100_000).unwrap();
        assert_eq!(drawn.matches("<polyline").count(), 4, "{drawn}");
        assert!((rate_scale(&points) - 9.0).abs() < 1e-9);
        assert!((rate_scale(&[]) - 1.0).abs() < 1e-9);
    }
}
