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
mod run;
mod shm;
mod stats;

pub use crate::party::{WorkerExit, EXIT_ABORTED};
pub use ctl::{MARKS, MAX_MEMBERS, SCRATCH_WORDS};
pub use member::set_thread_rank;
pub use stats::{MemberStats, TeamStats};

use crate::error::Error;
use crate::stats::Cost;
use ctl::Stat;
use member::{Member, View, MAX_WINDOW};
use serde::Serialize;
use shm::{anon_file, shm_path, sized, sweep_stale_named, valid_name, OwnFile};
use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiermem_sys::mm::{MapOptions, Mapping, UserAccess};
use tiermem_sys::process::ExitStatus;

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
    /// A fault also installs the neighbours its worker's recent faults
    /// call for (the engine's fault-around, per member): for sweeps, one
    /// fault per cluster of up to 16 pages instead of one per page.
    pub fault_around: bool,
    /// Dirty tracking (off by default): read faults install pages
    /// write-protected, so that evictions write back only the pages some
    /// worker wrote (the others are punched only). The first write to a
    /// protected page is one more fault, which unprotects the cluster
    /// around it that this worker maps. It pays where much is only read
    /// (evictions about 30% cheaper per page) and costs where pages are
    /// read, then written (about 10% on a sweep writing every page; even
    /// on the stencil): see docs/team.md. Needs Linux 5.19 (write
    /// protection of shared memory); on an older kernel the team runs
    /// without it and its configuration says so. System calls that write
    /// into a page the worker only read fail with EFAULT while it is
    /// protected (as into a page not mapped there).
    pub dirty_tracking: bool,
}

impl TeamConfig {
    /// `virt` bytes over `near` bytes for `workers` workers; FIFO, batches
    /// of 64 pages, no read-ahead, fault-around on, dirty tracking off.
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
            fault_around: true,
            dirty_tracking: false,
        }
    }

    /// Checks the configuration as [`TeamRegion::new`] does, with the same
    /// messages.
    pub fn validate(&self) -> Result<(), Error> {
        let ps = tiermem_sys::mm::base_page_size();
        let bad = |m: String| Err(Error::Usage(m));
        if self.virt_bytes == 0 || !self.virt_bytes.is_multiple_of(ps) {
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

/// The outcome of [`TeamRegion::run`].
#[derive(Clone, Debug, Serialize)]
pub struct TeamReport {
    /// One entry per worker.
    pub workers: Vec<WorkerExit>,
    /// Wall time of the run.
    pub seconds: f64,
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
        self.member.view.ctl().party().barrier()
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
    /// Pages whose sharer bit for this worker's process disagrees with its
    /// page table (`/proc/self/pagemap`: a sharer must map the page, and
    /// only a sharer of a near page may map it). Meaningful in processes
    /// mode at a quiet moment: between two barriers where no worker
    /// touches the region. For tests.
    #[doc(hidden)]
    pub fn sharer_mismatches(&self) -> Result<usize, Error> {
        use std::os::unix::fs::FileExt;
        let v = &self.member.view;
        let ctl = v.ctl();
        let me = ctl::sharer_bit(self.member.rank);
        let f = File::open("/proc/self/pagemap")?;
        let mut entries = vec![0u8; v.npages * 8];
        f.read_exact_at(&mut entries, (v.data_map.addr() / v.page * 8) as u64)?;
        let mut bad = 0;
        for (p, e) in entries.chunks_exact(8).enumerate() {
            let present = u64::from_ne_bytes(e.try_into().expect("8 bytes")) >> 63 == 1;
            let w = ctl.page(p).load(Ordering::Acquire);
            let sharer = ctl::where_(w) == ctl::Where::Resident && w & me != 0;
            if present != sharer {
                bad += 1;
            }
        }
        Ok(bad)
    }
    /// Snapshots every member's statistics as mark `k` (`0..MARKS`), read
    /// later with [`TeamRegion::stats_at_mark`]: how a worker brackets the
    /// timed part of a run between barriers.
    pub fn mark(&self, k: usize) {
        assert!(k < MARKS, "mark {k} out of 0..{MARKS}");
        self.member.view.ctl().snapshot(k);
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
        mut config: TeamConfig,
        files: [File; 3],
        names: Vec<OwnFile>,
        rank: Option<usize>,
    ) -> Result<TeamRegion, Error> {
        let ps = tiermem_sys::mm::base_page_size();
        let npages = config.virt_bytes / ps;
        let ctl_bytes = (ctl::words(npages) * 8).div_ceil(ps) * ps;
        config.dirty_tracking &= member::shmem_write_protect();
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
            set(ctl::H_AROUND, u64::from(config.fault_around));
            set(ctl::H_DIRTY, u64::from(config.dirty_tracking));
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
        config.fault_around = get(ctl::H_AROUND) != 0;
        config.dirty_tracking = get(ctl::H_DIRTY) != 0;
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
        self.member.view.ctl().party().barrier()
    }

    /// Whether a member failed (the region's contents may be incomplete).
    pub fn failed_rank(&self) -> Option<usize> {
        self.member.view.ctl().party().failed()
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
                    around_clusters: g(Stat::AroundClusters),
                    around_installed: g(Stat::AroundInstalled),
                    around_used: g(Stat::AroundUsed),
                    around_unused: g(Stat::AroundUnused),
                    wp_faults: g(Stat::WpFaults),
                    clean_evictions: g(Stat::CleanEvictions),
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
}

impl Drop for TeamRegion {
    fn drop(&mut self) {
        self.member.view.ctl().party().mark_finished(self.member.rank);
        Member::leave(&self.member);
        for n in &self.names {
            n.remove();
        }
    }
}
