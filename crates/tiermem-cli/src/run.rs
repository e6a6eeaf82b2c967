//! `tiermem run`: an unmodified program with its heap (and large static
//! arrays) tiered over a near budget, or on huge pages, through the preload
//! library (`libtiermem_preload.so`, next to this binary or named by
//! `TIERMEM_PRELOAD`).

use clap::Args;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use tiermem::config::{parse_share, parse_size};
use tiermem::heap::HugeKind;
use tiermem::PolicyKind;

#[derive(Args)]
#[command(trailing_var_arg = true)]
pub struct RunArgs {
    /// Near-memory budget: a size (8G) or a share of physical memory
    /// (50%); 100% means no tiering.
    #[arg(long, default_value = "100%")]
    near: String,
    /// Where evicted pages go: `memory`, a directory (an unnamed file in
    /// it) or a new file name.
    #[arg(long, default_value = "memory")]
    far: String,
    /// Address space reserved for the heap (default: twice the physical
    /// memory).
    #[arg(long)]
    heap_size: Option<String>,
    /// Page size of the heap: 4k, thp, 2m (tiered or not) or 1g (not
    /// tiered).
    #[arg(long, default_value = "4k")]
    page_size: String,
    /// Mover threads (prefetch ahead, evict behind).
    #[arg(long, default_value_t = 0)]
    movers: usize,
    /// CPUs for the movers (e.g. 1 or 2-3).
    #[arg(long)]
    mover_cpus: Option<String>,
    /// Replacement policy: fifo, clock or scan.
    #[arg(long, default_value = "fifo")]
    policy: String,
    /// Allocations of at least this size are served by tiermem.
    #[arg(long)]
    threshold: Option<String>,
    /// Take over the executable's large .bss/.data (on/off).
    #[arg(long = "static", default_value = "on")]
    statics: String,
    /// Reserve the huge page pool before the run and give it back after:
    /// a size (4G), or `auto` to size it from --report's previous run.
    #[arg(long, num_args = 0..=1, default_missing_value = "auto")]
    reserve: Option<String>,
    /// Write the JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// No summary at exit.
    #[arg(long)]
    quiet: bool,
    /// Programs PROGRAM execs are tiered too.
    #[arg(long)]
    follow_exec: bool,
    /// The program and its arguments.
    #[arg(required = true, num_args = 1..)]
    command: Vec<String>,
}

/// Signals a batch system sends the launcher, passed on to the program.
/// SIGINT and SIGQUIT come from the terminal to the whole process group:
/// the launcher ignores them and the program gets them directly.
const FORWARDED: [i32; 5] = [
    libc_sig::SIGTERM,
    libc_sig::SIGHUP,
    libc_sig::SIGUSR1,
    libc_sig::SIGUSR2,
    libc_sig::SIGCONT,
];

mod libc_sig {
    pub const SIGHUP: i32 = 1;
    pub const SIGINT: i32 = 2;
    pub const SIGQUIT: i32 = 3;
    pub const SIGUSR1: i32 = 10;
    pub const SIGUSR2: i32 = 12;
    pub const SIGTERM: i32 = 15;
    pub const SIGCONT: i32 = 18;
}

pub fn run(a: RunArgs) -> Result<(), String> {
    let program = resolve_program(&a.command[0])?;
    check_dynamic(&program)?;
    let preload = find_preload()?;
    let env = environment(&a)?;
    let pool = match &a.reserve {
        Some(r) => Some(reserve_pool(&a, r)?),
        None => None,
    };
    let mut cmd = Command::new(&program);
    cmd.args(&a.command[1..]).arg0(&a.command[0]);
    let ld = match std::env::var("LD_PRELOAD") {
        Ok(v) if !v.is_empty() => format!("{}:{v}", preload.display()),
        _ => preload.display().to_string(),
    };
    cmd.env("LD_PRELOAD", ld);
    for (k, v) in &env {
        cmd.env(k, v);
    }
    tiermem_sys::process::ignore_signals(&[libc_sig::SIGINT, libc_sig::SIGQUIT]);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    tiermem_sys::process::forward_signals(child.id(), &FORWARDED)
        .map_err(|e| format!("signal forwarding: {e}"))?;
    let status = child
        .wait()
        .map_err(|e| format!("waiting for {}: {e}", program.display()))?;
    if let Some(p) = pool {
        p.restore();
    }
    tiermem_sys::process::exit_like(status)
}

/// PROGRAM as a path: as given if it has a slash, else searched in PATH.
fn resolve_program(name: &str) -> Result<PathBuf, String> {
    let check = |p: &Path| -> Result<PathBuf, String> {
        let m = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        if !m.is_file() {
            return Err(format!("{} is not a file", p.display()));
        }
        if m.permissions().mode() & 0o111 == 0 {
            return Err(format!("{} is not executable (chmod +x it)", p.display()));
        }
        Ok(p.to_owned())
    };
    if name.contains('/') {
        return check(Path::new(name));
    }
    let path = std::env::var("PATH").unwrap_or_default();
    for dir in path.split(':').filter(|d| !d.is_empty()) {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return check(&p);
        }
    }
    Err(format!("{name}: not found in PATH"))
}

/// Refuses a statically linked ELF program (no dynamic linker reads
/// LD_PRELOAD for it). Scripts and dynamic programs pass.
fn check_dynamic(p: &Path) -> Result<(), String> {
    let bytes = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
    match elf_has_interpreter(&bytes) {
        Some(false) => Err(format!(
            "{} is statically linked: the preload library cannot reach it. Link it dynamically \
             (without -static) to run it under tiermem",
            p.display()
        )),
        _ => Ok(()),
    }
}

/// For a 64-bit little-endian ELF file: whether it has a `PT_INTERP`
/// program header. None for anything else (scripts).
fn elf_has_interpreter(b: &[u8]) -> Option<bool> {
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
        return None;
    }
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap()) as usize;
    let (phoff, phentsize, phnum) = (u64_at(32), u16_at(54), u16_at(56));
    Some((0..phnum).any(|k| {
        let o = phoff + k * phentsize;
        o + 4 <= b.len() && u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) == 3
        // PT_INTERP
    }))
}

/// The preload library: `TIERMEM_PRELOAD`, or next to this binary.
fn find_preload() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("TIERMEM_PRELOAD") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("TIERMEM_PRELOAD={}: no such file", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("where is this binary: {e}"))?;
    let p = exe.with_file_name("libtiermem_preload.so");
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "the preload library is not next to {} (looked for {}): build it with \
             `cargo build --release -p tiermem-preload`, or set TIERMEM_PRELOAD to its path",
            exe.display(),
            p.display()
        ))
    }
}

/// The TIERMEM_* variables for the program, checked here so that a bad
/// option is one clear line before anything runs.
fn environment(a: &RunArgs) -> Result<Vec<(String, String)>, String> {
    let mem = tiermem::SystemInfo::probe().mem_total_bytes;
    let near = a.near.trim();
    let near_bytes = parse_share(near, mem).map_err(|e| format!("--near: {e}"))?;
    let page = HugeKind::from_name(&a.page_size)
        .ok_or_else(|| format!("--page-size {:?}: expected 4k, thp, 2m or 1g", a.page_size))?;
    let tiered = near != "100%" && near_bytes < mem;
    if tiered && page == HugeKind::Huge1G {
        return Err(
            "--page-size 1g cannot be tiered (no 1 GiB pages in tiered regions): use 2m to tier on \
                    huge pages, or --near 100% for a heap on 1 GiB pages"
                .into(),
        );
    }
    let min = 4 * match page {
        HugeKind::Base4K => 4096,
        _ => 2 << 20,
    };
    if tiered && near_bytes < min {
        return Err(format!(
            "--near {near}: below the minimum of 4 pages ({min} bytes)"
        ));
    }
    PolicyKind::from_name(&a.policy)
        .ok_or_else(|| format!("--policy {:?}: expected fifo, clock or scan", a.policy))?;
    let mut env = vec![
        (
            "TIERMEM_NEAR".to_owned(),
            if tiered {
                near_bytes.to_string()
            } else {
                "100%".into()
            },
        ),
        ("TIERMEM_PAGE_SIZE".into(), page.name().into()),
        ("TIERMEM_POLICY".into(), a.policy.clone()),
        ("TIERMEM_MOVERS".into(), a.movers.to_string()),
        ("TIERMEM_STATIC".into(), a.statics.clone()),
    ];
    if !matches!(a.statics.as_str(), "on" | "off") {
        return Err(format!("--static {:?}: expected on or off", a.statics));
    }
    if let Some(c) = &a.mover_cpus {
        env.push(("TIERMEM_MOVER_CPUS".into(), c.clone()));
    }
    if let Some(t) = &a.threshold {
        parse_size(t).map_err(|e| format!("--threshold: {e}"))?;
        env.push(("TIERMEM_THRESHOLD".into(), t.clone()));
    }
    if let Some(h) = &a.heap_size {
        parse_size(h).map_err(|e| format!("--heap-size: {e}"))?;
        env.push(("TIERMEM_FAR".into(), h.clone()));
    }
    if a.far != "memory" {
        let p = Path::new(&a.far);
        let dir = if p.is_dir() {
            p
        } else {
            p.parent().unwrap_or(Path::new("."))
        };
        if !dir.is_dir() {
            return Err(format!("--far {}: {} is not a directory", a.far, dir.display()));
        }
        if p.exists() && !p.is_dir() {
            return Err(format!(
                "--far {}: the file exists; name a directory or a new file",
                a.far
            ));
        }
        env.push(("TIERMEM_FAR_FILE".into(), a.far.clone()));
    }
    if let Some(r) = &a.report {
        env.push(("TIERMEM_REPORT".into(), r.display().to_string()));
    }
    if a.quiet {
        env.push(("TIERMEM_QUIET".into(), "1".into()));
    }
    if a.follow_exec {
        env.push(("TIERMEM_FOLLOW_EXEC".into(), "1".into()));
    }
    Ok(env)
}

/// The huge page pool as it was before `--reserve`.
struct PoolGuard {
    size: tiermem_sys::hugetlb::HugePageSize,
    before: u64,
}

impl PoolGuard {
    fn restore(self) {
        if let Err(e) = tiermem::hugepages::set_pool(self.size, self.before) {
            eprintln!("tiermem: could not give the huge pages back: {e}");
        }
    }
}

fn reserve_pool(a: &RunArgs, what: &str) -> Result<PoolGuard, String> {
    use tiermem_sys::hugetlb::HugePageSize;
    let size = match HugeKind::from_name(&a.page_size) {
        Some(HugeKind::Huge1G) => HugePageSize::Size1G,
        Some(HugeKind::Huge2M) => HugePageSize::Size2M,
        _ => return Err("--reserve applies to --page-size 2m or 1g".into()),
    };
    let bytes = if what == "auto" {
        let path = a.report.as_ref().filter(|p| p.is_file()).ok_or(
            "--reserve auto sizes the pool from the report of a previous run: give --report FILE of that run",
        )?;
        let j: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).map_err(|e| e.to_string())?)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        let h = &j["heap"]["huge"];
        ["bytes_1g", "bytes_2m", "bytes_thp", "bytes_4k"]
            .iter()
            .map(|k| h[k].as_u64().unwrap_or(0))
            .sum::<u64>()
    } else {
        parse_size(what).map_err(|e| format!("--reserve: {e}"))?
    };
    let pages = bytes.div_ceil(size.bytes() as u64);
    let before = tiermem::hugepages::pool(size).total;
    let change = tiermem::hugepages::set_pool(size, before + pages).map_err(|e| e.to_string())?;
    eprintln!(
        "tiermem: reserved {pages} pages of {} for the run ({change})",
        a.page_size
    );
    Ok(PoolGuard { size, before })
}
