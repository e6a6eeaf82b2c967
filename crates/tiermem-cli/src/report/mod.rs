//! `tiermem report`: what to do with the JSON reports that `tiermem run
//! --report` writes. One module per action: `merge` (a job's per-rank
//! reports in one table, JSON and chart) and `plot` (a run's time series
//! drawn).

use clap::Subcommand;
use std::path::Path;

mod merge;
mod plot;

/// The actions of `tiermem report`.
#[derive(Subcommand)]
pub enum ReportCmd {
    /// Folds a job's per-rank reports (`tiermem run --report out-%r.json`
    /// under mpirun or srun) into one table, per rank and in total.
    Merge(merge::MergeArgs),
    /// Draws a run's report (`tiermem run --report FILE`): near use and
    /// faults per second over time, as SVG.
    Plot(plot::PlotArgs),
}

pub fn run(c: ReportCmd) -> Result<(), String> {
    match c {
        ReportCmd::Merge(a) => merge::run(a),
        ReportCmd::Plot(a) => plot::run(a),
    }
}

/// A report file as JSON, or an error that says what the file is not.
fn read_json(path: &Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => format!("{}: not a tiermem run report (not text)", path.display()),
        _ => format!("{}: {e}", path.display()),
    })?;
    serde_json::from_str(&text).map_err(|e| format!("{}: not a tiermem run report: {e}", path.display()))
}
