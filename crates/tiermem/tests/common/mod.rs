//! Helpers shared by the integration tests.
#![allow(dead_code, missing_docs)]

use tiermem::{Config, DirtyTracking, FarStoreConfig, FaultPath, Region};

/// Every fault path x dirty tracking x store combination.
pub fn variants() -> Vec<(FaultPath, DirtyTracking, &'static str)> {
    let mut v = Vec::new();
    for &fp in FaultPath::ALL {
        for &dt in DirtyTracking::ALL {
            for store in ["memory", "file"] {
                v.push((fp, dt, store));
            }
        }
    }
    v
}

/// A config for one variant.
pub fn config(virt: u64, near: u64, fp: FaultPath, dt: DirtyTracking, store: &str) -> Config {
    let mut c = Config::new(virt, near);
    c.fault_path = fp;
    c.dirty_tracking = dt;
    if store == "file" {
        c.far = FarStoreConfig::File {
            path: std::env::temp_dir(),
            direct: false,
        };
    }
    c
}

/// Asserts that a settled region kept to its budget (`resident_bytes`
/// from its stats, at most `budget`), recorded no I/O error, holds no page
/// busy or poisoned, and counts exactly its near pages as resident.
pub fn assert_settled(r: &Region, resident_bytes: u64, budget: u64, what: &str) {
    const PAGE: u64 = 4096;
    assert!(resident_bytes <= budget, "{what}: budget exceeded");
    assert!(r.errors().is_empty(), "{what}: {:?}", r.errors());
    let census = r.page_census();
    assert_eq!(census.busy + census.poisoned, 0, "{what}");
    assert_eq!(
        (census.clean + census.dirty) as u64 * PAGE,
        resident_bytes,
        "{what}"
    );
}

/// A 64-bit mix for per-word patterns.
pub fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tiermem::store::memory::MemoryStore;
use tiermem::store::{FarStore, StagingSlot, StoreError};
use tiermem_sys::mm::MemRange;
use tiermem_sys::Errno;

/// Switches for a [`FailingStore`].
#[derive(Default)]
pub struct Faults {
    /// Reads fail with EIO.
    pub reads: AtomicBool,
    /// Writes fail with ENOSPC.
    pub writes: AtomicBool,
}

/// A memory store whose reads or writes fail on demand.
pub struct FailingStore {
    inner: MemoryStore,
    pub faults: Arc<Faults>,
}

impl FailingStore {
    pub fn new(capacity: u64) -> (FailingStore, Arc<Faults>) {
        let faults = Arc::new(Faults::default());
        (
            FailingStore {
                inner: MemoryStore::new(capacity).unwrap(),
                faults: faults.clone(),
            },
            faults,
        )
    }
}

impl FarStore for FailingStore {
    fn needs_staging(&self) -> bool {
        false
    }
    fn fetch<'a>(
        &'a self,
        offset: u64,
        len: usize,
        s: Option<&'a StagingSlot<'a>>,
    ) -> Result<MemRange<'a>, StoreError> {
        if self.faults.reads.load(Ordering::Relaxed) {
            return Err(StoreError::Read {
                offset,
                len,
                errno: Errno(libc::EIO),
            });
        }
        self.inner.fetch(offset, len, s)
    }
    fn store(&self, offset: u64, src: MemRange<'_>) -> Result<(), StoreError> {
        if self.faults.writes.load(Ordering::Relaxed) {
            return Err(StoreError::Write {
                offset,
                len: src.len(),
                errno: Errno(libc::ENOSPC),
            });
        }
        self.inner.store(offset, src)
    }
    fn read_into(
        &self,
        offset: u64,
        len: usize,
        dst: &tiermem_sys::mm::Mapping,
        at: usize,
    ) -> Result<(), StoreError> {
        if self.faults.reads.load(Ordering::Relaxed) {
            return Err(StoreError::Read {
                offset,
                len,
                errno: Errno(libc::EIO),
            });
        }
        self.inner.read_into(offset, len, dst, at)
    }
    fn forget(&self, offset: u64, len: u64) {
        self.inner.forget(offset, len)
    }
    fn describe(&self) -> String {
        "failing memory store".into()
    }
}

/// Runs the test `name` of the current test binary in a child process with
/// `TIERMEM_CHILD=name` and returns its exit status and stderr.
pub fn run_child(name: &str) -> (std::process::ExitStatus, String) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("TIERMEM_CHILD", name)
        .output()
        .unwrap();
    (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// True in the child process started by [`run_child`] for `name`.
pub fn is_child(name: &str) -> bool {
    std::env::var("TIERMEM_CHILD").as_deref() == Ok(name)
}

/// Whether we run as root (mounts, hugepage pools).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// A small tmpfs mounted for a test (root only), unmounted on drop.
pub struct TmpMount {
    pub path: std::path::PathBuf,
}

impl TmpMount {
    pub fn new(tag: &str, opts: &str) -> Option<TmpMount> {
        if !is_root() {
            eprintln!("skipped part: needs root to mount a tmpfs");
            return None;
        }
        let path = std::env::temp_dir().join(format!("tiermem-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&path).ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tiermem-test", path.to_str()?])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            eprintln!("skipped part: mount -t tmpfs failed");
            let _ = std::fs::remove_dir(&path);
            return None;
        }
        Some(TmpMount { path })
    }
}

impl Drop for TmpMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.path).status();
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// Reserves 2 MiB huge pages for a test (root only) and restores the pool
/// size on drop.
pub struct HugePool {
    size: tiermem_sys::hugetlb::HugePageSize,
    before: u64,
}

impl HugePool {
    /// Makes sure `pages` 2 MiB pages are available; None (with a message)
    /// when that is impossible here.
    pub fn reserve(pages: u64) -> Option<HugePool> {
        Self::reserve_of(tiermem_sys::hugetlb::HugePageSize::Size2M, pages)
    }

    /// Same for any size; the pool is restored when the guard drops.
    pub fn reserve_of(size: tiermem_sys::hugetlb::HugePageSize, pages: u64) -> Option<HugePool> {
        use tiermem_sys::hugetlb::{pool, set_pool_pages};
        let p = pool(size).ok()?;
        if p.available() >= pages {
            return Some(HugePool {
                size,
                before: p.total,
            });
        }
        if !is_root() {
            eprintln!("skipped: needs root to reserve {pages} huge pages of {size}");
            return None;
        }
        let got = set_pool_pages(size, p.total + pages - p.available()).ok()?;
        let guard = HugePool {
            size,
            before: p.total,
        };
        if pool(size).ok()?.available() < pages {
            eprintln!("skipped: the kernel gave only {got} huge pages of {size} (memory fragmented)");
            return None;
        }
        Some(guard)
    }

    /// Sets the pool to exactly `pages` (root only), restoring it on drop.
    pub fn set_of(size: tiermem_sys::hugetlb::HugePageSize, pages: u64) -> Option<HugePool> {
        use tiermem_sys::hugetlb::{pool, set_pool_pages};
        let p = pool(size).ok()?;
        if !is_root() {
            eprintln!("skipped: needs root to resize the {size} huge page pool");
            return None;
        }
        let guard = HugePool {
            size,
            before: p.total,
        };
        if set_pool_pages(size, pages).ok()? != pages {
            eprintln!("skipped: the kernel would not make the {size} pool {pages} pages");
            return None;
        }
        Some(guard)
    }
}

impl Drop for HugePool {
    fn drop(&mut self) {
        let _ = tiermem_sys::hugetlb::set_pool_pages(self.size, self.before);
    }
}

/// What [`run_child_within`] saw.
pub struct ChildRun {
    /// Exit status; None when the child ran past the deadline (killed).
    pub status: Option<std::process::ExitStatus>,
    pub stderr: String,
}

/// [`run_child`] with extra environment and a deadline: a child still
/// running after `limit` is killed, so a hang fails the test instead of
/// stalling the suite.
pub fn run_child_within(name: &str, env: &[(&str, String)], limit: std::time::Duration) -> ChildRun {
    use std::io::Read;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("TIERMEM_CHILD", name)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    });
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    ChildRun {
        status,
        stderr: reader.join().unwrap_or_default(),
    }
}

/// `n` random read-modify-writes (xor with an xorshift sequence from
/// `seed`) over `words`, whose length is a power of two: running the same
/// call again restores every word.
pub fn xor_updates(words: &[std::sync::atomic::AtomicU64], seed: u64, n: usize) {
    let mut x = seed;
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = (x as usize) & (words.len() - 1);
        words[i].fetch_xor(x, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Sets every word of `words` to `mix(index)`.
pub fn fill_mixed(words: &[std::sync::atomic::AtomicU64]) {
    for (i, w) in words.iter().enumerate() {
        w.store(mix(i as u64), std::sync::atomic::Ordering::Relaxed);
    }
}

/// Asserts that every word of `words` is `mix(index)`.
pub fn check_mixed(words: &[std::sync::atomic::AtomicU64], what: &str) {
    for (i, w) in words.iter().enumerate() {
        assert_eq!(
            w.load(std::sync::atomic::Ordering::Relaxed),
            mix(i as u64),
            "{what}: word {i}"
        );
    }
}
