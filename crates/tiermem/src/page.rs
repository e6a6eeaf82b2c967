//! The per-page state table.
//!
//! One `AtomicU32` per page of a region holds its [`PageState`], a
//! `FAR_VALID` bit and a `WAITERS` bit. The state word is also the page's
//! lock: whoever moves a page into [`PageState::Busy`] (a compare-and-swap)
//! owns it until it stores the next state, and only the owner issues
//! userfaultfd calls or far-store I/O for the page.
//!
//! Invariants:
//! - `Untouched`: never written (or discarded); reads as zeros; no pte; the far
//!   store holds nothing for it.
//! - `Far`: no pte; the far store holds the data (`FAR_VALID` always set).
//! - `Clean`: pte present and write-protected (async mode: WP at install),
//!   contents equal the far copy if `FAR_VALID`, else all zeros.
//! - `Dirty`: pte present and writable; contents may differ from the far copy.
//! - `Busy`: owned by one thread in transition; waiters sleep on the word.
//! - `Poisoned`: the data could not be read back (far-store error) or no
//!   near memory could be freed; every access raises SIGBUS. `FAR_VALID`
//!   tells whether the far copy still exists.
//!
//! A page is counted against the near budget while `Clean`, `Dirty`, or
//! `Busy` on behalf of a fill that reserved a slot.
//!
//! Pins: a resident page can carry a pin count (bits 8..15) while a system
//! call reads or writes it in kernel mode (see `crate::kernel_access`). A
//! pinned page cannot be locked `Busy`, so it is neither evicted nor
//! discarded until the last pin goes; pins are only taken on `Clean` or
//! `Dirty` pages, so a `Busy` page never has one.

use crossbeam_utils::Backoff;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tiermem_sys::thread::{futex_wait, futex_wake};

/// Where a page is, as seen by the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum PageState {
    /// Never written: reads as zeros, nothing stored anywhere.
    Untouched = 0,
    /// Only in the far store.
    Far = 1,
    /// In near memory, unmodified since filled (write-protected).
    Clean = 2,
    /// In near memory, modified.
    Dirty = 3,
    /// In transition, owned by one thread.
    Busy = 4,
    /// Unreadable: accesses raise SIGBUS.
    Poisoned = 5,
}

const STATE_MASK: u32 = 0b111;
/// The far store holds this page's data.
pub(crate) const FAR_VALID: u32 = 1 << 3;
const WAITERS: u32 = 1 << 4;
/// Filled by the prefetcher and not yet known to be used.
const PREFETCHED: u32 = 1 << 5;
/// A `Dirty` page that may in fact be unmodified: it was installed
/// writable for a read (by `UFFDIO_MOVE`, which cannot install pages
/// write-protected). Eviction compares it with its far copy, once writers
/// are locked out, and writes it back only if it differs.
const VERIFY: u32 = 1 << 6;
/// One pin (a kernel-mode access in flight); up to 255 at once.
const PIN_ONE: u32 = 1 << 8;
const PIN_MASK: u32 = 0xff << 8;
/// The bits a `PageWord` carries (all but WAITERS).
const WORD_BITS: u32 = STATE_MASK | FAR_VALID | PREFETCHED | VERIFY | PIN_MASK;

/// A state plus its `FAR_VALID` bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PageWord(u32);

impl PageWord {
    pub(crate) const fn new(state: PageState, far_valid: bool) -> PageWord {
        PageWord(state as u32 | if far_valid { FAR_VALID } else { 0 })
    }
    pub(crate) fn state(self) -> PageState {
        match self.0 & STATE_MASK {
            0 => PageState::Untouched,
            1 => PageState::Far,
            2 => PageState::Clean,
            3 => PageState::Dirty,
            4 => PageState::Busy,
            _ => PageState::Poisoned,
        }
    }
    pub(crate) fn far_valid(self) -> bool {
        self.0 & FAR_VALID != 0
    }
    /// Whether the page was filled by the prefetcher and not yet used.
    pub(crate) fn prefetched(self) -> bool {
        self.0 & PREFETCHED != 0
    }
    /// The same word, marked as filled by the prefetcher.
    pub(crate) fn with_prefetched(self) -> PageWord {
        PageWord(self.0 | PREFETCHED)
    }
    /// Whether a `Dirty` page should be compared with its far copy before
    /// it is written back.
    pub(crate) fn verify(self) -> bool {
        self.0 & VERIFY != 0
    }
    /// The same word, marked for verification.
    pub(crate) fn with_verify(self) -> PageWord {
        PageWord(self.0 | VERIFY)
    }
    /// A page installed writable without being written (THP blocks, moved
    /// frames, writable clusters, the rewrite hint): `Dirty` until eviction
    /// finds it unchanged (VERIFY).
    pub(crate) fn dirty_unverified(far_valid: bool) -> PageWord {
        PageWord::new(PageState::Dirty, far_valid).with_verify()
    }
    /// Whether a kernel-mode access holds the page in place.
    pub(crate) fn pinned(self) -> bool {
        self.0 & PIN_MASK != 0
    }
    fn bits(self) -> u32 {
        self.0 & WORD_BITS
    }
}

/// Quiescing page transitions for `fork()` (regions whose child copies
/// their data, `OnFork::Copy`): the fork handler closes the gate and waits
/// until no thread holds a page of such a region `Busy`, so the child sees
/// every page either resident (its pte is copied) or in the far store
/// (which the child reads before the parent moves on).
struct ForkGate {
    closed: AtomicBool,
    /// Threads holding at least one gated page `Busy`.
    holders: AtomicUsize,
}

static GATE: ForkGate = ForkGate {
    closed: AtomicBool::new(false),
    holders: AtomicUsize::new(0),
};

thread_local! {
    /// Gated pages this thread holds `Busy` (nested locks, e.g. victims
    /// locked during a fill, pass the gate: the thread is counted).
    static HELD: Cell<u32> = const { Cell::new(0) };
}

/// Closes the gate and waits until no thread is inside a gated transition
/// (the fork's prepare handler).
pub(crate) fn close_fork_gate() {
    // SeqCst with the holders' SeqCst: either a new holder sees the gate
    // closed, or we see it counted.
    GATE.closed.store(true, Ordering::SeqCst);
    let backoff = Backoff::new();
    while GATE.holders.load(Ordering::SeqCst) != 0 {
        backoff.snooze();
        if backoff.is_completed() {
            tiermem_sys::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// Opens the gate again (parent and child after the fork).
pub(crate) fn open_fork_gate() {
    GATE.closed.store(false, Ordering::SeqCst);
}

/// In the child: no thread of the parent exists here.
pub(crate) fn reset_fork_gate_in_child() {
    GATE.holders.store(0, Ordering::SeqCst);
    HELD.with(|h| h.set(0));
    open_fork_gate();
}

/// Page words per bit of `PageTable::used`: one 4 KiB page of words.
const CHUNK: usize = 1024;

/// The state words of every page of a region.
pub(crate) struct PageTable {
    /// Zero-mapped: `Untouched` is 0, so the words of pages never touched
    /// cost no memory (metadata grows with use, not with the range).
    words: tiermem_sys::zeroed::ZeroedArray<AtomicU32>,
    /// One bit per `CHUNK` words: set once a page of the chunk was locked
    /// (left `Untouched`), so that walks over the table (fork, census)
    /// visit the chunks in use instead of every page of the range.
    used: tiermem_sys::zeroed::ZeroedArray<AtomicU64>,
    /// Transitions pass the fork gate (`OnFork::Copy` regions).
    gated: AtomicBool,
}

/// How long a waiter spins and yields before it sleeps on the futex: a
/// cross-CPU wake-up costs ~50 us here, most transitions take ~5 us.
const SLEEP_CHECK: Duration = Duration::from_millis(50);

impl PageTable {
    /// A table of `pages` untouched pages (panics if it cannot be mapped).
    #[cfg(test)]
    pub(crate) fn new(pages: usize) -> PageTable {
        PageTable::try_new(pages).expect("mapping a page table")
    }

    /// A table of `pages` untouched pages: address space only, O(1).
    pub(crate) fn try_new(pages: usize) -> Result<PageTable, tiermem_sys::mm::MmError> {
        const { assert!(PageState::Untouched as u32 == 0) };
        Ok(PageTable {
            words: tiermem_sys::zeroed::ZeroedArray::new(pages)?,
            used: tiermem_sys::zeroed::ZeroedArray::new(pages.div_ceil(CHUNK).div_ceil(64))?,
            gated: AtomicBool::new(false),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.words.len()
    }

    /// Makes transitions of this table pass the fork gate.
    pub(crate) fn set_gated(&self) {
        self.gated.store(true, Ordering::Relaxed);
    }

    fn gated(&self) -> bool {
        self.gated.load(Ordering::Relaxed)
    }

    /// Counts this thread in the gate after taking page `i` (was `seen`);
    /// false (page handed back) if a fork is being prepared.
    fn enter_gate(&self, i: usize, seen: PageWord) -> bool {
        if HELD.with(|h| h.get()) > 0 {
            HELD.with(|h| h.set(h.get() + 1));
            return true;
        }
        GATE.holders.fetch_add(1, Ordering::SeqCst);
        if GATE.closed.load(Ordering::SeqCst) {
            GATE.holders.fetch_sub(1, Ordering::SeqCst);
            self.unlock_ungated(i, seen);
            let backoff = Backoff::new();
            while GATE.closed.load(Ordering::SeqCst) {
                backoff.snooze();
                if backoff.is_completed() {
                    tiermem_sys::thread::sleep(Duration::from_micros(50));
                }
            }
            return false;
        }
        HELD.with(|h| h.set(1));
        true
    }

    fn leave_gate(&self) {
        let left = HELD.with(|h| {
            let n = h.get().saturating_sub(1);
            h.set(n);
            n
        });
        if left == 0 {
            GATE.holders.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The current word of page `i`.
    pub(crate) fn load(&self, i: usize) -> PageWord {
        // Acquire: pairs with the Release in `unlock`, so the data the last
        // owner wrote (far store, pte) is visible to whoever sees the state.
        PageWord(self.words[i].load(Ordering::Acquire) & WORD_BITS)
    }

    /// Takes page `i` if its word is still `seen` and it is not pinned. On
    /// success the page is `Busy` and owned by the caller.
    pub(crate) fn try_lock(&self, i: usize, seen: PageWord) -> bool {
        if seen.pinned() {
            return false;
        }
        let busy = PageState::Busy as u32 | (seen.0 & (FAR_VALID | PREFETCHED | VERIFY));
        // Acquire on success: the owner sees everything the previous owner
        // published. Relaxed on failure: the caller reloads.
        let locked = self.words[i]
            .compare_exchange(seen.bits(), busy, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        if locked {
            self.mark_used(i);
        }
        locked && (!self.gated() || self.enter_gate(i, seen))
    }

    /// Notes that page `i`'s chunk is in use (every state but `Untouched`
    /// is reached through `try_lock`). One relaxed load once it is set.
    fn mark_used(&self, i: usize) {
        let c = i / CHUNK;
        let (w, bit) = (&self.used[c / 64], 1u64 << (c % 64));
        if w.load(Ordering::Relaxed) & bit == 0 {
            w.fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// The pages of the chunks in use (a superset of the pages that are not
    /// `Untouched`), in order.
    fn used_pages(&self) -> impl Iterator<Item = usize> + '_ {
        let len = self.words.len();
        self.used.iter().enumerate().flat_map(move |(w, bits)| {
            let bits = bits.load(Ordering::Relaxed);
            (0..64).filter(move |b| bits & (1 << b) != 0).flat_map(move |b| {
                let c = w * 64 + b;
                c * CHUNK..((c + 1) * CHUNK).min(len)
            })
        })
    }

    /// Publishes the page's next state and wakes its waiters.
    pub(crate) fn unlock(&self, i: usize, next: PageWord) {
        self.unlock_ungated(i, next);
        if self.gated() {
            self.leave_gate();
        }
    }

    fn unlock_ungated(&self, i: usize, next: PageWord) {
        debug_assert_ne!(next.state(), PageState::Busy);
        // Release: everything the owner did before (copies, ioctls) happens
        // before any thread that observes the new state.
        let old = self.words[i].swap(next.bits(), Ordering::Release);
        debug_assert_eq!(
            old & STATE_MASK,
            PageState::Busy as u32,
            "unlock of a page not Busy"
        );
        if old & WAITERS != 0 {
            futex_wake(&self.words[i], i32::MAX);
        }
    }

    /// Adds a pin to resident page `i` if its word is still `seen` (`Clean`
    /// or `Dirty`, fewer than 255 pins).
    pub(crate) fn try_pin(&self, i: usize, seen: PageWord) -> bool {
        if !matches!(seen.state(), PageState::Clean | PageState::Dirty) || seen.0 & PIN_MASK == PIN_MASK {
            return false;
        }
        // Acquire: the pinner sees the data the filler published (the
        // kernel is about to read or write it). Relaxed on failure.
        self.words[i]
            .compare_exchange(
                seen.bits(),
                seen.bits() + PIN_ONE,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Drops one pin of page `i`.
    pub(crate) fn unpin(&self, i: usize) {
        // Release: the kernel's writes into the page happen before an
        // evictor that sees the pin gone locks and writes the page back.
        let old = self.words[i].fetch_sub(PIN_ONE, Ordering::Release);
        debug_assert!(old & PIN_MASK != 0, "unpin of a page without pins");
    }

    /// Waits until page `i` is not `Busy` and returns its word. Spins and
    /// yields first, then sleeps on the futex.
    pub(crate) fn wait_not_busy(&self, i: usize) -> PageWord {
        let backoff = Backoff::new();
        loop {
            let w = self.load(i);
            if w.state() != PageState::Busy {
                return w;
            }
            if !backoff.is_completed() {
                backoff.snooze();
                continue;
            }
            let raw = self.words[i].load(Ordering::Acquire);
            if raw & STATE_MASK != PageState::Busy as u32 {
                continue;
            }
            // Announce ourselves, then sleep while the word is unchanged. The
            // timeout only bounds the cost of a missed wake-up; it is not
            // needed for correctness because unlock() swaps and checks WAITERS.
            if raw & WAITERS != 0
                || self.words[i]
                    .compare_exchange(raw, raw | WAITERS, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                futex_wait(&self.words[i], raw | WAITERS, Some(SLEEP_CHECK));
            }
        }
    }

    /// Clears the PREFETCHED bit of page `i`; true if it was set. Used when
    /// a stream passes the page (so it was used).
    pub(crate) fn take_prefetched(&self, i: usize) -> bool {
        // Relaxed: the bit is statistics; racing with the owner of a Busy
        // page is harmless (it sets the whole word when it unlocks).
        self.words[i].fetch_and(!PREFETCHED, Ordering::Relaxed) & PREFETCHED != 0
    }

    #[cfg(test)]
    pub(crate) fn mark_prefetched(&self, i: usize) {
        self.words[i].fetch_or(PREFETCHED, Ordering::Relaxed);
    }

    /// Pages whose data is only in the far store.
    pub(crate) fn far_pages(&self) -> impl Iterator<Item = usize> + '_ {
        self.used_pages()
            .filter(|&i| self.load(i).state() == PageState::Far)
    }

    /// Counts pages per state (for statistics and tests).
    /// Whether any page is in transition.
    pub(crate) fn any_busy(&self) -> bool {
        self.used_pages().any(|i| self.load(i).state() == PageState::Busy)
    }

    pub(crate) fn census(&self) -> [usize; 6] {
        let mut c = [0; 6];
        let mut seen = 0;
        for i in self.used_pages() {
            c[self.load(i).state() as usize] += 1;
            seen += 1;
        }
        c[PageState::Untouched as usize] += self.words.len() - seen;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn lock_unlock_and_far_valid() {
        let t = PageTable::new(4);
        let w = t.load(1);
        assert_eq!(w.state(), PageState::Untouched);
        assert!(t.try_lock(1, w));
        assert!(!t.try_lock(1, w), "a Busy page cannot be taken twice");
        assert_eq!(t.load(1).state(), PageState::Busy);
        t.unlock(1, PageWord::new(PageState::Far, true));
        let w = t.load(1);
        assert_eq!(w.state(), PageState::Far);
        assert!(w.far_valid());
        assert!(t.try_lock(1, w));
        assert!(t.load(1).far_valid(), "Busy keeps FAR_VALID");
        t.unlock(1, PageWord::new(PageState::Dirty, false));
        assert_eq!(t.census(), [3, 0, 0, 1, 0, 0]);
    }

    #[test]
    fn pinned_pages_cannot_be_locked() {
        let t = PageTable::new(2);
        assert!(!t.try_pin(0, t.load(0)), "only resident pages are pinned");
        assert!(t.try_lock(0, t.load(0)));
        t.unlock(0, PageWord::new(PageState::Dirty, true));
        let w = t.load(0);
        assert!(t.try_pin(0, w));
        let w = t.load(0);
        assert!(w.pinned() && w.state() == PageState::Dirty && w.far_valid());
        assert!(!t.try_lock(0, w), "a pinned page cannot become Busy");
        assert!(t.try_pin(0, w), "pins nest");
        t.unpin(0);
        t.unpin(0);
        let w = t.load(0);
        assert!(!w.pinned());
        assert!(t.try_lock(0, w));
    }

    #[test]
    fn waiters_sleep_until_unlock() {
        let t = Arc::new(PageTable::new(1));
        assert!(t.try_lock(0, t.load(0)));
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let t = t.clone();
                std::thread::spawn(move || t.wait_not_busy(0))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(30));
        t.unlock(0, PageWord::new(PageState::Clean, true));
        for w in waiters {
            assert_eq!(w.join().unwrap(), PageWord::new(PageState::Clean, true));
        }
    }
}
