//! The live view of a running process (`tiermem top`): every process with
//! a tiered region publishes a small page of counters in a per-user
//! directory, and keeps a time series for the exit report.
//!
//! The page is a file `<pid>.page` (4096 bytes, mode 0600) in
//! `/dev/shm/tiermem-<uid>/` (mode 0700; `TIERMEM_LIVE_DIR` names another
//! directory, `TIERMEM_LIVE=off` turns publishing off). `/dev/shm` and not
//! `$XDG_RUNTIME_DIR`: batch jobs (Slurm, PBS) usually run without the
//! latter, so ranks and an interactive `tiermem top` would look in
//! different places. The layout is fixed and versioned ([`Page`]).
//!
//! Nothing is added to the fault path: a thread (`tiermem-live`, started
//! with the process's first region, asynchronous signals blocked) reads
//! the counters the engine keeps anyway ([`crate::stats`]) every 250 ms
//! and rewrites the page; one sample a second goes to the time series
//! ([`timeline`]). The thread never touches region memory and allocates
//! only through the process's global allocator (the C library's in the
//! preload library). A forked child gets no copy of the regions (they are
//! plain memory there, or absent), so its hook drops them, writes the
//! child's own page (flag [`FLAG_FORKED`]) and lets the child start its
//! own thread when it makes a region. At exit the page is removed
//! ([`remove_page`]); `tiermem top` removes pages of processes that are
//! gone (killed, `_exit` after fork) and skips pages nobody updates.

use crate::engine::RegionCore;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Bytes of a page file.
pub const PAGE_BYTES: usize = 4096;
/// The first 8 bytes of every page.
pub const MAGIC: [u8; 8] = *b"TMLIVE\0\x01";
/// Layout version; readers refuse others.
pub const VERSION: u32 = 1;
/// How often the page is rewritten.
pub const INTERVAL: Duration = Duration::from_millis(250);
/// Time-series samples are taken every this many page updates (1 s).
const SAMPLE_EVERY: u32 = 4;
/// At most this many samples are kept; beyond, every other one is dropped
/// and sampling slows down by half (a day-long run keeps ~2 hours' worth
/// of samples at a 20 s spacing).
const MAX_SAMPLES: usize = 4096;

/// Flag: a thread updates the page every [`INTERVAL`].
pub const FLAG_UPDATED: u64 = 1;
/// Flag: the process is a forked child of a tiered process (its copy of
/// the parent's tiered memory is plain, untiered memory).
pub const FLAG_FORKED: u64 = 2;

/// A process's published counters (the page's fixed layout, all fields
/// little-endian at the offsets listed in [`Page::encode`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Start time in clock ticks after boot (`/proc/PID/stat` field 22):
    /// tells a reused pid apart.
    pub start_ticks: u64,
    /// Start of publishing, ms since the Unix epoch.
    pub start_unix_ms: u64,
    /// Last update, ms since the Unix epoch.
    pub updated_unix_ms: u64,
    /// Updates so far.
    pub seq: u64,
    /// [`FLAG_UPDATED`], [`FLAG_FORKED`].
    pub flags: u64,
    /// MPI rank from the launcher's environment (-1: none).
    pub rank: i64,
    /// Inode of the program's executable (`/proc/PID/exe`): a process
    /// that exec'd another program since is not this one any more.
    pub exe_ino: u64,
    /// The program's name (argv\[0\]'s file name, at most 63 bytes).
    pub program: String,
    /// Tiered regions alive.
    pub regions: u64,
    /// Bytes resident in near memory now.
    pub near_bytes: u64,
    /// The near budgets of those regions (a shared budget counted once).
    pub budget_bytes: u64,
    /// The regions' near high-water marks, summed.
    pub near_peak_bytes: u64,
    /// First touches served with a zero page.
    pub zero_fills: u64,
    /// Fills from the far store: pages evicted earlier and touched again.
    pub far_fills: u64,
    /// Write-protect faults (first write to a clean page).
    pub wp_faults: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Evicted pages written back.
    pub write_backs: u64,
    /// Bytes read from the far store.
    pub bytes_in: u64,
    /// Bytes written to the far store.
    pub bytes_out: u64,
    /// Mover threads, all regions.
    pub movers: u64,
    /// Wall time the movers spent moving pages, ns.
    pub mover_busy_ns: u64,
    /// Time application threads spent in faults, ns.
    pub fault_ns: u64,
}

const COUNTERS: usize = 15;
const PROGRAM_AT: usize = 80;
const PROGRAM_LEN: usize = 64;
const COUNTERS_AT: usize = PROGRAM_AT + PROGRAM_LEN;
const CHECKSUM_AT: usize = COUNTERS_AT + 8 * COUNTERS;

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Page {
    /// Faults served: fills and write-protect faults.
    pub fn faults(&self) -> u64 {
        self.zero_fills + self.far_fills + self.wp_faults
    }

    /// Fills: zero fills and far fills.
    pub fn fills(&self) -> u64 {
        self.zero_fills + self.far_fills
    }

    fn counters(&self) -> [u64; COUNTERS] {
        [
            self.regions,
            self.near_bytes,
            self.budget_bytes,
            self.near_peak_bytes,
            self.zero_fills,
            self.far_fills,
            self.wp_faults,
            self.evictions,
            self.write_backs,
            self.bytes_in,
            self.bytes_out,
            self.movers,
            self.mover_busy_ns,
            self.fault_ns,
            0, // reserved
        ]
    }

    /// The page's bytes. Layout (version 1): 0 magic\[8\], 8 version u32,
    /// 12 used bytes u32, 16 pid u32, 20 ppid u32, 24 start_ticks,
    /// 32 start_unix_ms, 40 updated_unix_ms, 48 seq, 56 flags, 64 rank
    /// i64, 72 exe_ino, 80 program\[64\] (NUL-padded), 144 the counters
    /// in field order from `regions` to `fault_ns` and one reserved, 264
    /// an FNV-1a checksum of bytes 0..264 (a reader that raced a write
    /// sees a mismatch and reads again); the rest is zero.
    pub fn encode(&self) -> [u8; PAGE_BYTES] {
        let mut b = [0u8; PAGE_BYTES];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&((CHECKSUM_AT + 8) as u32).to_le_bytes());
        b[16..20].copy_from_slice(&self.pid.to_le_bytes());
        b[20..24].copy_from_slice(&self.ppid.to_le_bytes());
        for (i, v) in [
            self.start_ticks,
            self.start_unix_ms,
            self.updated_unix_ms,
            self.seq,
            self.flags,
            self.rank as u64,
            self.exe_ino,
        ]
        .into_iter()
        .enumerate()
        {
            b[24 + 8 * i..32 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        let name = self.program.as_bytes();
        let n = name.len().min(PROGRAM_LEN - 1);
        b[PROGRAM_AT..PROGRAM_AT + n].copy_from_slice(&name[..n]);
        for (i, v) in self.counters().into_iter().enumerate() {
            b[COUNTERS_AT + 8 * i..COUNTERS_AT + 8 * i + 8].copy_from_slice(&v.to_le_bytes());
        }
        let sum = fnv(&b[..CHECKSUM_AT]);
        b[CHECKSUM_AT..CHECKSUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Reads a page; says what is wrong with one that is not.
    pub fn decode(b: &[u8]) -> Result<Page, String> {
        if b.len() < CHECKSUM_AT + 8 {
            return Err(format!("{} bytes, shorter than a page", b.len()));
        }
        if b[0..8] != MAGIC {
            return Err("not a tiermem page (bad magic)".into());
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let version = u32_at(8);
        if version != VERSION {
            return Err(format!("layout version {version}, this tiermem reads {VERSION}"));
        }
        if u64_at(CHECKSUM_AT) != fnv(&b[..CHECKSUM_AT]) {
            return Err("checksum mismatch (torn read)".into());
        }
        let name = &b[PROGRAM_AT..PROGRAM_AT + PROGRAM_LEN];
        let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(PROGRAM_LEN)];
        let c = |i: usize| u64_at(COUNTERS_AT + 8 * i);
        Ok(Page {
            pid: u32_at(16),
            ppid: u32_at(20),
            start_ticks: u64_at(24),
            start_unix_ms: u64_at(32),
            updated_unix_ms: u64_at(40),
            seq: u64_at(48),
            flags: u64_at(56),
            rank: u64_at(64) as i64,
            exe_ino: u64_at(72),
            program: String::from_utf8_lossy(name).into_owned(),
            regions: c(0),
            near_bytes: c(1),
            budget_bytes: c(2),
            near_peak_bytes: c(3),
            zero_fills: c(4),
            far_fills: c(5),
            wp_faults: c(6),
            evictions: c(7),
            write_backs: c(8),
            bytes_in: c(9),
            bytes_out: c(10),
            movers: c(11),
            mover_busy_ns: c(12),
            fault_ns: c(13),
        })
    }
}

/// One time-series sample of the exit report: counters summed over the
/// process's regions, cumulative since the start (rates are differences
/// of consecutive samples over their time difference).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Milliseconds since the first region was made.
    pub t_ms: u64,
    /// Bytes resident in near memory at that time (not cumulative).
    pub near_bytes: u64,
    /// Faults served (zero fills, far fills, write-protect faults).
    pub faults: u64,
    /// Fills (zero fills and far fills).
    pub fills: u64,
    /// Fills from the far store.
    pub far_fills: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Bytes read from the far store.
    pub bytes_in: u64,
    /// Bytes written to the far store.
    pub bytes_out: u64,
}

/// The directory of the pages: `TIERMEM_LIVE_DIR`, else
/// `/dev/shm/tiermem-<uid>`.
pub fn dir() -> PathBuf {
    match tiermem_sys::env::var_os(crate::config::options::LIVE_DIR.var).filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(format!("/dev/shm/tiermem-{}", tiermem_sys::process::uid())),
    }
}

/// The page file of process `pid` in `dir`.
pub fn page_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{pid}.page"))
}

/// Whether publishing is on (`TIERMEM_LIVE` is not `off`/`0`/`no`/`false`:
/// the one on/off parser; a value it does not take leaves it on).
pub fn enabled() -> bool {
    let o = &crate::config::options::LIVE;
    o.value().map_or(o.default_on(), |v| {
        crate::config::parse_on_off(&v).unwrap_or(true)
    })
}

/// Makes the directory (0700) if needed and checks that it is a directory
/// of this user's, not a link or someone else's.
pub fn ensure_dir(d: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(0o700).create(d) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot make {}: {e}", d.display())),
    }
    let m = std::fs::symlink_metadata(d).map_err(|e| format!("{}: {e}", d.display()))?;
    if !m.is_dir() || m.uid() != tiermem_sys::process::uid() {
        return Err(format!("{} is not a directory of this user's", d.display()));
    }
    if m.permissions().mode() & 0o077 != 0 {
        let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700));
    }
    Ok(())
}

/// What the process publishes under: fixed at the first region.
struct Identity {
    dir: PathBuf,
    base: Page,
    since: Instant,
}

#[derive(Default)]
struct State {
    regions: Vec<Weak<RegionCore>>,
    identity: Option<Identity>,
    samples: Vec<Sample>,
    /// Ticks between samples (doubles when the series is thinned).
    stride: u32,
    ticks: u32,
    seq: u64,
    /// The page was removed (exit): no more updates.
    stopped: bool,
}

/// Serialises the state against `fork` (as [`crate::fork`] does): a spin
/// lock that the prepare hook takes and the parent and child hooks
/// release, so that the mutex below, only taken under it, is never held
/// at a fork.
static LOCK: AtomicBool = AtomicBool::new(false);
static STATE: Mutex<State> = Mutex::new(State {
    regions: Vec::new(),
    identity: None,
    samples: Vec::new(),
    stride: SAMPLE_EVERY,
    ticks: 0,
    seq: 0,
    stopped: false,
});
/// Whether this process's thread runs (cleared in a forked child).
static RUNNING: AtomicBool = AtomicBool::new(false);
static HOOKS: std::sync::Once = std::sync::Once::new();

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    let backoff = crossbeam_utils::Backoff::new();
    // Acquire: the state as the last holder left it.
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        backoff.snooze();
    }
    let r = f(&mut STATE.lock().unwrap_or_else(|p| p.into_inner()));
    // Release: our edits before the next holder's.
    LOCK.store(false, Ordering::Release);
    r
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Field 22 (starttime) of `/proc/PID/stat` (`self` for 0), read into a
/// buffer on the stack (this runs in the fork hook).
pub fn start_ticks(pid: u32) -> Option<u64> {
    use std::io::{Read, Write};
    use std::os::unix::ffi::OsStrExt;
    let mut name = [0u8; 32];
    let mut w = std::io::Cursor::new(&mut name[..]);
    if pid == 0 {
        write!(w, "/proc/self/stat").ok()?;
    } else {
        write!(w, "/proc/{pid}/stat").ok()?;
    }
    let n = w.position() as usize;
    let mut f = std::fs::File::open(std::ffi::OsStr::from_bytes(&name[..n])).ok()?;
    let mut buf = [0u8; 1024];
    let mut len = 0;
    while len < buf.len() {
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(k) => len += k,
            Err(_) => return None,
        }
    }
    let s = &buf[..len];
    // The name (field 2) may hold spaces and parentheses: count from the
    // last ')', after which field 3 starts.
    let rest = &s[s.iter().rposition(|&c| c == b')')? + 1..];
    std::str::from_utf8(rest)
        .ok()?
        .split_ascii_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// The inode of process `pid`'s executable (`self` for 0).
pub fn exe_ino(pid: u32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let p = if pid == 0 {
        "/proc/self/exe".to_string()
    } else {
        format!("/proc/{pid}/exe")
    };
    std::fs::metadata(p).ok().map(|m| m.ino())
}

/// Whether `page` is of a process that runs now, the same program it
/// published from: the pid runs, with the start time the page says (not
/// a reused pid) and the same executable (no exec since; unknown counts
/// as the same).
pub fn is_live(page: &Page) -> bool {
    tiermem_sys::process::running(page.pid)
        && start_ticks(page.pid) == Some(page.start_ticks)
        && (page.exe_ino == 0 || exe_ino(page.pid).is_none_or(|i| i == page.exe_ino))
}

/// Reads a page file, again if a write raced the read.
pub fn read_page(path: &Path) -> Result<Page, String> {
    let mut last = String::new();
    for _ in 0..5 {
        match std::fs::read(path) {
            Ok(b) => match Page::decode(&b) {
                Ok(p) => return Ok(p),
                Err(e) => last = e,
            },
            Err(e) => return Err(e.to_string()),
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Err(last)
}

/// The pages of `dir` of processes that run now, by rank and pid; removes
/// those of processes that are gone, pids reused, programs exec'd over
/// (killed processes and children that left by `_exit` leave theirs).
/// Pages that cannot be read are listed with why in `bad`.
pub fn scan(dir: &Path, bad: &mut Vec<String>) -> Vec<Page> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut pages = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".page"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let path = e.path();
        match read_page(&path) {
            Ok(p) if p.pid == pid && is_live(&p) => pages.push(p),
            Ok(_) => {
                let _ = std::fs::remove_file(&path);
            }
            // A process that died while making its page.
            Err(_) if !tiermem_sys::process::running(pid) => {
                let _ = std::fs::remove_file(&path);
            }
            Err(err) => bad.push(format!("{}: {err}", path.display())),
        }
    }
    pages.sort_by_key(|p| (p.rank, p.pid));
    pages
}

/// The MPI rank the launcher gave this process, if any.
fn rank_from_env() -> i64 {
    [
        "OMPI_COMM_WORLD_RANK",
        "PMIX_RANK",
        "PMI_RANK",
        "MV2_COMM_WORLD_RANK",
        "SLURM_PROCID",
    ]
    .iter()
    .find_map(|v| tiermem_sys::env::var(v)?.trim().parse::<i64>().ok())
    .unwrap_or(-1)
}

/// argv\[0\]'s file name, from /proc (the preload library's constructor
/// runs before the standard library has the arguments).
fn program_name() -> String {
    let cmd = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let argv0 = cmd.split(|&c| c == 0).next().unwrap_or_default();
    let name = String::from_utf8_lossy(argv0);
    let name = name.rsplit('/').next().unwrap_or_default();
    if name.is_empty() {
        std::fs::read_to_string("/proc/self/comm")
            .unwrap_or_default()
            .trim()
            .to_string()
    } else {
        name.chars().take(PROGRAM_LEN - 1).collect()
    }
}

fn identity(flags: u64) -> Option<Identity> {
    let dir = dir();
    ensure_dir(&dir).ok()?;
    let pid = std::process::id();
    let _ = DIR.set(dir.clone());
    Some(Identity {
        dir,
        base: Page {
            pid,
            ppid: std::os::unix::process::parent_id(),
            start_ticks: start_ticks(0).unwrap_or(0),
            start_unix_ms: unix_ms(),
            flags,
            rank: rank_from_env(),
            exe_ino: exe_ino(0).unwrap_or(0),
            program: program_name(),
            ..Page::default()
        },
        since: Instant::now(),
    })
}

/// Publishes `core` (called when a region is made); starts the thread with
/// the process's first region.
pub(crate) fn register(core: &Arc<RegionCore>) {
    if !enabled() {
        return;
    }
    HOOKS.call_once(|| tiermem_sys::thread::at_fork(Some(prepare), Some(in_parent), Some(in_child)));
    let ready = with_state(|s| {
        s.regions.retain(|w| w.strong_count() > 0);
        s.regions.push(Arc::downgrade(core));
        s.stopped = false;
        if s.identity.is_none() {
            s.identity = identity(FLAG_UPDATED);
        } else if let Some(id) = &mut s.identity {
            id.base.flags |= FLAG_UPDATED;
        }
        s.identity.is_some()
    });
    if ready && !RUNNING.swap(true, Ordering::AcqRel) {
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        AT_EXIT.call_once(|| {
            tiermem_sys::process::at_exit(removed_at_exit);
        });
        let b = std::thread::Builder::new().name("tiermem-live".into());
        if tiermem_sys::thread::spawn_with_async_signals_blocked(b, publisher).is_err() {
            RUNNING.store(false, Ordering::Release);
        }
    }
}

fn publisher() {
    // Pages that processes killed or ended by `_exit` left behind.
    scan(&dir(), &mut Vec::new());
    // Threads do not survive fork: this loop ends only with the process.
    loop {
        tiermem_sys::thread::sleep(INTERVAL);
        tick(false);
    }
}

/// Sums the regions' counters now.
fn collect(s: &mut State) -> Option<(Page, Sample)> {
    let id = s.identity.as_ref()?;
    let mut p = id.base.clone();
    let mut budgets: Vec<*const crate::engine::budget::Budget> = Vec::new();
    s.regions.retain(|w| w.strong_count() > 0);
    for core in s.regions.iter().filter_map(Weak::upgrade) {
        let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let st = &core.stats;
        let page = core.page_bytes() as u64;
        let resident = core.resident_pages() as u64;
        p.regions += 1;
        p.near_bytes += resident * page;
        p.near_peak_bytes += ld(&st.resident_peak).max(resident) * page;
        let b = Arc::as_ptr(&core.slots.budget);
        if !budgets.contains(&b) {
            budgets.push(b);
            p.budget_bytes += core.slots.budget.limit_bytes();
        }
        p.zero_fills += ld(&st.zero_fills);
        p.far_fills += ld(&st.far_fills);
        p.wp_faults += ld(&st.wp_faults);
        p.evictions += ld(&st.evictions);
        p.write_backs += ld(&st.write_backs);
        p.bytes_in += ld(&st.bytes_in);
        p.bytes_out += ld(&st.bytes_out);
        p.movers += core.config.movers as u64;
        p.mover_busy_ns += ld(&st.mover_busy_wall_ns);
        p.fault_ns += st.fault_ns();
    }
    s.seq += 1;
    p.seq = s.seq;
    p.updated_unix_ms = unix_ms();
    let sample = Sample {
        t_ms: id.since.elapsed().as_millis() as u64,
        near_bytes: p.near_bytes,
        faults: p.faults(),
        fills: p.fills(),
        far_fills: p.far_fills,
        evictions: p.evictions,
        bytes_in: p.bytes_in,
        bytes_out: p.bytes_out,
    };
    Some((p, sample))
}

fn push(s: &mut State, sample: Sample) {
    if s.samples.len() >= MAX_SAMPLES {
        let mut k = 0;
        s.samples.retain(|_| {
            k += 1;
            k % 2 == 1
        });
        s.stride = s.stride.saturating_mul(2);
    }
    s.samples.push(sample);
}

/// One update: the page, and a sample every second (or when `force`).
fn tick(force: bool) {
    let out = with_state(|s| {
        let (page, sample) = collect(s)?;
        if s.stride == 0 {
            s.stride = SAMPLE_EVERY;
        }
        if force || s.ticks % s.stride == 0 || s.samples.is_empty() {
            push(s, sample);
        }
        s.ticks = s.ticks.wrapping_add(1);
        let id = s.identity.as_ref()?;
        // Written under the lock, so that no update recreates the page
        // after `remove_page` (a fork waits for one small tmpfs write).
        if !s.stopped {
            write_page(&id.dir, &page);
        }
        Some(())
    });
    let _ = out;
}

/// The directory pages were published in (for `_exit`, which must not
/// read the environment or allocate).
static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Runs `f` on `dir/<pid>.page`, built on the stack: fork hooks and
/// `_exit` must not allocate (another thread may have held the C
/// library's allocator lock at a fork that runs no `pthread_atfork`
/// handlers, or `_exit` may run in a signal handler).
fn at_page_path<R>(dir: &Path, pid: u32, f: impl FnOnce(&Path) -> R) -> R {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    let mut buf = [0u8; 1024];
    let d = dir.as_os_str().as_bytes();
    let mut w = std::io::Cursor::new(&mut buf[..]);
    let fits = w.write_all(d).is_ok() && write!(w, "/{pid}.page").is_ok();
    if fits {
        let n = w.position() as usize;
        f(Path::new(std::ffi::OsStr::from_bytes(&buf[..n])))
    } else {
        f(&page_path(dir, pid))
    }
}

/// Writes the page (a whole-page `pwrite` on a file opened for it, so the
/// program's descriptor table keeps nothing of tiermem's in between).
fn write_page(dir: &Path, page: &Page) {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    at_page_path(dir, page.pid, |path| {
        let open = || {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path)
        };
        // `tiermem top` may have removed stale files, or the directory
        // itself was cleaned: make it again.
        let f = open().or_else(|_| {
            ensure_dir(dir)
                .map_err(std::io::Error::other)
                .and_then(|_| open())
        });
        if let Ok(f) = f {
            let _ = f.write_all_at(&page.encode(), 0);
        }
    })
}

/// Removes this process's page (at exit; the process keeps publishing if
/// it makes another region afterwards).
pub fn remove_page() {
    if !enabled() {
        return;
    }
    with_state(|s| {
        s.stopped = true;
        let _ = std::fs::remove_file(page_path(&dir(), std::process::id()));
    });
}

/// Removes this process's page file and nothing else: for `_exit`, which
/// a `vfork` child may call (it shares this memory: the parent's state
/// must stay as it is) and which may run in a signal handler (no lock).
pub fn unlink_page() {
    // The directory is known once this process, or the parent it was
    // forked from, published; else there is no page.
    if let Some(d) = DIR.get() {
        at_page_path(d, std::process::id(), |p| {
            let _ = std::fs::remove_file(p);
        });
    }
}

extern "C" fn removed_at_exit() {
    remove_page();
}

/// The time series so far, with a last sample taken now (for the exit
/// report). Empty when nothing was published.
pub fn timeline() -> Vec<Sample> {
    if RUNNING.load(Ordering::Acquire) {
        tick(true);
    }
    with_state(|s| s.samples.clone())
}

extern "C" fn prepare() {
    let backoff = crossbeam_utils::Backoff::new();
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        backoff.snooze();
    }
}

extern "C" fn in_parent() {
    LOCK.store(false, Ordering::Release);
}

/// The forked child: not its parent's regions, its own page. Allocates
/// and frees nothing (see [`at_page_path`]): the parent's lists are left
/// to leak in the child.
extern "C" fn in_child() {
    RUNNING.store(false, Ordering::Release);
    {
        let mut s = STATE.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::forget(std::mem::take(&mut s.regions));
        std::mem::forget(std::mem::take(&mut s.samples));
        s.stride = SAMPLE_EVERY;
        s.ticks = 0;
        s.seq = 0;
        s.stopped = false;
        if let Some(id) = &mut s.identity {
            let b = &mut id.base;
            b.pid = std::process::id();
            b.ppid = std::os::unix::process::parent_id();
            b.start_ticks = start_ticks(0).unwrap_or(0);
            b.start_unix_ms = unix_ms();
            b.updated_unix_ms = b.start_unix_ms;
            b.flags = FLAG_FORKED;
            id.since = Instant::now();
            write_page(&id.dir, &id.base);
        }
    }
    LOCK.store(false, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_round_trips_and_detects_damage() {
        let p = Page {
            pid: 42,
            ppid: 1,
            start_ticks: 777,
            start_unix_ms: 1_700_000_000_000,
            updated_unix_ms: 1_700_000_000_250,
            seq: 3,
            flags: FLAG_UPDATED,
            rank: -1,
            program: "solver with a name longer than sixty-four bytes, cut at sixty-three".into(),
            regions: 2,
            near_bytes: 8 << 20,
            budget_bytes: 8 << 20,
            far_fills: 5,
            evictions: 9,
            fault_ns: u64::MAX,
            ..Page::default()
        };
        let b = p.encode();
        let q = Page::decode(&b).unwrap();
        assert_eq!(q.program.len(), 63);
        assert_eq!(
            q,
            Page {
                program: q.program.clone(),
                ..p.clone()
            }
        );
        let mut torn = b;
        torn[COUNTERS_AT + 3] ^= 1;
        assert!(Page::decode(&torn).unwrap_err().contains("checksum"));
        let mut other = b;
        other[8] = 9;
        assert!(Page::decode(&other).unwrap_err().contains("version 9"));
        assert!(Page::decode(&b[..100]).is_err());
        assert!(Page::decode(&[0u8; PAGE_BYTES]).unwrap_err().contains("magic"));
    }

    #[test]
    fn start_ticks_of_self_match_proc() {
        let a = start_ticks(0).unwrap();
        assert_eq!(start_ticks(std::process::id()), Some(a));
        assert_eq!(start_ticks(u32::MAX), None);
    }

    #[test]
    fn thinning_halves_the_series_and_the_rate() {
        let mut s = State {
            stride: SAMPLE_EVERY,
            ..State::default()
        };
        for t in 0..MAX_SAMPLES as u64 + 1 {
            push(
                &mut s,
                Sample {
                    t_ms: t,
                    ..Sample::default()
                },
            );
        }
        assert_eq!(s.samples.len(), MAX_SAMPLES / 2 + 1);
        assert_eq!(s.stride, 2 * SAMPLE_EVERY);
        assert!(s.samples.windows(2).all(|w| w[0].t_ms < w[1].t_ms));
    }
}
