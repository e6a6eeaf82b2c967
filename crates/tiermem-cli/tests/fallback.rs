//! `tiermem run` never falls back to an untiered run unasked (issue 35
//! item 1: a missing far directory, `--far /proc` or `--page-size 2m` with
//! an empty pool printed "running without tiermem" and exited 0, and
//! `--mover-cpus 7` on a 2-CPU machine only warned at run time). Each
//! set-up failure is exit status 1 with one line before the program runs;
//! what only the preload learns ends the program it was asked to tier with
//! status 1; `--fallback untiered` (`TIERMEM_FALLBACK=untiered`) keeps the
//! old behaviour; a program that the tiered one runs (fork + exec,
//! `--follow-exec`) is never killed for it.
//!
//! The preload library must be next to the `tiermem` binary (`cargo build
//! -p tiermem-preload`); without it the tests say `skipped: <why>`.

use std::process::Command;

mod common;

use common::{preload, BIN};

/// `tiermem ARGS -- sh -c 'echo ran'` (or the program given after `--`):
/// exit code, stdout, stderr.
fn run(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.arg("run").args(args);
    if !args.contains(&"--") {
        cmd.args(["--", "sh", "-c", "echo ran"]);
    }
    for k in [
        "TIERMEM_FALLBACK",
        "TIERMEM_FAR_FILE",
        "TIERMEM_NEAR",
        "TIERMEM_ROOT_PID",
    ] {
        cmd.env_remove(k);
    }
    let out = cmd.envs(env.iter().copied()).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Exit status 1, the program never ran, one line saying `says`.
fn refused(args: &[&str], says: &[&str]) {
    let (code, out, err) = run(args, &[]);
    assert_eq!(code, Some(1), "{args:?}: {out}{err}");
    assert!(!out.contains("ran"), "{args:?}: the program ran: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
    for s in says {
        assert!(err.contains(s), "{args:?}: {s:?} in {err}");
    }
    assert!(!err.contains("running without tiermem"), "{err}");
}

#[test]
fn a_missing_far_directory_stops_the_run() {
    if preload().is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tiermem-fallback-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = format!("{}/", dir.display());
    refused(&["--near", "8M", "--far", &d], &[&d, "does not exist"]);
    let f = format!("{}/far", dir.display());
    refused(
        &["--near", "8M", "--far", &f],
        &[dir.to_str().unwrap(), "does not exist"],
    );
}

/// From the first-hour session: mistakes found only after the run (or
/// never) are refused before it, with one line.
#[test]
fn first_hour_mistakes_stop_the_run_before_it_starts() {
    if preload().is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tiermem-nodir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A far store named without a budget ran untiered, silently.
    let d = format!("{}/", dir.display());
    refused(&["--far", &d], &[&d, "does not exist"]);
    // A report in a missing directory was lost after the run, status 0.
    let r = format!("{}/r.json", dir.display());
    refused(&["--near", "8M", "--report", &r], &["--report", "does not exist"]);
    refused(
        &["--near", "8M", "--report", std::env::temp_dir().to_str().unwrap()],
        &["a directory"],
    );
    // A number without a unit is bytes; a unit apart became the program.
    refused(&["--near", "5"], &["minimum of 4 pages", "5G? 5%?"]);
    refused(
        &["--near", "8", "--", "GiB", "x"],
        &["--near 8GiB, not --near 8 GiB"],
    );
}

#[test]
fn proc_as_far_directory_stops_the_run() {
    if preload().is_none() {
        return;
    }
    refused(
        &["--near", "8M", "--far", "/proc"],
        &["/proc", "name a directory"],
    );
}

#[test]
fn mover_cpus_out_of_range_stop_the_run() {
    if preload().is_none() {
        return;
    }
    let allowed = std::thread::available_parallelism().map_or(1, |n| n.get());
    // A CPU this process cannot run on: past the last one it may use.
    let past = (allowed + 64).to_string();
    refused(
        &["--near", "8M", "--movers", "1", "--mover-cpus", &past],
        &["--mover-cpus", &format!("CPU {past} is not available")],
    );
}

/// The 2 MiB pool, emptied for a test and restored after it.
struct EmptyPool(Option<u64>);

const NR: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";

impl EmptyPool {
    fn new() -> Option<EmptyPool> {
        let before: u64 = std::fs::read_to_string(NR).ok()?.trim().parse().ok()?;
        if before != 0 {
            std::fs::write(NR, "0").ok()?;
        }
        let now: u64 = std::fs::read_to_string(NR).ok()?.trim().parse().ok()?;
        let pool = EmptyPool((before != 0).then_some(before));
        (now == 0).then_some(pool)
    }
}

impl Drop for EmptyPool {
    fn drop(&mut self) {
        if let Some(n) = self.0 {
            let _ = std::fs::write(NR, n.to_string());
        }
    }
}

#[test]
fn huge_pages_with_an_empty_pool_stop_the_run() {
    if preload().is_none() {
        return;
    }
    let Some(_pool) = EmptyPool::new() else {
        eprintln!("skipped: cannot empty the 2 MiB pool (needs root and hugetlbfs)");
        return;
    };
    // Tiered (the budget must be in the pool) and not (pages from it).
    refused(
        &["--near", "8M", "--page-size", "2m"],
        &["huge pages", "--reserve"],
    );
    refused(&["--page-size", "2m"], &["pool", "empty", "--reserve"]);
}

#[test]
fn fallback_untiered_runs_the_program_with_a_warning() {
    if preload().is_none() {
        return;
    }
    let (code, out, err) = run(&["--near", "8M", "--far", "/proc", "--fallback", "untiered"], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("ran"), "{out}{err}");
    assert!(err.contains("warning") && err.contains("/proc"), "{err}");
    let (code, _, err) = run(&["--fallback", "sometimes"], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--fallback"), "{err}");
}

/// A Go program's heap is the Go runtime's own, which tiermem cannot reach:
/// it ran untiered without a word (and printed no summary: it ends with a
/// raw `exit_group`). A dynamic program holding Go's build information
/// stands in for one (no Go toolchain needed).
#[test]
fn a_go_program_is_refused_unless_asked_for() {
    if preload().is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tiermem-go-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let go = dir.join("goprog");
    let mut image = std::fs::read("/bin/echo").unwrap();
    image.extend_from_slice(b"\xff Go buildinf:\x08\x02");
    std::fs::write(&go, image).unwrap();
    std::fs::set_permissions(&go, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let go = go.to_str().unwrap();
    refused(
        &["--near", "8M", "--", go, "ran"],
        &["is a Go program", "--follow-exec", "--fallback untiered"],
    );
    for asked in ["--follow-exec", "--fallback=untiered"] {
        let (code, out, err) = run(&["--near", "8M", asked, "--", go, "ran"], &[]);
        assert_eq!(code, Some(0), "{asked}: {err}");
        assert!(out.contains("ran"), "{asked}: {out}{err}");
        assert!(
            err.contains("warning") && err.contains("is a Go program"),
            "{asked}: {err}"
        );
    }
    // Not Go: /bin/echo itself runs.
    let (code, out, err) = run(&["--near", "8M", "--", "/bin/echo", "ran"], &[]);
    assert!(
        code == Some(0) && out.contains("ran") && !err.contains("Go program"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// What only the preload learns: the heap cannot be set up in the process
/// itself. Under `LD_PRELOAD` alone there is no launcher to check first.
#[test]
fn the_preload_ends_the_program_when_its_heap_cannot_be_set_up() {
    let Some(lib) = preload() else { return };
    let sh = |env: &[(&str, &str)]| {
        let out = Command::new("sh")
            .args(["-c", "echo ran"])
            .env("LD_PRELOAD", &lib)
            .env("TIERMEM_NEAR", "8M")
            .env("TIERMEM_FAR_FILE", "/proc")
            .env_remove("TIERMEM_FALLBACK")
            .env_remove("TIERMEM_ROOT_PID")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = sh(&[]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(!out.contains("ran"), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("/proc") && err.contains("exit status 1") && err.contains("TIERMEM_FALLBACK=untiered"),
        "{err}"
    );
    let (code, out, err) = sh(&[("TIERMEM_FALLBACK", "untiered")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("ran") && err.contains("running without tiermem"),
        "{out}{err}"
    );
}

/// A program the tiered one forks and execs (`--follow-exec`) whose heap
/// fails runs untiered: it is not the program the user asked to tier.
#[test]
fn a_followed_child_whose_heap_fails_still_runs() {
    if preload().is_none() {
        return;
    }
    let (code, out, err) = run(
        &[
            "--near",
            "8M",
            "--follow-exec",
            "--",
            "sh",
            "-c",
            "TIERMEM_FAR_FILE=/proc sh -c 'echo child ran'; echo status $?",
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("child ran") && out.contains("status 0"),
        "{out}{err}"
    );
    assert!(err.contains("running without tiermem"), "{err}");
}
