//! `tiermem run --far NEWFILE` (issue 35 item 2: the named far file stayed
//! after the run, 48 GiB of apparent size, so the next run failed with
//! "the file exists"; with an exec wrapper, `-- env ./prog`, the wrapper
//! took the file and the real program ran untiered). Now:
//!
//! - the file is gone after the program exits, and after it is killed
//!   (SIGKILL): `tiermem run` removes it after `waitpid`;
//! - the program a wrapper execs gets it;
//! - a killed run's leftover (the launcher killed too) is named and swept
//!   by the next run; a file that is not tiermem's is never touched.
//!
//! The program is this test binary (`child_holds_the_far_file`). The
//! preload library must be next to the `tiermem` binary (`cargo build -p
//! tiermem-preload`); without it the tests say `skipped: <why>`.

use std::io::BufRead;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{have_preload, BIN};
const CHILD: &str = "child_holds_the_far_file";

/// Under `tiermem run`: 32 MiB written over an 8 MiB budget, then a check
/// that this process holds the far file `TIERMEM_TEST_FAR` names, then
/// `ready` on stdout and a sleep of `TIERMEM_TEST_SLEEP` seconds.
#[test]
fn child_holds_the_far_file() {
    if std::env::var("TIERMEM_CHILD").as_deref() != Ok(CHILD) {
        return;
    }
    let mut v = vec![0u8; 32 << 20];
    for i in (0..v.len()).step_by(4096) {
        v[i] = 1;
    }
    std::hint::black_box(&v);
    let far = PathBuf::from(std::env::var("TIERMEM_TEST_FAR").unwrap());
    let held = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l == far));
    println!("{}", if held { "ready" } else { "far file not held" });
    let secs: u64 = std::env::var("TIERMEM_TEST_SLEEP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    std::thread::sleep(Duration::from_secs(secs));
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tiermem-far-file-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `tiermem run --near 8M --far FAR [-- WRAPPER...] this-binary child`.
fn start(far: &Path, wrapper: &[&str], sleep: u64) -> Child {
    let exe = std::env::current_exe().unwrap();
    Command::new(BIN)
        .args(["run", "--near", "8M", "--quiet", "--far"])
        .arg(far)
        .arg("--")
        .args(wrapper)
        .arg(exe)
        .args(["--exact", CHILD, "--nocapture", "--test-threads=1"])
        .env("TIERMEM_CHILD", CHILD)
        .env("TIERMEM_TEST_FAR", far)
        .env("TIERMEM_TEST_SLEEP", sleep.to_string())
        .env_remove("TIERMEM_FAR_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads the child's stdout until `ready` (true) or its end (false).
fn wait_ready(c: &mut Child) -> bool {
    let out = c.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(out).lines();
    // The harness prints "test NAME ... " before the line.
    let ready = lines.any(|l| l.is_ok_and(|l| l.trim_end().ends_with(" ready")));
    // Keep the pipe open (and drained) while the program sleeps.
    std::thread::spawn(move || for _ in lines {});
    ready
}

/// The only child process of `pid` (the program `tiermem run` started).
fn child_of(pid: u32) -> u32 {
    let t0 = Instant::now();
    loop {
        let s = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(c) = s.split_whitespace().next() {
            return c.parse().unwrap();
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no child of {pid}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn stderr_of(c: Child) -> (std::process::ExitStatus, String) {
    let out = c.wait_with_output().unwrap();
    (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn kill(pid: u32) {
    let r = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    assert!(r.is_ok_and(|s| s.success()), "kill {pid}");
}

#[test]
fn the_far_file_is_gone_after_a_normal_exit() {
    if !have_preload() {
        return;
    }
    let d = scratch("exit");
    let far = d.join("far.bin");
    let mut c = start(&far, &[], 0);
    assert!(wait_ready(&mut c), "the program did not hold {}", far.display());
    let (status, err) = stderr_of(c);
    assert!(status.success(), "{status:?}: {err}");
    assert!(!far.exists(), "{} left behind: {err}", far.display());
    // And the next run can use the name again.
    let mut c = start(&far, &[], 0);
    assert!(wait_ready(&mut c));
    let (status, err) = stderr_of(c);
    assert!(status.success() && !far.exists(), "{status:?}: {err}");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn the_far_file_is_gone_after_the_program_is_killed() {
    if !have_preload() {
        return;
    }
    let d = scratch("sigkill");
    let far = d.join("far.bin");
    let mut c = start(&far, &[], 60);
    assert!(wait_ready(&mut c), "the program did not hold {}", far.display());
    assert!(far.exists());
    let program = child_of(c.id());
    // The record file of the run's children, which the program made at
    // start and never reached its exit to remove.
    let records = std::env::temp_dir().join(format!("tiermem-children-{program}"));
    assert!(records.exists(), "no {}", records.display());
    kill(program);
    let (status, err) = stderr_of(c);
    assert!(
        !records.exists(),
        "{} left behind after SIGKILL",
        records.display()
    );
    assert_eq!(
        status.signal(),
        Some(9),
        "tiermem run ends as its program did: {err}"
    );
    assert!(
        !far.exists(),
        "{} left behind after SIGKILL: {err}",
        far.display()
    );
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn the_program_a_wrapper_execs_gets_the_far_file() {
    if !have_preload() {
        return;
    }
    let d = scratch("wrapper");
    let far = d.join("far.bin");
    // `env` loads the preload, makes its heap (and the file), then execs
    // the program under the same pid.
    let mut c = start(&far, &["env", "WRAPPED=1"], 0);
    assert!(
        wait_ready(&mut c),
        "the exec'd program did not hold {}",
        far.display()
    );
    let (status, err) = stderr_of(c);
    assert!(status.success(), "{status:?}: {err}");
    assert!(
        !err.contains("running without tiermem") && !err.contains("exists"),
        "{err}"
    );
    assert!(!far.exists(), "{err}");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_killed_runs_leftover_is_swept_and_a_foreign_file_kept() {
    if !have_preload() {
        return;
    }
    let d = scratch("leftover");
    let far = d.join("far.bin");
    // Launcher and program both killed: nobody is left to remove it.
    let mut c = start(&far, &[], 60);
    assert!(wait_ready(&mut c));
    let program = child_of(c.id());
    kill(c.id());
    kill(program);
    let _ = c.wait();
    let t0 = Instant::now();
    while Path::new(&format!("/proc/{program}")).exists() {
        assert!(t0.elapsed() < Duration::from_secs(10), "{program} lives on");
        std::thread::sleep(Duration::from_millis(10));
    }
    if !far.exists() {
        eprintln!("skipped: no leftover to sweep");
        return;
    }
    let mut c = start(&far, &[], 0);
    assert!(wait_ready(&mut c));
    let (status, err) = stderr_of(c);
    assert!(status.success(), "{status:?}: {err}");
    assert!(
        err.contains(&format!("removed {}", far.display())) && err.contains(&program.to_string()),
        "the sweep is named: {err}"
    );
    assert!(!far.exists(), "{err}");
    // A file that is not tiermem's: refused, untouched.
    std::fs::write(&far, b"precious").unwrap();
    let c = start(&far, &[], 0);
    let (status, err) = stderr_of(c);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("never overwrites"), "{err}");
    assert_eq!(std::fs::read(&far).unwrap(), b"precious");
    std::fs::remove_dir_all(d).unwrap();
}
