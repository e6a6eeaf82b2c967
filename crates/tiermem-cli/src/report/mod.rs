//! `tiermem report`: what to do with the JSON reports that `tiermem run
//! --report` writes. One module per action: `merge` (a job's per-rank
//! reports in one table, JSON and chart).

use clap::Subcommand;

mod merge;

/// The actions of `tiermem report`.
#[derive(Subcommand)]
pub enum ReportCmd {
    /// Folds a job's per-rank reports (`tiermem run --report out-%r.json`
    /// under mpirun or srun) into one table, per rank and in total.
    Merge(merge::MergeArgs),
}

pub fn run(c: ReportCmd) -> Result<(), String> {
    match c {
        ReportCmd::Merge(a) => merge::run(a),
    }
}
