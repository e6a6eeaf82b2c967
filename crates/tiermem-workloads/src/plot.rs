//! SVG plots written by the benchmarks themselves (plotters, no external
//! tool or font needed).

use crate::report::first_seen;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// One bar of a grouped bar chart, with an optional error bar.
#[derive(Clone, Debug)]
pub struct Bar {
    /// Group (x axis label).
    pub group: String,
    /// Series (color, legend).
    pub series: String,
    /// Height.
    pub value: f64,
    /// Upper whisker (e.g. p99), drawn when greater than `value`.
    pub upper: Option<f64>,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// One bar per (group, series) of repeated measurements: the median, with
/// the maximum as the whisker.
pub fn median_bars(samples: &[(String, String, f64)]) -> Vec<Bar> {
    let mut bars: Vec<Bar> = Vec::new();
    for (group, series) in first_seen(samples.iter().map(|(g, s, _)| (g, s))) {
        let mut v: Vec<f64> = samples
            .iter()
            .filter(|(g, s, _)| g == group && s == series)
            .map(|x| x.2)
            .collect();
        let hi = v.iter().cloned().fold(0.0, f64::max);
        bars.push(Bar {
            group: group.clone(),
            series: series.clone(),
            value: crate::report::quantile(&mut v, 0.5),
            upper: Some(hi),
        });
    }
    bars
}

/// Draws a grouped bar chart to `path` (SVG). `log_y` uses a log scale.
pub fn grouped_bars(
    path: &Path,
    title: &str,
    y_label: &str,
    bars: &[Bar],
    log_y: bool,
) -> Result<(), String> {
    // An infinite or NaN height (a ratio over a zero time) would send the
    // axis computation into an endless loop; such bars are left out.
    let finite: Vec<Bar> = bars
        .iter()
        .filter(|b| b.value.is_finite() && (!log_y || b.value > 0.0))
        .map(|b| Bar {
            upper: b.upper.filter(|u| u.is_finite()),
            ..b.clone()
        })
        .collect();
    let bars = &finite[..];
    let groups = first_seen(bars.iter().map(|b| b.group.clone()));
    let series = first_seen(bars.iter().map(|b| b.series.clone()));
    if groups.is_empty() {
        return Err("nothing to plot".into());
    }
    let ymax = bars
        .iter()
        .map(|b| b.upper.unwrap_or(b.value).max(b.value))
        .fold(0.0f64, f64::max)
        * 1.15;
    let ymin_log = bars
        .iter()
        .map(|b| b.value)
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min)
        .min(1.0)
        / 2.0;
    let per_group = |g: &str| {
        series
            .iter()
            .filter(|s| bars.iter().any(|b| b.group == g && &b.series == *s))
            .count()
    };
    let max_in_group = groups.iter().map(|g| per_group(g)).max().unwrap_or(1).max(1);
    let width = (260 + groups.len() * (50 + 34 * max_in_group)).max(720) as u32;
    let root = SVGBackend::new(path, (width, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let ng = groups.len() as f64;
    let slot = 0.8 / max_in_group as f64;
    // x position of a bar: the bars a group has are centred in its unit.
    let bar_x = |b: &Bar| {
        let g = groups.iter().position(|x| x == &b.group).unwrap_or(0);
        let present: Vec<&String> = series
            .iter()
            .filter(|s| bars.iter().any(|o| o.group == b.group && &o.series == *s))
            .collect();
        let k = present.iter().position(|s| **s == b.series).unwrap_or(0);
        g as f64 + 0.5 - slot * present.len() as f64 / 2.0 + slot * k as f64
    };
    macro_rules! body {
        ($chart:expr, $y:expr, $ybottom:expr) => {{
            let mut chart = $chart;
            draw_bar_mesh(&mut chart, y_label)?;
            for (si, s) in series.iter().enumerate() {
                let color = COLORS[si % COLORS.len()];
                let mine: Vec<&Bar> = bars.iter().filter(|b| &b.series == s).collect();
                let rects: Vec<_> = mine
                    .iter()
                    .map(|b| {
                        let x0 = bar_x(b);
                        Rectangle::new([(x0, $y(0.0)), (x0 + slot * 0.9, $y(b.value))], color.filled())
                    })
                    .collect();
                chart
                    .draw_series(rects)
                    .map_err(|e| e.to_string())?
                    .label(s.clone())
                    .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
                let whiskers: Vec<_> = mine
                    .iter()
                    .filter(|b| b.upper.is_some_and(|u| u > b.value))
                    .map(|b| {
                        let xm = bar_x(b) + slot * 0.45;
                        let top = b.upper.unwrap_or(b.value);
                        PathElement::new(vec![(xm, $y(b.value)), (xm, $y(top))], BLACK.stroke_width(1))
                    })
                    .collect();
                chart.draw_series(whiskers).map_err(|e| e.to_string())?;
            }
            draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
            // Group names under the axis, centred on each group.
            draw_categories(&root, &chart, &groups, $ybottom, 14)?;
        }};
    }
    if log_y {
        let top = ymax.max(ymin_log * 10.0);
        let chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(
                0.0..ng,
                (ymin_log..top)
                    .log_scale()
                    .with_key_points(log_ticks(ymin_log, top)),
            )
            .map_err(|e| e.to_string())?;
        body!(chart, |v: f64| v.max(ymin_log), ymin_log);
    } else {
        let chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..ng, 0.0..ymax.max(1e-9))
            .map_err(|e| e.to_string())?;
        body!(chart, |v: f64| v, 0.0);
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// The y axis of a bar chart, labelled `y_label`: no vertical grid lines
/// and no x labels (the categories are written under the axis by
/// [`draw_categories`]).
fn draw_bar_mesh<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    y_label: &str,
) -> Result<(), String>
where
    DB: DrawingBackend,
    X: Ranged + ValueFormatter<X::ValueType>,
    Y: Ranged + ValueFormatter<Y::ValueType>,
{
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(y_label)
        .draw()
        .map_err(|e| e.to_string())
}

/// The legend of every chart here: the series' names in a framed box on a
/// light background, at `pos`.
pub fn draw_legend<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    pos: SeriesLabelPosition,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(pos)
        .draw()
        .map_err(|e| e.to_string())
}

/// Category `names` of a bar chart under its axis (at `y`), the `k`-th
/// centred on `k + 0.5`, in `size`-point type.
fn draw_categories<'a, 'n, DB, X, Y>(
    root: &DrawingArea<DB, Shift>,
    chart: &ChartContext<'a, DB, Cartesian2d<X, Y>>,
    names: impl IntoIterator<Item = &'n String>,
    y: Y::ValueType,
    size: u32,
) -> Result<(), String>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64>,
    Y: Ranged,
    Y::ValueType: Clone,
{
    let style = TextStyle::from(("sans-serif", size).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (k, name) in names.into_iter().enumerate() {
        let (px, py) = chart.backend_coord(&(k as f64 + 0.5, y.clone()));
        root.draw(&Text::new(name.clone(), (px, py + 8), style.clone()))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Ticks for a log axis over `[lo, hi]`: 1, 2 and 5 times each power of
/// ten (plotters' own log ticks print a decade's end twice).
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut decade = 10f64.powi(lo.log10().floor() as i32);
    while decade <= hi {
        ticks.extend(
            [1.0, 2.0, 5.0]
                .iter()
                .map(|m| m * decade)
                .filter(|t| (lo..=hi).contains(t)),
        );
        decade *= 10.0;
    }
    ticks
}

/// One segment of a stacked bar.
#[derive(Clone, Debug)]
pub struct Segment {
    /// Bar (x axis label).
    pub bar: String,
    /// Stack layer (color, legend).
    pub layer: String,
    /// Height of the segment.
    pub value: f64,
}

/// Draws stacked bars to `path` (SVG), layers in first-seen order.
pub fn stacked_bars(path: &Path, title: &str, y_label: &str, segs: &[Segment]) -> Result<(), String> {
    let bars = first_seen(segs.iter().map(|s| s.bar.clone()));
    let layers = first_seen(segs.iter().map(|s| s.layer.clone()));
    if bars.is_empty() {
        return Err("nothing to plot".into());
    }
    let total = |b: &str| segs.iter().filter(|s| s.bar == b).map(|s| s.value).sum::<f64>();
    let ymax = bars.iter().map(|b| total(b)).fold(0.0f64, f64::max).max(1e-9) * 1.15;
    let width = (260 + bars.len() * 110).max(720) as u32;
    let root = SVGBackend::new(path, (width, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let nb = bars.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..nb, 0.0..ymax)
        .map_err(|e| e.to_string())?;
    draw_bar_mesh(&mut chart, y_label)?;
    for (li, layer) in layers.iter().enumerate() {
        let color = COLORS[li % COLORS.len()];
        let rects: Vec<_> = bars
            .iter()
            .enumerate()
            .filter_map(|(bi, b)| {
                let below: f64 = segs
                    .iter()
                    .filter(|s| &s.bar == b && layers.iter().position(|l| *l == s.layer) < Some(li))
                    .map(|s| s.value)
                    .sum();
                let v = segs.iter().find(|s| &s.bar == b && &s.layer == layer)?.value;
                Some(Rectangle::new(
                    [(bi as f64 + 0.2, below), (bi as f64 + 0.8, below + v)],
                    color.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(|e| e.to_string())?
            .label(layer.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    draw_categories(&root, &chart, &bars, 0.0, 13)?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// One line of a line chart: points `(x, y)` in drawing order.
#[derive(Clone, Debug)]
pub struct Line {
    /// Legend.
    pub name: String,
    /// Points.
    pub points: Vec<(f64, f64)>,
}

/// Draws lines to `path` (SVG), linear axes from zero, legend lower right.
pub fn lines(path: &Path, title: &str, x_label: &str, y_label: &str, lines: &[Line]) -> Result<(), String> {
    let xmax = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.02;
    let ymax = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.05;
    if lines.iter().all(|l| l.points.is_empty()) {
        return Err("nothing to plot".into());
    }
    let root = SVGBackend::new(path, (820, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(|e| e.to_string())?;
    for (k, l) in lines.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        chart
            .draw_series(LineSeries::new(l.points.iter().copied(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(l.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ticks_name_each_value_once() {
        assert_eq!(log_ticks(0.5, 35.0), vec![0.5, 1.0, 2.0, 5.0, 10.0, 20.0]);
        assert_eq!(log_ticks(1.0, 10.0), vec![1.0, 2.0, 5.0, 10.0]);
        assert_eq!(log_ticks(0.03, 0.04), Vec::<f64>::new());
    }

    #[test]
    fn median_bars_take_the_median_and_the_maximum() {
        let s = |g: &str, x: f64| (g.to_string(), "fifo".to_string(), x);
        let bars = median_bars(&[s("a", 3.0), s("a", 1.0), s("b", 4.0), s("a", 2.0)]);
        assert_eq!(bars.len(), 2);
        assert_eq!(
            (bars[0].group.as_str(), bars[0].value, bars[0].upper),
            ("a", 2.0, Some(3.0))
        );
        assert_eq!((bars[1].value, bars[1].upper), (4.0, Some(4.0)));
    }

    #[test]
    fn draws_an_svg() {
        let p = std::env::temp_dir().join(format!("tiermem-plot-{}.svg", std::process::id()));
        let bars = vec![
            Bar {
                group: "zero-fill".into(),
                series: "in-context".into(),
                value: 5.0,
                upper: Some(9.0),
            },
            Bar {
                group: "zero-fill".into(),
                series: "handler".into(),
                value: 12.0,
                upper: None,
            },
            Bar {
                group: "fill".into(),
                series: "in-context".into(),
                value: 6.0,
                upper: Some(7.0),
            },
        ];
        grouped_bars(&p, "t", "us", &bars, false).unwrap();
        grouped_bars(&p, "t", "us", &bars, true).unwrap();
        // An infinite ratio is left out instead of hanging the axis code.
        let mut with_inf = bars.clone();
        with_inf.push(Bar {
            group: "fill".into(),
            series: "handler".into(),
            value: f64::INFINITY,
            upper: Some(f64::NAN),
        });
        grouped_bars(&p, "t", "us", &with_inf, false).unwrap();
        let s = std::fs::read_to_string(&p).unwrap();
        assert!(s.starts_with("<svg") && s.contains("zero-fill") && s.contains("handler"));
        std::fs::remove_file(&p).unwrap();
        assert!(grouped_bars(Path::new("/tmp/x.svg"), "t", "us", &[], false).is_err());
        let segs = vec![
            Segment {
                bar: "sync".into(),
                layer: "pte".into(),
                value: 3.0,
            },
            Segment {
                bar: "sync".into(),
                layer: "tlb".into(),
                value: 2.0,
            },
            Segment {
                bar: "prefetch".into(),
                layer: "pte".into(),
                value: 1.0,
            },
        ];
        stacked_bars(&p, "costs", "s", &segs).unwrap();
        let s = std::fs::read_to_string(&p).unwrap();
        assert!(s.contains("prefetch") && s.contains("tlb"));
        std::fs::remove_file(p).unwrap();
    }
}
