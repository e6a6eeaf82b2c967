//! Team mode: one tiered region shared by N worker processes at the same
//! address, each with its own page table (paper 1's partially separated
//! page tables, section III.C).
//!
//! In user space a thread cannot have a page table of its own, but a
//! process can. The region is a shmem file mapped by every member; each
//! member process serves its own faults in its SIGBUS handler, so a worker
//! holds translations only for the pages it touched, and the page word's
//! sharer mask (the paper's per-range CPU mask) says which members those
//! are. Eviction punches the page out of the file: the kernel unmaps it
//! from exactly the members that map it, so evicting a page that only the
//! faulting worker maps interrupts no other CPU. Replacement is FIFO or
//! sharer-aware (fewest sharers first, the CMCP idea).
//!
//! ```no_run
//! use tiermem::team::{TeamConfig, TeamKind, TeamRegion};
//! let team = TeamRegion::new(TeamConfig::new(256 << 20, 64 << 20, 2))?;
//! let report = team.run(TeamKind::Processes, |w| {
//!     let words = w.atomics();
//!     let per = words.len() / w.workers();
//!     for x in &words[w.rank() * per..(w.rank() + 1) * per] {
//!         x.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
//!     }
//!     w.barrier()
//! })?;
//! assert!(report.workers.iter().all(|x| x.status.success()));
//! # Ok::<(), tiermem::Error>(())
//! ```
//!
//! The same region can be shared by processes that already exist (MPI
//! ranks on one node): [`TeamRegion::create_named`] and
//! [`TeamRegion::attach`].

mod ctl;
mod member;

pub use ctl::{MARKS, MAX_MEMBERS, SCRATCH_WORDS};
pub use member::{set_thread_rank, EXIT_ABORTED};

use crate::error::Error;
use crate::stats::Cost;
use ctl::{Ctl, Stat};
use member::{Member, View, MAX_WINDOW};
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiermem_sys::mm::{MapOptions, Mapping, UserAccess};
use tiermem_sys::process::{self, ExitStatus, Forked};

/// Set in a member's pid word once it finished cleanly.
pub(crate) const PID_FINISHED: u64 = 1 << 63;

/// Replacement policy of a team region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum TeamPolicy {
    /// Oldest fill first.
    Fifo = 0,
    /// Among the oldest `sharer_window` pages, those mapped by the fewest
    /// members other than the evicting one first, then oldest (after the
    /// follow-up CMCP work): an eviction then interrupts the fewest other
    /// workers, none when the page is the evicting worker's own.
    SharerAware = 1,
}

impl TeamPolicy {
    /// Name used on command lines.
    pub fn name(self) -> &'static str {
        match self {
            TeamPolicy::Fifo => "fifo",
            TeamPolicy::SharerAware => "sharer",
        }
    }
    /// Parses "fifo" or "sharer".
    pub fn parse(s: &str) -> Option<TeamPolicy> {
        match s {
            "fifo" => Some(TeamPolicy::Fifo),
            "sharer" | "sharer-aware" => Some(TeamPolicy::SharerAware),
            _ => None,
        }
    }
}

/// How the workers of [`TeamRegion::run`] are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TeamKind {
    /// Worker processes: a page table each (PSPT).
    Processes,
    /// Threads of this process: one page table for all (the "regular"
    /// baseline, with the same fault and eviction code).
    Threads,
}

/// Configuration of a team region.
#[derive(Clone, Debug)]
pub struct TeamConfig {
    /// Bytes of the region (a multiple of 4 KiB).
    pub virt_bytes: usize,
    /// Near-memory budget shared by all members.
    pub near_bytes: usize,
    /// Workers (1 to `MAX_MEMBERS - 1`).
    pub workers: usize,
    /// CPUs to pin worker `r` to (`cpus[r % len]`); empty: unpinned.
    pub cpus: Vec<usize>,
    /// Replacement policy.
    pub policy: TeamPolicy,
    /// Pages evicted per eviction call (1 is paper 1's setting).
    pub evict_batch_pages: usize,
    /// Pages filled per missing fault (1: no read-ahead).
    pub readahead_pages: usize,
    /// Oldest pages examined by the sharer-aware policy.
    pub sharer_window: usize,
}

impl TeamConfig {
    /// `virt` bytes over `near` bytes for `workers` workers; FIFO, batches
    /// of 64 pages, no read-ahead.
    pub fn new(virt: usize, near: usize, workers: usize) -> TeamConfig {
        TeamConfig {
            virt_bytes: virt,
            near_bytes: near,
            workers,
            cpus: Vec::new(),
            policy: TeamPolicy::Fifo,
            evict_batch_pages: 64,
            readahead_pages: 1,
            sharer_window: 256,
        }
    }

    fn validate(&self) -> Result<(), Error> {
        let ps = tiermem_sys::mm::base_page_size();
        let bad = |m: String| Err(Error::Usage(m));
        if self.virt_bytes == 0 || self.virt_bytes % ps != 0 {
            return bad(format!(
                "team region size {} is not a positive multiple of the {ps}-byte page",
                self.virt_bytes
            ));
        }
        // The limit of a region (64 TiB): larger cannot be sized or mapped.
        if self.virt_bytes > 1 << 46 {
            return bad(format!(
                "team region size {} is larger than 64 TiB",
                self.virt_bytes
            ));
        }
        if self.workers == 0 || self.workers >= MAX_MEMBERS {
            return bad(format!(
                "team of {} workers: 1 to {} are supported",
                self.workers,
                MAX_MEMBERS - 1
            ));
        }
        if !(1..=MAX_WINDOW / 2).contains(&self.evict_batch_pages)
            || !(1..=MAX_WINDOW / 2).contains(&self.readahead_pages)
        {
            return bad(format!(
                "evict batch ({}) and read-ahead ({}) must be 1 to {} pages",
                self.evict_batch_pages,
                self.readahead_pages,
                MAX_WINDOW / 2
            ));
        }
        // Every member may hold a fill's worth of pages reserved while it
        // evicts: the budget must leave room for one more.
        let members = self.workers + 1;
        let need = (members * self.readahead_pages + self.evict_batch_pages) * ps;
        if self.near_bytes < need {
            return bad(format!(
                "near budget of {} bytes is too small for {} workers: at least {need} bytes ({} pages) are needed",
                self.near_bytes,
                self.workers,
                need / ps
            ));
        }
        if let Some(c) = self
            .cpus
            .iter()
            .find(|&&c| c >= tiermem_sys::thread::online_cpus())
        {
            return bad(format!("CPU {c} does not exist"));
        }
        Ok(())
    }
}

/// How one worker ended.
#[derive(Clone, Debug, Serialize)]
pub struct WorkerExit {
    /// Rank.
    pub rank: usize,
    /// Process id (threads mode: this process).
    pub pid: u32,
    /// CPU it was pinned to.
    pub cpu: Option<usize>,
    /// Exit status (threads: 0, 1 for an error, 101 for a panic).
    #[serde(skip)]
    pub status: ExitStatus,
    /// `status` in words.
    pub how: String,
}

/// The outcome of [`TeamRegion::run`].
#[derive(Clone, Debug, Serialize)]
pub struct TeamReport {
    /// One entry per worker.
    pub workers: Vec<WorkerExit>,
    /// Wall time of the run.
    pub seconds: f64,
}

/// Counters of one member (or of all, summed).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct MemberStats {
    /// Missing faults (fills from far memory or with zeros).
    pub missing_faults: u64,
    /// Of those, zero fills.
    pub zero_fills: u64,
    /// Minor faults: page near, mapped for this member (`UFFDIO_CONTINUE`).
    pub minor_faults: u64,
    /// Pages evicted by this member.
    pub evictions: u64,
    /// Eviction runs (one punch each).
    pub evict_calls: u64,
    /// Bytes read from far memory.
    pub bytes_in: u64,
    /// Bytes written to far memory.
    pub bytes_out: u64,
    /// Time per cost category (paper 1 Fig. 6), ns.
    pub cost_ns: [u64; 5],
    /// Time inside fault handlers, ns.
    pub fault_ns: u64,
    /// Evicted pages that no member mapped.
    pub victims_unmapped: u64,
    /// Evicted pages mapped by the evicting member only.
    pub victims_self: u64,
    /// Evicted pages mapped by one other member only.
    pub victims_other: u64,
    /// Evicted pages mapped by two or more members.
    pub victims_many: u64,
    /// Sum over victims of members other than the evicting one mapping it.
    pub victim_remote_sharers: u64,
    /// Pages filled by read-ahead beyond the faulting one.
    pub readahead_pages: u64,
    /// Time spent evicting, ns.
    pub evict_ns: u64,
    /// Failed operations (far file full, ioctl errors).
    pub errors: u64,
}

impl MemberStats {
    /// All faults.
    pub fn faults(&self) -> u64 {
        self.missing_faults + self.minor_faults
    }
    /// Cost categories with names.
    pub fn costs(&self) -> Vec<(String, u64)> {
        Cost::ALL
            .iter()
            .map(|c| (c.name().to_owned(), self.cost_ns[*c as usize]))
            .collect()
    }
    /// Adds `o`'s counters to these.
    pub fn add(&mut self, o: &MemberStats) {
        self.combine(o, u64::wrapping_add);
    }

    /// `self - earlier`, counter by counter.
    pub fn since(&self, earlier: &MemberStats) -> MemberStats {
        let mut d = self.clone();
        d.combine(earlier, u64::wrapping_sub);
        d
    }

    /// Applies `f(mine, theirs)` to every counter (one list of fields).
    fn combine(&mut self, o: &MemberStats, f: fn(u64, u64) -> u64) {
        let MemberStats {
            missing_faults,
            zero_fills,
            minor_faults,
            evictions,
            evict_calls,
            bytes_in,
            bytes_out,
            cost_ns,
            fault_ns,
            victims_unmapped,
            victims_self,
            victims_other,
            victims_many,
            victim_remote_sharers,
            readahead_pages,
            evict_ns,
            errors,
        } = o;
        let pairs = [
            (&mut self.missing_faults, missing_faults),
            (&mut self.zero_fills, zero_fills),
            (&mut self.minor_faults, minor_faults),
            (&mut self.evictions, evictions),
            (&mut self.evict_calls, evict_calls),
            (&mut self.bytes_in, bytes_in),
            (&mut self.bytes_out, bytes_out),
            (&mut self.fault_ns, fault_ns),
            (&mut self.victims_unmapped, victims_unmapped),
            (&mut self.victims_self, victims_self),
            (&mut self.victims_other, victims_other),
            (&mut self.victims_many, victims_many),
            (&mut self.victim_remote_sharers, victim_remote_sharers),
            (&mut self.readahead_pages, readahead_pages),
            (&mut self.evict_ns, evict_ns),
            (&mut self.errors, errors),
        ];
        for (a, b) in pairs {
            *a = f(*a, *b);
        }
        for (a, b) in self.cost_ns.iter_mut().zip(cost_ns) {
            *a = f(*a, *b);
        }
    }
}

/// Statistics of a team region.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TeamStats {
    /// By rank: workers `0..workers`, then the host (the creating process).
    pub members: Vec<MemberStats>,
    /// Pages near now.
    pub resident_pages: u64,
    /// Budget in pages.
    pub budget_pages: u64,
    /// Near pages by number of members mapping them (index: sharers,
    /// capped at the last entry).
    pub resident_by_sharers: Vec<u64>,
}

impl TeamStats {
    /// Sum over all members.
    pub fn total(&self) -> MemberStats {
        let mut t = MemberStats::default();
        for m in &self.members {
            t.add(m);
        }
        t
    }
}

/// One worker's handle inside [`TeamRegion::run`].
pub struct Worker<'a> {
    member: &'a Arc<Member>,
    rank: usize,
    workers: usize,
    user: &'a UserAccess,
}

impl Worker<'_> {
    /// This worker's rank, `0..workers()`.
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.workers
    }
    /// Waits until every worker arrived; an error if another worker died.
    pub fn barrier(&self) -> Result<(), Error> {
        barrier(&self.member.view.ctl())
    }
    /// The region as 64-bit atomics (relaxed loads and stores compile to
    /// plain moves; the barrier orders them between workers).
    pub fn atomics(&self) -> &[AtomicU64] {
        self.member.view.data_map.user_atomics(self.user)
    }
    /// Words that every member sees, for results and flags.
    pub fn scratch(&self) -> &[AtomicU64] {
        self.member.view.ctl().scratch()
    }
    /// The region's base address (the same in every worker).
    pub fn base(&self) -> usize {
        self.member.view.data_map.addr()
    }
    /// Snapshots every member's statistics as mark `k` (`0..MARKS`), read
    /// later with [`TeamRegion::stats_at_mark`]: how a worker brackets the
    /// timed part of a run between barriers.
    pub fn mark(&self, k: usize) {
        assert!(k < MARKS, "mark {k} out of 0..{MARKS}");
        self.member.view.ctl().snapshot(k);
    }
}

/// How a process waits for another (a barrier, a lock): spin, then yield,
/// then sleep `sleep` per round. Polling, because a cross-CPU wake-up costs
/// about 50 us on these machines; the caller checks for dead members
/// between rounds.
pub(crate) struct Backoff {
    spins: u64,
    sleep: Duration,
}

impl Backoff {
    pub(crate) fn new(sleep: Duration) -> Backoff {
        Backoff { spins: 0, sleep }
    }

    pub(crate) fn snooze(&mut self) {
        self.spins += 1;
        if self.spins < 200 {
            std::hint::spin_loop();
        } else if self.spins < 2000 {
            std::thread::yield_now();
        } else {
            tiermem_sys::thread::sleep(self.sleep);
        }
    }
}

fn barrier(ctl: &Ctl<'_>) -> Result<(), Error> {
    let gen = ctl.get(ctl::H_BAR_GEN);
    let party = ctl.get(ctl::H_PARTY);
    if ctl.w[ctl::H_BAR_COUNT].fetch_add(1, Ordering::AcqRel) + 1 == party {
        ctl.set(ctl::H_BAR_COUNT, 0);
        ctl.w[ctl::H_BAR_GEN].fetch_add(1, Ordering::AcqRel);
        return Ok(());
    }
    let mut backoff = Backoff::new(Duration::from_micros(50));
    let mut last_check = Instant::now();
    loop {
        if ctl.get(ctl::H_BAR_GEN) != gen {
            return Ok(());
        }
        let abort = ctl.get(ctl::H_ABORT);
        if abort != 0 {
            return Err(Error::Team(format!(
                "worker {} failed; the team stopped",
                abort - 1
            )));
        }
        backoff.snooze();
        if last_check.elapsed() > Duration::from_millis(20) {
            last_check = Instant::now();
            for r in 0..MAX_MEMBERS {
                let pid = ctl.pid(r).load(Ordering::Acquire);
                if pid != 0 && pid & PID_FINISHED == 0 && !process::running(pid as u32) {
                    ctl.abort(r);
                }
            }
        }
    }
}

/// A team region: created by [`TeamRegion::new`] (its workers are started
/// by [`TeamRegion::run`]) or [`TeamRegion::create_named`] and
/// [`TeamRegion::attach`] (cooperating processes that already exist).
pub struct TeamRegion {
    member: Arc<Member>,
    user: UserAccess,
    config: TeamConfig,
    /// Files to remove when the creator drops the region (named regions).
    names: Vec<OwnFile>,
    /// Joined the barrier party (named members) rather than hosting.
    in_party: bool,
}

fn shm_path(name: &str, part: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/tiermem-team.{name}.{part}"))
}

/// A file's (device, inode).
type FileId = (u64, u64);

/// The (device, inode) `path` names now (not following a symbolic link).
fn named_identity(path: &std::path::Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// A named file this process created: removed by name only while the name
/// still names that file (same device and inode), and only by the process
/// that created it, as far files are (`tiermem_sys::file::FarFile`). A
/// file renamed behind tiermem's back, and whatever took its name (the
/// next job's team of the same name), are left alone; so is the name in a
/// `fork()`ed child dropping its copy.
struct OwnFile {
    path: PathBuf,
    id: (u64, u64),
    owner_pid: u32,
}

impl OwnFile {
    fn new(path: PathBuf, file: &File) -> std::io::Result<OwnFile> {
        use std::os::unix::fs::MetadataExt;
        let m = file.metadata()?;
        Ok(OwnFile {
            path,
            id: (m.dev(), m.ino()),
            owner_pid: std::process::id(),
        })
    }

    fn remove(&self) {
        if std::process::id() == self.owner_pid && named_identity(&self.path) == Some(self.id) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Removes the `/dev/shm/tiermem-team.<name>.*` files of teams that no
/// process holds any more (open or mapped): what a named team leaves when
/// its creator is killed. A file is created open (`O_CREAT`) and its
/// members keep it open or mapped, so a file no process holds belongs to
/// no live team. Only the owner (mode 0600) or root could hold it, and
/// their `/proc` entries are readable.
fn sweep_stale_named() {
    const PREFIX: &str = "/dev/shm/tiermem-team.";
    let Ok(entries) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    // Each file with the (device, inode) its name names now: a file is
    // removed only if the name still names the file judged unheld.
    let mut names: std::collections::BTreeMap<String, Vec<(PathBuf, FileId)>> = Default::default();
    for e in entries.flatten() {
        let p = e.path();
        let s = p.to_string_lossy().into_owned();
        if let Some(rest) = s.strip_prefix(PREFIX) {
            if let (Some((name, _part)), Some(id)) = (rest.rsplit_once('.'), named_identity(&p)) {
                names.entry(name.to_owned()).or_default().push((p, id));
            }
        }
    }
    if names.is_empty() {
        return;
    }
    // Held files by (device, inode) (a descriptor's target, whatever its
    // name now) and by inode (a mapping of a /dev/shm file).
    let mut held = std::collections::BTreeSet::new();
    let mut mapped_inodes = std::collections::BTreeSet::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for pr in procs.flatten() {
        let dir = pr.path();
        if !pr
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        if let Ok(fds) = std::fs::read_dir(dir.join("fd")) {
            for fd in fds.flatten() {
                let is_shm = std::fs::read_link(fd.path()).is_ok_and(|l| l.starts_with("/dev/shm"));
                if let Some(id) = is_shm.then(|| named_identity_of_fd(&fd.path())).flatten() {
                    held.insert(id);
                }
            }
        }
        if let Ok(maps) = std::fs::read_to_string(dir.join("maps")) {
            // "start-end perms offset dev inode path"
            for line in maps.lines().filter(|l| l.contains("/dev/shm/")) {
                if let Some(ino) = line.split_whitespace().nth(4).and_then(|v| v.parse::<u64>().ok()) {
                    mapped_inodes.insert(ino);
                }
            }
        }
    }
    for files in names.values() {
        if files
            .iter()
            .all(|(_, id)| !held.contains(id) && !mapped_inodes.contains(&id.1))
        {
            for (f, id) in files {
                if named_identity(f) == Some(*id) {
                    let _ = std::fs::remove_file(f);
                }
            }
        }
    }
}

/// The (device, inode) of the file a `/proc/PID/fd/N` link opens.
fn named_identity_of_fd(link: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(link).ok().map(|m| (m.dev(), m.ino()))
}

fn valid_name(name: &str) -> Result<(), Error> {
    if name.is_empty()
        || name.len() > 100
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(Error::Usage(format!(
            "team name {name:?}: use 1 to 100 letters, digits, '-', '_' or '.'"
        )));
    }
    Ok(())
}

fn anon_file(name: &str) -> Result<File, Error> {
    let fd = tiermem_sys::memfd::Memfd::create(name, false).map_err(|errno| Error::Sys {
        what: "creating a memfd for the team region",
        errno,
    })?;
    Ok(File::from(std::os::fd::OwnedFd::from(fd)))
}

/// Pins worker `rank` to `cpu`; a refusal (a cpuset without that CPU) is
/// reported, and the worker runs unpinned.
fn pin(rank: usize, cpu: Option<usize>) {
    if let Some(c) = cpu {
        if let Err(e) = tiermem_sys::thread::set_affinity(&[c]) {
            eprintln!("tiermem team: worker {rank} not pinned to CPU {c}: {e}");
        }
    }
}

fn sized(f: File, len: usize, what: &'static str) -> Result<File, Error> {
    tiermem_sys::memfd::set_len(std::os::fd::AsFd::as_fd(&f), len as u64)
        .map_err(|errno| Error::Sys { what, errno })
        .map(|_| f)
}

impl TeamRegion {
    /// Creates a team region in this process (the host). Workers are
    /// started with [`TeamRegion::run`]; the host can use the region too
    /// (to initialise it or check results), as rank `workers`.
    pub fn new(config: TeamConfig) -> Result<TeamRegion, Error> {
        config.validate()?;
        let files = [
            anon_file("tiermem-team-ctl")?,
            anon_file("tiermem-team-data")?,
            anon_file("tiermem-team-far")?,
        ];
        Self::create(config, files, Vec::new(), None)
    }

    /// Creates a named team region that other processes attach to with
    /// [`TeamRegion::attach`]; this process is rank 0 and the region has
    /// `config.workers` ranks in all. The files live in /dev/shm until the
    /// creator drops the region.
    pub fn create_named(name: &str, config: TeamConfig) -> Result<TeamRegion, Error> {
        valid_name(name)?;
        config.validate()?;
        // Files of named teams whose members were all killed before they
        // could remove them (found by the kill tests).
        sweep_stale_named();
        let mut files = Vec::new();
        let mut names: Vec<OwnFile> = Vec::new();
        for part in ["ctl", "data", "far"] {
            let p = shm_path(name, part);
            let made = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&p)
                .map_err(|e| (e, false))
                .and_then(|f| match OwnFile::new(p.clone(), &f) {
                    Ok(own) => Ok((f, own)),
                    // Created but its identity is unknown: remove it now,
                    // while the name certainly names it.
                    Err(e) => {
                        let _ = std::fs::remove_file(&p);
                        Err((e, true))
                    }
                });
            let (f, own) = made.map_err(|(e, created)| {
                for n in &names {
                    n.remove();
                }
                let hint = if created {
                    ""
                } else {
                    " (is a team of that name running?)"
                };
                Error::Usage(format!("cannot create {}: {e}{hint}", p.display()))
            })?;
            names.push(own);
            files.push(f);
        }
        let files: [File; 3] = files.try_into().map_err(|_| Error::Usage("internal".into()))?;
        Self::create(config, files, names, Some(0))
    }

    fn create(
        config: TeamConfig,
        files: [File; 3],
        names: Vec<OwnFile>,
        rank: Option<usize>,
    ) -> Result<TeamRegion, Error> {
        let ps = tiermem_sys::mm::base_page_size();
        let npages = config.virt_bytes / ps;
        let ctl_bytes = (ctl::words(npages) * 8).div_ceil(ps) * ps;
        let [ctl_file, data, far] = files;
        let cleanup = |e: Error| {
            for n in &names {
                n.remove();
            }
            e
        };
        let ctl_file = sized(ctl_file, ctl_bytes, "sizing the team control block").map_err(cleanup)?;
        let data = sized(data, config.virt_bytes, "sizing the team region file").map_err(cleanup)?;
        let far = sized(far, config.virt_bytes, "sizing the team far file").map_err(cleanup)?;
        let (ctl_map, ctl_user) = Mapping::shared(ctl_file.as_fd(), 0, ctl_bytes, ps, &MapOptions::default())
            .map_err(|e| cleanup(e.into()))?;
        let (view, data_user) =
            View::map(ctl_map, ctl_user, data, far, npages, None).map_err(|e| cleanup(e.into()))?;
        {
            let w = view.ctl_map.user_atomics(&view.ctl_user);
            let set = |h: usize, v: u64| w[h].store(v, Ordering::Release);
            set(ctl::H_NPAGES, npages as u64);
            set(ctl::H_PAGE, ps as u64);
            set(ctl::H_BUDGET, (config.near_bytes / ps) as u64);
            set(ctl::H_WORKERS, config.workers as u64);
            set(ctl::H_BASE, view.data_map.addr() as u64);
            set(ctl::H_BATCH, config.evict_batch_pages as u64);
            set(ctl::H_READAHEAD, config.readahead_pages as u64);
            set(ctl::H_POLICY, config.policy as u64);
            set(ctl::H_WINDOW, config.sharer_window.clamp(1, MAX_WINDOW) as u64);
            set(ctl::H_PARTY, config.workers as u64);
            // Last: attachers wait for the magic.
            set(ctl::H_MAGIC, ctl::MAGIC);
        }
        let host_rank = rank.unwrap_or(config.workers);
        // The host has a lane per rank, for threads mode.
        let member = Member::join(Arc::new(view), host_rank, true, config.workers + 1).map_err(cleanup)?;
        Ok(TeamRegion {
            member,
            user: data_user,
            config,
            names,
            in_party: rank.is_some(),
        })
    }

    /// Attaches this process to the named team region as `rank` (1 to
    /// workers-1; rank 0 is the creator), at the creator's address.
    pub fn attach(name: &str, rank: usize) -> Result<TeamRegion, Error> {
        valid_name(name)?;
        let open =
            |part: &str| {
                let p = shm_path(name, part);
                OpenOptions::new().read(true).write(true).open(&p).map_err(|e| {
                    Error::Usage(format!("cannot attach to team {name:?}: {}: {e}", p.display()))
                })
            };
        let (ctl_file, data, far) = (open("ctl")?, open("data")?, open("far")?);
        let ps = tiermem_sys::mm::base_page_size();
        let ctl_bytes = ctl_file.metadata().map(|m| m.len() as usize).unwrap_or(0);
        if ctl_bytes < ps || ctl_bytes % ps != 0 {
            return Err(Error::Usage(format!("team {name:?} is not (yet) initialised")));
        }
        let (ctl_map, ctl_user) =
            Mapping::shared(ctl_file.as_fd(), 0, ctl_bytes, ps, &MapOptions::default())?;
        let w = ctl_map.user_atomics(&ctl_user);
        let deadline = Instant::now() + Duration::from_secs(10);
        while w[ctl::H_MAGIC].load(Ordering::Acquire) != ctl::MAGIC {
            if Instant::now() > deadline {
                return Err(Error::Usage(format!("team {name:?} was never initialised")));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let get = |h: usize| w[h].load(Ordering::Acquire) as usize;
        let (npages, workers, base) = (get(ctl::H_NPAGES), get(ctl::H_WORKERS), get(ctl::H_BASE));
        if rank == 0 || rank >= workers {
            return Err(Error::Usage(format!(
                "rank {rank} cannot attach to team {name:?} of {workers} ranks (1 to {} attach; 0 created it)",
                workers - 1
            )));
        }
        let mut config = TeamConfig::new(npages * ps, get(ctl::H_BUDGET) * ps, workers);
        config.evict_batch_pages = get(ctl::H_BATCH);
        config.readahead_pages = get(ctl::H_READAHEAD);
        config.policy = if get(ctl::H_POLICY) == TeamPolicy::SharerAware as usize {
            TeamPolicy::SharerAware
        } else {
            TeamPolicy::Fifo
        };
        let (view, data_user) = View::map(ctl_map, ctl_user, data, far, npages, Some(base)).map_err(|e| {
            Error::Usage(format!(
                "team {name:?} lives at {base:#x} in its creator, which is taken in this process ({e}); attach before mapping much else"
            ))
        })?;
        let member = Member::join(Arc::new(view), rank, false, 1)?;
        Ok(TeamRegion {
            member,
            user: data_user,
            config,
            names: Vec::new(),
            in_party: true,
        })
    }

    /// Base address (the same in every member).
    pub fn base(&self) -> usize {
        self.member.view.data_map.addr()
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.member.view.data_map.len()
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The configuration.
    pub fn config(&self) -> &TeamConfig {
        &self.config
    }

    /// This process's rank (the host of [`TeamRegion::new`] is `workers`).
    pub fn rank(&self) -> usize {
        self.member.rank
    }

    /// The region as a typed slice, for this process.
    pub fn as_mut_slice<T: bytemuck::Pod>(&mut self) -> &mut [T] {
        self.member.view.data_map.user_slice_mut(&mut self.user)
    }

    /// The region as 64-bit atomics.
    pub fn atomics(&self) -> &[AtomicU64] {
        self.member.view.data_map.user_atomics(&self.user)
    }

    /// The shared scratch words.
    pub fn scratch(&self) -> &[AtomicU64] {
        self.member.view.ctl().scratch()
    }

    /// Barrier among the ranks of a named team.
    pub fn barrier(&self) -> Result<(), Error> {
        if !self.in_party {
            return Err(Error::Usage(
                "the host of TeamRegion::new is not in the workers' barrier".into(),
            ));
        }
        barrier(&self.member.view.ctl())
    }

    /// Whether a member failed (the region's contents may be incomplete).
    pub fn failed_rank(&self) -> Option<usize> {
        let a = self.member.view.ctl().get(ctl::H_ABORT);
        (a != 0).then(|| a as usize - 1)
    }

    /// Current statistics.
    pub fn stats(&self) -> TeamStats {
        self.read_stats(None)
    }

    /// The statistics as a worker snapshotted them with [`Worker::mark`].
    pub fn stats_at_mark(&self, k: usize) -> TeamStats {
        assert!(k < MARKS, "mark {k} out of 0..{MARKS}");
        self.read_stats(Some(k))
    }

    fn read_stats(&self, mark: Option<usize>) -> TeamStats {
        let ctl = self.member.view.ctl();
        let members = self.config.workers + usize::from(!self.in_party);
        let members = (0..members.min(MAX_MEMBERS))
            .map(|r| {
                let g = |s: Stat| ctl.stat_in(mark, r, s as usize);
                let mut cost_ns = [0; 5];
                for (k, c) in cost_ns.iter_mut().enumerate() {
                    *c = ctl.stat_in(mark, r, Stat::CostBase as usize + k);
                }
                MemberStats {
                    missing_faults: g(Stat::MissingFaults),
                    zero_fills: g(Stat::ZeroFills),
                    minor_faults: g(Stat::MinorFaults),
                    evictions: g(Stat::Evictions),
                    evict_calls: g(Stat::EvictCalls),
                    bytes_in: g(Stat::BytesIn),
                    bytes_out: g(Stat::BytesOut),
                    cost_ns,
                    fault_ns: g(Stat::FaultNs),
                    victims_unmapped: g(Stat::Victims0),
                    victims_self: g(Stat::VictimsSelf),
                    victims_other: g(Stat::VictimsOther),
                    victims_many: g(Stat::VictimsMany),
                    victim_remote_sharers: g(Stat::VictimRemoteSharers),
                    readahead_pages: g(Stat::ReadaheadPages),
                    evict_ns: g(Stat::EvictNs),
                    errors: g(Stat::Errors),
                }
            })
            .collect();
        let mut by = vec![0u64; 4];
        for i in 0..self.member.view.npages {
            let w = ctl.page(i).load(Ordering::Relaxed);
            if ctl::where_(w) == ctl::Where::Resident {
                by[(ctl::sharers(w).count_ones() as usize).min(3)] += 1;
            }
        }
        TeamStats {
            members,
            resident_pages: ctl.get(ctl::H_RESIDENT),
            budget_pages: ctl.get(ctl::H_BUDGET),
            resident_by_sharers: by,
        }
    }

    /// Runs `f` on `workers` workers (processes or threads), pinned to the
    /// configured CPUs, and waits for all of them. A worker that fails
    /// (error, panic, crash, kill) stops the others at their next barrier
    /// or page wait, and the run returns an error naming it.
    pub fn run<F>(&self, kind: TeamKind, f: F) -> Result<TeamReport, Error>
    where
        F: Fn(&Worker<'_>) -> Result<(), Error> + Sync,
    {
        if self.in_party {
            return Err(Error::Usage(
                "run() belongs to a region made by TeamRegion::new".into(),
            ));
        }
        let ctl = self.member.view.ctl();
        ctl.set(ctl::H_ABORT, 0);
        ctl.set(ctl::H_BAR_COUNT, 0);
        // No worker runs between runs, so a held list lock or a busy page
        // is left over from a worker of the last run that died holding it:
        // the next run's workers would wait for it forever (their owner
        // checks look at this run's pids). The list is released; a busy
        // page's contents are unknown, so it is lost (SIGBUS on access),
        // as when a waiter notices a dead owner during a run.
        ctl.set(ctl::H_LOCK, 0);
        for i in 0..ctl.get(ctl::H_NPAGES) as usize {
            let w = ctl.page(i).load(Ordering::Acquire);
            if w & ctl::BUSY != 0 {
                ctl.page(i)
                    .store(ctl::with_where(0, ctl::Where::Lost), Ordering::Release);
            }
        }
        ctl.set(ctl::H_PARTY, self.config.workers as u64);
        for r in 0..self.config.workers {
            ctl.pid(r).store(0, Ordering::Release);
        }
        let cpu =
            |r: usize| (!self.config.cpus.is_empty()).then(|| self.config.cpus[r % self.config.cpus.len()]);
        let start = Instant::now();
        let workers = match kind {
            TeamKind::Threads => self.run_threads(&f, &cpu),
            TeamKind::Processes => self.run_processes(&f, &cpu)?,
        };
        let report = TeamReport {
            workers,
            seconds: start.elapsed().as_secs_f64(),
        };
        if let Some(bad) = report
            .workers
            .iter()
            .find(|w| !w.status.success() && w.status != ExitStatus::Exited(EXIT_ABORTED))
        {
            return Err(Error::Team(format!(
                "worker {} (pid {}) failed: {}",
                bad.rank, bad.pid, bad.how
            )));
        }
        if let Some(bad) = report.workers.iter().find(|w| !w.status.success()) {
            return Err(Error::Team(format!("worker {} stopped: {}", bad.rank, bad.how)));
        }
        Ok(report)
    }

    fn run_threads<F>(&self, f: &F, cpu: &(dyn Fn(usize) -> Option<usize> + Sync)) -> Vec<WorkerExit>
    where
        F: Fn(&Worker<'_>) -> Result<(), Error> + Sync,
    {
        let ctl = self.member.view.ctl();
        let pid = tiermem_sys::thread::getpid();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..self.config.workers)
                .map(|r| {
                    let ctl = &ctl;
                    s.spawn(move || {
                        pin(r, cpu(r));
                        set_thread_rank(r);
                        let w = Worker {
                            member: &self.member,
                            rank: r,
                            workers: self.config.workers,
                            user: &self.user,
                        };
                        let code = exit_code(
                            r,
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&w))),
                        );
                        if code != 0 {
                            ctl.abort(r);
                        }
                        code
                    })
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(r, h)| {
                    let status = ExitStatus::Exited(h.join().unwrap_or(101));
                    WorkerExit {
                        rank: r,
                        pid,
                        cpu: cpu(r),
                        status,
                        how: status.to_string(),
                    }
                })
                .collect()
        })
    }

    fn run_processes<F>(
        &self,
        f: &F,
        cpu: &(dyn Fn(usize) -> Option<usize> + Sync),
    ) -> Result<Vec<WorkerExit>, Error>
    where
        F: Fn(&Worker<'_>) -> Result<(), Error> + Sync,
    {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let ctl = self.member.view.ctl();
        let mut pids = Vec::with_capacity(self.config.workers);
        for r in 0..self.config.workers {
            match process::fork(true) {
                Ok(Forked::Child) => self.worker_main(r, f, cpu(r)),
                Ok(Forked::Parent(pid)) => pids.push(pid),
                Err(errno) => {
                    ctl.set(ctl::H_ABORT, r as u64 + 1);
                    for &p in &pids {
                        let _ = process::kill(p, libc::SIGKILL);
                        let _ = process::wait(p);
                    }
                    return Err(Error::Sys {
                        what: "forking a team worker",
                        errno,
                    });
                }
            }
        }
        let mut status: Vec<Option<ExitStatus>> = vec![None; pids.len()];
        let mut deadline: Option<Instant> = None;
        while status.iter().any(Option::is_none) {
            let pending: Vec<u32> = pids
                .iter()
                .zip(&status)
                .filter(|(_, s)| s.is_none())
                .map(|(&p, _)| p)
                .collect();
            let ended = match process::wait_any(&pending, Duration::from_millis(200)) {
                Ok(ended) => ended,
                Err(errno) => {
                    // Cannot watch the pidfds (out of descriptors?): poll
                    // at the same pace instead of spinning.
                    eprintln!("tiermem team: waiting for workers: {errno}; polling");
                    std::thread::sleep(Duration::from_millis(200));
                    pending
                        .iter()
                        .filter(|&&p| !process::running(p))
                        .copied()
                        .collect()
                }
            };
            for pid in ended {
                let r = pids.iter().position(|&p| p == pid).expect("our child");
                let st = process::wait(pid).unwrap_or(ExitStatus::Exited(-1));
                status[r] = Some(st);
                if !st.success() {
                    ctl.abort(r);
                    deadline.get_or_insert(Instant::now() + Duration::from_secs(2));
                }
            }
            if deadline.is_some_and(|d| Instant::now() > d) {
                // Workers that compute without ever waiting do not see the
                // abort flag: stop them.
                for &p in &pending {
                    let _ = process::kill(p, libc::SIGKILL);
                }
            }
        }
        Ok(pids
            .iter()
            .zip(status)
            .enumerate()
            .map(|(r, (&pid, st))| {
                let st = st.expect("all reaped");
                WorkerExit {
                    rank: r,
                    pid,
                    cpu: cpu(r),
                    status: st,
                    how: st.to_string(),
                }
            })
            .collect())
    }

    /// A forked worker: joins as `rank`, runs `f`, and leaves with `_exit`.
    fn worker_main<F>(&self, rank: usize, f: &F, cpu: Option<usize>) -> !
    where
        F: Fn(&Worker<'_>) -> Result<(), Error> + Sync,
    {
        pin(rank, cpu);
        let member = match Member::join(self.member.view.clone(), rank, false, 1) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("tiermem team: worker {rank} cannot join: {e}");
                process::exit_now(1)
            }
        };
        let w = Worker {
            member: &member,
            rank,
            workers: self.config.workers,
            user: &self.user,
        };
        let code = exit_code(
            rank,
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&w))),
        );
        let ctl = member.view.ctl();
        ctl.pid(rank).fetch_or(PID_FINISHED, Ordering::AcqRel);
        process::exit_now(code)
    }
}

/// A worker's exit code: 0, [`EXIT_ABORTED`] when it stopped because
/// another failed, 1 for an error (printed), 101 for a panic.
fn exit_code(rank: usize, r: std::thread::Result<Result<(), Error>>) -> i32 {
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(Error::Team(_))) => EXIT_ABORTED,
        Ok(Err(e)) => {
            eprintln!("tiermem team: worker {rank}: {e}");
            1
        }
        Err(_) => 101,
    }
}

impl Drop for TeamRegion {
    fn drop(&mut self) {
        let ctl = self.member.view.ctl();
        ctl.pid(self.member.rank).fetch_or(PID_FINISHED, Ordering::AcqRel);
        Member::leave(&self.member);
        for n in &self.names {
            n.remove();
        }
    }
}
