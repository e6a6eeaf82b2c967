//! `tiermem run` over a far store that fills up (issue 30 item 7: `--far`
//! on a 24 MiB tmpfs, 96 MiB of data, `--near 16M`; the program died by
//! SIGBUS after 0.1 s with nothing on stderr and no report). It still dies
//! by SIGBUS, but one line names the far store, its size and what to do
//! first, and the report (and the summary, unless `--quiet`) is written on
//! the way. On both fault paths.
//!
//! The program is this test binary (`child_writes_96_mib`), a dynamically
//! linked program like any other. Mounting the tmpfs needs root, and
//! `tiermem run` needs the preload library next to it (built by `cargo
//! test --workspace`, or `cargo build -p tiermem-preload`): without either
//! the test says `skipped: <why>`.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tiermem");
const CHILD: &str = "child_writes_96_mib";

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// A tmpfs of `size`, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let p = std::env::temp_dir().join(format!("tiermem-far-full-{}", std::process::id()));
        std::fs::create_dir_all(&p).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tiermem-test"])
            .arg(&p)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = std::fs::remove_dir(&p);
            return None;
        }
        Some(Tmpfs(p))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// 96 MiB written page by page, in the program `tiermem run` runs.
#[test]
fn child_writes_96_mib() {
    if std::env::var("TIERMEM_CHILD").as_deref() != Ok(CHILD) {
        return;
    }
    let mut v = vec![0u8; 96 << 20];
    for i in (0..v.len()).step_by(4096) {
        v[i] = i as u8 | 1;
    }
    std::hint::black_box(&v);
    eprintln!("BUG: 96 MiB fitted");
}

/// `tiermem run` of the child; its status (None: killed after the
/// deadline) and stderr.
fn run(args: &[&str], far: &Path, env: &[(&str, &str)]) -> (Option<std::process::ExitStatus>, String) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(BIN)
        .arg("run")
        .args(["--near", "16M", "--far"])
        .arg(far)
        .args(args)
        .arg("--")
        .arg(exe)
        .args(["--exact", CHILD, "--nocapture", "--test-threads=1"])
        .env("TIERMEM_CHILD", CHILD)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut pipe, &mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, reader.join().unwrap())
}

#[test]
fn a_full_far_store_is_named_and_the_report_written_before_sigbus() {
    if !is_root() {
        eprintln!("skipped: mounting a 24 MiB tmpfs needs root");
        return;
    }
    let preload = Path::new(BIN).with_file_name("libtiermem_preload.so");
    if !preload.is_file() && std::env::var_os("TIERMEM_PRELOAD").is_none() {
        eprintln!(
            "skipped: no {} (cargo test --workspace or cargo build -p tiermem-preload builds it)",
            preload.display()
        );
        return;
    }
    let Some(far) = Tmpfs::mount("24M") else {
        eprintln!("skipped: mount -t tmpfs failed");
        return;
    };
    let out = std::env::temp_dir().join(format!("tiermem-far-full-{}.json", std::process::id()));
    for (path, quiet) in [("in-context", false), ("handler-thread", true)] {
        let _ = std::fs::remove_file(&out);
        let report = out.to_str().unwrap();
        let mut args = vec!["--report", report];
        if quiet {
            args.push("--quiet");
        }
        let (status, err) = run(&args, &far.0, &[("TIERMEM_FAULT_PATH", path)]);
        let what = format!("{path}, quiet {quiet}");
        assert_eq!(
            status.and_then(|s| s.signal()),
            Some(libc::SIGBUS),
            "{what}: {status:?} (None: hung), stderr:\n{err}"
        );
        assert!(!err.contains("BUG"), "{what}: {err}");
        // One line, first: the store, its size, what to do.
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("tiermem: the far store is full"))
            .collect();
        assert_eq!(lines.len(), 1, "{what}: one line:\n{err}");
        for says in [
            far.0.to_str().unwrap(),
            "a file system of 24.0 MiB",
            "free",
            "--far",
            "--near",
        ] {
            assert!(lines[0].contains(says), "{what}: {says:?} in {}", lines[0]);
        }
        // The summary unless --quiet, and the report either way.
        assert_eq!(
            err.contains("tiermem:   ended by SIGBUS"),
            !quiet,
            "{what}: summary:\n{err}"
        );
        let text =
            std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{what}: no report ({e}):\n{err}"));
        let j: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(
            j["ended_by"].as_str().is_some_and(|s| s.starts_with("SIGBUS")),
            "{what}: {text}"
        );
        assert!(
            j["heap"]["region"]["evictions"].as_u64() > Some(0),
            "{what}: {text}"
        );
        let errors = j["errors"].as_array().unwrap();
        assert!(
            errors.last().is_some_and(|e| e["errno"] == libc::ENOSPC),
            "{what}: {text}"
        );
    }
    let _ = std::fs::remove_file(&out);
}
