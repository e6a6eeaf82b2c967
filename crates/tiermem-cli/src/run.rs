//! `tiermem run`: an unmodified program with its heap (and large static
//! arrays) tiered over a near budget, or on huge pages, through the preload
//! library (`libtiermem_preload.so`: named by `TIERMEM_PRELOAD`, else next
//! to this binary, else in `../lib` of an installed prefix).

use clap::Args;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use tiermem::config::options::{self, Opt};
use tiermem::config::{format_size, parse_on_off, parse_size};
use tiermem::heap::HugeKind;
use tiermem::launcher::per_rank_path;

/// Every option but --reserve has a `TIERMEM_*` variable, named with its
/// flag, parser and default in the option table
/// (`tiermem::config::options`, `tiermem env`; a test checks that every
/// flag here is in it): an option given on the command line wins over the
/// variable (with a warning when they differ), a variable set in the
/// environment over the default.
#[derive(Args)]
#[command(trailing_var_arg = true)]
pub struct RunArgs {
    /// Near-memory budget: a size (8G), a share of physical memory (50%),
    /// or a share of the program's footprint (50%fp) that a previous run
    /// measured in its --report FILE; 100% means no tiering. Under mpirun
    /// or srun a share of physical memory is of the node, divided among
    /// the job's ranks on it; a size is per process [default: 100%;
    /// TIERMEM_NEAR].
    #[arg(long, conflicts_with = "near_node")]
    near: Option<String>,
    /// The near budget of the whole node (64G, or 50%), divided among the
    /// job's ranks on it as mpirun or srun counts them [TIERMEM_NEAR_NODE].
    #[arg(long)]
    near_node: Option<String>,
    /// Where evicted pages go: `memory`, a directory (an unnamed file in
    /// it) or a new file name (per rank under mpirun: %r, or .rank<N>
    /// added) [default: memory; TIERMEM_FAR_FILE].
    #[arg(long)]
    far: Option<String>,
    /// Address space reserved for the heap [default: twice the physical
    /// memory; TIERMEM_FAR].
    #[arg(long)]
    heap_size: Option<String>,
    /// Page size of the heap: 4k, thp, 2m (tiered or not) or 1g (not
    /// tiered) [default: 4k; TIERMEM_PAGE_SIZE].
    #[arg(long)]
    page_size: Option<String>,
    /// Mover threads (prefetch ahead, evict behind) [default: 0;
    /// TIERMEM_MOVERS].
    #[arg(long)]
    movers: Option<String>,
    /// CPUs for the movers (e.g. 1 or 2-3) [default: unpinned;
    /// TIERMEM_MOVER_CPUS].
    #[arg(long)]
    mover_cpus: Option<String>,
    /// Replacement policy: auto, fifo, clock or scan [default: fifo;
    /// TIERMEM_POLICY].
    #[arg(long)]
    policy: Option<String>,
    /// Allocations of at least this size are served by tiermem [default:
    /// 1M; TIERMEM_THRESHOLD].
    #[arg(long)]
    threshold: Option<String>,
    /// Take over the executable's large .bss/.data (on/off) [default: on;
    /// TIERMEM_STATIC].
    #[arg(long = "static")]
    statics: Option<String>,
    /// Reserve the huge page pool before the run and give it back after:
    /// a size (4G), or `auto` to size it from --report's previous run.
    #[arg(long, num_args = 0..=1, default_missing_value = "auto")]
    reserve: Option<String>,
    /// Write the JSON report here; %r is the MPI rank, %l the local rank,
    /// %% a percent sign (several ranks and no %r: .rank<N> is added
    /// before the extension) [TIERMEM_REPORT].
    #[arg(long)]
    report: Option<PathBuf>,
    /// No summary at exit [TIERMEM_QUIET].
    #[arg(long)]
    quiet: bool,
    /// Programs PROGRAM execs are tiered too [TIERMEM_FOLLOW_EXEC].
    #[arg(long)]
    follow_exec: bool,
    /// When tiering cannot be set up (far store, huge page pool, mover
    /// CPUs, the heap): `error` stops with exit status 1 before the
    /// program runs; `untiered` warns and runs it without tiermem
    /// [default: error; TIERMEM_FALLBACK].
    #[arg(long)]
    fallback: Option<String>,
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
    let image = inspect(&program)?;
    let preload = find_preload()?;
    let s = settings(&a, &|v| std::env::var(v).ok())?;
    if image.go {
        check_go(&program, &s)?;
    }
    let pool = match &a.reserve {
        Some(r) => Some(reserve_pool(&s, r)?),
        None => None,
    };
    // After the reservation: the pool check counts what it added.
    if let Err(e) = check_setup(&s) {
        if let Some(p) = pool {
            p.restore();
        }
        return Err(e);
    }
    // The far file named by --far is this run's to remove only if the
    // name was free when it started (check_setup swept a leftover).
    let far_file = s
        .far
        .as_ref()
        .and_then(|f| named_far_file(&f.value))
        .filter(|p| std::fs::symlink_metadata(p).is_err());
    // The program as the reports name it.
    let canonical = std::fs::canonicalize(&program).unwrap_or_else(|_| program.clone());
    if s.near_of_footprint {
        if let Some(r) = &s.report {
            warn_other_program(r, &canonical);
        }
    }
    let started = std::time::SystemTime::now();
    let mut cmd = Command::new(&program);
    cmd.args(&a.command[1..]).arg0(&a.command[0]);
    let ld = match std::env::var("LD_PRELOAD") {
        Ok(v) if !v.is_empty() => format!("{}:{v}", preload.display()),
        _ => preload.display().to_string(),
    };
    cmd.env("LD_PRELOAD", ld);
    // The program is this process's child: the preload tells it from the
    // programs it runs by that (settings::is_root_process), whatever a
    // tiered program around this run left in the environment.
    cmd.env(options::LAUNCHER_PID.var, std::process::id().to_string())
        .env_remove(options::ROOT_PID.var);
    // This process's CPUs: the program's OpenMP runtime may bind its first
    // thread to one of them before the preload can look.
    if let Ok(cpus) = tiermem_sys::thread::affinity() {
        let list: Vec<String> = cpus.iter().map(usize::to_string).collect();
        cmd.env(options::LAUNCH_CPUS.var, list.join(","));
    }
    for (k, v) in &s.env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
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
    // A named far file is this run's, made by the program (or the image
    // it exec'd: same pid) and removed by its exit, unless it was killed
    // or exec'd a program that does not exit through the preload: then
    // here, however it ended.
    if let Some(far) = far_file {
        tiermem_sys::file::remove_far_file_of(far, child.id());
    }
    if let Some(r) = &s.report {
        stamp_report(r, started, &canonical, &a.command[1..]);
    }
    // The children's records, which a program that did not reach its exit
    // summary leaves behind.
    let _ = std::fs::remove_file(tiermem::config::children_log_path(child.id()));
    tiermem_sys::process::exit_like(status)
}

/// Adds what was launched to the report the run just wrote (`launched`:
/// the program's path and arguments), so that a later `--near N%fp` can
/// tell whose footprint it holds.
fn stamp_report(report: &Path, started: std::time::SystemTime, program: &Path, args: &[String]) {
    let fresh = std::fs::metadata(report)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= started);
    if !fresh {
        return;
    }
    let Ok(text) = std::fs::read_to_string(report) else {
        return;
    };
    // Added as text before the object's closing brace, so that the rest
    // of the report keeps its order (a serde_json::Value would sort the
    // keys, and scripts grep the report).
    let is_object = serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|j| j.is_object());
    let Some(end) = text.rfind('}').filter(|_| is_object) else {
        return;
    };
    let launched = serde_json::json!({ "program": program.display().to_string(), "args": args });
    let body = text[..end].trim_end();
    let comma = if body.ends_with('{') { "" } else { "," };
    let stamped = format!("{body}{comma}\n  \"launched\": {launched}\n}}\n");
    let _ = std::fs::write(report, stamped);
}

/// `--near N%fp` with a report another program's run wrote: one warning.
fn warn_other_program(report: &Path, program: &Path) {
    let measured = std::fs::read_to_string(report)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|j| j["launched"]["program"].as_str().map(PathBuf::from));
    if let Some(m) = measured.filter(|m| m != program) {
        say!(
            "tiermem: warning: {} holds the footprint of {}, not of {}: the budget is a share of that",
            report.display(),
            m.display(),
            program.display()
        );
    }
}

/// The far store when it names a file (not a directory).
fn named_far_file(far: &str) -> Option<&Path> {
    let p = Path::new(far);
    (!p.is_dir() && !far.ends_with('/')).then_some(p)
}

/// A number without a unit is bytes: say so where that was likely not meant.
fn unit_hint(v: &str, e: String) -> String {
    if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()) {
        format!("{e} (a number without a unit is bytes: {v}G? {v}%?)")
    } else {
        e
    }
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
    // `--near 8 GiB`: the unit became the program.
    let unit = name.trim_end_matches(['b', 'B']).trim_end_matches(['i', 'I']);
    if ["k", "m", "g", "t", "%"].contains(&unit.to_ascii_lowercase().as_str()) {
        return Err(format!(
            "{name}: not found in PATH (a size is one word: --near 8{name}, not --near 8 {name})"
        ));
    }
    Err(format!("{name}: not found in PATH"))
}

/// What the program's file says before it runs.
struct Image {
    /// A Go program (its build information is in the file).
    go: bool,
}

/// Refuses a statically linked ELF program (no dynamic linker reads
/// LD_PRELOAD for it). Scripts and dynamic programs pass.
fn inspect(p: &Path) -> Result<Image, String> {
    let bytes = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
    match elf_has_interpreter(&bytes) {
        Some(false) => Err(format!(
            "{} is statically linked: the preload library cannot reach it. Link it dynamically \
             (without -static) to run it under tiermem",
            p.display()
        )),
        has => Ok(Image {
            go: has.is_some() && is_go(&bytes),
        }),
    }
}

/// Whether an ELF file holds Go's build information (every Go program
/// since Go 1.13 does: the `.go.buildinfo` section starts with this).
fn is_go(elf: &[u8]) -> bool {
    const MAGIC: &[u8] = b"\xff Go buildinf:";
    elf.windows(MAGIC.len()).any(|w| w == MAGIC)
}

/// A Go program's heap is the Go runtime's own, mapped with its own system
/// calls, which the preload library cannot reach: it would run untiered,
/// and silently (it also ends with a raw `exit_group`, so no summary is
/// printed). It runs when asked: with `--follow-exec` for the programs it
/// starts, or with `--fallback untiered` (memory its C code allocates is
/// still tiered).
fn check_go(p: &Path, s: &Settings) -> Result<(), String> {
    let what = format!(
        "{} is a Go program: the Go runtime maps its heap with its own system calls, which tiermem \
         cannot reach",
        p.display()
    );
    if s.follow_exec {
        say!("tiermem: warning: {what}: it runs untiered, the programs it starts are tiered (--follow-exec)");
        Ok(())
    } else if s.fallback_untiered {
        say!("tiermem: warning: {what} (--fallback untiered: running it anyway, only memory its C code allocates is tiered)");
        Ok(())
    } else {
        Err(format!(
            "{what}, so it would run untiered. --follow-exec tiers the programs it starts; \
             --fallback untiered runs it anyway"
        ))
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

/// The preload library: `TIERMEM_PRELOAD`, else the first of
/// [`preload_candidates`] that exists.
fn find_preload() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var(options::PRELOAD.var) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("TIERMEM_PRELOAD={}: no such file", p.display()))
        };
    }
    // The real path (/proc/self/exe): a symlink to an installed binary
    // still finds the library of its own prefix.
    let exe = std::env::current_exe().map_err(|e| format!("where is this binary: {e}"))?;
    let candidates = preload_candidates(&exe);
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| no_preload_message(&exe, &candidates))
}

/// Where the preload library goes relative to the `tiermem` binary: next
/// to it (target/release of a cargo build) or in the installed layout's
/// lib directory (PREFIX/bin/tiermem, PREFIX/lib/libtiermem_preload.so).
fn preload_candidates(exe: &Path) -> Vec<PathBuf> {
    const NAME: &str = "libtiermem_preload.so";
    let mut v = vec![exe.with_file_name(NAME)];
    if let Some(prefix) = exe.parent().and_then(Path::parent) {
        v.push(prefix.join("lib").join(NAME));
    }
    v
}

/// The error when no candidate exists (say after `cargo install`, which
/// installs the binary alone): every place looked at and how to get it.
fn no_preload_message(exe: &Path, looked: &[PathBuf]) -> String {
    let looked: Vec<String> = looked.iter().map(|p| p.display().to_string()).collect();
    format!(
        "the preload library libtiermem_preload.so was not found: TIERMEM_PRELOAD is not set, \
         and it is in neither {} (this binary is {}). Install the whole package with \
         `scripts/install.sh --prefix DIR` from tiermem's source tree (docs/install.md), or build \
         it with `cargo build --release -p tiermem-preload` and set \
         TIERMEM_PRELOAD=<source tree>/target/release/libtiermem_preload.so",
        looked.join(" nor "),
        exe.display()
    )
}

/// The run's settings, each from the command line, else the environment,
/// else the default.
struct Settings {
    /// The program's environment: each variable set, or removed (a value
    /// from the environment that is not understood: warned about here,
    /// the default kept). Variables not named are inherited as they are.
    env: Vec<(&'static str, Option<String>)>,
    near_bytes: u64,
    tiered: bool,
    page: HugeKind,
    /// A directory or file name; None: the memory store.
    far: Option<Setting>,
    mover_cpus: Option<Setting>,
    fallback_untiered: bool,
    /// Programs the program starts are tiered too.
    follow_exec: bool,
    report: Option<PathBuf>,
    /// The budget is a share of the footprint in the report (`50%fp`).
    near_of_footprint: bool,
}

/// A setting's value and how to name it in a message (`--far X` or
/// `TIERMEM_FAR_FILE=X`).
struct Setting {
    value: String,
    named: String,
}

/// Applies the precedence rule, one setting at a time.
struct Resolver<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
    env: Vec<(&'static str, Option<String>)>,
}

impl Resolver<'_> {
    /// The setting of option `o` (its flag, its variable): the command
    /// line's value (`cli`), checked by the option's parser (an error),
    /// else the environment's, checked (a warning and the default), else
    /// None (the default).
    fn take(&mut self, o: &Opt, cli: Option<String>) -> Result<Option<String>, String> {
        Ok(self.setting(o, cli, |v| o.check(v))?.map(|s| s.value))
    }

    /// Same, checked by `check` (the option's parser and what else the
    /// run needs), with how to name it.
    fn setting(
        &mut self,
        o: &Opt,
        cli: Option<String>,
        check: impl Fn(&str) -> Result<(), String>,
    ) -> Result<Option<Setting>, String> {
        let (opt, var) = (o.flag.unwrap_or(o.var), o.var);
        let from_env = o.value_in(self.lookup);
        if let Some(v) = cli {
            check(&v).map_err(|e| format!("{opt} {v}: {e}"))?;
            if let Some(w) = from_env.filter(|w| *w != v) {
                // A flag's value is its presence.
                let given = if v == "1" {
                    opt.to_owned()
                } else {
                    format!("{opt} {v}")
                };
                say!("tiermem: {given} overrides {var}={w}");
            }
            self.env.push((var, Some(v.clone())));
            let named = format!("{opt} {v}");
            return Ok(Some(Setting { value: v, named }));
        }
        let Some(w) = from_env else {
            return Ok(None);
        };
        if let Err(e) = check(&w) {
            self.drop_env(o, &w, &e);
            return Ok(None);
        }
        let named = format!("{var}={w}");
        Ok(Some(Setting { value: w, named }))
    }

    /// A variable whose value is not used: warned about, and removed from
    /// the program's environment (so that the preload does not warn again).
    fn drop_env(&mut self, o: &Opt, value: &str, why: &str) {
        say!("{}", o.ignoring(value, why, &o.keeping()));
        self.env.push((o.var, None));
    }

    /// What the program's environment gets for `var`, in place of what
    /// was decided before.
    fn set(&mut self, var: &'static str, value: Option<String>) {
        self.env.retain(|(k, _)| *k != var);
        self.env.push((var, value));
    }

    /// A flag: on from the command line, else the variable's value.
    fn flag(&mut self, o: &Opt, on: bool) -> Result<bool, String> {
        let v = self.take(o, on.then(|| "1".to_owned()))?;
        Ok(v.map_or(o.default_on(), |v| parse_on_off(&v) == Ok(true)))
    }
}

/// Resolves every option against the environment (`lookup`), and checks
/// each value so that a bad option is one clear line before anything
/// runs.
fn settings(a: &RunArgs, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Settings, String> {
    let mem = tiermem::SystemInfo::probe().mem_total_bytes;
    // The launcher's warnings are the preload's to print (once, in the
    // program); the share is the same here.
    let launch = tiermem::launcher::detect(lookup);
    let ranks = launch.ranks.as_ref();
    let node = tiermem::launcher::NodeShare::new(mem, ranks);
    let mut r = Resolver {
        lookup,
        env: Vec::new(),
    };
    let page = r
        .take(&options::PAGE_SIZE, a.page_size.clone())?
        .or(options::PAGE_SIZE.default_value().map(str::to_owned))
        .map(|v| options::parse_page(&v))
        .expect("TIERMEM_PAGE_SIZE has a default")?;
    let min = 4 * match page {
        HugeKind::Base4K => 4096,
        _ => 2 << 20,
    };
    // Before the budget: a share of the footprint (`50%fp`) reads the
    // report a previous run wrote there.
    let report = r
        .take(
            &options::REPORT,
            a.report.as_ref().map(|p| p.display().to_string()),
        )?
        .map(PathBuf::from);
    // Absolute: the program (or a helper it runs) may change directory.
    let report = report.map(|p| match std::env::current_dir() {
        Ok(d) if p.is_relative() => d.join(p),
        _ => p,
    });
    if let Some(p) = &report {
        r.set(options::REPORT.var, Some(p.display().to_string()));
    }
    // This rank's report; the template goes to the preload, which names
    // it the same way.
    let report =
        report.map(|p| {
            let (path, added) = per_rank_path(&p, ranks);
            if added && ranks.is_some_and(|r| r.rank == 0) {
                say!(
                "tiermem: --report {}: {} ranks, one report each: {} for rank 0 and so on (put %r in the \
                 name to choose where the rank goes)",
                p.display(),
                ranks.and_then(|r| r.size).map_or("several".into(), |n| n.to_string()),
                path.display()
            );
            }
            path
        });
    // --near-node, or TIERMEM_NEAR_NODE unless a near budget is given.
    let near_given = a.near.is_some() || options::NEAR.value_in(lookup).is_some();
    let node_wins = a.near_node.is_some() || !near_given;
    let near_node = if node_wins {
        r.setting(&options::NEAR_NODE, a.near_node.clone(), |v| {
            options::NEAR_NODE.check(v)?;
            node.near_node(v).map(|_| ())
        })?
    } else {
        if let Some(v) = options::NEAR_NODE.value_in(lookup) {
            let why = match &a.near {
                Some(n) => format!("--near {n} is given"),
                None => "TIERMEM_NEAR is set too".into(),
            };
            // Dropped only when a per-process budget is given.
            say!(
                "tiermem: ignoring {}={v:?}: {why}; that per-process budget is used",
                options::NEAR_NODE.var
            );
            r.set(options::NEAR_NODE.var, None);
        }
        None
    };
    if near_node.is_some() {
        if let Some(v) = options::NEAR.value_in(lookup) {
            say!("tiermem: --near-node overrides TIERMEM_NEAR={v}");
            r.set(options::NEAR.var, None);
        }
    }
    // The budget that covers everything: no tiering (the default).
    let full = options::NEAR.default_value().unwrap_or("100%");
    let near_of = |v: &str| match &near_node {
        Some(_) => node.near_node(v).map(|n| n.bytes),
        None => node.near(v, report.as_deref()).map(|n| n.bytes),
    };
    // A budget that tiers must be tierable on these pages.
    let near_check = |v: &str| -> Result<(), String> {
        options::NEAR.check(v).map_err(|e| unit_hint(v, e))?;
        let b = near_of(v).map_err(|e| unit_hint(v, e))?;
        let tiered = (v != full || near_node.is_some()) && b < mem;
        if tiered && page == HugeKind::Huge1G {
            return Err(
                "1 GiB pages cannot be tiered (no 1 GiB pages in tiered regions): use \
                        --page-size 2m to tier on huge pages, or --near 100% for a heap on 1 GiB pages"
                    .into(),
            );
        }
        if tiered && b < min {
            return Err(unit_hint(
                v,
                format!("below the minimum of 4 pages ({min} bytes)"),
            ));
        }
        Ok(())
    };
    let near = match &near_node {
        Some(v) => {
            near_check(&v.value).map_err(|e| format!("{}: {e}", v.named))?;
            Some(v.value.clone())
        }
        None => r
            .setting(&options::NEAR, a.near.clone(), near_check)?
            .map(|s| s.value),
    };
    let near_bytes = match &near {
        Some(v) => near_of(v)?,
        None => mem,
    };
    let tiered = near.as_ref().is_some_and(|v| v != full || near_node.is_some()) && near_bytes < mem;
    // The budget goes to the program as given (a share is of the same
    // physical memory there, and its summary says so), or as `100%`
    // when it covers the machine.
    if near.is_some() && !tiered {
        r.set(options::NEAR_NODE.var, None);
        r.set(options::NEAR.var, Some(full.into()));
    }
    let far = r.setting(&options::FAR_FILE, a.far.clone(), |v| options::FAR_FILE.check(v))?;
    // `--far memory` is the memory store: no far file at all.
    let far = match far {
        Some(v) if v.value == "memory" => {
            r.set(options::FAR_FILE.var, None);
            None
        }
        // This rank's file (the preload names it the same way).
        Some(v) if named_far_file(&v.value).is_some() => Some(Setting {
            value: per_rank_path(Path::new(&v.value), ranks).0.display().to_string(),
            named: v.named,
        }),
        f => f,
    };
    r.take(&options::FAR, a.heap_size.clone())?;
    r.take(&options::MOVERS, a.movers.clone())?;
    let mover_cpus = r.setting(&options::MOVER_CPUS, a.mover_cpus.clone(), |v| {
        options::MOVER_CPUS.check(v)
    })?;
    r.take(&options::POLICY, a.policy.clone())?;
    r.take(&options::THRESHOLD, a.threshold.clone())?;
    r.take(&options::STATIC, a.statics.clone())?;
    r.flag(&options::QUIET, a.quiet)?;
    let follow_exec = r.flag(&options::FOLLOW_EXEC, a.follow_exec)?;
    let fallback_untiered = r
        .take(&options::FALLBACK, a.fallback.clone())?
        .or(options::FALLBACK.default_value().map(str::to_owned))
        .is_some_and(|v| options::parse_fallback(&v) == Ok(true));
    Ok(Settings {
        env: r.env,
        near_bytes,
        tiered,
        page,
        far,
        mover_cpus,
        fallback_untiered,
        follow_exec,
        near_of_footprint: near.as_deref().is_some_and(|v| v.trim().ends_with("%fp")),
        report,
    })
}

/// Checks what tiering needs from the machine, before the program runs:
/// the far store, the huge page pool, the mover CPUs. A problem stops the
/// run (exit status 1, one line with the fix), or under `--fallback
/// untiered` is a warning (the preload then runs the program untiered).
/// The report can be written where it is named: its directory exists
/// and takes new files (found after the run, a night's report is lost).
fn check_report(r: &Path) -> Result<(), String> {
    if r.is_dir() {
        return Err(format!(
            "--report {}: a directory; name a file in it",
            r.display()
        ));
    }
    let dir = r
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(format!(
            "--report {}: the directory {} does not exist (create it first)",
            r.display(),
            dir.display()
        ));
    }
    if !tiermem_sys::file::writable_dir(dir) {
        return Err(format!(
            "--report {}: cannot write in {}",
            r.display(),
            dir.display()
        ));
    }
    Ok(())
}

fn check_setup(s: &Settings) -> Result<(), String> {
    let (near_bytes, tiered, page) = (s.near_bytes, s.tiered, s.page);
    let mut problems = Vec::new();
    let page_bytes: u64 = match page {
        HugeKind::Base4K => 4096,
        HugeKind::Huge1G => 1 << 30,
        _ => 2 << 20,
    };
    // Checked untiered too: a far store named for nothing is a mistake the
    // user wants to hear of (the run would not be what they asked for).
    if let Some(far) = &s.far {
        // One eviction batch (64 pages by default) must fit.
        let batch = 64 * page_bytes;
        if let Err(e) = check_far(far, batch) {
            problems.push(e);
        }
    }
    if let Err(e) = check_pool(page, tiered, near_bytes) {
        problems.push(e);
    }
    if let Some(c) = &s.mover_cpus {
        if let Err(e) = check_mover_cpus(&c.value, &c.named) {
            problems.push(e);
        }
    }
    if let Some(r) = &s.report {
        // The run itself would be right: no fallback applies.
        check_report(r)?;
    }
    match problems.first() {
        None => Ok(()),
        Some(_) if s.fallback_untiered => {
            for p in &problems {
                say!("tiermem: warning: {p} (--fallback untiered: running anyway)");
            }
            Ok(())
        }
        Some(p) => Err(p.clone()),
    }
}

/// The far store can be created where `--far` says, with room for one
/// eviction batch: a probe file is made there (an unnamed one in a
/// directory) and dropped again.
fn check_far(setting: &Setting, batch: u64) -> Result<(), String> {
    use tiermem_sys::file::{FarFile, FileError, Leftover};
    let (far, named) = (setting.value.as_str(), setting.named.as_str());
    let p = Path::new(far);
    if !p.is_dir() {
        let dir = match p.parent().filter(|d| !d.as_os_str().is_empty()) {
            _ if far.ends_with('/') => p,
            Some(d) => d,
            None => Path::new("."),
        };
        if !dir.is_dir() {
            return Err(format!(
                "{named}: directory {} does not exist (create it, or name an existing directory)",
                dir.display()
            ));
        }
        match tiermem_sys::file::sweep_leftover(p) {
            Leftover::Free => {}
            Leftover::Swept(pid) => say!(
                "tiermem: removed {far}, the far file of process {pid}, which no longer runs (a \
                 killed run's leftover)"
            ),
            Leftover::InUse(pid) => {
                return Err(format!(
                    "{named}: the far file of process {pid}, which runs: name another file, or a \
                     directory (each run gets its own unnamed file there)"
                ))
            }
            Leftover::Foreign => {
                return Err(format!(
                    "{named}: the file exists and is no far file of tiermem's; tiermem never \
                     overwrites a file: remove it, or name a directory or a new file"
                ))
            }
        }
    }
    let probe = FarFile::create(p, false).map_err(|e| {
        let fix = match e {
            FileError::NoDirectory { .. } => "create the directory, or name an existing one",
            FileError::NotWritable { .. } => "name a directory this user can write to",
            _ => "name a directory on a disk or tmpfs file system",
        };
        format!("{named}: {e}: {fix}")
    })?;
    if let Ok(space) = probe.fs_space() {
        if space.free < batch {
            return Err(format!(
                "{named}: its file system is full ({} free of {}, less than one eviction batch of {}): \
                 name a directory with room",
                format_size(space.free),
                format_size(space.total),
                format_size(batch)
            ));
        }
    }
    Ok(())
}

/// Huge pages for the heap: a tiered heap on 2 MiB pages needs its whole
/// budget in the pool (the region checks the same); an untiered heap on
/// 2m or 1g pages falls back to smaller pages chunk by chunk, but with an
/// empty pool it would get none at all.
fn check_pool(page: HugeKind, tiered: bool, near_bytes: u64) -> Result<(), String> {
    use tiermem_sys::hugetlb::HugePageSize;
    let (size, name) = match page {
        HugeKind::Huge2M => (HugePageSize::Size2M, "2M"),
        HugeKind::Huge1G => (HugePageSize::Size1G, "1G"),
        _ => return Ok(()),
    };
    if tiered {
        let need = near_bytes.div_ceil(size.bytes() as u64);
        return tiermem::hugepages::check_available(size, need, "a near budget").map_err(|e| {
            format!(
                "--page-size {}: {e}, or --reserve {}",
                page.name(),
                format_size(near_bytes)
            )
        });
    }
    if tiermem::hugepages::pool(size).available() == 0 {
        return Err(format!(
            "--page-size {}: the pool of {name} huge pages is empty, so the heap would get none: \
             reserve pages for the run (--reserve SIZE, as root), or `tiermem hugepages reserve {name}:N`",
            page.name()
        ));
    }
    Ok(())
}

/// Every mover CPU is one this process may run on (the program inherits
/// its affinity): pinning to another fails at run time.
fn check_mover_cpus(list: &str, named: &str) -> Result<(), String> {
    let cpus = tiermem::config::parse_cpu_list(list).map_err(|e| format!("{named}: {e}"))?;
    let allowed = tiermem_sys::thread::affinity().map_err(|e| format!("{named}: {e}"))?;
    match cpus.iter().find(|c| !allowed.contains(c)) {
        None => Ok(()),
        Some(c) => Err(format!(
            "{named}: CPU {c} is not available (this process may run on CPUs {}): name \
             CPUs among those",
            cpu_ranges(&allowed)
        )),
    }
}

/// `0-3,6` for a sorted CPU list.
fn cpu_ranges(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// The pages `--reserve` added to the huge page pool, given back after
/// the run: the pool shrinks by them, not back to its size before, since
/// the other ranks of a job on this node may still hold theirs.
struct PoolGuard {
    size: tiermem_sys::hugetlb::HugePageSize,
    added: u64,
}

impl PoolGuard {
    fn restore(self) {
        let _turn = pool_turn();
        let now = tiermem::hugepages::pool(self.size).total;
        if let Err(e) = tiermem::hugepages::set_pool(self.size, now.saturating_sub(self.added)) {
            say!("tiermem: could not give the huge pages back: {e}");
        }
    }
}

/// The ranks of a job on one node change the pool one at a time (a read,
/// then a write of the total: two at once would lose one's pages). None
/// when the lock file cannot be had: then as before, unlocked.
fn pool_turn() -> Option<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(std::env::temp_dir().join("tiermem-hugepages.lock"))
        .ok()?;
    tiermem_sys::file::lock_exclusive(&f).ok()?;
    Some(f)
}

fn reserve_pool(s: &Settings, what: &str) -> Result<PoolGuard, String> {
    use tiermem_sys::hugetlb::HugePageSize;
    let size = match s.page {
        HugeKind::Huge1G => HugePageSize::Size1G,
        HugeKind::Huge2M => HugePageSize::Size2M,
        _ => return Err("--reserve applies to --page-size 2m or 1g".into()),
    };
    let bytes = if what == "auto" {
        let path = s.report.as_ref().filter(|p| p.is_file()).ok_or(
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
    let _turn = pool_turn();
    let before = tiermem::hugepages::pool(size).total;
    let change = tiermem::hugepages::set_pool(size, before + pages).map_err(|e| e.to_string())?;
    say!(
        "tiermem: reserved {pages} pages of {} for the run ({change})",
        s.page.name()
    );
    Ok(PoolGuard {
        size,
        added: change.after.total.saturating_sub(before),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_next_to_the_binary_then_in_the_prefix_lib() {
        let c = preload_candidates(Path::new("/opt/tiermem/bin/tiermem"));
        assert_eq!(
            c,
            [
                PathBuf::from("/opt/tiermem/bin/libtiermem_preload.so"),
                PathBuf::from("/opt/tiermem/lib/libtiermem_preload.so"),
            ]
        );
        // A binary at the root has no prefix to look in.
        assert_eq!(preload_candidates(Path::new("/tiermem")).len(), 1);
    }

    #[test]
    fn missing_preload_names_every_place_and_the_remedies() {
        let exe = Path::new("/home/u/.cargo/bin/tiermem");
        let m = no_preload_message(exe, &preload_candidates(exe));
        for part in [
            "/home/u/.cargo/bin/libtiermem_preload.so",
            "/home/u/.cargo/lib/libtiermem_preload.so",
            "TIERMEM_PRELOAD",
            "scripts/install.sh --prefix",
            "cargo build --release -p tiermem-preload",
        ] {
            assert!(m.contains(part), "{part} missing from: {m}");
        }
    }
}
