//! `tiermem top` (issue 33, part 4): a tiered run under `tiermem run`
//! and a process of its own that uses the library's regions publish live
//! pages; `tiermem top --once --json` lists them with their budget, near
//! use and faults, lists a forked child as its own process, ignores and
//! removes pages of processes that are gone; the pages go when the
//! processes end; the run's report has a time series that `tiermem report
//! plot` draws.
//!
//! The programs are this test binary (the `child_*` tests, which do
//! nothing unless `TIERMEM_CHILD` names them). Each test has its own page
//! directory (`TIERMEM_LIVE_DIR`), so that other tiered processes of the
//! machine do not count. The `tiermem run` test needs the preload library
//! (`cargo build -p tiermem-preload`); without it it says `skipped: <why>`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{have_preload, BIN};

const RUN_CHILD: &str = "child_sweeps_and_forks";
const REGION_CHILD: &str = "child_uses_a_region";

/// How long the programs run.
const SECONDS: f64 = 3.0;

fn sweep(v: &mut [u8], secs: f64) {
    let t = Instant::now();
    while t.elapsed().as_secs_f64() < secs {
        for i in (0..v.len()).step_by(4096) {
            v[i] = v[i].wrapping_add(1);
        }
    }
}

/// 64 MiB through the tiered heap (8 MiB near), swept for 3 s by the
/// process and by a child it forks (which ends by `exit`, running the
/// atexit handlers it inherited).
#[test]
fn child_sweeps_and_forks() {
    if std::env::var("TIERMEM_CHILD").as_deref() != Ok(RUN_CHILD) {
        return;
    }
    let mut v = vec![0u8; 64 << 20];
    sweep(&mut v, 0.2);
    // SAFETY: the child sweeps its own copy and leaves with exit.
    match unsafe { libc::fork() } {
        0 => {
            sweep(&mut v, SECONDS);
            // SAFETY: ends the child through the C library's exit path.
            unsafe { libc::exit(0) }
        }
        pid => {
            assert!(pid > 0);
            sweep(&mut v, SECONDS);
            let mut status = 0;
            // SAFETY: waits for the child forked above.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            assert_eq!(status, 0);
        }
    }
}

/// A program of its own that makes a region (64 MiB, 4 MiB near) and
/// sweeps it for 3 s: what a C API user does through the same core.
#[test]
fn child_uses_a_region() {
    if std::env::var("TIERMEM_CHILD").as_deref() != Ok(REGION_CHILD) {
        return;
    }
    let mut r = tiermem::Region::new(tiermem::Config::new(64 << 20, 4 << 20)).unwrap();
    sweep(r.as_mut_slice::<u8>(), SECONDS);
    assert!(r.stats().evictions > 0);
}

fn live_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tiermem-top-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn clean_env(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars() {
        if k.starts_with("TIERMEM_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// `tiermem top --once --json [PIDS]` in `dir`: its JSON.
fn top(dir: &Path, pids: &[u32]) -> serde_json::Value {
    let out = clean_env(&mut Command::new(BIN))
        .args(["top", "--once", "--json", "--interval", "0.5"])
        .args(pids.iter().map(u32::to_string))
        .env("TIERMEM_LIVE_DIR", dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tiermem top: {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn processes(v: &serde_json::Value) -> Vec<serde_json::Value> {
    v["processes"].as_array().cloned().unwrap_or_default()
}

/// Polls `tiermem top` until `done` says yes of its processes (10 s).
fn wait_for(dir: &Path, what: &str, done: impl Fn(&[serde_json::Value]) -> bool) -> Vec<serde_json::Value> {
    let t = Instant::now();
    loop {
        let p = processes(&top(dir, &[]));
        if done(&p) {
            return p;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{what}: never seen; last: {p:?}"
        );
    }
}

fn pages_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn wait(mut c: Child) -> std::process::Output {
    let t = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(60) {
            let _ = c.kill();
            panic!("the program did not end in 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    c.wait_with_output().unwrap()
}

/// Waits for `c`, which must succeed, and checks that no live page is left
/// in `dir` (every tiermem process removes its own as it ends).
fn wait_until_gone(c: Child, dir: &Path) {
    let out = wait(c);
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let left = pages_in(dir);
    assert!(left.is_empty(), "{left:?}");
}

/// The pid of a process that has ended.
fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

#[test]
fn top_lists_a_tiered_run_and_its_forked_child_and_the_report_has_a_time_series() {
    if !have_preload() {
        return;
    }
    let dir = live_dir("run");
    let report = dir.with_extension("json");
    let svg = dir.with_extension("svg");
    let exe = std::env::current_exe().unwrap();
    let run = clean_env(&mut Command::new(BIN))
        .args(["run", "--near", "8M", "--quiet", "--report"])
        .arg(&report)
        .arg("--")
        .arg(&exe)
        .args(["--exact", RUN_CHILD, "--test-threads=1"])
        .env("TIERMEM_CHILD", RUN_CHILD)
        .env("TIERMEM_LIVE_DIR", &dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let p = wait_for(&dir, "the run and its forked child", |p| {
        p.iter()
            .any(|x| x["regions"] == 1 && x["evictions"].as_u64() > Some(0) && x["measured"] == true)
            && p.iter().any(|x| x["forked"] == true)
    });
    let parent = p.iter().find(|x| x["regions"] == 1).unwrap();
    let pid = parent["pid"].as_u64().unwrap() as u32;
    assert_eq!(parent["budget_bytes"], 8 << 20, "{parent}");
    assert!(
        parent["near_bytes"].as_u64() <= parent["budget_bytes"].as_u64(),
        "{parent}"
    );
    assert!(parent["faults"].as_u64() > Some(0), "{parent}");
    assert!(parent["faults_per_s"].as_f64() > Some(0.0), "{parent}");
    assert_eq!(parent["stale"], false, "{parent}");
    let name = exe.file_name().unwrap().to_string_lossy();
    assert_eq!(
        parent["program"].as_str(),
        Some(&name[..name.len().min(63)]),
        "{parent}"
    );
    let child = p.iter().find(|x| x["forked"] == true).unwrap();
    assert_eq!(child["ppid"].as_u64(), Some(pid as u64), "{child}");
    assert_ne!(child["pid"], parent["pid"], "{child}");
    assert_eq!(child["regions"], 0, "{child}");
    // Chosen processes only.
    let only = top(&dir, &[pid]);
    assert_eq!(processes(&only).len(), 1, "{only}");
    // A page of a process that has ended, and one of a live pid that is
    // another process now (its start time differs): both ignored and
    // removed.
    let dead = dead_pid();
    for (pid, ticks) in [(dead, 1), (std::process::id(), 1)] {
        let page = tiermem::live::Page {
            pid,
            start_ticks: ticks,
            program: "gone".into(),
            ..Default::default()
        };
        std::fs::write(tiermem::live::page_path(&dir, pid), page.encode()).unwrap();
    }
    // A live pid whose page is another process's: listed as missing.
    let me = std::process::id();
    let v = top(&dir, &[me]);
    assert!(processes(&v).is_empty(), "{v}");
    assert_eq!(v["missing"][0].as_u64(), Some(me as u64), "{v}");
    // A pid that does not exist: refused.
    let out = clean_env(&mut Command::new(BIN))
        .args(["top", "--once", &dead.to_string()])
        .env("TIERMEM_LIVE_DIR", &dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no such process"), "{err}");
    assert!(processes(&top(&dir, &[])).iter().all(|x| x["program"] != "gone"));
    let left = pages_in(&dir);
    assert!(!left.contains(&format!("{dead}.page")), "{left:?}");
    assert!(
        !left.contains(&format!("{}.page", std::process::id())),
        "{left:?}"
    );
    // Both processes removed their pages as they ended.
    wait_until_gone(run, &dir);
    // The report's time series: about one sample a second, times rising.
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let t = r["timeline"].as_array().unwrap();
    assert!(t.len() >= 2, "{t:?}");
    let times: Vec<u64> = t.iter().map(|s| s["t_ms"].as_u64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    assert!(
        t.iter().all(|s| s["near_bytes"].as_u64() <= Some(8 << 20)),
        "{t:?}"
    );
    assert!(t.last().unwrap()["faults"].as_u64() > Some(0), "{t:?}");
    let out = Command::new(BIN)
        .args(["report", "plot"])
        .arg(&report)
        .arg("--out")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.contains("<svg") && s.contains("near use") && s.contains("faults/s"));
    let _ = std::fs::remove_file(&report);
    let _ = std::fs::remove_file(&svg);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn top_lists_a_library_user_and_forgets_it_when_it_ends() {
    let dir = live_dir("region");
    let exe = std::env::current_exe().unwrap();
    let c = clean_env(&mut Command::new(&exe))
        .args(["--exact", REGION_CHILD, "--test-threads=1"])
        .env("TIERMEM_CHILD", REGION_CHILD)
        .env("TIERMEM_LIVE_DIR", &dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = c.id();
    let p = wait_for(&dir, "the region user", |p| {
        p.iter()
            .any(|x| x["pid"] == pid && x["evictions"].as_u64() > Some(0))
    });
    let me = p.iter().find(|x| x["pid"] == pid).unwrap();
    assert_eq!(me["regions"], 1, "{me}");
    assert_eq!(me["budget_bytes"], 4 << 20, "{me}");
    assert!(me["near_bytes"].as_u64() <= Some(4 << 20), "{me}");
    assert!(me["faults"].as_u64() > Some(0), "{me}");
    assert_eq!(me["forked"], false, "{me}");
    wait_until_gone(c, &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn top_refuses_bad_arguments() {
    for args in [
        &["--interval", "0"][..],
        &["--count", "0"],
        &["--interval", "nan"],
    ] {
        let out = Command::new(BIN).arg("top").args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
    let dir = live_dir("empty");
    let v = top(&dir, &[]);
    assert!(processes(&v).is_empty(), "{v}");
}
