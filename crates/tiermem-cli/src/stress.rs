//! `tiermem stress`: random configurations and operations with every byte
//! checked (crates/tiermem-workloads/src/stress.rs); exits 1 on any
//! mismatch, naming the seed and configuration that reproduce it.

use crate::common::save;
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;
use tiermem_workloads::stress::{self, StressOutcome};

#[derive(Args)]
pub struct StressArgs {
    /// How long to run, in minutes (fractions allowed).
    #[arg(long, default_value_t = 1.0)]
    minutes: f64,
    /// Seed of the run (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Seconds per configuration.
    #[arg(long, default_value_t = 3.0)]
    per_config: f64,
    /// Run only configuration number N of the seed (to reproduce one).
    #[arg(long)]
    only: Option<u64>,
    /// Plain heap memory instead of regions: the same checks for a program
    /// that knows nothing of tiermem (run it under `tiermem run`).
    #[arg(long)]
    plain: bool,
    /// Write every configuration's outcome as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(a: StressArgs) -> Result<(), String> {
    if !(a.minutes > 0.0 && a.per_config > 0.0) {
        return Err("--minutes and --per-config must be positive".into());
    }
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let pool = tiermem::hugepages::pool(tiermem::hugepages::HugePageSize::Size2M).free;
    eprintln!(
        "tiermem stress: seed {seed}, {} min, {} s per configuration{}",
        a.minutes,
        a.per_config,
        if a.plain { ", plain heap memory" } else { "" }
    );
    let t0 = Instant::now();
    let budget = a.minutes * 60.0;
    let mut outcomes: Vec<StressOutcome> = Vec::new();
    let mut failed = false;
    let indices: Box<dyn Iterator<Item = u64>> = match a.only {
        Some(i) => Box::new(std::iter::once(i)),
        None => Box::new(0..),
    };
    for i in indices {
        let elapsed = t0.elapsed().as_secs_f64();
        if a.only.is_none() && elapsed + 0.5 > budget {
            break;
        }
        let cfg = if a.plain {
            stress::plain(seed, i)
        } else {
            stress::draw(seed, i, pool)
        };
        let secs = a.per_config.min((budget - elapsed).max(0.5));
        // The configuration first: if it hangs, the line says which.
        eprint!(
            "[{:7.1}s] #{i:<4} {:<78}",
            t0.elapsed().as_secs_f64(),
            cfg.describe()
        );
        let o = stress::run_one(&cfg, stress::config_seed(seed, i), secs)?;
        eprintln!(
            " {:>9} ops {:>7} syscalls {:>7} blocks {:>8} evictions  {}",
            o.ops,
            o.syscalls,
            o.blocks_verified,
            o.evictions,
            if o.corrupted == 0 { "ok" } else { "CORRUPTED" }
        );
        if o.corrupted > 0 {
            failed = true;
            eprintln!(
                "  {} corrupted block(s), first: {}\n  reproduce: tiermem stress --seed {seed} --only {i}{}",
                o.corrupted,
                o.first_mismatch.as_deref().unwrap_or("?"),
                if a.plain { " --plain" } else { "" }
            );
        }
        outcomes.push(o);
    }
    print_summary(&outcomes);
    let doc = serde_json::json!({
        "benchmark": "stress",
        "seed": seed,
        "minutes": a.minutes,
        "plain": a.plain,
        "outcomes": outcomes,
    });
    save(&doc, &a.json, &None, |_, _| Ok(Vec::new()))?;
    if failed {
        return Err(format!("corrupted data (seed {seed}): see the lines above"));
    }
    Ok(())
}

fn print_summary(outcomes: &[StressOutcome]) {
    let sum = |f: fn(&StressOutcome) -> u64| outcomes.iter().map(f).sum::<u64>();
    println!("configurations  blocks verified  operations  syscalls   evictions  faults     corrupted");
    println!(
        "{:<15} {:<16} {:<11} {:<10} {:<10} {:<10} {}",
        outcomes.len(),
        sum(|o| o.blocks_verified),
        sum(|o| o.ops),
        sum(|o| o.syscalls),
        sum(|o| o.evictions),
        sum(|o| o.faults),
        sum(|o| o.corrupted)
    );
    let by = |key: fn(&StressOutcome) -> &str| {
        let mut m: std::collections::BTreeMap<&str, (usize, u64)> = Default::default();
        for o in outcomes {
            let e = m.entry(key(o)).or_default();
            e.0 += 1;
            e.1 += o.corrupted;
        }
        m.into_iter()
            .map(|(k, (n, c))| format!("{k} {n} ({c} corrupted)"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("by page size: {}", by(|o| &o.config.page_size));
    println!("by fault path: {}", by(|o| &o.config.fault_path));
    println!("by store: {}", by(|o| &o.config.store));
}
