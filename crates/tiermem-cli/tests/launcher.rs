//! `tiermem run` under a job launcher, with the launcher's variables set
//! by hand (no mpirun needed; scripts/test.sh runs the real mpirun in
//! tests/mpi/run.sh): a share of physical memory is of the node divided
//! among its local ranks, `--near-node` is divided the same way, an
//! absolute `--near` stays per process, reports and named far files get
//! the rank in their names, the summary names the rank and why the fault
//! path is handler-thread, and garbage in the variables is a warning and
//! per-process budgets.
//!
//! The preload library must be next to the `tiermem` binary (`cargo build
//! -p tiermem-preload`); without it these tests say `skipped: <why>`.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::{preload, BIN};

/// Physical memory as tiermem reads it.
fn mem_total() -> u64 {
    tiermem::SystemInfo::probe().mem_total_bytes
}

/// A scratch directory of this test's own.
fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tiermem-launcher-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `tiermem run ARGS -- true` with the launcher variables `vars` and none
/// of the caller's launcher or `TIERMEM_*` variables; (success, stderr).
fn run(args: &[&str], vars: &[(&str, &str)]) -> (bool, String) {
    let mut c = Command::new(BIN);
    for (k, _) in std::env::vars() {
        if ["TIERMEM_", "OMPI_", "PMI", "SLURM_", "MPI_LOCAL"]
            .iter()
            .any(|p| k.starts_with(p))
        {
            c.env_remove(k);
        }
    }
    let out = c
        .arg("run")
        .args(args)
        .args(["--", "true"])
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn read(p: &Path) -> serde_json::Value {
    let t = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&t).unwrap()
}

fn ompi(
    rank: &'static str,
    size: &'static str,
    local: &'static str,
    local_size: &'static str,
) -> Vec<(&'static str, &'static str)> {
    vec![
        ("OMPI_COMM_WORLD_RANK", rank),
        ("OMPI_COMM_WORLD_SIZE", size),
        ("OMPI_COMM_WORLD_LOCAL_RANK", local),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", local_size),
    ]
}

fn budget(r: &serde_json::Value) -> u64 {
    r["cost"]["budget_bytes"].as_u64().expect("a tiered run")
}

#[test]
fn a_share_of_the_node_is_divided_among_its_local_ranks() {
    if preload().is_none() {
        return;
    }
    let d = scratch("share");
    let report = d.join("r-%r.json");
    let report = report.to_str().unwrap();
    let half = (mem_total() as f64 * 0.5) as u64;
    for (rank, local, n) in [("1", "1", "2"), ("3", "0", "4")] {
        let (ok, err) = run(&["--near", "50%", "--report", report], &ompi(rank, "4", local, n));
        assert!(ok, "{err}");
        let r = read(&d.join(format!("r-{rank}.json")));
        let n: u64 = n.parse().unwrap();
        assert!(
            budget(&r).abs_diff(half / n) <= 1,
            "{} vs {}",
            budget(&r),
            half / n
        );
        assert_eq!(r["rank"]["rank"].as_u64(), Some(rank.parse().unwrap()));
        assert_eq!(r["rank"]["local_size"].as_u64(), Some(n));
        assert!(
            r["cost"]["budget_share"]
                .as_str()
                .unwrap()
                .ends_with(&format!("/ {n} local ranks")),
            "{r}"
        );
        // The summary names the rank, and why the fault path changed.
        assert!(
            err.contains(&format!("rank {rank}/4 (local {local}/{n}, Open MPI)")),
            "{err}"
        );
        assert!(
            err.contains("fault path handler-thread (OMPI_COMM_WORLD_RANK is set: an MPI rank"),
            "{err}"
        );
        // The default heap: twice the memory, divided the same way.
        let heap = r["heap_bytes"].as_u64().unwrap();
        assert_eq!(
            heap,
            tiermem::launcher::NodeShare {
                mem_total: mem_total(),
                local_ranks: n
            }
            .default_heap_bytes()
        );
    }
    // An absolute size stays per process.
    let (ok, err) = run(&["--near", "16M", "--report", report], &ompi("0", "2", "0", "2"));
    assert!(ok, "{err}");
    assert_eq!(budget(&read(&d.join("r-0.json"))), 16 << 20);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn near_node_is_divided_among_local_ranks_and_replaces_near() {
    if preload().is_none() {
        return;
    }
    let d = scratch("node");
    let report = d.join("r.json");
    let report = report.to_str().unwrap();
    let (ok, err) = run(
        &["--near-node", "64M", "--report", report],
        &ompi("1", "2", "1", "2"),
    );
    assert!(ok, "{err}");
    // No %r and two ranks: the rank goes before the extension.
    let r = read(&d.join("r.rank1.json"));
    assert!(!d.join("r.json").exists());
    assert_eq!(budget(&r), 32 << 20);
    assert_eq!(r["cost"]["budget_share"], "64M for the node / 2 local ranks");
    // From the environment, and over TIERMEM_NEAR when given on the command line.
    let mut vars = ompi("0", "2", "0", "2");
    vars.push(("TIERMEM_NEAR_NODE", "32M"));
    let (ok, err) = run(&["--report", report], &vars);
    assert!(ok, "{err}");
    assert_eq!(budget(&read(&d.join("r.rank0.json"))), 16 << 20);
    // Rank 0 says once where the reports go.
    assert!(err.contains("2 ranks, one report each"), "{err}");
    vars.push(("TIERMEM_NEAR", "8M"));
    let (ok, err) = run(&["--near-node", "32M", "--report", report], &vars);
    assert!(
        ok && err.contains("--near-node overrides TIERMEM_NEAR=8M"),
        "{err}"
    );
    assert_eq!(budget(&read(&d.join("r.rank0.json"))), 16 << 20);
    // Both on the command line: refused.
    let (ok, err) = run(&["--near", "8M", "--near-node", "32M"], &vars);
    assert!(!ok && err.contains("cannot be used with"), "{err}");
    // Below four pages per rank: refused, naming the option.
    let (ok, err) = run(&["--near-node", "16K"], &ompi("0", "2", "0", "2"));
    assert!(
        !ok && err.contains("--near-node 16K") && err.contains("minimum"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn slurm_and_garbage() {
    if preload().is_none() {
        return;
    }
    let d = scratch("slurm");
    let report = d.join("r-%r-%l.json");
    let report = report.to_str().unwrap();
    let slurm = [
        ("SLURM_STEP_ID", "0"),
        ("SLURM_PROCID", "3"),
        ("SLURM_STEP_NUM_TASKS", "5"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NODEID", "1"),
        ("SLURM_STEP_TASKS_PER_NODE", "3,2"),
    ];
    let (ok, err) = run(&["--near-node", "64M", "--report", report, "--quiet"], &slurm);
    assert!(ok, "{err}");
    let r = read(&d.join("r-3-1.json"));
    assert_eq!(budget(&r), 32 << 20);
    assert_eq!(r["rank"]["launcher"], "Slurm");
    // Not an MPI rank: the fault path is left alone.
    assert!(!r["settings"].as_str().unwrap().contains("handler-thread"), "{r}");
    // Garbage: a warning, and the share per process.
    let mut vars = ompi("0", "2", "0", "2");
    vars[3] = ("OMPI_COMM_WORLD_LOCAL_SIZE", "lots");
    let (ok, err) = run(&["--near", "50%", "--report", report, "--quiet"], &vars);
    assert!(ok, "{err}");
    assert!(
        err.contains("OMPI_COMM_WORLD_LOCAL_SIZE=\"lots\": not a number"),
        "{err}"
    );
    let r = read(&d.join("r-0-0.json"));
    assert!(budget(&r).abs_diff((mem_total() as f64 * 0.5) as u64) <= 1);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_named_far_file_is_one_per_rank() {
    if preload().is_none() {
        return;
    }
    let d = scratch("far");
    let report = d.join("r.json");
    let (ok, err) = run(
        &[
            "--near",
            "8M",
            "--far",
            d.join("far-%r.bin").to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
            "--quiet",
        ],
        &ompi("1", "2", "1", "2"),
    );
    assert!(ok, "{err}");
    let r = read(&d.join("r.rank1.json"));
    assert_eq!(
        r["cost"]["far_place"],
        d.join("far-1.bin").to_str().unwrap(),
        "{r}"
    );
    // Removed at exit, as any named far file.
    assert!(!d.join("far-1.bin").exists());
    let _ = std::fs::remove_dir_all(&d);
}
