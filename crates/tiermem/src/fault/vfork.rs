//! Tiered memory for `vfork` children: a thread of the owner serves them.
//!
//! A `vfork` child (Python's `subprocess` starts every program that way)
//! runs on its parent's memory, tiered pages included, until it `exec`s,
//! but with a descriptor table of its own, which it may have emptied
//! (`subprocess` closes every descriptor above 2, then reads its list of
//! descriptors to keep from the Python heap). On the in-context path it
//! would serve its own faults and pins with the owner's descriptors: the
//! far store's read fails (`EBADF`) and the page is poisoned for the owner
//! too, or worse, a descriptor the child opened since is used in its
//! place. So the child asks instead: the owner's *lender* thread pins the
//! pages, in the owner's context, and the child uses them.
//!
//! ```text
//!  vfork child                         lender thread (owner)
//!  fault / kernel access / exec copy
//!    claim a slot, fill it, ASKED ---> pin the range (fills, evicts as any
//!    wait for PINNED            <--- thread of the owner would)
//!    retry the access / copy
//!    transient: RELEASE         --->  unpin, free the slot
//!    fault: held until the vfork returns in the parent (or a second
//!           passes, or the child holds more than HOLDS pages)
//! ```
//!
//! The slots are statics, so shared with the child; the two meet through
//! private futexes, which need no descriptor (their key is the address
//! space). The lender starts at a process's first `vfork`, so a program
//! that never `vfork`s has no extra thread. Only `vfork`s through the C
//! library's `vfork` are known (`tiermem-interpose` interposes it, in the
//! preload library and in `libtiermem`); a child of a raw `clone` serves
//! itself, as before.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tiermem_sys::thread::{futex_wait, futex_wake, getpid};

/// Requests in flight at once (children of concurrent `vfork`s).
const SLOTS: usize = 16;
/// Pages a child's faults keep pinned: enough for one instruction that
/// touches several pages (a copy whose source and target cross pages).
const HOLDS: usize = 2;
/// A fault's pin is let go after this even if the `vfork` has not
/// returned (a raw `vfork` never says so): the child faults again.
const HOLD_LIMIT: Duration = Duration::from_secs(1);
/// How long a child waits for a free slot before it serves itself.
const CLAIM_LIMIT: Duration = Duration::from_secs(1);

const IDLE: u32 = 0;
const ASKED: u32 = 1;
const PINNED: u32 = 2;
const RELEASE: u32 = 3;

struct Slot {
    /// The child using the slot (its pid); 0: free.
    child: AtomicU32,
    state: AtomicU32,
    addr: AtomicUsize,
    len: AtomicUsize,
    write: AtomicBool,
    /// A fault's pin, held after the child returns from its handler.
    held: AtomicBool,
    /// Bytes from `addr` pinned (0: none; the lender touched the page).
    ready: AtomicUsize,
    /// When the hold was asked for, in asks: the oldest goes first.
    order: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE_SLOT: Slot = Slot {
    child: AtomicU32::new(0),
    state: AtomicU32::new(IDLE),
    addr: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    write: AtomicBool::new(false),
    held: AtomicBool::new(false),
    ready: AtomicUsize::new(0),
    order: AtomicU64::new(0),
};

static SLOT: [Slot; SLOTS] = [FREE_SLOT; SLOTS];
/// Bumped by every request; the lender sleeps on it.
static BELL: AtomicU32 = AtomicU32::new(0);
static ASKS: AtomicU64 = AtomicU64::new(0);
/// Faults and loans served (counted by the children, in shared memory).
static FAULTS_SERVED: AtomicU64 = AtomicU64::new(0);
static LOANS_SERVED: AtomicU64 = AtomicU64::new(0);

/// The process whose lender runs (0: none).
static LENDER_OF: AtomicU32 = AtomicU32::new(0);
static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Faults of this process's `vfork` children served by its lender, and
/// buffers it pinned for their system calls and `exec` strings.
pub fn served() -> (u64, u64) {
    (
        FAULTS_SERVED.load(Ordering::Relaxed),
        LOANS_SERVED.load(Ordering::Relaxed),
    )
}

/// Registers the lender's hooks with the interposed `vfork` (by the first
/// region of a process).
pub(crate) fn register() {
    tiermem_sys::thread::on_vfork(started, returned);
}

/// Runs in the parent just before a `vfork`: in a process with tiered
/// memory, starts its lender (once per process; a `fork`ed child that
/// `vfork`s starts its own).
fn started() {
    let me = getpid();
    if tiermem_sys::thread::owner_pid() != me || LENDER_OF.load(Ordering::Acquire) == me {
        return;
    }
    let _g = STARTING.lock().unwrap_or_else(|p| p.into_inner());
    if LENDER_OF.load(Ordering::Acquire) == me {
        return;
    }
    // A forked child's slots are copies of its parent's: start afresh.
    for s in &SLOT {
        s.state.store(IDLE, Ordering::Relaxed);
        s.child.store(0, Ordering::Relaxed);
    }
    FAULTS_SERVED.store(0, Ordering::Relaxed);
    LOANS_SERVED.store(0, Ordering::Relaxed);
    let spawned = std::thread::Builder::new()
        .name("tiermem-vfork".into())
        .stack_size(128 << 10)
        .spawn(lend);
    match spawned {
        Ok(_) => LENDER_OF.store(me, Ordering::Release),
        // Its children then serve their own faults, as without a lender.
        Err(e) => eprintln!("tiermem: cannot start the thread that serves vfork children: {e}"),
    }
}

/// Runs in the parent when a `vfork` returned `pid`: the child has
/// `exec`ed or ended, its pins go.
fn returned(pid: i32) {
    if pid <= 0 || LENDER_OF.load(Ordering::Acquire) != getpid() {
        return;
    }
    let pid = pid as u32;
    let deadline = Instant::now() + CLAIM_LIMIT;
    for (k, s) in SLOT.iter().enumerate() {
        if s.child.load(Ordering::Acquire) != pid {
            continue;
        }
        loop {
            match s.state.load(Ordering::Acquire) {
                // Claimed, never asked: the child ended in between.
                IDLE => {
                    let _ = s
                        .child
                        .compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed);
                    break;
                }
                ASKED if Instant::now() < deadline => {
                    futex_wait(&s.state, ASKED, Some(Duration::from_millis(10)));
                }
                PINNED => {
                    release(k);
                    break;
                }
                _ => break,
            }
        }
    }
}

/// Whether the caller is a `vfork` child whose faults, pins and `exec`
/// copies go to the owner's lender.
pub fn lending() -> bool {
    tiermem_sys::thread::in_vfork_child()
        && LENDER_OF.load(Ordering::Acquire) == tiermem_sys::thread::owner_pid()
}

/// In a `vfork` child ([`lending`]): has the lender bring in the page at
/// `addr` (writable for a `write`) and keep it until the `vfork` returns.
/// False when no slot came free: the child serves the fault itself.
pub(crate) fn serve_fault(addr: usize, write: bool) -> bool {
    let me = getpid();
    // The oldest of this child's holds goes when it would pass HOLDS.
    let mut held = 0;
    let mut oldest: Option<(u64, usize)> = None;
    for (k, s) in SLOT.iter().enumerate() {
        if s.child.load(Ordering::Acquire) == me
            && s.held.load(Ordering::Relaxed)
            && s.state.load(Ordering::Acquire) == PINNED
        {
            held += 1;
            let o = s.order.load(Ordering::Relaxed);
            if oldest.is_none_or(|(b, _)| o < b) {
                oldest = Some((o, k));
            }
        }
    }
    if held >= HOLDS {
        if let Some((_, k)) = oldest {
            release(k);
        }
    }
    let Some(k) = ask(me, addr, 1, write, true) else {
        return false;
    };
    FAULTS_SERVED.fetch_add(1, Ordering::Relaxed);
    if SLOT[k].ready.load(Ordering::Acquire) == 0 {
        // Nothing pinned (the lender touched the page instead): the slot
        // is not needed any more.
        release(k);
    }
    true
}

/// A range pinned by the lender for a `vfork` child; let go on drop.
pub(crate) struct Loan {
    slot: usize,
    /// Bytes from the start pinned (0: none, the range is as it is).
    pub(crate) ready: usize,
}

impl Drop for Loan {
    fn drop(&mut self) {
        release(self.slot);
    }
}

/// In a `vfork` child ([`lending`]): has the lender pin `[addr, addr +
/// len)` for a kernel access that writes it (`write`) or reads it, until
/// the loan drops. None when no slot came free.
pub(crate) fn borrow(addr: usize, len: usize, write: bool) -> Option<Loan> {
    let slot = ask(getpid(), addr, len, write, false)?;
    LOANS_SERVED.fetch_add(1, Ordering::Relaxed);
    Some(Loan {
        slot,
        ready: SLOT[slot].ready.load(Ordering::Acquire),
    })
}

/// Public form of `borrow` for the preload library's copies of `exec`
/// strings: runs `f` on the pinned part of `[addr, addr + len)` (address,
/// length; at least the rest of the first page, read as it is where
/// nothing could be pinned). None where the caller is not a `vfork` child
/// served by a lender, or no slot came free.
pub fn with_borrowed<R>(addr: usize, len: usize, f: impl FnOnce(usize, usize) -> R) -> Option<R> {
    if !lending() {
        return None;
    }
    let loan = borrow(addr, len, false)?;
    let n = if loan.ready == 0 {
        len.min(4096 - addr % 4096)
    } else {
        loan.ready
    };
    Some(f(addr, n))
}

/// Claims a slot for `child`, asks for `[addr, addr + len)` and waits
/// until it is pinned. None when no slot came free within the limit.
fn ask(child: u32, addr: usize, len: usize, write: bool, held: bool) -> Option<usize> {
    let deadline = Instant::now() + CLAIM_LIMIT;
    let k = loop {
        let free = SLOT.iter().position(|s| {
            s.child
                .compare_exchange(0, child, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        if let Some(k) = free {
            break k;
        }
        if Instant::now() > deadline {
            return None;
        }
        tiermem_sys::thread::sleep(Duration::from_micros(50));
    };
    let s = &SLOT[k];
    s.addr.store(addr, Ordering::Relaxed);
    s.len.store(len, Ordering::Relaxed);
    s.write.store(write, Ordering::Relaxed);
    s.held.store(held, Ordering::Relaxed);
    s.order
        .store(ASKS.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
    s.state.store(ASKED, Ordering::Release);
    ring();
    while s.state.load(Ordering::Acquire) == ASKED {
        futex_wait(&s.state, ASKED, None);
    }
    Some(k)
}

/// Hands slot `k` back to the lender, which unpins and frees it. A hold
/// the lender let go meanwhile (too old) may already be another child's:
/// only a slot still pinned is released.
fn release(k: usize) {
    if SLOT[k]
        .state
        .compare_exchange(PINNED, RELEASE, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
    {
        ring();
    }
}

fn ring() {
    BELL.fetch_add(1, Ordering::Release);
    futex_wake(&BELL, 1);
}

/// The lender: pins what the slots ask for, unpins what they release, and
/// lets go of holds older than [`HOLD_LIMIT`].
fn lend() {
    // It may be started with every signal blocked (Python blocks them
    // around its vfork); a fault it takes must be served.
    tiermem_sys::signal::unblock_fault_signals();
    let mut pins: [Option<super::KernelPins>; SLOTS] = std::array::from_fn(|_| None);
    let mut since = [None::<Instant>; SLOTS];
    loop {
        let bell = BELL.load(Ordering::Acquire);
        let now = Instant::now();
        for (k, s) in SLOT.iter().enumerate() {
            match s.state.load(Ordering::Acquire) {
                ASKED => {
                    let (addr, write) = (s.addr.load(Ordering::Relaxed), s.write.load(Ordering::Relaxed));
                    let pin = super::pin_for_kernel(addr, s.len.load(Ordering::Relaxed), write);
                    let ready = pin.ready;
                    if ready == 0 {
                        // Not pinnable (memory of a feature without pins,
                        // or the allowance is taken): serve it as this
                        // thread's own fault; the child retries, and asks
                        // again if the page went meanwhile.
                        drop(pin);
                        super::serve_here(addr, write);
                    } else {
                        pins[k] = Some(pin);
                        since[k] = Some(now);
                    }
                    s.ready.store(ready, Ordering::Release);
                    s.state.store(PINNED, Ordering::Release);
                    futex_wake(&s.state, i32::MAX);
                }
                RELEASE => free(k, &mut pins, &mut since),
                PINNED
                    if s.held.load(Ordering::Relaxed)
                        && since[k].is_some_and(|t| now.duration_since(t) > HOLD_LIMIT)
                        && s.state
                            .compare_exchange(PINNED, RELEASE, Ordering::AcqRel, Ordering::Relaxed)
                            .is_ok() =>
                {
                    free(k, &mut pins, &mut since);
                }
                _ => {}
            }
        }
        let holding = since.iter().any(Option::is_some);
        futex_wait(&BELL, bell, holding.then_some(HOLD_LIMIT / 4));
    }
}

fn free(k: usize, pins: &mut [Option<super::KernelPins>; SLOTS], since: &mut [Option<Instant>; SLOTS]) {
    pins[k] = None;
    since[k] = None;
    let s = &SLOT[k];
    s.state.store(IDLE, Ordering::Release);
    s.child.store(0, Ordering::Release);
    futex_wake(&s.state, i32::MAX);
}
