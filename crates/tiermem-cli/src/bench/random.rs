//! `tiermem bench random`: GUPS-style random updates per policy and movers.

use crate::common::{check_sizes, list, parse_on_off, progress_printer, save_chart};
use clap::Args;
use std::path::PathBuf;
use tiermem::config::parse_size;
use tiermem::PolicyKind;

#[derive(Args)]
pub struct RandomArgs {
    /// Table size (a power of two).
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    virt: u64,
    /// Near budget.
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    near: u64,
    /// Updates.
    #[arg(long, default_value_t = 4_000_000)]
    updates: u64,
    /// Application threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Policies, comma-separated.
    #[arg(long, default_value = "fifo,clock,scan")]
    policy: String,
    /// Mover counts, comma-separated (0: movement in faults only).
    #[arg(long, default_value = "0,1")]
    movers: String,
    /// Fault-around settings, comma-separated (on, off), interleaved.
    #[arg(long, default_value = "on")]
    fault_around: String,
    /// Rounds, interleaved (the table shows the median).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw an SVG chart of seconds per policy and movers.
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn run(a: RandomArgs) -> Result<(), String> {
    if !a.virt.is_power_of_two() || !a.virt.is_multiple_of(4096) {
        return Err("--virt must be a power of two of at least 4K".into());
    }
    check_sizes(a.virt, a.near)?;
    let policies = list(&a.policy, "policy", PolicyKind::from_name)?;
    let movers = list(&a.movers, "mover count", |x| x.parse::<usize>().ok())?;
    let fault_around = list(&a.fault_around, "fault-around setting", parse_on_off)?;
    eprintln!(
        "bench random: {} updates over {} MiB with {} MiB near, {} thread(s), {} rounds",
        a.updates,
        a.virt >> 20,
        a.near >> 20,
        a.threads,
        a.rounds
    );
    let mut p = progress_printer();
    let r = tiermem_workloads::random::run(
        a.virt,
        a.near,
        a.updates,
        a.threads.max(1),
        &policies,
        &movers,
        &fault_around,
        a.rounds.max(1),
        &mut p,
    )
    .map_err(|e| e.to_string())?;
    print!("{}", tiermem_workloads::random::table(&r));
    save_chart(&r, &a.json, &a.plot, tiermem_workloads::random::plot)?;
    if r.results.iter().any(|x| !x.valid) {
        return Err("a run failed verification".into());
    }
    Ok(())
}
