//! The SVM inside an MPI job (cargo feature `mpi`): one SVM process per
//! rank of `MPI_COMM_WORLD`, on one node or many, with the same API as the
//! forked team ([`super::Svm`], `tm_svm_*`).
//!
//! Two levels:
//!
//! - **Node**: the ranks of one node (`MPI_Comm_split_type(SHARED)`, or
//!   groups of `TIERMEM_SVM_RANKS_PER_NODE` ranks) share one
//!   [`LocalShm`]: its leader creates the home file and the metadata, the
//!   others open them through `/proc/<pid>/fd`. Pages homed on the node
//!   are served exactly as in the forked team: SPM maps the home file,
//!   DSM copies from it, versions, masks and locks are CPU atomics.
//! - **Cluster**: pages homed on another node are reached through two MPI
//!   windows that every rank exposes over its node's files: the home
//!   copies (`MPI_Get` of up to 8 pages per fault, `MPI_Put` of the diff's
//!   byte runs as one hindexed datatype per page) and the metadata
//!   (`MPI_Fetch_and_op` for versions, DSM masks, the DSM epoch and lock
//!   tickets, `MPI_Compare_and_swap` for lock hand-overs, `MPI_Get`/`MPI_Put`
//!   for the notice rings). Passive target: one `MPI_Win_lock_all` epoch per window,
//!   operations completed by `MPI_Win_flush_all`.
//!
//! Homes: each allocation is split into as many contiguous blocks as there
//! are ranks (block), or dealt page by page (cyclic, per allocation); the
//! rest of the heap is block-distributed. A page's home copy lives in the
//! file of its home rank's node; every rank of that node can map it.
//!
//! What the remote operations rely on:
//!
//! - Remote atomics and local atomics meet on the same metadata words (a
//!   rank of the home node takes a lock ticket with a CPU `fetch_add`, a
//!   rank of another node with `MPI_Fetch_and_op`). Open MPI's `osc/ucx` (and
//!   `osc/sm`) execute MPI atomics as CPU atomics on the target's memory,
//!   so the two are atomic with respect to each other. The MPI standard
//!   does not promise this (a NIC with its own atomics would break it), so
//!   only `MPI_SUM` and compare-and-swap are used, the two operations UCX
//!   performs natively; other operators go through a software lock in
//!   `osc/ucx` that CPU atomics do not take.
//! - Over TCP, `osc/ucx` emulates RMA with active messages that the
//!   *target* must progress: a rank computing without MPI calls would
//!   stall every fault that targets it (measured: a 1 s compute loop
//!   delays a 4 KiB `MPI_Get` by 1 s). Multi-node jobs therefore run a
//!   progress thread per rank ([`tiermem_sys::mpi::Progress`], an
//!   `MPI_Iprobe` every `TIERMEM_SVM_PROGRESS_US` microseconds, default 50).
//! - Fault handling: the SIGSEGV handler calls `MPI_Fetch_and_op`,
//!   `MPI_Get` and `MPI_Win_flush_all` on the faulting thread. MPI is not
//!   async-signal-safe. The fault is synchronous: it comes from a load or
//!   store of the program on SVM memory, never from inside MPI, provided
//!   the program does not hand SVM memory to MPI calls (copy it out
//!   first). Requiring `MPI_THREAD_MULTIPLE` means that MPI's internal
//!   locks, when held by another thread (the progress thread, or the
//!   program's), are released by that thread without the faulting one. The
//!   handler itself allocates nothing in tiermem (MPI may).
//! - A rank that dies: Open MPI's launcher ends the job and names the rank.
//!   A rank whose run fails marks the job failed (a word of rank 0's node);
//!   ranks waiting at barriers and locks see it within milliseconds and
//!   fail with an error naming it. Waits also time out
//!   (`TIERMEM_SVM_TIMEOUT_S`, default 600).

use super::meta::{self, Meta, MAX_LOCKS, NOTICE_CAP};
use super::transport::{LocalShm, Notices, Transport};
use super::{SpmFlavour, Stat, SvmConfig, SvmStats};
use crate::error::Error;
use crate::team::{Backoff, SCRATCH_WORDS};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tiermem_sys::mm::{MapOptions, Mapping, MemRange, UserAccess};
use tiermem_sys::mpi::{Comm, MpiError, Pending, Progress, ReduceOp, Window};

impl From<MpiError> for Error {
    fn from(e: MpiError) -> Error {
        Error::Mpi(e.to_string())
    }
}

/// Whether `Svm::new` should join an MPI job: launched by `mpirun`.
pub(crate) fn launched() -> bool {
    tiermem_sys::mpi::launched()
}

/// How an allocation's pages are dealt to home ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// Contiguous blocks, one per rank in rank order (the default).
    Block,
    /// Page `i` of the allocation on rank `i % ranks`.
    Cyclic,
}

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!("tiermem: {name}={v:?} is not a positive integer; using {default}");
                default
            }
        },
    }
}

/// Bytes of an inbox slot's header: `posted` and `done` counters.
const SLOT_HDR: usize = 64;
/// Bytes of packed diffs one packet carries at most.
const SLOT_DATA: usize = 4 << 20;
const SLOT_STRIDE: usize = SLOT_HDR + SLOT_DATA;
/// A home's runs up to this many go as one `MPI_Put` each (one message per
/// run); more go packed through the home's inbox.
const DIRECT_RUNS: usize = 16;

/// The ticket lock that the MPI transport keeps in each lock's metadata
/// word (the forked team's `LocalShm` keeps a plain holder word): the
/// holder (rank + 1, 0 while nobody holds it) in bits 0-15, the ticket
/// being served in bits 16-39, the next ticket to hand out in bits 40-63.
/// Taking a ticket is one `MPI_SUM` of [`NEXT_ONE`](ticket::NEXT_ONE)
/// (its carry out of bit 63 is the wrap of that counter); every other
/// change is a compare-and-swap by the rank whose turn it is, so the
/// served counter wraps inside its field.
mod ticket {
    const HOLDER: u64 = 0xffff;
    const SERVING_SHIFT: u32 = 16;
    const COUNTER: u64 = 0xff_ffff;
    pub(super) const NEXT_ONE: u64 = 1 << 40;

    pub(super) fn holder(w: u64) -> u64 {
        w & HOLDER
    }
    pub(super) fn serving(w: u64) -> u64 {
        (w >> SERVING_SHIFT) & COUNTER
    }
    pub(super) fn next(w: u64) -> u64 {
        w >> 40
    }
    /// Tickets served before `mine` (the holder's included).
    pub(super) fn ahead(w: u64, mine: u64) -> u64 {
        mine.wrapping_sub(serving(w)) & COUNTER
    }
    /// The word once `who` (rank + 1) holds the lock.
    pub(super) fn claimed(w: u64, who: u64) -> u64 {
        (w & !HOLDER) | who
    }
    /// The word once the holder released it: nobody holds it and the next
    /// ticket is served.
    pub(super) fn released(w: u64) -> u64 {
        let serving = ((serving(w) + 1) & COUNTER) << SERVING_SHIFT;
        (w & !(HOLDER | COUNTER << SERVING_SHIFT)) | serving
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn tickets_are_served_in_order_and_wrap() {
            // Three ranks take tickets on a free lock, at the edge of both counters.
            let start = (COUNTER << 40) | (COUNTER << SERVING_SHIFT);
            let mut w = start;
            let mut tickets = Vec::new();
            for _ in 0..3 {
                tickets.push(next(w));
                w = w.wrapping_add(NEXT_ONE);
            }
            assert_eq!(tickets, vec![COUNTER, 0, 1]);
            for (k, &t) in tickets.iter().enumerate() {
                assert_eq!(serving(w), t, "ticket {k} is served next");
                assert_eq!(holder(w), 0);
                assert_eq!(ahead(w, t), 0);
                w = claimed(w, k as u64 + 1);
                assert_eq!(holder(w), k as u64 + 1);
                assert_eq!(next(w), 2, "claiming leaves the ticket counter");
                w = released(w);
            }
            assert_eq!(serving(w), next(w), "free again after everyone released");
            assert_eq!(ahead(start, 1), 2);
        }
    }
}

/// One lock's word, on this node or another.
enum LockWord<'a> {
    Local(&'a AtomicU64),
    Remote {
        link: &'a MpiLink,
        home: usize,
        disp: usize,
    },
}

impl LockWord<'_> {
    fn fetch_add(&self, v: u64) -> Result<u64, Error> {
        match *self {
            // Relaxed: taking a ticket orders nothing; the claim does.
            LockWord::Local(w) => Ok(w.fetch_add(v, Ordering::Relaxed)),
            LockWord::Remote { link, home, disp } => {
                let mut old = 0u64;
                let mut b = link.remote()?.meta.batch();
                b.fetch_add(home, disp, &v, &mut old)?;
                b.flush()?;
                link.net(1, 1, 8, 8);
                Ok(old)
            }
        }
    }

    /// An atomic read (a remote word is read with an add of 0: `MPI_Get`
    /// is not atomic with respect to the other ranks' atomics).
    fn read(&self) -> Result<u64, Error> {
        match *self {
            // Acquire: pairs with the release of the previous holder.
            LockWord::Local(w) => Ok(w.load(Ordering::Acquire)),
            LockWord::Remote { .. } => self.fetch_add(0),
        }
    }

    /// Compare-and-swap; returns the value before (== `cur` on success).
    fn compare_swap(&self, cur: u64, new: u64) -> Result<u64, Error> {
        match *self {
            // AcqRel: a claim acquires the previous holder's writes, a
            // release publishes ours.
            LockWord::Local(w) => Ok(w
                .compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire)
                .unwrap_or_else(|v| v)),
            LockWord::Remote { link, home, disp } => {
                let mut old = 0u64;
                let mut b = link.remote()?.meta.batch();
                b.compare_swap(home, disp, &cur, &new, &mut old)?;
                b.flush()?;
                link.net(1, 1, 8, 8);
                Ok(old)
            }
        }
    }
}

/// The windows of a job that spans nodes.
///
/// Fields: the progress thread first (stopped before the windows are
/// freed), then the windows.
struct Remote {
    /// Drives MPI progress for operations that target this rank, and
    /// applies the inbox's diffs.
    _progress: Progress,
    /// Every rank's view of its node's home file (displacement: heap offset).
    data: Window,
    /// Every rank's view of its node's metadata (displacement: word * 8).
    meta: Window,
    /// Every rank's diff inbox: one slot per origin rank, a header
    /// (`posted`, `done`) and packed diffs that this rank's progress thread
    /// applies to its node's home copies.
    inbox: Window,
}

/// The transport of an MPI job: this node's [`LocalShm`] for local pages,
/// MPI windows for the others.
///
/// Fields: the windows (which keep their own mappings alive) first, then
/// the node's files.
pub(crate) struct MpiLink {
    remote: Option<Remote>,
    node: LocalShm,
    rank: usize,
    /// World rank -> node index.
    node_of: Vec<u16>,
    my_node: u16,
    /// Page -> home rank.
    homes: Vec<AtomicU16>,
    /// Pages whose home DSM mask holds this rank's bit (remote pages: the
    /// mask is changed by `MPI_SUM`, so a bit must be added only once).
    in_mask: Vec<AtomicBool>,
    /// Per lock homed on another node: its notice head, read at the
    /// acquire, written back at the release (nobody else moves it while
    /// this rank holds the lock).
    heads: Vec<AtomicU64>,
    /// Pages this rank changed since the last barrier, with the version
    /// after the change (what the next barrier carries; jobs across nodes).
    changed: Mutex<Vec<(u64, u64)>>,
    /// Per home rank: diff packets sent to its inbox.
    posted: Vec<AtomicU64>,
    /// Locks homed on other nodes that this rank holds (an unlock checks
    /// here instead of asking the home).
    held: Vec<AtomicBool>,
    timeout: Duration,
}

impl MpiLink {
    /// Counts network traffic in this rank's statistics.
    fn net(&self, ops: u64, flushes: u64, bytes_in: usize, bytes_out: usize) {
        let m = self.node.meta();
        m.add(self.rank, Stat::NetOps as usize, ops);
        m.add(self.rank, Stat::NetFlushes as usize, flushes);
        m.add(self.rank, Stat::NetBytesIn as usize, bytes_in as u64);
        m.add(self.rank, Stat::NetBytesOut as usize, bytes_out as u64);
    }

    fn remote(&self) -> Result<&Remote, Error> {
        self.remote
            .as_ref()
            .ok_or_else(|| Error::Mpi("no MPI windows in a one-node job (a remote page?)".into()))
    }

    fn home(&self, page: usize) -> usize {
        // Relaxed: homes change only in collective malloc, on the thread
        // that also takes the faults.
        self.homes[page].load(Ordering::Relaxed) as usize
    }

    /// The ranks on this node.
    fn node_ranks(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.node_of.len()).filter(|&r| self.node_of[r] == self.my_node)
    }

    fn nodes(&self) -> usize {
        self.node_of.iter().map(|&n| n as usize + 1).max().unwrap_or(1)
    }

    /// Byte displacement of a metadata word (the same layout on every node).
    fn disp(&self, f: impl for<'a> FnOnce(Meta<'a>) -> &'a AtomicU64) -> usize {
        let m = self.node.meta();
        m.index(f(m)) * 8
    }

    /// Whether lock `id` lives on this node (its home rank is `id % ranks`).
    fn lock_home(&self, id: usize) -> (usize, bool) {
        let home = id % self.node_of.len();
        (home, self.node_of[home] == self.my_node)
    }

    /// Sets the homes of pages `first..first + n` (collective: every rank
    /// does the same).
    pub(crate) fn set_homes(&self, first: usize, n: usize, d: Distribution) {
        let ranks = self.node_of.len();
        for i in 0..n {
            let r = match d {
                Distribution::Block => i * ranks / n,
                Distribution::Cyclic => i % ranks,
            };
            self.homes[first + i].store(r as u16, Ordering::Relaxed);
        }
    }

    /// Marks the job failed by `rank` (the first failure stays).
    pub(crate) fn fail(&self, rank: usize) {
        let mine = rank as u64 + 1;
        if self.node_of[0] == self.my_node {
            // Relaxed: a flag; waiters poll it.
            let _ = self.node.meta().h(meta::H_FAILED).compare_exchange(
                0,
                mine,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        } else if let Ok(r) = self.remote() {
            let (zero, mut old) = (0u64, 0u64);
            let disp = self.disp(|m| m.h(meta::H_FAILED));
            let mut b = r.meta.batch();
            if b.compare_swap(0, disp, &zero, &mine, &mut old).is_ok() {
                let _ = b.flush();
            }
        }
    }

    /// The rank whose run failed, if one did.
    pub(crate) fn failed(&self) -> Result<Option<usize>, Error> {
        let v = if self.node_of[0] == self.my_node {
            self.node.meta().h(meta::H_FAILED).load(Ordering::Relaxed)
        } else {
            let mut v = [0u64];
            let disp = self.disp(|m| m.h(meta::H_FAILED));
            let r = self.remote()?;
            let mut b = r.meta.batch();
            b.get_words(0, disp, &mut v)?;
            b.flush()?;
            v[0]
        };
        Ok((v != 0).then(|| v as usize - 1))
    }

    /// An error if another rank failed, a rank of this node died, or `start`
    /// is longer ago than the timeout (`what` says what was awaited).
    pub(crate) fn check_peers(&self, start: Instant, what: &dyn Fn() -> String) -> Result<(), Error> {
        let m = self.node.meta();
        for r in self.node_ranks() {
            let pid = m.pid(r).load(Ordering::Acquire) as u32;
            if pid != 0 && !tiermem_sys::process::running(pid) {
                return Err(Error::Team(format!("{}: rank {r} (pid {pid}) died", what())));
            }
        }
        // After the deaths: a rank that saw one fails, and the cause is the
        // better message.
        if let Some(r) = self.failed()? {
            return Err(Error::Team(format!(
                "{}: rank {r} failed (its error is in its output)",
                what()
            )));
        }
        if start.elapsed() > self.timeout {
            return Err(Error::Team(format!(
                "{}: no progress for {} s (TIERMEM_SVM_TIMEOUT_S); a rank may be dead or stuck",
                what(),
                self.timeout.as_secs()
            )));
        }
        Ok(())
    }

    /// Remembers that `page` changed to `version` (for the next barrier).
    fn record(&self, page: usize, version: u64) {
        if self.remote.is_none() {
            return;
        }
        let mut c = self.changed.lock().unwrap_or_else(|p| p.into_inner());
        c.push((page as u64, version));
        if c.len() > 2 * self.homes.len() {
            dedup_changes(&mut c);
        }
    }

    /// Takes the changes recorded since the last barrier.
    pub(crate) fn take_changes(&self) -> Vec<(u64, u64)> {
        let mut c = std::mem::take(&mut *self.changed.lock().unwrap_or_else(|p| p.into_inner()));
        dedup_changes(&mut c);
        c
    }

    /// The word of lock `id`, wherever its home is: CPU atomics on this
    /// node's metadata, MPI atomics (`MPI_Fetch_and_op` with `MPI_SUM`,
    /// `MPI_Compare_and_swap`) on another node's.
    fn lock_word(&self, id: usize) -> LockWord<'_> {
        let (home, local) = self.lock_home(id);
        if local {
            LockWord::Local(self.node.meta().lock_holder(id))
        } else {
            LockWord::Remote {
                link: self,
                home,
                disp: self.disp(|m| m.lock_holder(id)),
            }
        }
    }

    /// Sends a diff packet to `home`'s inbox and waits until its progress
    /// thread applied it.
    fn send_packet(&self, home: usize, packet: &[u8]) -> Result<(), Error> {
        let r = self.remote()?;
        let slot = self.rank * SLOT_STRIDE;
        let mut framed = Vec::with_capacity(8 + packet.len());
        framed.extend_from_slice(&(packet.len() as u64).to_le_bytes());
        framed.extend_from_slice(packet);
        let mut b = r.inbox.batch();
        b.put_bytes(home, slot + SLOT_HDR, &framed)?;
        b.flush()?;
        // Relaxed: this thread's own counter.
        let seq = self.posted[home].fetch_add(1, Ordering::Relaxed) + 1;
        let (one, mut old) = (1u64, 0u64);
        let mut b = r.inbox.batch();
        b.fetch_add(home, slot, &one, &mut old)?;
        b.flush()?;
        let mut backoff = Backoff::new(Duration::from_micros(20));
        let (start, mut last) = (Instant::now(), Instant::now());
        let mut polls = 0;
        loop {
            let mut done = [0u64];
            let mut b = r.inbox.batch();
            b.get_words(home, slot + 8, &mut done)?;
            b.flush()?;
            polls += 1;
            if done[0] >= seq {
                break;
            }
            backoff.snooze();
            if last.elapsed() > Duration::from_millis(10) {
                last = Instant::now();
                self.check_peers(start, &|| format!("waiting for rank {home} to apply a diff"))?;
            }
        }
        self.net(2 + polls, 2 + polls, 8 * polls as usize, framed.len());
        Ok(())
    }

    /// Reads words `words` of `target`'s metadata (blocking).
    fn get_meta_words(&self, target: usize, disp: usize, out: &mut [u64]) -> Result<(), Error> {
        self.net(1, 1, out.len() * 8, 0);
        let r = self.remote()?;
        let mut b = r.meta.batch();
        b.get_words(target, disp, out)?;
        b.flush()?;
        Ok(())
    }
}

/// Appends page `page`'s runs to a packet: `u32` page, `u32` runs, the
/// runs as (`u16` offset, `u16` length), then their bytes.
fn pack(packet: &mut Vec<u8>, page: usize, cur: MemRange<'_>, runs: &[(u32, u32)]) {
    packet.extend_from_slice(&(page as u32).to_le_bytes());
    packet.extend_from_slice(&(runs.len() as u32).to_le_bytes());
    for &(o, l) in runs {
        packet.extend_from_slice(&(o as u16).to_le_bytes());
        packet.extend_from_slice(&(l as u16).to_le_bytes());
    }
    let mut page_bytes = vec![0u8; cur.len()];
    cur.copy_to(&mut page_bytes);
    for &(o, l) in runs {
        packet.extend_from_slice(&page_bytes[o as usize..(o + l) as usize]);
    }
}

/// Applies a packet (see [`pack`]) to the home copies in `home` (a view of
/// the node's home file); a malformed packet stops where it breaks.
fn unpack(packet: &[u8], home: &Mapping, ps: usize) {
    let rd16 = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]) as usize;
    let rd32 = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize;
    let mut at = 0;
    while at + 8 <= packet.len() {
        let (page, n) = (rd32(packet, at), rd32(packet, at + 4));
        let runs_at = at + 8;
        let mut data = runs_at + 4 * n;
        if data > packet.len() || (page + 1) * ps > home.len() {
            return;
        }
        for k in 0..n {
            let (o, l) = (rd16(packet, runs_at + 4 * k), rd16(packet, runs_at + 4 * k + 2));
            if o + l > ps || data + l > packet.len() {
                return;
            }
            home.write_bytes(page * ps + o, &packet[data..data + l]);
            data += l;
        }
        at = data;
    }
}

/// What a rank's progress thread does besides driving MPI: applies the
/// diff packets other ranks posted to its inbox, and marks them done.
fn inbox_hook(
    inbox: Arc<Mapping>,
    user: UserAccess,
    home: Arc<Mapping>,
    ranks: usize,
    ps: usize,
) -> Box<dyn FnMut() + Send> {
    let mut buf = Vec::new();
    Box::new(move || {
        let words = inbox.user_atomics(&user);
        for o in 0..ranks {
            let hdr = o * SLOT_STRIDE / 8;
            // Acquire: the packet's bytes (put and flushed by the origin
            // before it rang the doorbell) are there.
            let posted = words[hdr].load(Ordering::Acquire);
            // Relaxed: only this thread writes `done`.
            if posted == words[hdr + 1].load(Ordering::Relaxed) {
                continue;
            }
            let mut len = [0u8; 8];
            inbox.copy_out(o * SLOT_STRIDE + SLOT_HDR, &mut len);
            let len = (u64::from_le_bytes(len) as usize).min(SLOT_DATA - 8);
            buf.resize(len, 0);
            inbox.copy_out(o * SLOT_STRIDE + SLOT_HDR + 8, &mut buf);
            unpack(&buf, &home, ps);
            // Release: the applied bytes before `done`, which the origin
            // reads before it bumps the versions.
            words[hdr + 1].store(posted, Ordering::Release);
        }
    })
}

/// Sorts by page and keeps the newest version of each.
fn dedup_changes(c: &mut Vec<(u64, u64)>) {
    c.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    c.dedup_by_key(|x| x.0);
}

impl Transport for MpiLink {
    fn node(&self) -> &LocalShm {
        &self.node
    }

    fn is_local(&self, page: usize) -> bool {
        self.node_of[self.home(page)] == self.my_node
    }

    fn home_run(&self, first: usize, max: usize) -> usize {
        let h = self.home(first);
        (first..(first + max).min(self.homes.len()))
            .take_while(|&q| self.home(q) == h)
            .count()
    }

    fn fetch_page(&self, page: usize, dst: &Mapping, dst_offset: usize) {
        self.node.fetch_page(page, dst, dst_offset);
    }

    fn apply_runs(&self, page: usize, src: MemRange<'_>, runs: &[(u32, u32)]) {
        self.node.apply_runs(page, src, runs);
    }

    fn apply_diff(
        &self,
        page: usize,
        cur: MemRange<'_>,
        twin: MemRange<'_>,
        runs: &mut Vec<(u32, u32)>,
    ) -> (usize, usize) {
        self.node.apply_diff(page, cur, twin, runs)
    }

    fn version(&self, page: usize) -> u64 {
        if self.is_local(page) {
            return self.node.version(page);
        }
        let mut v = Vec::new();
        match self.versions(&[page], &mut v) {
            Ok(()) => v[0],
            // An unreadable version reads as "changed": the copy is refetched
            // (and the fetch reports the error).
            Err(_) => u64::MAX,
        }
    }

    fn bump_version(&self, page: usize) -> u64 {
        if self.is_local(page) {
            let v = self.node.bump_version(page);
            self.record(page, v + 1);
            return v;
        }
        let mut v = Vec::new();
        match self.bump_versions(&[page], &mut v) {
            Ok(()) => v[0],
            Err(_) => u64::MAX,
        }
    }

    fn add_cacher(&self, page: usize, rank: usize) -> u64 {
        self.node.add_cacher(page, rank)
    }

    fn remove_cacher(&self, page: usize, rank: usize) {
        let _ = self.remove_cachers(&[page], rank);
    }

    fn cachers(&self, page: usize) -> u64 {
        if self.is_local(page) {
            return self.node.cachers(page);
        }
        let mut v = [0u64];
        let disp = self.disp(|m| m.dsm_mask(page));
        match self.get_meta_words(self.home(page), disp, &mut v) {
            Ok(()) => v[0],
            Err(_) => u64::MAX,
        }
    }

    /// A ticket lock (see [`ticket`]): one atomic add takes a ticket, the
    /// rank then waits until its ticket is served, so waiters are served
    /// in arrival order whichever node they are on, and a waiting rank
    /// only reads the word (no compare-and-swap storm on a contended lock).
    fn lock(&self, id: usize, rank: usize) -> Result<(), Error> {
        let word = self.lock_word(id);
        let mine = rank as u64 + 1;
        if ticket::holder(word.read()?) == mine {
            return Err(Error::Usage(format!("lock {id} is already held by this process")));
        }
        let my_ticket = ticket::next(word.fetch_add(ticket::NEXT_ONE)?);
        let mut backoff = Backoff::new(Duration::from_micros(20));
        let (start, mut last) = (Instant::now(), Instant::now());
        let mut cur = word.read()?;
        loop {
            if ticket::serving(cur) == my_ticket && ticket::holder(cur) == 0 {
                // Our turn: record the holder (the ticket counter may move
                // under us, hence the loop). Acquire (local) or the flush
                // (remote): the previous holder's release happens before
                // our critical section.
                let old = word.compare_swap(cur, ticket::claimed(cur, mine))?;
                if old == cur {
                    break;
                }
                cur = old;
                continue;
            }
            backoff.snooze();
            if last.elapsed() > Duration::from_millis(10) {
                last = Instant::now();
                let holder = ticket::holder(cur);
                let ahead = ticket::ahead(cur, my_ticket);
                self.check_peers(start, &|| match holder {
                    0 => format!("waiting for lock {id} ({ahead} ahead)"),
                    h => format!("waiting for lock {id} (held by rank {}, {ahead} ahead)", h - 1),
                })?;
            }
            cur = word.read()?;
        }
        if matches!(word, LockWord::Remote { .. }) {
            // Relaxed: this thread's own bookkeeping.
            self.held[id].store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    fn unlock(&self, id: usize, rank: usize) -> Result<(), Error> {
        let word = self.lock_word(id);
        let mine = rank as u64 + 1;
        let mut cur = word.read()?;
        loop {
            if ticket::holder(cur) != mine {
                return Err(Error::Usage(format!(
                    "unlock of lock {id}, which this process does not hold"
                )));
            }
            // Release (local) or the flush (remote): our diffs and notices
            // happen before the next holder's claim.
            let old = word.compare_swap(cur, ticket::released(cur))?;
            if old == cur {
                break;
            }
            cur = old;
        }
        if matches!(word, LockWord::Remote { .. }) {
            self.held[id].store(false, Ordering::Relaxed);
        }
        Ok(())
    }

    fn lock_holder(&self, id: usize) -> Result<u64, Error> {
        if !self.lock_home(id).1 && self.held[id].load(Ordering::Relaxed) {
            // Relaxed: this thread's own bookkeeping (no round trip).
            return Ok(self.rank as u64 + 1);
        }
        Ok(ticket::holder(self.lock_word(id).read()?))
    }

    fn publish_notices(&self, id: usize, pages: &[u32]) -> Result<(), Error> {
        let (home, local) = self.lock_home(id);
        if local {
            return self.node.publish_notices(id, pages);
        }
        if pages.is_empty() {
            return Ok(());
        }
        // We hold the lock: nobody else writes its ring or head, which our
        // acquire read.
        let r = self.remote()?;
        // Relaxed: this thread's own bookkeeping.
        let head = self.heads[id].load(Ordering::Relaxed);
        // The newest NOTICE_CAP notices fit; older ones would be overwritten
        // anyway (readers that far behind see an overflow).
        let skip = pages.len().saturating_sub(NOTICE_CAP);
        let from = head + skip as u64;
        let entries: Vec<u64> = pages[skip..].iter().map(|&p| p as u64).collect();
        let slot = (from % NOTICE_CAP as u64) as usize;
        let first_len = entries.len().min(NOTICE_CAP - slot);
        // Entries and head in one flush: readers read them only under the
        // lock, which is released after the flush.
        let new_head = [head + pages.len() as u64];
        let mut b = r.meta.batch();
        b.put_words(home, self.disp(|m| m.notice(id, from)), &entries[..first_len])?;
        if first_len < entries.len() {
            b.put_words(home, self.disp(|m| m.notice(id, 0)), &entries[first_len..])?;
        }
        b.put_words(home, self.disp(|m| m.notice_head(id)), &new_head)?;
        b.flush()?;
        self.net(3, 1, 0, 8 * (entries.len() + 1));
        self.heads[id].store(new_head[0], Ordering::Relaxed);
        Ok(())
    }

    fn notices_since(&self, id: usize, seen: u64, out: &mut Vec<u32>) -> Result<Notices, Error> {
        let (home, local) = self.lock_home(id);
        if local {
            return self.node.notices_since(id, seen, out);
        }
        // The head and the whole ring in one get (they are adjacent).
        let mut buf = vec![0u64; 1 + NOTICE_CAP];
        self.get_meta_words(home, self.disp(|m| m.notice_head(id)), &mut buf)?;
        let head = buf[0];
        // Relaxed: this thread's own bookkeeping (we hold the lock).
        self.heads[id].store(head, Ordering::Relaxed);
        if head - seen.min(head) > NOTICE_CAP as u64 {
            return Ok(Notices::Overflow(head));
        }
        let ring = &buf[1..];
        out.extend((seen.min(head)..head).map(|s| ring[(s % NOTICE_CAP as u64) as usize] as u32));
        Ok(Notices::Since(head))
    }

    fn notice_heads(&self, out: &mut Vec<u64>) -> Result<(), Error> {
        out.clear();
        out.resize(MAX_LOCKS, 0);
        let m = self.node.meta();
        let mut remote = Vec::new();
        for (id, o) in out.iter_mut().enumerate() {
            let (home, local) = self.lock_home(id);
            if local {
                *o = m.notice_head(id).load(Ordering::Acquire);
            } else {
                remote.push((home, self.disp(|m| m.notice_head(id)), o));
            }
        }
        if !remote.is_empty() {
            let r = self.remote()?;
            let mut b = r.meta.batch();
            for (home, disp, o) in remote {
                b.get_words(home, disp, std::slice::from_mut(o))?;
            }
            b.flush()?;
            self.net(MAX_LOCKS as u64, 1, 8 * MAX_LOCKS, 0);
        }
        Ok(())
    }

    fn read_home(&self, offset: usize, out: &mut [u8]) -> Result<(), Error> {
        let ps = self.node.page_bytes;
        let mut at = 0;
        while at < out.len() {
            let off = offset + at;
            let page = off / ps;
            let len = (ps - off % ps).min(out.len() - at);
            if self.is_local(page) {
                self.node.home.copy_out(off, &mut out[at..at + len]);
            } else {
                let r = self.remote()?;
                let mut b = r.data.batch();
                b.get_bytes(self.home(page), off, &mut out[at..at + len])?;
                b.flush()?;
                self.net(1, 1, len, 0);
            }
            at += len;
        }
        Ok(())
    }

    fn fetch_remote(
        &self,
        first: usize,
        n: usize,
        rank: usize,
        cacher: bool,
        dst: &Mapping,
        versions: &mut [u64],
    ) -> Result<(), Error> {
        // Runs in the fault handler: no allocation here (stack arrays).
        let r = self.remote()?;
        let home = self.home(first);
        let bit = 1u64 << rank;
        let mut before = [u64::MAX; 8];
        assert!(n <= before.len() && versions.len() >= n, "fetch of {n} pages");
        let mut adds = 0;
        {
            // The cacher bits and the versions in one flush (the version
            // read may see the state before or after the bits: both are
            // older than the data read below).
            let mut b = r.meta.batch();
            if cacher {
                for (k, slot) in before[..n].iter_mut().enumerate() {
                    let p = first + k;
                    // Relaxed: this thread's own bookkeeping.
                    if !self.in_mask[p].swap(true, Ordering::Relaxed) {
                        b.fetch_add(home, self.disp(|m| m.dsm_mask(p)), &bit, slot)?;
                        adds += 1;
                    }
                }
            }
            b.get_words(home, self.disp(|m| m.version(first)), &mut versions[..n])?;
            b.flush()?;
        }
        let mut flushes = 2;
        if before[..n].contains(&0) {
            // The page became DSM-cached: the home node's SPM writers must
            // start tracking it before we copy (see LocalShm::add_cacher).
            let (one, mut old) = (1u64, 0u64);
            let mut b = r.meta.batch();
            b.fetch_add(home, self.disp(|m| m.h(meta::H_DSM_EPOCH)), &one, &mut old)?;
            b.flush()?;
            adds += 1;
            flushes += 1;
        }
        // Versions before data: a copy is never newer than its version says.
        let ps = self.node.page_bytes;
        let mut b = r.data.batch();
        b.get(home, first * ps, dst, first * ps, n * ps)?;
        b.flush()?;
        let m = self.node.meta();
        m.add(self.rank, Stat::NetFetchPages as usize, n as u64);
        self.net(
            adds + 2,
            flushes,
            n * ps + 8 * (n + adds as usize),
            8 * adds as usize,
        );
        Ok(())
    }

    fn apply_remote_diffs(
        &self,
        pages: &[usize],
        heap: &Mapping,
        twin: &Mapping,
        out: &mut Vec<(usize, usize)>,
    ) -> Result<(), Error> {
        out.clear();
        if pages.is_empty() {
            return Ok(());
        }
        let r = self.remote()?;
        let ps = self.node.page_bytes;
        // Runs of every page, then per home: a few runs go as one put each;
        // many (a page of sorted keys has ~1000) go packed to the home's
        // inbox, one message per packet instead of one per run.
        let mut runs: Vec<Vec<(u32, u32)>> = Vec::with_capacity(pages.len());
        for &p in pages {
            let mut rr = Vec::new();
            let bytes = heap.range(p * ps, ps).diff_runs(twin.range(p * ps, ps), &mut rr);
            out.push((bytes, rr.len()));
            runs.push(rr);
        }
        let mut homes: Vec<usize> = pages.iter().map(|&p| self.home(p)).collect();
        homes.sort_unstable();
        homes.dedup();
        let mut b = r.data.batch();
        let (mut puts, mut sent) = (0, 0);
        for h in homes {
            let mine: Vec<usize> = (0..pages.len())
                .filter(|&i| self.home(pages[i]) == h && out[i].0 > 0)
                .collect();
            let total: usize = mine.iter().map(|&i| runs[i].len()).sum();
            if total <= DIRECT_RUNS {
                for &i in &mine {
                    b.put_runs(h, pages[i] * ps, heap.range(pages[i] * ps, ps), &runs[i])?;
                    puts += 1;
                    sent += out[i].0;
                }
                continue;
            }
            let mut packet = Vec::new();
            for &i in &mine {
                let rec = 8 + 4 * runs[i].len() + out[i].0;
                if !packet.is_empty() && 8 + packet.len() + rec > SLOT_DATA {
                    self.send_packet(h, &packet)?;
                    packet.clear();
                }
                pack(&mut packet, pages[i], heap.range(pages[i] * ps, ps), &runs[i]);
            }
            if !packet.is_empty() {
                self.send_packet(h, &packet)?;
            }
        }
        b.flush()?;
        self.net(puts, 1, 0, sent);
        Ok(())
    }

    fn versions(&self, pages: &[usize], out: &mut Vec<u64>) -> Result<(), Error> {
        out.clear();
        out.resize(pages.len(), 0);
        let mut batch = None;
        let mut rest: &mut [u64] = out;
        let mut i = 0;
        while i < pages.len() {
            let p = pages[i];
            if self.is_local(p) {
                let (one, tail) = rest.split_at_mut(1);
                one[0] = self.node.version(p);
                rest = tail;
                i += 1;
                continue;
            }
            // A run of consecutive pages with one home: one get.
            let h = self.home(p);
            let mut n = 1;
            while i + n < pages.len() && pages[i + n] == p + n && self.home(p + n) == h {
                n += 1;
            }
            let (seg, tail) = rest.split_at_mut(n);
            rest = tail;
            let b = match &mut batch {
                Some(b) => b,
                None => batch.insert(self.remote()?.meta.batch()),
            };
            b.get_words(h, self.disp(|m| m.version(p)), seg)?;
            self.net(1, 0, 8 * n, 0);
            i += n;
        }
        if let Some(b) = batch {
            b.flush()?;
            self.net(0, 1, 0, 0);
        }
        Ok(())
    }

    fn bump_versions(&self, pages: &[usize], before: &mut Vec<u64>) -> Result<(), Error> {
        before.clear();
        before.resize(pages.len(), 0);
        let one = 1u64;
        {
            let mut batch = None;
            for (&p, b0) in pages.iter().zip(before.iter_mut()) {
                if self.is_local(p) {
                    *b0 = self.node.bump_version(p);
                    self.record(p, *b0 + 1);
                    continue;
                }
                let b = match &mut batch {
                    Some(b) => b,
                    None => batch.insert(self.remote()?.meta.batch()),
                };
                b.fetch_add(self.home(p), self.disp(|m| m.version(p)), &one, b0)?;
                self.net(1, 0, 8, 8);
            }
            if let Some(b) = batch {
                b.flush()?;
                self.net(0, 1, 0, 0);
            }
        }
        for (&p, &b0) in pages.iter().zip(before.iter()) {
            if !self.is_local(p) {
                self.record(p, b0 + 1);
            }
        }
        Ok(())
    }

    fn remove_cachers(&self, pages: &[usize], rank: usize) -> Result<(), Error> {
        let neg = (1u64 << rank).wrapping_neg();
        let mut olds = vec![0u64; pages.len()];
        let mut batch = None;
        for (&p, old) in pages.iter().zip(olds.iter_mut()) {
            if self.is_local(p) {
                self.node.remove_cacher(p, rank);
                continue;
            }
            // Relaxed: this thread's own bookkeeping.
            if !self.in_mask[p].swap(false, Ordering::Relaxed) {
                continue;
            }
            let b = match &mut batch {
                Some(b) => b,
                None => batch.insert(self.remote()?.meta.batch()),
            };
            b.fetch_add(self.home(p), self.disp(|m| m.dsm_mask(p)), &neg, old)?;
            self.net(1, 0, 8, 8);
        }
        if let Some(b) = batch {
            b.flush()?;
            self.net(0, 1, 0, 0);
        }
        Ok(())
    }
}

/// A collective allocation (the same table in every rank).
#[derive(Clone, Copy, Debug)]
struct Block {
    first: usize,
    pages: usize,
}

/// What an MPI job adds to an [`super::Svm`]: the communicator, the
/// transport, and what the forked team keeps in shared memory but an MPI
/// job keeps per rank (scratch words, the allocation table, statistics
/// gathered after a run).
pub(crate) struct Job {
    pub(crate) link: Arc<MpiLink>,
    world: Comm,
    scratch: Vec<AtomicU64>,
    stats: Mutex<Vec<SvmStats>>,
    blocks: Mutex<Vec<Block>>,
    /// Double-buffered slots of [`Job::allreduce_sum`]'s generation.
    runs: AtomicU64,
    /// Heap candidates rank 0 refused (kept mapped so they are not
    /// proposed again).
    _refused: Vec<Mapping>,
}

/// The pieces [`super::Svm::new`] assembles in an MPI job.
pub(crate) struct Joined {
    pub(crate) job: Job,
    pub(crate) heap: Mapping,
    pub(crate) heap_user: UserAccess,
}

fn wait(p: &mut Pending, what: &str) -> Result<Vec<u64>, Error> {
    let start = Instant::now();
    let mut backoff = Backoff::new(Duration::from_micros(20));
    loop {
        if let Some(v) = p.test()? {
            return Ok(v);
        }
        backoff.snooze();
        if start.elapsed() > Duration::from_secs(600) {
            return Err(Error::Team(format!("{what}: a rank did not join within 600 s")));
        }
    }
}

impl Job {
    /// Joins the MPI job (collective over `MPI_COMM_WORLD`): node files,
    /// heap at one address in every rank, windows and progress thread if
    /// the job spans nodes.
    pub(crate) fn join(config: &SvmConfig, npages: usize) -> Result<Joined, Error> {
        let m = tiermem_sys::mpi::init()?;
        let world = Comm::world(&m)?;
        let (rank, size) = (world.rank(), world.size());
        if config.procs != 0 && config.procs != size {
            return Err(Error::Usage(format!(
                "an SVM of {} processes inside an MPI job of {size} ranks: pass 0 or {size} (every rank is one SVM process)",
                config.procs
            )));
        }
        if size >= meta::MAX_PROCS {
            return Err(Error::Usage(format!(
                "an MPI job of {size} ranks: the SVM supports at most {}",
                meta::MAX_PROCS - 1
            )));
        }
        let ps = tiermem_sys::mm::base_page_size();
        let mut node_comm = world.split_shared()?;
        let per_node = env_usize("TIERMEM_SVM_RANKS_PER_NODE", usize::MAX);
        if per_node < node_comm.size() {
            node_comm = node_comm.split(node_comm.rank() / per_node, node_comm.rank())?;
        }
        // Node index: the leaders' world ranks, in order.
        let mut lead = [if node_comm.rank() == 0 { rank as u64 } else { 0 }];
        node_comm.bcast(0, &mut lead)?;
        let mut leaders_by_rank = vec![0u64; size];
        world.allgather(&lead, &mut leaders_by_rank)?;
        let mut leaders = leaders_by_rank.clone();
        leaders.sort_unstable();
        leaders.dedup();
        let node_of: Vec<u16> = leaders_by_rank
            .iter()
            .map(|l| leaders.binary_search(l).unwrap_or(0) as u16)
            .collect();
        let nodes = leaders.len();
        if nodes > 1 && config.flavour == SpmFlavour::Noncoherent {
            return Err(Error::Usage(
                "the noncoherent SPM flavour models non-coherent memory inside a node; an MPI job on several nodes runs coherent SPM"
                    .into(),
            ));
        }
        // The node's files: made by its leader, opened by the others.
        let made = if node_comm.rank() == 0 {
            Some(LocalShm::create(npages, size))
        } else {
            None
        };
        let mut ids = [0u64; 4];
        if let Some(r) = &made {
            match r {
                Ok(t) => {
                    let (h, mf) = t.raw_fds();
                    ids = [1, tiermem_sys::thread::getpid() as u64, h as u64, mf as u64];
                }
                Err(_) => ids[0] = 0,
            }
        }
        node_comm.bcast(0, &mut ids)?;
        if ids[0] == 0 {
            return Err(made
                .and_then(|r| r.err())
                .unwrap_or_else(|| Error::Team("the node leader could not create the SVM files".into())));
        }
        let node = match made {
            Some(r) => r?,
            None => LocalShm::open_peer(ids[1] as u32, ids[2] as i32, ids[3] as i32, npages)?,
        };
        // The heap at one address everywhere: rank 0 proposes, the others
        // map there or refuse, until all agree.
        let len = npages * ps;
        let mut refused = Vec::new();
        let mut heap = None;
        for _ in 0..16 {
            let mut addr = [0u64];
            let mine = if rank == 0 {
                let (mp, u) = Mapping::shared(node.home_fd(), 0, len, ps, &MapOptions::default())?;
                addr[0] = mp.addr() as u64;
                Some((mp, u))
            } else {
                None
            };
            world.bcast(0, &mut addr)?;
            let mine = match mine {
                Some(x) => Some(x),
                None => Mapping::shared_at(node.home_fd(), 0, len, ps, addr[0] as usize).ok(),
            };
            let ok = wait(
                &mut world.iallreduce(ReduceOp::Min, vec![mine.is_some() as u64])?,
                "agreeing on the heap address",
            )?;
            if ok[0] == 1 {
                heap = mine;
                break;
            }
            if let Some((mp, _)) = mine {
                if rank == 0 {
                    refused.push(mp);
                }
            }
        }
        let Some((heap, heap_user)) = heap else {
            return Err(Error::Team(format!(
                "no address range of {len} bytes was free in every rank after 16 tries"
            )));
        };
        let remote = if nodes > 1 {
            let (data_view, _) = Mapping::shared(node.home_fd(), 0, len, ps, &MapOptions::default())?;
            let data_view = Arc::new(data_view);
            let (meta_view, _) =
                Mapping::shared(node.meta_fd(), 0, node.meta_map.len(), ps, &MapOptions::default())?;
            let opts = MapOptions {
                noreserve: true,
                ..MapOptions::default()
            };
            let (inbox_map, inbox_user) = Mapping::anonymous((size * SLOT_STRIDE).div_ceil(ps) * ps, &opts)?;
            let inbox_map = Arc::new(inbox_map);
            let data = Window::create(&world, data_view.clone())?;
            let meta = Window::create(&world, Arc::new(meta_view))?;
            let inbox = Window::create(&world, inbox_map.clone())?;
            let us = env_usize("TIERMEM_SVM_PROGRESS_US", 50);
            let hook = inbox_hook(inbox_map, inbox_user, data_view, size, ps);
            let progress = Progress::start(&world, Duration::from_micros(us as u64), hook)?;
            Some(Remote {
                _progress: progress,
                data,
                meta,
                inbox,
            })
        } else {
            None
        };
        let link = MpiLink {
            remote,
            node,
            rank,
            my_node: node_of[rank],
            node_of,
            homes: (0..npages).map(|_| AtomicU16::new(0)).collect(),
            in_mask: (0..npages).map(|_| AtomicBool::new(false)).collect(),
            heads: (0..MAX_LOCKS).map(|_| AtomicU64::new(0)).collect(),
            posted: (0..size).map(|_| AtomicU64::new(0)).collect(),
            held: (0..MAX_LOCKS).map(|_| AtomicBool::new(false)).collect(),
            changed: Mutex::new(Vec::new()),
            timeout: Duration::from_secs(env_usize("TIERMEM_SVM_TIMEOUT_S", 600) as u64),
        };
        link.set_homes(0, npages, Distribution::Block);
        world.barrier()?;
        Ok(Joined {
            job: Job {
                link: Arc::new(link),
                world,
                scratch: (0..SCRATCH_WORDS).map(|_| AtomicU64::new(0)).collect(),
                stats: Mutex::new(Vec::new()),
                blocks: Mutex::new(Vec::new()),
                runs: AtomicU64::new(0),
                _refused: refused,
            },
            heap,
            heap_user,
        })
    }

    /// This rank.
    pub(crate) fn rank(&self) -> usize {
        self.link.rank
    }

    /// Ranks in the job.
    pub(crate) fn procs(&self) -> usize {
        self.world.size()
    }

    /// Nodes the job spans.
    pub(crate) fn nodes(&self) -> usize {
        self.link.nodes()
    }

    /// The scratch words (this rank's during a run; after it, the sum over
    /// ranks).
    pub(crate) fn scratch(&self) -> &[AtomicU64] {
        &self.scratch
    }

    /// Statistics per rank, gathered at the end of the last run.
    pub(crate) fn stats(&self) -> Vec<SvmStats> {
        self.stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits until every rank arrived; an error if a rank failed or died.
    pub(crate) fn barrier(&self) -> Result<(), Error> {
        let mut p = self.world.ibarrier()?;
        let mut backoff = Backoff::new(Duration::from_micros(20));
        let (start, mut last) = (Instant::now(), Instant::now());
        loop {
            if p.test()?.is_some() {
                return Ok(());
            }
            backoff.snooze();
            if last.elapsed() > Duration::from_millis(10) {
                last = Instant::now();
                self.link.check_peers(start, &|| "waiting at a barrier".into())?;
            }
        }
    }

    /// Waits for `p` while watching the other ranks.
    fn wait(&self, mut p: Pending, what: &str) -> Result<Vec<u64>, Error> {
        let mut backoff = Backoff::new(Duration::from_micros(20));
        let (start, mut last) = (Instant::now(), Instant::now());
        loop {
            if let Some(v) = p.test()? {
                return Ok(v);
            }
            backoff.snooze();
            if last.elapsed() > Duration::from_millis(10) {
                last = Instant::now();
                self.link.check_peers(start, &|| what.to_string())?;
            }
        }
    }

    /// A barrier that carries the changes (collective): every rank's pages
    /// changed since the last barrier, with their newest versions, sorted
    /// by page.
    pub(crate) fn barrier_exchange(&self) -> Result<Vec<(usize, u64)>, Error> {
        let mine = self.link.take_changes();
        let counts = self.wait(
            self.world.iallgather(vec![mine.len() as u64])?,
            "waiting at a barrier",
        )?;
        let max = counts.iter().copied().max().unwrap_or(0) as usize;
        if max == 0 {
            return Ok(Vec::new());
        }
        let mut send = vec![u64::MAX; 2 * max];
        for (i, &(p, v)) in mine.iter().enumerate() {
            send[2 * i] = p;
            send[2 * i + 1] = v;
        }
        let all = self.wait(
            self.world.iallgather(send)?,
            "exchanging write notices at a barrier",
        )?;
        let mut ch: Vec<(u64, u64)> = all
            .chunks(2)
            .filter(|c| c[0] != u64::MAX)
            .map(|c| (c[0], c[1]))
            .collect();
        dedup_changes(&mut ch);
        Ok(ch.into_iter().map(|(p, v)| (p as usize, v)).collect())
    }

    /// Sum of `v` over ranks (collective; `what` names the call in errors).
    pub(crate) fn allreduce(&self, op: ReduceOp, v: Vec<u64>, what: &str) -> Result<Vec<u64>, Error> {
        let mut p = self.world.iallreduce(op, v)?;
        let mut backoff = Backoff::new(Duration::from_micros(20));
        let (start, mut last) = (Instant::now(), Instant::now());
        loop {
            if let Some(v) = p.test()? {
                return Ok(v);
            }
            backoff.snooze();
            if last.elapsed() > Duration::from_millis(10) {
                last = Instant::now();
                self.link
                    .check_peers(start, &|| format!("in collective {what}"))?;
            }
        }
    }

    /// Starts a run: this rank's statistics zeroed, scratch words of ranks
    /// other than 0 zeroed (so the sum after the run counts rank 0's
    /// leftovers once), every rank here.
    pub(crate) fn begin_run(&self) -> Result<(), Error> {
        let m = self.link.node.meta();
        for s in 0..meta::NSTAT {
            m.stat(self.rank(), s).store(0, Ordering::Relaxed);
        }
        // Relaxed: the barrier below orders the rest.
        m.pid(self.rank())
            .store(tiermem_sys::thread::getpid() as u64, Ordering::Relaxed);
        if self.rank() != 0 {
            for w in &self.scratch {
                w.store(0, Ordering::Relaxed);
            }
        }
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.barrier()
    }

    /// Ends a run that succeeded here: waits for every rank, gathers the
    /// statistics and sums the scratch words.
    pub(crate) fn end_run(&self) -> Result<(), Error> {
        self.barrier()?;
        let m = self.link.node.meta();
        let mine: Vec<u64> = (0..meta::NSTAT)
            .map(|s| m.stat(self.rank(), s).load(Ordering::Relaxed))
            .collect();
        let mut all = vec![0u64; meta::NSTAT * self.procs()];
        self.world.allgather(&mine, &mut all)?;
        *self.stats.lock().unwrap_or_else(|p| p.into_inner()) =
            all.chunks(meta::NSTAT).map(SvmStats::from_words).collect();
        let words: Vec<u64> = self.scratch.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        let sum = self.allreduce(ReduceOp::Sum, words, "summing the scratch words")?;
        for (w, v) in self.scratch.iter().zip(sum) {
            w.store(v, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Collective allocation of `pages` pages: every rank checks that the
    /// others ask for the same (call `call`), then takes the same first-fit
    /// range from its copy of the table and sets the pages' homes.
    pub(crate) fn malloc(
        &self,
        pages: usize,
        call: u64,
        npages: usize,
        d: Distribution,
    ) -> Result<usize, Error> {
        let key = (pages as u64) << 20 | (d == Distribution::Cyclic) as u64;
        let v = self.allreduce(
            ReduceOp::Min,
            vec![key, call, u64::MAX - key, u64::MAX - call],
            "tm_svm_malloc",
        )?;
        if v[0] != u64::MAX - v[2] || v[1] != u64::MAX - v[3] {
            return Err(Error::Usage(format!(
                "tm_svm_malloc call {call} asks for {pages} pages here, and another rank asks for a different size or distribution, or is at another call: calls must match"
            )));
        }
        let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        if blocks.len() >= super::MAX_BLOCKS {
            return Err(Error::GlobalHeapFull(format!(
                "more than {} SVM allocations",
                super::MAX_BLOCKS
            )));
        }
        blocks.sort_unstable_by_key(|b| b.first);
        let mut at = 0;
        for b in blocks.iter() {
            if b.first >= at + pages {
                break;
            }
            at = at.max(b.first + b.pages);
        }
        if at + pages > npages {
            return Err(Error::GlobalHeapFull(format!(
                "the SVM heap of {npages} pages has no free run of {pages} pages"
            )));
        }
        blocks.push(Block { first: at, pages });
        self.link.set_homes(at, pages, d);
        Ok(at)
    }

    /// Collective free of the block at page `first`: its page count, after
    /// every rank agreed on the block.
    pub(crate) fn free(&self, first: usize, ptr: usize) -> Result<usize, Error> {
        let found = {
            let blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
            blocks.iter().find(|b| b.first == first).map(|b| b.pages)
        };
        let key = found.map_or(u64::MAX, |_| first as u64);
        let v = self.allreduce(ReduceOp::Min, vec![key, u64::MAX - key], "tm_svm_free")?;
        let Some(pages) = found else {
            return Err(Error::Usage(format!(
                "tm_svm_free({ptr:#x}): not an SVM allocation"
            )));
        };
        if v[0] != u64::MAX - v[1] {
            return Err(Error::Usage(format!(
                "tm_svm_free({ptr:#x}): another rank frees a different block: calls must match"
            )));
        }
        let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        blocks.retain(|b| b.first != first);
        Ok(pages)
    }
}
