//! The rows of the option table ([`super::options`]): one constant per
//! `TIERMEM_*` variable, and [`OPTIONS`], all of them in order.

use super::modes::{FarStoreConfig, PageSize};
use super::options::{
    parse_dirty, parse_fault_path, parse_install, parse_kernel_access, parse_movers, parse_policy,
    DefaultValue, Kind, Opt,
};
use super::parse::{parse_cpu_list, parse_near, parse_on_off};
use super::MAX_EVICT_BATCH;

/// `TIERMEM_FAR` (`tiermem run --heap-size`).
pub const FAR: Opt = Opt {
    var: "TIERMEM_FAR",
    flag: Some("--heap-size"),
    kind: Kind::Size { min: 1 << 20 },
    unit: "bytes (K/M/G/T)",
    default: DefaultValue::Described("twice the physical memory (whole GiB; the preload divides it among the node's MPI ranks)"),
    doc: "Size of the far store, i.e. of the virtual range: of the process-wide region behind tm_malloc_global, and of the preload's heap (`tiermem run --heap-size`). A large range costs address space, not memory: region metadata grows with the pages used (docs/design.md, \"metadata grows with use\").",
    apply: Some(|c, kind, v| {
            c.virt_bytes = kind.size(v)?;
            Ok(())
        }),
};

/// `TIERMEM_NEAR` (`tiermem run --near`).
pub const NEAR: Opt = Opt {
    var: "TIERMEM_NEAR",
    flag: Some("--near"),
    kind: Kind::Near,
    unit: "bytes (K/M/G/T), a share of physical memory (50%), or of the program's footprint (50%fp)",
    default: DefaultValue::Split { preload: "100%", region: "1G" },
    doc: "Near-memory budget: of the process-wide region, and of the preload's heap and static arrays together (`tiermem run --near`; 100% means no tiering there; under an MPI or Slurm launcher the preload divides a share of physical memory among the node's ranks, docs/mpi.md). `50%fp` is half the program's footprint as a previous run measured it in its report (`TIERMEM_REPORT`, `tiermem run --report`): transparent mode only.",
    apply: Some(|c, _, v| {
            c.near_bytes = parse_near(v, crate::SystemInfo::probe().mem_total_bytes, None)?.bytes;
            Ok(())
        }),
};

/// `TIERMEM_PAGE_SIZE` (`tiermem run --page-size`).
pub const PAGE_SIZE: Opt = Opt {
    var: "TIERMEM_PAGE_SIZE",
    flag: Some("--page-size"),
    kind: Kind::PageSize,
    unit: "4K, 2M or THP (the preload also 1G)",
    default: DefaultValue::Value("4K"),
    doc: "Page size; 2M uses the hugetlbfs pool (reserve pages first), THP transparent huge pages; under the preload (`tiermem run --page-size`) 1G too, without tiering.",
    apply: Some(|c, _, v| {
            c.page_size = PageSize::parse(v).ok_or("page size must be 4K, 2M or THP (1G only under the preload, untiered)")?;
            Ok(())
        }),
};

/// `TIERMEM_HUGEPAGES`.
pub const HUGEPAGES: Opt = Opt {
    var: "TIERMEM_HUGEPAGES",
    flag: None,
    kind: Kind::HugePages,
    unit: "SIZE:PAGES list (2M:512,1G:2)",
    default: DefaultValue::Described("(unset: no reservation)"),
    doc: "Huge pages to reserve once at start-up, before the first region (a static pool; needs root).",
    apply: Some(|c, _, v| {
        c.reserve_huge_pages = crate::pool_request::parse_requests(v)?;
        Ok(())
    }),
};

/// `TIERMEM_FAR_FILE` (`tiermem run --far`).
pub const FAR_FILE: Opt = Opt {
    var: "TIERMEM_FAR_FILE",
    flag: Some("--far"),
    kind: Kind::Path,
    unit: "path",
    default: DefaultValue::Described("(unset: memory store)"),
    doc: "Use a file far store: a directory (an unnamed file is created in it) or a new file name.",
    apply: Some(|c, kind, v| {
        let check = |v: &str| kind.check(v);
        check(v)?;
        let direct = matches!(&c.far, FarStoreConfig::File { direct: true, .. });
        c.far = FarStoreConfig::File {
            path: v.into(),
            direct,
        };
        Ok(())
    }),
};

/// `TIERMEM_FAR_DIRECT`.
pub const FAR_DIRECT: Opt = Opt {
    var: "TIERMEM_FAR_DIRECT",
    flag: None,
    kind: Kind::OnOff,
    unit: "0 or 1",
    default: DefaultValue::Value("0"),
    doc: "Open the far file with O_DIRECT.",
    apply: Some(|c, _, v| {
        let d = parse_on_off(v)?;
        if let FarStoreConfig::File { direct, .. } = &mut c.far {
            *direct = d;
        } else if d {
            return Err("only applies with TIERMEM_FAR_FILE (set it first)".into());
        }
        Ok(())
    }),
};

/// `TIERMEM_POLICY` (`tiermem run --policy`).
pub const POLICY: Opt = Opt {
    var: "TIERMEM_POLICY",
    flag: Some("--policy"),
    kind: Kind::Policy,
    unit: "auto, fifo, clock or scan",
    default: DefaultValue::Value("fifo"),
    doc: "Replacement policy: auto (FIFO, or scan resistance while evicted pages come back in the order they left; docs/policies.md), FIFO (paper 1), CLOCK (second chance), scan (scan-resistant, for sweeps larger than the budget).",
    apply: Some(|c, _, v| {
            c.policy = parse_policy(v)?;
            Ok(())
        }),
};

/// `TIERMEM_FAULT_PATH`.
pub const FAULT_PATH: Opt = Opt {
    var: "TIERMEM_FAULT_PATH",
    flag: None,
    kind: Kind::FaultPath,
    unit: "in-context or handler-thread",
    default: DefaultValue::Value("in-context"),
    doc: "Where faults are served: in a SIGBUS handler on the faulting thread, or by handler threads.",
    apply: Some(|c, _, v| {
        c.fault_path = parse_fault_path(v)?;
        Ok(())
    }),
};

/// `TIERMEM_DIRTY`.
pub const DIRTY: Opt = Opt {
    var: "TIERMEM_DIRTY",
    flag: None,
    kind: Kind::Dirty,
    unit: "wp-fault or wp-async",
    default: DefaultValue::Value("wp-fault"),
    doc: "Dirty tracking: write-protect faults, or WP_ASYNC with PAGEMAP_SCAN at eviction.",
    apply: Some(|c, _, v| {
        c.dirty_tracking = parse_dirty(v)?;
        Ok(())
    }),
};

/// `TIERMEM_KERNEL_ACCESS`.
pub const KERNEL_ACCESS: Opt = Opt {
    var: "TIERMEM_KERNEL_ACCESS",
    flag: None,
    kind: Kind::KernelAccess,
    unit: "trap or off",
    default: DefaultValue::Value("trap"),
    doc: "Trap read/write/recv/send-style system calls on tiered buffers (seccomp) and serve them (pinned on regular files, through a bounce buffer on pipes, sockets and devices): on the in-context path so they do not fail with EFAULT, on the handler-thread path so that direct I/O (`O_DIRECT`) never has a page evicted under it; and guard SIGBUS/SIGSEGV/SIGSYS from the C library's internal signal calls (aio and timer helper threads, `sigvec`, `setcontext`); off: no filter (in-context: EFAULT on pages not resident, glibc's `aio_*` helper threads die on tiered buffers; handler-thread: direct reads into evicted pages can return stale data) (design.md, \"Kernel accesses\", \"Signals\").",
    apply: Some(|c, _, v| {
            c.kernel_access = parse_kernel_access(v)?;
            Ok(())
        }),
};

/// `TIERMEM_EVICT_BATCH`.
pub const EVICT_BATCH: Opt = Opt {
    var: "TIERMEM_EVICT_BATCH",
    flag: None,
    kind: Kind::Count {
        min: 1,
        max: MAX_EVICT_BATCH,
    },
    unit: "pages (1-512)",
    default: DefaultValue::Value("64"),
    doc: "Pages evicted together when the budget is full; contiguous victims share one unmap call.",
    apply: Some(|c, kind, v| {
        let count = |v: &str| kind.count(v);
        c.evict_batch_pages = count(v)?;
        Ok(())
    }),
};

/// `TIERMEM_HANDLER_THREADS`.
pub const HANDLER_THREADS: Opt = Opt {
    var: "TIERMEM_HANDLER_THREADS",
    flag: None,
    kind: Kind::Count {
        min: 1,
        max: usize::MAX,
    },
    unit: "count",
    default: DefaultValue::Value("1"),
    doc: "Handler threads in the handler-thread design.",
    apply: Some(|c, kind, v| {
        let count = |v: &str| kind.count(v);
        c.handler_threads = count(v)?;
        Ok(())
    }),
};

/// `TIERMEM_MOVERS` (`tiermem run --movers`).
pub const MOVERS: Opt = Opt {
    var: "TIERMEM_MOVERS",
    flag: Some("--movers"),
    kind: Kind::Movers,
    unit: "count (0-64) or auto",
    default: DefaultValue::Value("0"),
    doc: "Dedicated data-mover threads: prefetch ahead of demand, evict behind it (0: movement in faults only). auto: one mover, which stands down while the application keeps every CPU busy, and while trials without it show the application running faster (none with under 1.9 CPUs' worth of time; docs/movers.md).",
    apply: Some(|c, _, v| {
        (c.movers, c.movers_auto) = match parse_movers(v)? {
            Some(n) => (n, false),
            None => (1, true),
        };
        Ok(())
    }),
};

/// `TIERMEM_MOVER_CPUS` (`tiermem run --mover-cpus`).
pub const MOVER_CPUS: Opt = Opt {
    var: "TIERMEM_MOVER_CPUS",
    flag: Some("--mover-cpus"),
    kind: Kind::Cpus,
    unit: "CPU list (0,2-3)",
    default: DefaultValue::Described("(unpinned)"),
    doc: "CPUs the mover threads are pinned to, round robin.",
    apply: Some(|c, _, v| {
        c.mover_cpus = parse_cpu_list(v)?;
        Ok(())
    }),
};

/// `TIERMEM_PREFETCH`.
pub const PREFETCH: Opt = Opt {
    var: "TIERMEM_PREFETCH",
    flag: None,
    kind: Kind::OnOff,
    unit: "0 or 1",
    default: DefaultValue::Value("1"),
    doc: "Fault-triggered stream prefetch by the movers.",
    apply: Some(|c, _, v| {
        c.prefetch = parse_on_off(v)?;
        Ok(())
    }),
};

/// `TIERMEM_PREFETCH_MAX`.
pub const PREFETCH_MAX: Opt = Opt {
    var: "TIERMEM_PREFETCH_MAX",
    flag: None,
    kind: Kind::Count {
        min: 4,
        max: 4 * MAX_EVICT_BATCH,
    },
    unit: "pages (4-2048)",
    default: DefaultValue::Value("512"),
    doc: "Largest prefetch window.",
    apply: Some(|c, kind, v| {
        let count = |v: &str| kind.count(v);
        c.prefetch_max_pages = count(v)?;
        Ok(())
    }),
};

/// `TIERMEM_FAULT_AROUND`.
pub const FAULT_AROUND: Opt = Opt {
    var: "TIERMEM_FAULT_AROUND",
    flag: None,
    kind: Kind::OnOff,
    unit: "on or off",
    default: DefaultValue::Value("on"),
    doc: "Fault-around: a demand fault outside any prefetch stream also installs up to 16 missing neighbours, in the same call, while the thread's faults show spatial locality (4 KiB pages).",
    apply: Some(|c, _, v| {
            c.fault_around = parse_on_off(v)?;
            Ok(())
        }),
};

/// `TIERMEM_STRIDE`.
pub const STRIDE: Opt = Opt {
    var: "TIERMEM_STRIDE",
    flag: None,
    kind: Kind::OnOff,
    unit: "on or off",
    default: DefaultValue::Value("on"),
    doc: "Stride detection, part of fault-around (off with TIERMEM_FAULT_AROUND=off): a thread whose faults fall at a regular stride beyond fault-around's window (any distance, e.g. 1 MiB) gets up to 32 next points of the stride, each with its aligned window of up to 16 pages while nearly all points are used, installed with each fault, into free near slots only (4 KiB pages); fewer points as more go unused.",
    apply: Some(|c, _, v| {
            c.stride = parse_on_off(v)?;
            Ok(())
        }),
};

/// `TIERMEM_REWRITE_HINT`.
pub const REWRITE_HINT: Opt = Opt {
    var: "TIERMEM_REWRITE_HINT",
    flag: None,
    kind: Kind::OnOff,
    unit: "on or off",
    default: DefaultValue::Value("on"),
    doc: "Install a page written during its last stay in near memory writable at its next read fill (no write-protect fault when it is written again; eviction compares it with its far copy). wp-fault dirty tracking with the memory far store.",
    apply: Some(|c, _, v| {
            c.rewrite_hint = parse_on_off(v)?;
            Ok(())
        }),
};

/// `TIERMEM_INSTALL`.
pub const INSTALL: Opt = Opt {
    var: "TIERMEM_INSTALL",
    flag: None,
    kind: Kind::Install,
    unit: "auto, copy or move",
    default: DefaultValue::Value("auto"),
    doc: "How pages are installed: frame recycling with UFFDIO_MOVE (evicted frames receive new data and are moved into place), UFFDIO_COPY from the far store, or auto: copies (measured on Linux 6.18, NPB class A at near 50%: recycling was 8-25% slower on CG, IS and MG at one thread; a move out of the region is a TLB shootdown of the other CPUs, while copies unmap a batch's victims with one).",
    apply: Some(|c, _, v| {
            c.install = parse_install(v)?;
            Ok(())
        }),
};

/// `TIERMEM_HANDLER_CPUS`.
pub const HANDLER_CPUS: Opt = Opt {
    var: "TIERMEM_HANDLER_CPUS",
    flag: None,
    kind: Kind::Cpus,
    unit: "CPU list (0,2-3)",
    default: DefaultValue::Described("(unpinned)"),
    doc: "CPUs the handler threads are pinned to, round robin.",
    apply: Some(|c, _, v| {
        c.handler_cpus = parse_cpu_list(v)?;
        Ok(())
    }),
};

/// `TIERMEM_THRESHOLD` (`tiermem run --threshold`).
pub const THRESHOLD: Opt = Opt {
    var: "TIERMEM_THRESHOLD",
    flag: Some("--threshold"),
    kind: Kind::Size { min: 0 },
    unit: "bytes (K/M/G/T)",
    default: DefaultValue::Value("1M"),
    doc: "Preload: allocations (and anonymous `mmap`s) of at least this size go to the tiered heap (`tiermem run --threshold`).",
    apply: None,
};

/// `TIERMEM_NEAR_NODE` (`tiermem run --near-node`).
pub const NEAR_NODE: Opt = Opt {
    var: "TIERMEM_NEAR_NODE",
    flag: Some("--near-node"),
    kind: Kind::NearNode,
    unit: "bytes (K/M/G/T) or a share of physical memory (50%)",
    default: DefaultValue::Described("(unset: TIERMEM_NEAR)"),
    doc: "Preload: the near budget of the whole node, divided among the job's ranks on it as the launcher (Open MPI, MPICH/Hydra, Slurm srun) counts them (`tiermem run --near-node`; docs/mpi.md). Instead of `TIERMEM_NEAR`.",
    apply: None,
};

/// `TIERMEM_STATIC` (`tiermem run --static`).
pub const STATIC: Opt = Opt {
    var: "TIERMEM_STATIC",
    flag: Some("--static"),
    kind: Kind::OnOff,
    unit: "on or off",
    default: DefaultValue::Value("on"),
    doc: "Preload: take over the executable's large `.bss`/`.data` arrays (`tiermem run --static`).",
    apply: None,
};

/// `TIERMEM_REPORT` (`tiermem run --report`).
pub const REPORT: Opt = Opt {
    var: "TIERMEM_REPORT",
    flag: Some("--report"),
    kind: Kind::Path,
    unit: "path",
    default: DefaultValue::Described("(none)"),
    doc: "Preload: write the JSON report there at exit (`tiermem run --report`); a program that a tiered one forks and execs writes it with its pid appended. `%r` is the MPI rank, `%l` the local rank, `%%` a percent sign; several ranks and no `%r`: `.rank<N>` before the extension (docs/mpi.md).",
    apply: None,
};

/// `TIERMEM_QUIET` (`tiermem run --quiet`).
pub const QUIET: Opt = Opt {
    var: "TIERMEM_QUIET",
    flag: Some("--quiet"),
    kind: Kind::OnOff,
    unit: "on or off",
    default: DefaultValue::Value("off"),
    doc: "Preload: no summary on stderr at exit (`tiermem run --quiet`).",
    apply: None,
};

/// `TIERMEM_FOLLOW_EXEC` (`tiermem run --follow-exec`).
pub const FOLLOW_EXEC: Opt = Opt {
    var: "TIERMEM_FOLLOW_EXEC",
    flag: Some("--follow-exec"),
    kind: Kind::OnOff,
    unit: "on or off",
    default: DefaultValue::Value("off"),
    doc: "Preload: programs that the tiered program's children exec are tiered too (`tiermem run --follow-exec`); an exec without fork (a wrapper script) always stays tiered.",
    apply: None,
};

/// `TIERMEM_FALLBACK` (`tiermem run --fallback`).
pub const FALLBACK: Opt = Opt {
    var: "TIERMEM_FALLBACK",
    flag: Some("--fallback"),
    kind: Kind::Fallback,
    unit: "error or untiered",
    default: DefaultValue::Value("error"),
    doc: "Preload: when the heap cannot be set up in the program the user started, `error` ends it with exit status 1 and one line naming the problem, `untiered` warns and runs it without tiermem (`tiermem run --fallback`). A program the tiered one forks and execs runs untiered with a warning either way.",
    apply: None,
};

/// `TIERMEM_TRANSPARENT`.
pub const TRANSPARENT: Opt = Opt {
    var: "TIERMEM_TRANSPARENT",
    flag: None,
    kind: Kind::OnOff,
    unit: "on or off",
    default: DefaultValue::Value("on"),
    doc: "Preload: off loads the library without tiering anything.",
    apply: None,
};

/// `TIERMEM_PRELOAD`.
pub const PRELOAD: Opt = Opt {
    var: "TIERMEM_PRELOAD",
    flag: None,
    kind: Kind::Path,
    unit: "path",
    default: DefaultValue::Described(
        "(libtiermem_preload.so next to the tiermem binary, else in its ../lib)",
    ),
    doc: "The preload library `tiermem run` uses.",
    apply: None,
};

/// `TIERMEM_LAUNCHER_PID`.
pub const LAUNCHER_PID: Opt = Opt {
    var: "TIERMEM_LAUNCHER_PID",
    flag: None,
    kind: Kind::Text,
    unit: "pid",
    default: DefaultValue::Described("(set by tiermem run)"),
    doc: "Internal: the pid of `tiermem run`, whose child is the program the user started: a process that finds no `TIERMEM_ROOT_PID` in its environment (a program passed its children the environment it started with, as Go does) is that program only if `tiermem run` is its parent. Do not set it.",
    apply: None,
};

/// `TIERMEM_LAUNCH_CPUS`.
pub const LAUNCH_CPUS: Opt = Opt {
    var: "TIERMEM_LAUNCH_CPUS",
    flag: None,
    kind: Kind::Cpus,
    unit: "CPU list (0,2-3)",
    default: DefaultValue::Described("(set by tiermem run)"),
    doc: "Internal: the CPUs `tiermem run` was started on. An OpenMP runtime binds the program's first thread to one CPU before the preload starts (`OMP_PROC_BIND`); the program `tiermem run` started (not its children) then gives its unpinned movers these CPUs, and the `auto` mover the last of them. Do not set it.",
    apply: None,
};

/// `TIERMEM_ROOT_PID`.
pub const ROOT_PID: Opt = Opt {
    var: "TIERMEM_ROOT_PID",
    flag: None,
    kind: Kind::Text,
    unit: "pid",
    default: DefaultValue::Described("(set by the preload)"),
    doc: "Internal: the pid of the program the user started, set by the first process that loads the preload, so that the programs it runs know they are not that program. Do not set it.",
    apply: None,
};

/// `TIERMEM_CHILDREN_LOG`.
pub const CHILDREN_LOG: Opt = Opt {
    var: "TIERMEM_CHILDREN_LOG",
    flag: None,
    kind: Kind::Path,
    unit: "path",
    default: DefaultValue::Described("(set by the preload)"),
    doc: "Internal: the file in which the processes a tiered program forks and execs record themselves, for its exit summary's line on its children. Do not set it.",
    apply: None,
};

/// `TIERMEM_GLOBAL_HEAP`.
pub const GLOBAL_HEAP: Opt = Opt {
    var: "TIERMEM_GLOBAL_HEAP",
    flag: None,
    kind: Kind::GlobalHeap,
    unit: "tiered, 2m, 1g or thp",
    default: DefaultValue::Value("tiered"),
    doc: "What serves `tm_malloc_global`: the tiered process-wide region, or a huge-page heap without tiering (paper 3) of `TIERMEM_FAR` bytes on pages of that size from the pool, falling back 1g -> 2m -> THP -> 4k with one warning line.",
    apply: None,
};

/// `TIERMEM_VERBOSE`.
pub const VERBOSE: Opt = Opt {
    var: "TIERMEM_VERBOSE",
    flag: None,
    kind: Kind::OnOff,
    unit: "0 or 1",
    default: DefaultValue::Value("0"),
    doc: "Print the effective configuration of each region (and the preload's heap) on stderr.",
    apply: None,
};

/// `TIERMEM_LIVE`.
pub const LIVE: Opt = Opt {
    var: "TIERMEM_LIVE",
    flag: None,
    kind: Kind::OnOff,
    unit: "on or off",
    default: DefaultValue::Value("on"),
    doc: "Each process with a tiered region publishes a page of live counters for `tiermem top` (a thread updates it every 250 ms and keeps the report's time series; docs/live.md); off publishes nothing.",
    apply: None,
};

/// `TIERMEM_LIVE_DIR`.
pub const LIVE_DIR: Opt = Opt {
    var: "TIERMEM_LIVE_DIR",
    flag: None,
    kind: Kind::Path,
    unit: "path",
    default: DefaultValue::Described("/dev/shm/tiermem-UID"),
    doc: "Where the live pages are (`<pid>.page`, mode 0600, in a directory of mode 0700) and where `tiermem top` reads them.",
    apply: None,
};

/// `TIERMEM_SVM_RANKS_PER_NODE`.
pub const SVM_RANKS_PER_NODE: Opt = Opt {
    var: "TIERMEM_SVM_RANKS_PER_NODE",
    flag: None,
    kind: Kind::Count { min: 1, max: usize::MAX },
    unit: "count",
    default: DefaultValue::Described("(all ranks of a node)"),
    doc: "SVM over MPI: treat groups of this many ranks of a node as nodes (a test switch for the cross-node paths on one machine; docs/svm.md).",
    apply: None,
};

/// `TIERMEM_SVM_PROGRESS_US`.
pub const SVM_PROGRESS_US: Opt = Opt {
    var: "TIERMEM_SVM_PROGRESS_US",
    flag: None,
    kind: Kind::Count {
        min: 1,
        max: usize::MAX,
    },
    unit: "microseconds",
    default: DefaultValue::Value("50"),
    doc: "SVM over MPI: the progress thread's period.",
    apply: None,
};

/// `TIERMEM_SVM_TIMEOUT_S`.
pub const SVM_TIMEOUT_S: Opt = Opt {
    var: "TIERMEM_SVM_TIMEOUT_S",
    flag: None,
    kind: Kind::Count {
        min: 1,
        max: usize::MAX,
    },
    unit: "seconds",
    default: DefaultValue::Value("600"),
    doc: "SVM over MPI: the bound of every wait.",
    apply: None,
};

/// `TIERMEM_FAULT_INJECT`.
pub const FAULT_INJECT: Opt = Opt {
    var: "TIERMEM_FAULT_INJECT",
    flag: None,
    kind: Kind::FaultInject,
    unit: "`read:P,write:P,short:P,full:after=N,seed:S`",
    default: DefaultValue::Described("off"),
    doc: "**Tests only.** Every region's far store fails a fraction P of reads (EIO: page poisoned, SIGBUS, error recorded) and of writes (EIO: victim kept resident), shortens a fraction P of the file store's pread/pwrite calls, and refuses writes (ENOSPC) after N successful ones until space is made. Never set it in production.",
    apply: None,
};

/// Every option, in the order `tiermem env` and docs/configuration.md list
/// them (and the order region options apply in: `TIERMEM_FAR_FILE`
/// before `TIERMEM_FAR_DIRECT`). Never rename a variable or a flag: C
/// users and job scripts depend on the names.
pub const OPTIONS: &[&Opt] = &[
    &FAR,
    &NEAR,
    &PAGE_SIZE,
    &HUGEPAGES,
    &FAR_FILE,
    &FAR_DIRECT,
    &POLICY,
    &FAULT_PATH,
    &DIRTY,
    &KERNEL_ACCESS,
    &EVICT_BATCH,
    &HANDLER_THREADS,
    &MOVERS,
    &MOVER_CPUS,
    &PREFETCH,
    &PREFETCH_MAX,
    &FAULT_AROUND,
    &STRIDE,
    &REWRITE_HINT,
    &INSTALL,
    &HANDLER_CPUS,
    &THRESHOLD,
    &NEAR_NODE,
    &STATIC,
    &REPORT,
    &QUIET,
    &FOLLOW_EXEC,
    &FALLBACK,
    &TRANSPARENT,
    &PRELOAD,
    &ROOT_PID,
    &LAUNCHER_PID,
    &LAUNCH_CPUS,
    &CHILDREN_LOG,
    &GLOBAL_HEAP,
    &VERBOSE,
    &LIVE,
    &LIVE_DIR,
    &SVM_RANKS_PER_NODE,
    &SVM_PROGRESS_US,
    &SVM_TIMEOUT_S,
    &FAULT_INJECT,
];
