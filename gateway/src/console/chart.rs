//! The overview's chart: jobs waiting and running over the last 15 minutes, from the
//! refresher's samples in this gateway's memory (no Redis read), drawn as SVG with
//! plotters. No fonts are linked: the chart is lines only, and its legend and scale are
//! HTML beside it (`pages.rs`).

use plotters::prelude::*;

use super::view::{HISTORY, REFRESH, Sample};

/// Width and height of the drawing, in SVG units.
const SIZE: (u32, u32) = (720, 160);
/// Colours of the two lines (also used by the legend).
pub(crate) const WAITING: RGBColor = RGBColor(0xd9, 0x77, 0x06);
pub(crate) const RUNNING: RGBColor = RGBColor(0x25, 0x63, 0xeb);

/// The highest value drawn (the top of the scale), at least 1.
pub(crate) fn scale(samples: &[Sample]) -> u64 {
    samples
        .iter()
        .map(|s| s.waiting.max(s.running))
        .max()
        .unwrap_or(0)
        .max(1)
}

/// The chart as an SVG document; `Err` says why plotters could not draw it.
pub(crate) fn svg(samples: &[Sample], now_ms: i64) -> Result<String, String> {
    let span_ms = (HISTORY as i64) * (REFRESH.as_millis() as i64);
    let top = scale(samples) as f64 * 1.05;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .margin(4)
            .build_cartesian_2d(-span_ms..0i64, 0f64..top)
            .map_err(|e| e.to_string())?;
        for (colour, value) in [
            (WAITING, (|s: &Sample| s.waiting) as fn(&Sample) -> u64),
            (RUNNING, |s: &Sample| s.running),
        ] {
            chart
                .draw_series(LineSeries::new(
                    samples
                        .iter()
                        .map(|s| ((s.at_ms - now_ms).max(-span_ms), value(s) as f64)),
                    colour.stroke_width(2),
                ))
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
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
}
