//! The `tiermem` command refuses bad arguments with one clear line before
//! it allocates anything large (issue 18.6: `bench stencil --far
//! /no/such/dir` allocated its 512 MiB bandwidth buffers first and was
//! killed in a small memory cgroup instead of saying what was wrong).

use std::process::Command;

/// Runs `tiermem ARGS` with its address space limited to `limit_mib`.
fn tiermem_limited(limit_mib: u64, args: &str) -> (Option<i32>, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {}; exec {} {args}",
            limit_mib << 10,
            env!("CARGO_BIN_EXE_tiermem")
        ))
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_missing_far_directory_is_reported_before_anything_is_allocated() {
    let (code, err) = tiermem_limited(400, "bench stencil --far /no/such/dir");
    assert_eq!(code, Some(1), "a clean failure, not a crash: {err}");
    assert!(
        err.contains("/no/such/dir") && err.contains("does not exist"),
        "{err}"
    );
    assert!(err.lines().count() <= 2, "one clear line: {err}");
}

#[test]
fn bad_numbers_are_refused_with_their_name() {
    for (args, says) in [
        ("bench stencil --virt 1G --near 8K", "near"),
        ("bench stencil --page-size 3K", "--page-size"),
        ("bench stencil --threads 0", "thread"),
        ("bench stencil --policy lru", "policy"),
    ] {
        let (code, err) = tiermem_limited(400, args);
        assert!(code.is_some_and(|c| c != 0), "{args}: {err}");
        assert!(err.contains(says), "{args}: {err}");
        assert!(!err.contains("panicked"), "{args}: {err}");
    }
}
