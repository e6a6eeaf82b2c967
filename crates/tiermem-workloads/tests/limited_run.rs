//! An unmodified program run under a memory limit with kernel swap through
//! the public API, as the transparent-mode baseline uses it: Python touches
//! 96 MiB under a 32 MiB cgroup, with zram and with a swap file. Needs root,
//! a memory cgroup and python3; prints `skipped: <why>` where it cannot run.

use std::process::Command;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tiermem_workloads::kernel_swap::{active_swaps, KernelSwapError, LimitedRun, Stream, SwapKind};

/// The runs set up swap areas: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

const LIMIT_BYTES: u64 = 32 << 20;
const TOUCHED_MIB: u64 = 96;

/// Allocates and zero-fills 96 MiB, writes one byte in every page, reads
/// them back and prints their sum: 120 (b'x') times 96 MiB / 4 KiB pages.
const PROGRAM: &str = "b=bytearray(96<<20); b[::4096]=b'x'*len(b[::4096]); print(sum(b[::4096]))";
const EXPECTED: u64 = 120 * (TOUCHED_MIB << 20) / 4096;

fn python_touches_96_mib_under_32_mib(kind: SwapKind) {
    let _g = serial();
    if Command::new("python3").arg("-c").arg("pass").output().is_err() {
        println!("skipped: no python3 in PATH");
        return;
    }
    let before: Vec<_> = active_swaps().into_iter().map(|s| s.path).collect();
    let result = LimitedRun::new(kind.clone(), LIMIT_BYTES)
        .swap_bytes(256 << 20)
        .stdout(Stream::Capture)
        .run(Command::new("python3").args(["-c", PROGRAM]));
    let run = match result {
        Err(e) if e.is_unavailable() => {
            println!("skipped: {e}");
            return;
        }
        Err(e) => panic!("{kind:?}: {e}"),
        Ok(run) => run,
    };
    println!("{kind:?}: {}", run.summary());
    println!("cgroup counters: {:?}", run.cgroup);
    assert!(run.status.success(), "{}", run.status);
    assert_eq!(run.stdout_text().trim(), EXPECTED.to_string());
    // At least half of what does not fit went out (the counter is
    // system-wide, so more is fine).
    let excess_pages = ((TOUCHED_MIB << 20) - LIMIT_BYTES) / 4096;
    assert!(
        run.swapped_out_pages >= excess_pages / 2,
        "only {} pages swapped out",
        run.swapped_out_pages
    );
    assert!(run.cgroup.max_usage_bytes <= LIMIT_BYTES, "{:?}", run.cgroup);
    assert!(run.cgroup.failcnt > 0, "{:?}", run.cgroup);
    assert_eq!(run.cgroup.oom_kill, 0, "{:?}", run.cgroup);
    let after: Vec<_> = active_swaps().into_iter().map(|s| s.path).collect();
    assert_eq!(after, before, "swap area left active");
}

#[test]
fn python_under_a_limit_with_zram() {
    python_touches_96_mib_under_32_mib(SwapKind::Zram);
}

#[test]
fn python_under_a_limit_with_a_swap_file() {
    python_touches_96_mib_under_32_mib(SwapKind::File(std::env::temp_dir()));
}

#[test]
fn unavailable_is_reported_not_failed() {
    let _g = serial();
    let err = LimitedRun::new(SwapKind::File("/nonexistent/dir".into()), LIMIT_BYTES)
        .run_argv(&["true"])
        .unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    assert!(matches!(err, KernelSwapError::Unavailable { .. }));
    assert!(err.to_string().contains("/nonexistent/dir"), "{err}");
    println!("kernel-swap baseline skipped: {err}");
}
