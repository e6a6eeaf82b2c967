//! `tiermem report plot REPORT.json --out FILE.svg`: the time series of a
//! `tiermem run --report` (its `timeline`, one sample a second) as a
//! chart: near use against the budget above, faults and evictions per
//! second below.

use clap::Args;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use tiermem::live::Sample;
use tiermem_workloads::plot::draw_legend;

#[derive(Args)]
pub struct PlotArgs {
    /// The report `tiermem run --report` wrote.
    report: PathBuf,
    /// Where to write the chart (SVG).
    #[arg(long, short)]
    out: PathBuf,
}

pub fn run(a: PlotArgs) -> Result<(), String> {
    plot(&a.report, &a.out)
}

/// The samples and the budget of a report.
fn read(path: &Path) -> Result<(Vec<Sample>, Option<u64>), String> {
    let v = super::read_json(path)?;
    let Some(t) = v.get("timeline") else {
        return Err(format!(
            "{}: no time series (`timeline`): not a report of `tiermem run --report`, or one of an older tiermem",
            path.display()
        ));
    };
    let samples: Vec<Sample> =
        serde_json::from_value(t.clone()).map_err(|e| format!("{}: timeline: {e}", path.display()))?;
    if samples.is_empty() {
        return Err(format!(
            "{}: the time series is empty (the run made no tiered region, or TIERMEM_LIVE=off)",
            path.display()
        ));
    }
    let budget = v.pointer("/cost/budget_bytes").and_then(|b| b.as_u64());
    Ok((samples, budget))
}

/// Per-second rates between consecutive samples, at the later one's time.
fn rates(s: &[Sample], f: impl Fn(&Sample) -> u64) -> Vec<(f64, f64)> {
    s.windows(2)
        .filter(|w| w[1].t_ms > w[0].t_ms)
        .map(|w| {
            let dt = (w[1].t_ms - w[0].t_ms) as f64 / 1e3;
            (
                w[1].t_ms as f64 / 1e3,
                f(&w[1]).saturating_sub(f(&w[0])) as f64 / dt,
            )
        })
        .collect()
}

fn plot(report: &Path, out: &Path) -> Result<(), String> {
    let (samples, budget) = read(report)?;
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", out.display());
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let tmax = (samples.last().map_or(0, |s| s.t_ms) as f64 / 1e3).max(1e-3) * 1.02;
    let near: Vec<(f64, f64)> = samples
        .iter()
        .map(|s| (s.t_ms as f64 / 1e3, mib(s.near_bytes)))
        .collect();
    let faults = rates(&samples, |s| s.faults);
    let evictions = rates(&samples, |s| s.evictions);
    let near_max = near
        .iter()
        .map(|p| p.1)
        .chain(budget.map(mib))
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.1;
    let rate_max = faults
        .iter()
        .chain(&evictions)
        .map(|p| p.1)
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.1;
    let root = SVGBackend::new(out, (900, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (top, bottom) = root.split_vertically(320);
    let mut c = ChartBuilder::on(&top)
        .caption(
            format!(
                "near memory in use ({})",
                report.file_name().unwrap_or_default().to_string_lossy()
            ),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..tmax, 0.0..near_max)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc("seconds")
        .y_desc("MiB")
        .draw()
        .map_err(|e| err(&e))?;
    c.draw_series(LineSeries::new(near, BLUE.stroke_width(2)))
        .map_err(|e| err(&e))?
        .label("near use")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLUE.stroke_width(2)));
    if let Some(b) = budget {
        let b = mib(b);
        c.draw_series(LineSeries::new(vec![(0.0, b), (tmax, b)], RED.stroke_width(1)))
            .map_err(|e| err(&e))?
            .label("budget")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED.stroke_width(1)));
    }
    draw_legend(&mut c, SeriesLabelPosition::LowerRight).map_err(|e| err(&e))?;
    let mut c = ChartBuilder::on(&bottom)
        .caption("faults and evictions per second", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..tmax, 0.0..rate_max)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc("seconds")
        .y_desc("per second")
        .draw()
        .map_err(|e| err(&e))?;
    let green = RGBColor(0, 140, 60);
    c.draw_series(LineSeries::new(faults, BLUE.stroke_width(2)))
        .map_err(|e| err(&e))?
        .label("faults/s")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLUE.stroke_width(2)));
    c.draw_series(LineSeries::new(evictions, green.stroke_width(2)))
        .map_err(|e| err(&e))?
        .label("evictions/s")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], green.stroke_width(2)));
    draw_legend(&mut c, SeriesLabelPosition::UpperRight).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    eprintln!("tiermem: wrote {} ({} samples)", out.display(), samples.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_differences_over_time() {
        let s = |t_ms, faults| Sample {
            t_ms,
            faults,
            ..Sample::default()
        };
        let r = rates(&[s(0, 0), s(500, 100), s(500, 100), s(1500, 1100)], |x| x.faults);
        assert_eq!(r, vec![(0.5, 200.0), (1.5, 1000.0)]);
    }

    #[test]
    fn bad_reports_say_why() {
        let d = std::env::temp_dir().join(format!("tiermem-plot-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("r.json");
        std::fs::write(&f, "{}").unwrap();
        assert!(read(&f).unwrap_err().contains("no time series"));
        std::fs::write(&f, r#"{"timeline": []}"#).unwrap();
        assert!(read(&f).unwrap_err().contains("empty"));
        std::fs::write(&f, "nope").unwrap();
        assert!(read(&f).unwrap_err().contains("not a tiermem run report"));
        std::fs::write(&f, [0xffu8, 0xfe, 0x00, 0x80]).unwrap();
        assert!(read(&f).unwrap_err().contains("(not text)"));
        assert!(read(&d.join("absent.json")).is_err());
        std::fs::write(
            &f,
            r#"{"timeline": [{"t_ms": 0, "near_bytes": 1048576, "faults": 0, "fills": 0, "far_fills": 0,
                "evictions": 0, "bytes_in": 0, "bytes_out": 0},
               {"t_ms": 1000, "near_bytes": 2097152, "faults": 10, "fills": 10, "far_fills": 0,
                "evictions": 5, "bytes_in": 0, "bytes_out": 0}],
               "cost": {"budget_bytes": 4194304}}"#,
        )
        .unwrap();
        let svg = d.join("r.svg");
        plot(&f, &svg).unwrap();
        assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
