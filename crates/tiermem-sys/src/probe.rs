//! What this machine offers tiermem, probed once at run time.

use crate::hugetlb::{self, HugePageSize, PoolInfo};
use crate::pagemap::PagemapScanner;
use crate::uffd::Features;

/// Facts about the running kernel and machine.
#[derive(Clone, Debug)]
pub struct SystemInfo {
    /// `uname -r`.
    pub kernel_release: String,
    /// userfaultfd features (Err: why userfaultfd is unusable).
    pub uffd_features: Result<Features, String>,
    /// Whether `PAGEMAP_SCAN` works.
    pub pagemap_scan: bool,
    /// 2 MiB pool, if the kernel has one.
    pub pool_2m: Option<PoolInfo>,
    /// 1 GiB pool, if the kernel has one.
    pub pool_1g: Option<PoolInfo>,
    /// Online CPUs.
    pub cpus: usize,
    /// CPU model name.
    pub cpu_model: String,
    /// Total memory in bytes.
    pub mem_total_bytes: u64,
    /// THP mode (`always`, `madvise`, `never`).
    pub thp_mode: String,
    /// Whether we run as root.
    pub root: bool,
}

impl SystemInfo {
    /// Probes everything.
    pub fn probe() -> SystemInfo {
        let rd = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let thp = rd("/sys/kernel/mm/transparent_hugepage/enabled");
        let thp_mode = thp
            .split_whitespace()
            .find(|w| w.starts_with('['))
            .map(|w| w.trim_matches(|c| c == '[' || c == ']').to_owned())
            .unwrap_or_else(|| "unknown".into());
        let cpuinfo = rd("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .unwrap_or("unknown")
            .trim()
            .to_owned();
        let mem_total_bytes = rd("/proc/meminfo")
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|k| k.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024;
        SystemInfo {
            kernel_release: rd("/proc/sys/kernel/osrelease").trim().to_owned(),
            uffd_features: Features::probe().map_err(|e| e.to_string()),
            pagemap_scan: PagemapScanner::supported(),
            pool_2m: hugetlb::pool(HugePageSize::Size2M).ok(),
            pool_1g: hugetlb::pool(HugePageSize::Size1G).ok(),
            cpus: crate::thread::online_cpus(),
            cpu_model,
            mem_total_bytes,
            thp_mode,
            // SAFETY: geteuid has no preconditions.
            root: unsafe { libc::geteuid() } == 0,
        }
    }
}

/// Where the running executable's program headers are (`AT_PHDR`): with
/// their address in the file, it gives the executable's load bias.
pub fn auxv_phdr() -> u64 {
    // SAFETY: getauxval has no preconditions.
    unsafe { libc::getauxval(libc::AT_PHDR) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn probe_describes_this_machine() {
        let i = super::SystemInfo::probe();
        assert!(!i.kernel_release.is_empty());
        assert!(i.cpus >= 1);
        assert!(i.mem_total_bytes > 0);
    }
}
