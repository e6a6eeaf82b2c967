//! `tiermem bench dirty`: the two dirty-tracking designs on sweeps.

use crate::common::{check_sizes, progress_printer, save_chart};
use clap::Args;
use std::path::PathBuf;
use tiermem::config::parse_size;
use tiermem::DirtyTracking;

#[derive(Args)]
pub struct DirtyArgs {
    /// Virtual size.
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    virt: u64,
    /// Near budget.
    #[arg(long, default_value = "128M", value_parser = parse_size)]
    near: u64,
    /// Timed sweeps per pattern.
    #[arg(long, default_value_t = 3)]
    passes: usize,
    /// Rounds, interleaved (the table shows the median).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw an SVG chart.
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn run(a: DirtyArgs) -> Result<(), String> {
    check_sizes(a.virt, a.near)?;
    eprintln!(
        "bench dirty: {} MiB over {} MiB, {} passes x {} rounds, faulting thread unpinned",
        a.virt >> 20,
        a.near >> 20,
        a.passes,
        a.rounds
    );
    let mut p = progress_printer();
    let r = tiermem_workloads::dirty::run(
        a.virt,
        a.near,
        a.passes.max(1),
        a.rounds.max(1),
        DirtyTracking::ALL,
        &mut p,
    )
    .map_err(|e| e.to_string())?;
    print!("{}", tiermem_workloads::dirty::table(&r));
    save_chart(&r, &a.json, &a.plot, tiermem_workloads::dirty::plot)?;
    Ok(())
}
