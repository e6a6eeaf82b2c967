//! Forward progress on small budgets: an instruction that needs several
//! pages resident at once (up to four on x86: a `movs` between two
//! page-crossing operands, `MIN_NEAR_PAGES`) must get them all, however
//! the policy orders its victims and whatever else fills the budget.
//!
//! Two rules, both about which victims an eviction may take:
//!
//! - **Own pages.** A thread that evicts to make room for its fault spares
//!   the pages its last [`OWN`] demand faults filled: with the page it is
//!   faulting on they make four, and a budget of at least four always has
//!   another page to give (or one that is only busy for a moment). One
//!   thread's instruction therefore completes after at most four fills:
//!   none of them evicts another. Without this, a batch (64 pages by
//!   default, all of a small budget) or a policy that evicts the newest
//!   pages first (scan) took the instruction's first pages out while its
//!   last one came in, and the thread faulted on them forever.
//! - **A turn.** Threads do not spare each other's pages, so two threads
//!   that each need four pages of a budget of four can still take them
//!   from each other forever. A thread that faults again on a page it
//!   filled itself a moment ago (the sign of that) takes the budget's one
//!   turn if nobody holds it: while it holds it, every other evictor
//!   (threads, movers) spares its last [`TURN`] fills as well. The turn
//!   ends at its holder's next fill after those (its instruction got what
//!   it needed, or needs pages filled by others: it takes the turn again
//!   the next time it repeats itself), and another thread that finds
//!   nothing it may evict ends a turn held for longer than [`HOLD`]
//!   (a holder that stopped faulting, or was preempted). So threads take
//!   turns; none waits for long.
//!
//! Another process's thread (a `process_vm_readv`/`writev` pinning this
//! process's pages, see `pinned`) has no instruction to complete: its
//! fills are not recorded and its evictions spare only the turn.
//!
//! Explicit evictions (`evict_all`, `evict_range`, advice) spare nothing:
//! the caller asked for them. Pages pinned by a kernel-mode access are a
//! separate matter (the budget's pin allowance, half of it, `pin`); a
//! fault that finds the rest all spared while pins are held stops sparing
//! after a moment (`reserve_slot`): the calls may be its own thread's.
//!
//! The state belongs to the near budget, not to a region: regions that
//! share a budget (the transparent heap and the static arrays `tiermem run`
//! takes over) are one pool of four pages to an instruction that reads one
//! and writes the other, so a thread's last fills, and the turn, count
//! across all of them. Pages are named by their address (a key unique
//! across the regions of a process). With a state per region, each region
//! spared the thread's last three fills of its own: six of four pages, and
//! the fault found nothing to evict.
//!
//! Per-thread state lives in [`SLOTS`] cache-line slots hashed by thread
//! id, plain atomics and no lock (the fault path may run in a signal
//! handler); threads that share a slot only blur each other's protection.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A thread's own demand fills spared by its own evictions: with the page
/// it faults on, an x86 instruction's four (`MIN_NEAR_PAGES - 1`).
const OWN: usize = crate::config::MIN_NEAR_PAGES - 1;
/// Fills remembered per thread, and spared for the holder of the turn.
const TURN: usize = crate::config::MIN_NEAR_PAGES;
/// Slots threads hash into.
const SLOTS: usize = 64;
/// How long a turn is safe from other threads that cannot evict anything:
/// a few fills take tens of microseconds, a time slice a few milliseconds.
const HOLD: Duration = Duration::from_millis(10);

/// One thread's recent demand fills (page addresses; 0: empty).
#[repr(align(64))]
#[derive(Default)]
struct Slot {
    tid: AtomicU32,
    next: AtomicU32,
    fills: [AtomicUsize; TURN],
}

impl Slot {
    /// Whether `page` is among the last `n` fills recorded.
    fn has(&self, page: PageKey, n: usize) -> bool {
        let next = self.next.load(Ordering::Relaxed) as usize;
        (1..=n).any(|back| self.fills[(next + TURN - back) % TURN].load(Ordering::Relaxed) == page.0)
    }
}

/// A page of any region of a budget: its address (never 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PageKey(pub(crate) usize);

/// Which pages an eviction must spare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Keep {
    /// None: an explicit eviction.
    Nothing,
    /// The pages of the thread holding the turn (a mover, a catch-up fill).
    Turn,
    /// Those, unless this thread holds the turn, and this thread's own
    /// last fills (it evicts to make room for its fault).
    Thread(u32),
}

/// Forward-progress state of one near budget (its regions' pages).
pub(crate) struct Progress {
    slots: [Slot; SLOTS],
    /// Thread holding the turn (0: nobody).
    holder: AtomicU32,
    /// When it took it (ns since `epoch`).
    taken_at: AtomicU64,
    /// Its demand fills since it took it.
    turn_fills: AtomicU32,
    epoch: Instant,
    /// Turns taken (statistics for tests).
    pub(crate) turns: AtomicU64,
}

impl Progress {
    pub(crate) fn new() -> Progress {
        Progress {
            slots: std::array::from_fn(|_| Slot::default()),
            holder: AtomicU32::new(0),
            taken_at: AtomicU64::new(0),
            turn_fills: AtomicU32::new(0),
            epoch: Instant::now(),
            turns: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The slot of `tid`, if it holds that thread's fills.
    fn slot(&self, tid: u32) -> Option<&Slot> {
        let s = &self.slots[tid as usize % SLOTS];
        (s.tid.load(Ordering::Relaxed) == tid).then_some(s)
    }

    /// Records a demand fill of `page` for thread `tid`; a fill of a page
    /// the thread filled among its last ones asks for the turn.
    pub(crate) fn filled(&self, tid: u32, page: PageKey) {
        let s = &self.slots[tid as usize % SLOTS];
        let owner = s.tid.load(Ordering::Relaxed);
        if owner != tid {
            // Another thread's slot: take it over unless that thread holds
            // the turn (its fills are what the turn spares).
            if owner != 0 && owner == self.holder.load(Ordering::Relaxed) {
                return;
            }
            s.tid.store(tid, Ordering::Relaxed);
            s.fills.iter().for_each(|f| f.store(0, Ordering::Relaxed));
        }
        let again = s.has(page, TURN);
        // Load and store: a slot is one thread's (sharers only blur it).
        let k = s.next.load(Ordering::Relaxed);
        s.fills[k as usize % TURN].store(page.0, Ordering::Relaxed);
        s.next.store(k.wrapping_add(1), Ordering::Relaxed);
        let holder = self.holder.load(Ordering::Relaxed);
        if holder == tid {
            if self.turn_fills.fetch_add(1, Ordering::Relaxed) as usize + 1 > TURN {
                // A fill past those the turn was for: done with it.
                let _ = self
                    .holder
                    .compare_exchange(tid, 0, Ordering::Relaxed, Ordering::Relaxed);
            }
            return;
        }
        if again && (holder == 0 || self.expired()) {
            self.take(holder, tid);
        }
    }

    fn expired(&self) -> bool {
        self.now().saturating_sub(self.taken_at.load(Ordering::Relaxed)) > HOLD.as_nanos() as u64
    }

    fn take(&self, from: u32, tid: u32) {
        // The time first: a thread that sees the new holder must not judge
        // it by the old holder's time.
        self.taken_at.store(self.now(), Ordering::Relaxed);
        self.turn_fills.store(1, Ordering::Relaxed);
        if self
            .holder
            .compare_exchange(from, tid, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.turns.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether an eviction that spares `keep` must leave `page` alone.
    pub(crate) fn spares(&self, keep: Keep, page: PageKey) -> bool {
        let me = match keep {
            Keep::Nothing => return false,
            Keep::Turn => 0,
            Keep::Thread(tid) => {
                if self.slot(tid).is_some_and(|s| s.has(page, OWN)) {
                    return true;
                }
                tid
            }
        };
        let holder = self.holder.load(Ordering::Relaxed);
        holder != 0 && holder != me && self.slot(holder).is_some_and(|s| s.has(page, TURN))
    }

    /// Whether another thread than `tid` holds a turn that is still safe
    /// from it.
    pub(crate) fn turn_of_other(&self, tid: u32) -> bool {
        let holder = self.holder.load(Ordering::Relaxed);
        holder != 0 && holder != tid && !self.expired()
    }

    /// An evictor sparing `keep` found nothing it may evict: ends a turn
    /// held for longer than [`HOLD`] by another thread.
    pub(crate) fn stuck(&self, keep: Keep) {
        let holder = self.holder.load(Ordering::Relaxed);
        if holder != 0 && keep != Keep::Thread(holder) && self.expired() {
            let _ = self
                .holder
                .compare_exchange(holder, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(page: usize) -> PageKey {
        PageKey(0x7000_0000 + page * 4096)
    }

    #[test]
    fn a_thread_spares_its_last_three_fills() {
        let p = Progress::new();
        for page in [10, 11, 12, 13] {
            p.filled(7, key(page));
        }
        let me = Keep::Thread(7);
        assert!(!p.spares(me, key(10)), "the fourth fill back is fair game");
        assert!([11, 12, 13].iter().all(|&x| p.spares(me, key(x))));
        assert!(!p.spares(Keep::Thread(8), key(13)), "others do not spare them");
        assert!(!p.spares(Keep::Turn, key(13)));
        assert!(!p.spares(Keep::Nothing, key(13)));
    }

    #[test]
    fn a_repeated_fill_takes_the_turn_until_four_more() {
        let p = Progress::new();
        for page in [1, 2, 3, 1] {
            p.filled(5, key(page));
        }
        assert_eq!(p.holder.load(Ordering::Relaxed), 5, "page 1 again: the turn");
        // Others (and movers) spare the holder's last four fills.
        assert!([2, 3, 1].iter().all(|&x| p.spares(Keep::Thread(6), key(x))));
        assert!(p.spares(Keep::Turn, key(3)));
        assert!(!p.spares(Keep::Nothing, key(3)));
        // Another thread repeating itself waits for the turn.
        for page in [40, 41, 40] {
            p.filled(6, key(page));
        }
        assert_eq!(p.holder.load(Ordering::Relaxed), 5);
        for page in [4, 8, 9] {
            p.filled(5, key(page));
        }
        assert_eq!(p.holder.load(Ordering::Relaxed), 5, "four fills in the turn");
        p.filled(5, key(20));
        assert_eq!(p.holder.load(Ordering::Relaxed), 0, "the fifth ends it");
        assert!(!p.spares(Keep::Thread(6), key(20)));
    }

    #[test]
    fn a_stuck_evictor_ends_an_old_turn() {
        let p = Progress::new();
        for page in [1, 1] {
            p.filled(5, key(page));
        }
        assert_eq!(p.holder.load(Ordering::Relaxed), 5);
        p.stuck(Keep::Thread(6));
        assert_eq!(p.holder.load(Ordering::Relaxed), 5, "not held for long yet");
        p.taken_at.store(0, Ordering::Relaxed);
        std::thread::sleep(HOLD + Duration::from_millis(1));
        p.stuck(Keep::Thread(5));
        assert_eq!(p.holder.load(Ordering::Relaxed), 5, "its holder never ends it");
        p.stuck(Keep::Thread(6));
        assert_eq!(p.holder.load(Ordering::Relaxed), 0);
    }
}
