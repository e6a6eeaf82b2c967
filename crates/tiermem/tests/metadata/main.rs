//! Region metadata grows with the pages in use, not with the virtual range:
//! creating a 64 TiB region costs little resident memory, and a 1 TiB
//! region that touches 16 MiB runs inside a 64 MiB memory cgroup.

#[path = "../common/mod.rs"]
mod common;

use common::{is_child, is_root, run_child};
use tiermem::{Config, Region};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;

/// Resident bytes of this process.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Resident bytes a region of `virt` bytes (64 MiB budget) costs at creation.
fn creation_cost(virt: u64) -> u64 {
    let before = rss();
    let mut c = Config::new(virt, 64 * MIB);
    // 64 TiB of far memory plus the region's 64 TiB would not fit in the
    // 128 TiB of user address space: a sparse file on tmpfs holds it.
    if virt > 16 * TIB {
        c.far = tiermem::FarStoreConfig::File {
            path: "/dev/shm".into(),
            direct: false,
        };
    }
    let r = Region::new(c).unwrap();
    let cost = rss().saturating_sub(before);
    drop(r);
    cost
}

#[test]
fn creating_a_64_tib_region_costs_less_than_64_mib() {
    // A child process: other tests' allocations do not blur the figure.
    if is_child("creating_a_64_tib_region_costs_less_than_64_mib") {
        let _warm = creation_cost(GIB);
        for virt in [GIB, TIB, 64 * TIB] {
            let cost = creation_cost(virt);
            eprintln!(
                "region of {:>6} GiB: {:>8} KiB resident at creation",
                virt / GIB,
                cost >> 10
            );
            assert!(
                cost < 64 * MIB,
                "a {} GiB region costs {} MiB at creation",
                virt / GIB,
                cost / MIB
            );
        }
        return;
    }
    let (st, out) = run_child("creating_a_64_tib_region_costs_less_than_64_mib");
    eprintln!("{out}");
    assert!(st.success(), "{out}");
}

/// A memory cgroup of `limit` bytes (v1 or v2), removed on drop.
struct Cgroup {
    dir: std::path::PathBuf,
}

impl Cgroup {
    fn create(limit: u64) -> Result<Cgroup, String> {
        let name = format!("tiermem-metadata-{}", std::process::id());
        let v1 = std::path::Path::new("/sys/fs/cgroup/memory");
        let (dir, files): (_, &[&str]) = if v1.join("memory.limit_in_bytes").exists() {
            (
                v1.join(&name),
                &["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"],
            )
        } else if std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            (
                std::path::Path::new("/sys/fs/cgroup").join(&name),
                &["memory.max", "memory.swap.max"],
            )
        } else {
            return Err("no memory cgroup hierarchy".into());
        };
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let cg = Cgroup { dir };
        std::fs::write(cg.dir.join(files[0]), limit.to_string()).map_err(|e| format!("{}: {e}", files[0]))?;
        // No swap: over the limit means the OOM killer, not swapping.
        let swap = if files[1] == "memory.swap.max" {
            "0".into()
        } else {
            limit.to_string()
        };
        let _ = std::fs::write(cg.dir.join(files[1]), swap);
        Ok(cg)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[test]
fn a_1_tib_region_touching_16_mib_runs_in_a_64_mib_cgroup() {
    let name = "a_1_tib_region_touching_16_mib_runs_in_a_64_mib_cgroup";
    if is_child(name) {
        // Join the cgroup first, then create and use the region.
        let procs = std::env::var("TIERMEM_TEST_CGROUP_PROCS").unwrap();
        std::fs::write(&procs, "0").unwrap();
        let mut r = Region::new(Config::new(TIB, 8 * MIB)).unwrap();
        let words: &mut [u64] = r.as_mut_slice();
        // 16 MiB touched, spread over the whole range (4 KiB every 64 GiB
        // would be too sparse to matter; 4096 pages in 16 clusters).
        let touched: Vec<usize> = (0..16u64)
            .flat_map(|c| (0..256u64).map(move |k| ((c * (TIB / 16) + k * 4096) / 8) as usize))
            .collect();
        for &i in &touched {
            words[i] = i as u64 ^ 0x5a5a;
        }
        for &i in &touched {
            assert_eq!(words[i], i as u64 ^ 0x5a5a, "word {i}");
        }
        let s = r.stats();
        assert!(
            s.evictions > 0,
            "the touched pages went over the 8 MiB budget: {s:?}"
        );
        eprintln!("rss at the end: {} MiB", rss() / MIB);
        return;
    }
    if !is_root() {
        eprintln!("skipped: needs root to create a memory cgroup");
        return;
    }
    let cg = match Cgroup::create(64 * MIB) {
        Ok(cg) => cg,
        Err(e) => {
            eprintln!("skipped: cannot create a memory cgroup ({e})");
            return;
        }
    };
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("TIERMEM_CHILD", name)
        .env("TIERMEM_TEST_CGROUP_PROCS", cg.dir.join("cgroup.procs"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("{err}");
    assert!(
        out.status.success(),
        "the child failed in a 64 MiB cgroup ({:?}): {err}",
        out.status
    );
}

#[test]
fn walks_over_a_64_tib_region_visit_only_what_was_used() {
    // The census (like fork's pass over evicted pages and `settle`) walks
    // the chunks of pages in use, not 2^34 page words.
    let mut c = Config::new(64 * TIB, 64 * MIB);
    c.far = tiermem::FarStoreConfig::File {
        path: "/dev/shm".into(),
        direct: false,
    };
    let mut r = Region::new(c).unwrap();
    let words: &mut [u64] = r.as_mut_slice();
    let far_end = words.len() - 1;
    words[0] = 1;
    words[far_end] = 2;
    r.evict_all().unwrap();
    let before = rss();
    let t = std::time::Instant::now();
    let census = r.page_census();
    let took = t.elapsed();
    r.settle();
    assert_eq!(census.far, 2, "{census:?}");
    assert_eq!(census.untouched, (64 * TIB / 4096) as usize - 2, "{census:?}");
    assert!(
        took.as_secs_f64() < 2.0,
        "census of a 64 TiB region took {took:?}"
    );
    assert!(
        rss().saturating_sub(before) < 16 * MIB,
        "the census mapped the page table"
    );
}
