//! `bench.png`: throughput and p99 latency against the number of clients.

use std::path::Path;

use crate::load::Row;

/// Font of the chart's text, unless `BENCH_FONT` names another.
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// The PNG: throughput and p99 latency against clients. `Err` says why not (or what was
/// left out); it never fails the run.
pub(crate) fn draw_png(path: &Path, rows: &[Row]) -> Result<Option<String>, String> {
    use plotters::prelude::*;
    let font_path = std::env::var("BENCH_FONT").unwrap_or_else(|_| FONT.to_owned());
    let mut note = None;
    let font = match std::fs::read(&font_path) {
        Ok(bytes) => {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            match plotters::style::register_font("sans-serif", FontStyle::Normal, bytes) {
                Ok(()) => true,
                Err(_) => {
                    note = Some(format!("{font_path} is not a usable font"));
                    false
                }
            }
        }
        Err(e) => {
            note = Some(format!("no font at {font_path} ({e})"));
            false
        }
    };
    if let Some(n) = &mut note {
        n.push_str(
            "; drawn without text: left throughput, right p99; red create, blue e2e poll, green e2e listen",
        );
    }
    let xs: Vec<f64> = rows.iter().map(|r| r.clients as f64).collect();
    let xmin = xs.iter().copied().fold(f64::INFINITY, f64::min) * 0.8;
    let xmax = xs.iter().copied().fold(0.0, f64::max) * 1.25;
    let colors = [RED, BLUE, GREEN];
    let throughput: Vec<(&str, Vec<f64>)> = vec![
        ("create/s", rows.iter().map(|r| r.create.per_s).collect()),
        (
            "e2e poll tasks/s",
            rows.iter().map(|r| r.poll.per_s).collect(),
        ),
        (
            "e2e listen tasks/s",
            rows.iter().map(|r| r.listen.per_s).collect(),
        ),
    ];
    let p99: Vec<(&str, Vec<f64>)> = vec![
        ("create p99 ms", rows.iter().map(|r| r.create.p99).collect()),
        ("e2e poll p99 ms", rows.iter().map(|r| r.poll.p99).collect()),
        (
            "e2e listen p99 ms",
            rows.iter().map(|r| r.listen.p99).collect(),
        ),
    ];
    let root = BitMapBackend::new(path, (1400, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| format!("{e:?}"))?;
    let (left, right) = root.split_horizontally(700);
    for (area, title, ylabel, series) in [
        (&left, "Throughput", "per second", &throughput),
        (&right, "p99 latency", "ms", &p99),
    ] {
        let ymax = series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max)
            .max(1.0)
            * 1.15;
        let mut builder = ChartBuilder::on(area);
        builder.margin(20);
        if font {
            builder
                .caption(title, ("sans-serif", 24))
                .x_label_area_size(45)
                .y_label_area_size(70);
        }
        let mut chart = builder
            .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..ymax)
            .map_err(|e| format!("{e:?}"))?;
        if font {
            chart
                .configure_mesh()
                .x_desc("clients")
                .y_desc(ylabel)
                .x_label_formatter(&|x| format!("{x:.0}"))
                .y_label_formatter(&|y| format!("{y:.0}"))
                .label_style(("sans-serif", 15))
                .draw()
                .map_err(|e| format!("{e:?}"))?;
        }
        for ((name, values), color) in series.iter().zip(colors) {
            let pts: Vec<(f64, f64)> = xs
                .iter()
                .copied()
                .zip(values.iter().copied())
                .filter(|(_, y)| y.is_finite())
                .collect();
            let s = chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(|e| format!("{e:?}"))?;
            if font {
                s.label(*name).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            }
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 4, color.filled())))
                .map_err(|e| format!("{e:?}"))?;
        }
        if font {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| format!("{e:?}"))?;
        }
    }
    root.present().map_err(|e| format!("{e:?}"))?;
    Ok(note)
}
