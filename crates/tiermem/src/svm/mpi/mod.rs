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
use crate::party::Backoff;
use crate::team::SCRATCH_WORDS;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tiermem_sys::mm::{MapOptions, Mapping, MemRange, UserAccess};
use tiermem_sys::mpi::{Comm, MpiError, Pending, Progress, ReduceOp, Window};

mod job;
mod link;

pub(crate) use job::Job;

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
    match tiermem_sys::env::var(name) {
        None => default,
        Some(v) => match v.trim().parse::<usize>() {
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
