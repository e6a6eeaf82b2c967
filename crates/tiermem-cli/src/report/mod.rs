//! `tiermem report`: what to do with the JSON reports that `tiermem run
//! --report` writes. One module per action: `merge` (a job's per-rank
//! reports in one table, JSON and chart) and `plot` (a run's time series
//! drawn).

use clap::Subcommand;

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
