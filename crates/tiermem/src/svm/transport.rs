//! How a process reaches the home copies and the protocol's shared
//! metadata. The protocol ([`super::protocol`]) only talks to a
//! [`Transport`]:
//!
//! - [`LocalShm`] implements it over shared memory on one node (the home
//!   copies are a memfd, the metadata an array of atomics);
//! - `svm::mpi` (cargo feature `mpi`) keeps a `LocalShm` per node for the
//!   pages homed there and carries the calls for pages homed on other
//!   nodes over MPI one-sided operations (`MPI_Get` for fetches, `MPI_Put`
//!   of byte runs for diffs, `MPI_Fetch_and_op` and `MPI_Compare_and_swap`
//!   for versions, masks and locks).
//!
//! Methods marked *signal-safe* are called from the SIGSEGV handler: they
//! must not allocate or block (an MPI transport waits for the network;
//! see `svm::mpi`).

use super::meta::{self, Meta, MAX_LOCKS, NOTICE_CAP};
use crate::error::Error;
use crate::party::Backoff;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tiermem_sys::memfd::Memfd;
use tiermem_sys::mm::{MapOptions, Mapping, MemRange, UserAccess};

/// Write notices read from a lock.
#[derive(Debug, PartialEq, Eq)]
pub enum Notices {
    /// The notices since the reader's position (page ids appended to the
    /// caller's buffer); the new position.
    Since(u64),
    /// More notices were released than the lock remembers: the reader must
    /// validate every cached page. The new position.
    Overflow(u64),
}

/// The operations the SVM protocol needs from wherever the home copies and
/// the metadata live.
///
/// Pages are *local* when their home copy is in this node's home file
/// ([`Transport::node`]): SPM maps them, and the per-page methods below
/// serve them. A transport across nodes also has *remote* pages, served by
/// the batch methods ([`Transport::fetch_remote`],
/// [`Transport::apply_remote_diffs`], [`Transport::versions`],
/// [`Transport::bump_versions`]); [`LocalShm`] has none.
pub trait Transport: Send + Sync {
    /// This node's shared memory: the home file of the pages homed here
    /// (what SPM pages map) and the node's metadata (statistics, SPM log,
    /// DSM epoch, and the directory and locks homed here).
    fn node(&self) -> &LocalShm;
    /// Whether `page`'s home copy is in this node's home file
    /// (signal-safe).
    fn is_local(&self, _page: usize) -> bool {
        true
    }
    /// How many pages from `first` (at most `max`) share `first`'s home:
    /// what one fetch may bring (signal-safe).
    fn home_run(&self, _first: usize, max: usize) -> usize {
        max
    }
    /// Fetches remote pages `first..first + n` (one home) into `dst` (the
    /// heap) at their offsets, writable: registers `rank` as a cacher if `cacher`,
    /// reads the versions into `versions[..n]` before the data.
    /// Signal-safe: no allocation.
    fn fetch_remote(
        &self,
        first: usize,
        n: usize,
        _rank: usize,
        _cacher: bool,
        _dst: &Mapping,
        _versions: &mut [u64],
    ) -> Result<(), Error> {
        Err(Error::Usage(format!(
            "pages {first}..{} are not remote on this transport",
            first + n
        )))
    }
    /// Applies the diffs of remote pages (`cur` pages of `heap` against
    /// `twin` pages at the same offsets) to their home copies, complete
    /// when it returns; `out[i]` gets (bytes, runs) of `pages[i]`.
    fn apply_remote_diffs(
        &self,
        pages: &[usize],
        _heap: &Mapping,
        _twin: &Mapping,
        _out: &mut Vec<(usize, usize)>,
    ) -> Result<(), Error> {
        match pages.first() {
            None => Ok(()),
            Some(p) => Err(Error::Usage(format!("page {p} is not remote on this transport"))),
        }
    }
    /// The versions of `pages` (any mix of local and remote) into `out`.
    fn versions(&self, pages: &[usize], out: &mut Vec<u64>) -> Result<(), Error> {
        out.clear();
        out.extend(pages.iter().map(|&p| self.version(p)));
        Ok(())
    }
    /// Bumps the versions of `pages` (their changes applied); `before[i]`
    /// gets the version of `pages[i]` before.
    fn bump_versions(&self, pages: &[usize], before: &mut Vec<u64>) -> Result<(), Error> {
        before.clear();
        before.extend(pages.iter().map(|&p| self.bump_version(p)));
        Ok(())
    }
    /// The notice heads of locks `0..MAX_LOCKS`, where a new run starts
    /// reading.
    fn notice_heads(&self, out: &mut Vec<u64>) -> Result<(), Error> {
        let m = self.node().meta();
        out.clear();
        out.extend((0..MAX_LOCKS).map(|id| m.notice_head(id).load(Ordering::Acquire)));
        Ok(())
    }
    /// Copies home bytes from heap offset `offset` into `out`.
    fn read_home(&self, offset: usize, out: &mut [u8]) -> Result<(), Error> {
        self.node().home.copy_out(offset, out);
        Ok(())
    }
    /// The holder of lock `id` (0: free, else 1 + rank).
    fn lock_holder(&self, id: usize) -> Result<u64, Error> {
        Ok(self.node().meta().lock_holder(id).load(Ordering::Relaxed))
    }
    /// Copies home page `page` into `dst` at `dst_offset` (signal-safe).
    /// This method and the two next ones default to this node's home file
    /// ([`Transport::node`]), which is where both transports here do them.
    fn fetch_page(&self, page: usize, dst: &Mapping, dst_offset: usize) {
        dst.copy_in(dst_offset, self.node().home_range(page));
    }
    /// Writes the byte runs `(offset, len)` of `src` (one page) into home
    /// page `page`, and nothing else.
    fn apply_runs(&self, page: usize, src: MemRange<'_>, runs: &[(u32, u32)]) {
        let node = self.node();
        node.home.copy_runs(page * node.page_bytes, src, runs);
    }
    /// Applies the diff of `cur` against `twin` (one page) to home page
    /// `page`: only the bytes that differ. Returns (bytes, runs). `runs` is
    /// scratch for a transport that sends the runs (computed with
    /// [`MemRange::diff_runs`], applied with [`Transport::apply_runs`]).
    fn apply_diff(
        &self,
        page: usize,
        cur: MemRange<'_>,
        twin: MemRange<'_>,
        _runs: &mut Vec<(u32, u32)>,
    ) -> (usize, usize) {
        let node = self.node();
        node.home.apply_diff(page * node.page_bytes, cur, twin)
    }
    /// The home copy's version: bumped after every change that cached
    /// copies must not miss (signal-safe).
    fn version(&self, page: usize) -> u64;
    /// Bumps the version after a change was applied; returns the previous
    /// version.
    fn bump_version(&self, page: usize) -> u64;
    /// Records that `rank` caches `page` in DSM mode; returns the mask of
    /// cachers before (signal-safe).
    fn add_cacher(&self, page: usize, rank: usize) -> u64;
    /// `rank` no longer caches `page`.
    fn remove_cacher(&self, page: usize, rank: usize);
    /// `rank` no longer caches `pages` (any mix of local and remote).
    fn remove_cachers(&self, pages: &[usize], rank: usize) -> Result<(), Error> {
        for &p in pages {
            self.remove_cacher(p, rank);
        }
        Ok(())
    }
    /// The processes caching `page` in DSM mode.
    fn cachers(&self, page: usize) -> u64;
    /// Takes lock `id` for `rank`, waiting as long as it takes; an error
    /// names a holder that died.
    fn lock(&self, id: usize, rank: usize) -> Result<(), Error>;
    /// Releases lock `id`; an error if `rank` does not hold it.
    fn unlock(&self, id: usize, rank: usize) -> Result<(), Error>;
    /// Attaches write notices for `pages` to lock `id` (held by the caller).
    fn publish_notices(&self, id: usize, pages: &[u32]) -> Result<(), Error>;
    /// Appends to `out` the notices of lock `id` (held by the caller)
    /// released since position `seen`.
    fn notices_since(&self, id: usize, seen: u64, out: &mut Vec<u32>) -> Result<Notices, Error>;
}

/// The home copies and metadata in shared memory on this node.
///
/// Fields: mappings first, then the files they map (dropped after).
pub struct LocalShm {
    /// A view of the home copies (every page, read-write), for fetches and
    /// diffs.
    pub(crate) home: Mapping,
    pub(crate) meta_map: Mapping,
    meta_user: UserAccess,
    pub(crate) home_file: Memfd,
    _meta_file: Memfd,
    pub(crate) npages: usize,
    pub(crate) page_bytes: usize,
}

impl LocalShm {
    /// Creates the home file for `npages` pages and the metadata for
    /// `procs` processes.
    pub(crate) fn create(npages: usize, procs: usize) -> Result<LocalShm, Error> {
        let t = Self::map(Self::files(npages)?, npages)?;
        let m = t.meta();
        m.h(meta::H_NPAGES).store(npages as u64, Ordering::Relaxed);
        m.h(meta::H_PROCS).store(procs as u64, Ordering::Relaxed);
        // Release: a process that sees the magic sees the header.
        m.h(meta::H_MAGIC).store(meta::MAGIC, Ordering::Release);
        Ok(t)
    }

    /// Opens the files another process of this node made with
    /// [`LocalShm::create`] (`/proc/<pid>/fd/<fd>`): how MPI ranks that
    /// were not forked from one another share a node's home copies.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn open_peer(pid: u32, home_fd: i32, meta_fd: i32, npages: usize) -> Result<LocalShm, Error> {
        let sys = |what| move |errno| Error::Sys { what, errno };
        let home = Memfd::open_peer(pid, home_fd).map_err(sys("opening the node's SVM home file"))?;
        let meta = Memfd::open_peer(pid, meta_fd).map_err(sys("opening the node's SVM metadata"))?;
        let t = Self::map((home, meta), npages)?;
        // Acquire: pairs with create's release of the magic.
        if t.meta().h(meta::H_MAGIC).load(Ordering::Acquire) != meta::MAGIC {
            return Err(Error::Team(format!(
                "process {pid}'s SVM metadata (fd {meta_fd}) has no header"
            )));
        }
        Ok(t)
    }

    /// The metadata file.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn meta_fd(&self) -> BorrowedFd<'_> {
        self._meta_file.as_fd()
    }

    /// The descriptors of the home file and the metadata in this process.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn raw_fds(&self) -> (i32, i32) {
        (self.home_file.raw(), self._meta_file.raw())
    }

    fn files(npages: usize) -> Result<(Memfd, Memfd), Error> {
        let ps = tiermem_sys::mm::base_page_size();
        let sys = |what| move |errno| Error::Sys { what, errno };
        let home_file =
            Memfd::create("tiermem-svm-home", false).map_err(sys("creating the SVM home file"))?;
        home_file
            .set_len((npages * ps) as u64)
            .map_err(sys("sizing the SVM home file"))?;
        let meta_file = Memfd::create("tiermem-svm-meta", false).map_err(sys("creating the SVM metadata"))?;
        meta_file
            .set_len(Self::meta_bytes(npages) as u64)
            .map_err(sys("sizing the SVM metadata"))?;
        Ok((home_file, meta_file))
    }

    fn meta_bytes(npages: usize) -> usize {
        let ps = tiermem_sys::mm::base_page_size();
        (meta::words(npages) * 8).div_ceil(ps) * ps
    }

    fn map((home_file, meta_file): (Memfd, Memfd), npages: usize) -> Result<LocalShm, Error> {
        let ps = tiermem_sys::mm::base_page_size();
        let meta_bytes = Self::meta_bytes(npages);
        let opts = MapOptions::default();
        let (home, _) = Mapping::shared(home_file.as_fd(), 0, npages * ps, ps, &opts)?;
        let (meta_map, meta_user) = Mapping::shared(meta_file.as_fd(), 0, meta_bytes, ps, &opts)?;
        Ok(LocalShm {
            home,
            meta_map,
            meta_user,
            home_file,
            _meta_file: meta_file,
            npages,
            page_bytes: ps,
        })
    }

    pub(crate) fn meta(&self) -> Meta<'_> {
        Meta::new(self.words(), self.npages)
    }

    fn words(&self) -> &[AtomicU64] {
        self.meta_map.user_atomics(&self.meta_user)
    }

    /// The home file (SPM pages map it).
    pub(crate) fn home_fd(&self) -> BorrowedFd<'_> {
        self.home_file.as_fd()
    }

    /// Home page `page` as a range (for cache-line flushes).
    pub(crate) fn home_range(&self, page: usize) -> MemRange<'_> {
        self.home.range(page * self.page_bytes, self.page_bytes)
    }

    fn holder_error(&self, id: usize, holder: u64) -> Option<Error> {
        let rank = holder as usize - 1;
        let pid = self.meta().pid(rank).load(Ordering::Acquire) as u32;
        // No pid: a process of another node (an MPI job), out of sight here.
        (pid != 0 && !tiermem_sys::process::running(pid)).then(|| {
            Error::Team(format!(
                "lock {id} is held by process {pid} (rank {rank}), which died holding it"
            ))
        })
    }
}

impl Transport for LocalShm {
    fn node(&self) -> &LocalShm {
        self
    }

    fn version(&self, page: usize) -> u64 {
        // Acquire: pairs with bump_version's release, so a fetch after this
        // load sees every change applied before the bump.
        self.meta().version(page).load(Ordering::Acquire)
    }

    fn bump_version(&self, page: usize) -> u64 {
        // AcqRel: release publishes the runs applied before; acquire orders
        // the caller's later reads after other processes' bumps.
        self.meta().version(page).fetch_add(1, Ordering::AcqRel)
    }

    fn add_cacher(&self, page: usize, rank: usize) -> u64 {
        let m = self.meta();
        // SeqCst: an SPM writer stores to the page, issues a SeqCst fence
        // and then reads the epoch; either it sees this epoch bump (and
        // reports its writes) or its stores come before our fetch.
        let before = m.dsm_mask(page).fetch_or(1 << rank, Ordering::SeqCst);
        if before == 0 {
            m.h(meta::H_DSM_EPOCH).fetch_add(1, Ordering::SeqCst);
        }
        before
    }

    fn remove_cacher(&self, page: usize, rank: usize) {
        // Relaxed: a stale bit only makes SPM writers report more.
        self.meta()
            .dsm_mask(page)
            .fetch_and(!(1 << rank), Ordering::Relaxed);
    }

    fn cachers(&self, page: usize) -> u64 {
        self.meta().dsm_mask(page).load(Ordering::SeqCst)
    }

    fn lock(&self, id: usize, rank: usize) -> Result<(), Error> {
        let word = self.meta().lock_holder(id);
        let mine = rank as u64 + 1;
        let mut backoff = Backoff::new(Duration::from_micros(20));
        let mut last_check = Instant::now();
        loop {
            let cur = word.load(Ordering::Relaxed);
            // Acquire: the holder's release (its diffs and notices) happens
            // before what we do under the lock.
            if cur == 0
                && word
                    .compare_exchange(0, mine, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return Ok(());
            }
            if cur == mine {
                return Err(Error::Usage(format!("lock {id} is already held by this process")));
            }
            backoff.snooze();
            if cur != 0 && last_check.elapsed() > Duration::from_millis(10) {
                last_check = Instant::now();
                if let Some(e) = self.holder_error(id, cur) {
                    return Err(e);
                }
            }
        }
    }

    fn unlock(&self, id: usize, rank: usize) -> Result<(), Error> {
        let word = self.meta().lock_holder(id);
        // Release: our diffs and notices happen before the next holder's acquire.
        word.compare_exchange(rank as u64 + 1, 0, Ordering::Release, Ordering::Relaxed)
            .map(|_| ())
            .map_err(|_| Error::Usage(format!("unlock of lock {id}, which this process does not hold")))
    }

    fn publish_notices(&self, id: usize, pages: &[u32]) -> Result<(), Error> {
        let m = self.meta();
        let head = m.notice_head(id).load(Ordering::Relaxed);
        for (k, &p) in pages.iter().enumerate() {
            // Relaxed: only the holder writes the ring; the head's release
            // store publishes the entries.
            m.notice(id, head + k as u64).store(p as u64, Ordering::Relaxed);
        }
        m.notice_head(id)
            .store(head + pages.len() as u64, Ordering::Release);
        Ok(())
    }

    fn notices_since(&self, id: usize, seen: u64, out: &mut Vec<u32>) -> Result<Notices, Error> {
        debug_assert!(id < MAX_LOCKS);
        let m = self.meta();
        let head = m.notice_head(id).load(Ordering::Acquire);
        if head - seen.min(head) > NOTICE_CAP as u64 {
            return Ok(Notices::Overflow(head));
        }
        for s in seen.min(head)..head {
            out.push(m.notice(id, s).load(Ordering::Relaxed) as u32);
        }
        Ok(Notices::Since(head))
    }
}
