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
    /// Fault injection, tests only: the far store fails, shortens I/O or
    /// fills up (`read:0.01,write:0.01,short:0.01,full:after=N`, as
    /// `TIERMEM_FAULT_INJECT`); every failure must be reported and no byte
    /// lost.
    #[arg(long)]
    fault_inject: Option<String>,
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
    if let Some(spec) = &a.fault_inject {
        tiermem::store::inject::FaultInjectSpec::parse(spec).map_err(|e| format!("--fault-inject: {e}"))?;
        if a.plain {
            return Err("--fault-inject needs regions: leave out --plain".into());
        }
    }
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
        let mut cfg = if a.plain {
            stress::plain(seed, i)
        } else {
            stress::draw(seed, i, pool)
        };
        if cfg.team.is_some() && a.fault_inject.is_some() {
            // Team regions have no far store to inject failures into.
            if a.only.is_some() {
                return Err(format!(
                    "configuration #{i} of seed {seed} is a team region, which has no far store to inject failures into"
                ));
            }
            continue;
        }
        cfg.fault_inject = a.fault_inject.clone();
        let secs = a.per_config.min((budget - elapsed).max(0.5));
        // The configuration first: if it hangs, the line says which.
        eprint!(
            "[{:7.1}s] #{i:<4} {:<78}",
            t0.elapsed().as_secs_f64(),
            cfg.describe()
        );
        // A watchdog: a configuration that does not finish is a hang; say
        // which one and fail rather than wait forever.
        let limit = std::time::Duration::from_secs_f64(secs * 10.0 + 60.0);
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let what = format!(
            "{} (reproduce: tiermem stress --seed {seed} --only {i})",
            cfg.describe()
        );
        let dog = std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(limit) {
                eprintln!("\ntiermem stress: HANG: configuration #{i} did not finish in {limit:?}: {what}");
                std::process::exit(3);
            }
        });
        let o = stress::run_one(&cfg, stress::config_seed(seed, i), secs);
        let _ = done_tx.send(());
        let _ = dog.join();
        let o = o?;
        let injected = if o.injected == Default::default() {
            String::new()
        } else {
            format!(
                " {:>5} injected ({} short) {:>5} reported {:>4} SIGBUS {:>3} EFAULT",
                o.injected.failures(),
                o.injected.short,
                o.reported,
                o.sigbus,
                o.efault
            )
        };
        eprintln!(
            " {:>9} ops {:>7} syscalls {:>7} blocks {:>8} evictions{injected}  {}",
            o.ops,
            o.syscalls,
            o.blocks_verified,
            o.evictions,
            if o.corrupted == 0 { "ok" } else { "CORRUPTED" }
        );
        if o.corrupted > 0 {
            failed = true;
            eprintln!(
                "  {} corrupted block(s), first: {}\n  reproduce: tiermem stress --seed {seed} --only {i}{}{}",
                o.corrupted,
                o.first_mismatch.as_deref().unwrap_or("?"),
                if a.plain { " --plain" } else { "" },
                a.fault_inject
                    .as_ref()
                    .map(|f| format!(" --fault-inject {f}"))
                    .unwrap_or_default()
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
        "fault_inject": a.fault_inject,
        "summary": summary(&outcomes),
        "outcomes": outcomes,
    });
    save(&doc, &a.json, &None, |_, _| Ok(Vec::new()))?;
    if failed {
        return Err(format!("corrupted data (seed {seed}): see the lines above"));
    }
    Ok(())
}

/// Totals over the run (also in the JSON).
fn summary(outcomes: &[StressOutcome]) -> serde_json::Value {
    let sum = |f: fn(&StressOutcome) -> u64| outcomes.iter().map(f).sum::<u64>();
    serde_json::json!({
        "configurations": outcomes.len(),
        "blocks_verified": sum(|o| o.blocks_verified),
        "bytes_verified": sum(|o| o.blocks_verified) * 4096,
        "operations": sum(|o| o.ops),
        "syscalls": sum(|o| o.syscalls),
        "evictions": sum(|o| o.evictions),
        "faults": sum(|o| o.faults),
        "injected_failures": sum(|o| o.injected.failures()),
        "injected_read": sum(|o| o.injected.read),
        "injected_write": sum(|o| o.injected.write),
        "injected_full": sum(|o| o.injected.full),
        "injected_short": sum(|o| o.injected.short),
        "reported_failures": sum(|o| o.reported),
        "sigbus_caught": sum(|o| o.sigbus),
        "efault_caught": sum(|o| o.efault),
        "corrupted": sum(|o| o.corrupted),
        "hangs": 0,
    })
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
    if outcomes
        .iter()
        .any(|o| o.config.fault_inject.is_some() || o.injected != Default::default())
    {
        println!(
            "fault injection: {} failures injected ({} read, {} write, {} full) + {} short I/O; {} reported; {} SIGBUS and {} EFAULT caught and repaired",
            sum(|o| o.injected.failures()),
            sum(|o| o.injected.read),
            sum(|o| o.injected.write),
            sum(|o| o.injected.full),
            sum(|o| o.injected.short),
            sum(|o| o.reported),
            sum(|o| o.sigbus),
            sum(|o| o.efault)
        );
    }
    println!("by page size: {}", by(|o| &o.config.page_size));
    println!("by fault path: {}", by(|o| &o.config.fault_path));
    println!("by store: {}", by(|o| &o.config.store));
}
