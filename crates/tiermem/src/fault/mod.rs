//! The fault router: the one owner of SIGBUS and SIGSEGV, below every
//! feature and knowing none of them.
//!
//! A feature that serves faults in some address range (a tiered region, a
//! team member's view, the SVM heap, an overshadow view, a transparent
//! heap) registers the range with a [`FaultHandler`] and keeps the returned
//! [`RangeGuard`]; dropping the guard unregisters the range and returns
//! only once no handler runs on it any more.
//!
//! ```text
//!  SIGBUS / SIGSEGV (tiermem_sys::signal: installed once, chains to the
//!        |          handlers installed before)
//!        v
//!  dispatch: poisoned page? -> forward
//!            range table lookup (lock-free, O(log n), no allocation)
//!            none, or a parent's range after fork() -> forward
//!        |
//!        v
//!  handler.on_fault(fault) -> Resolved | Spurious | Forward
//!            repeat guard: a million Spurious in a row at one address -> forward
//! ```
//!
//! The table is [`tiermem_sys::ranges::RangeTable`]: a sorted array
//! published RCU-style, so a faulting thread never takes a lock that the
//! code it interrupted (or a registering thread) could hold.

pub mod vfork;

use crate::Error;
use std::any::Any;
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Once, OnceLock};
use std::time::Duration;
use tiermem_sys::ranges::RangeTable;
use tiermem_sys::signal::{self, Disposition, FaultSignalKind, SignalFault, BUS_MCEERR_AR};

pub(crate) use tiermem_sys::signal::FaultSignalKind as Signal;

/// One fault, as the router hands it to a handler.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fault {
    /// SIGBUS (userfaultfd in SIGBUS mode) or SIGSEGV (a protected page).
    pub(crate) signal: Signal,
    /// The faulting address.
    pub(crate) addr: usize,
    /// The access was a write.
    pub(crate) write: bool,
    /// Kernel id of the faulting thread.
    pub(crate) tid: u32,
}

/// What a handler did with a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Served {
    /// Something changed (a page was filled, unprotected, switched): the
    /// access is restarted.
    Resolved,
    /// Nothing had to change (another thread resolved it first): the access
    /// is restarted, but a thread that keeps faulting at one address with
    /// nothing changing is handed on rather than left looping.
    Spurious,
    /// Not served: the signal goes to the handler installed before
    /// tiermem's, or takes its default action (e.g. a poisoned page).
    Forward,
}

/// A feature's fault service for the ranges it registers. Runs in a signal
/// handler: no allocation, no lock that code touching the range may hold.
///
/// Handlers are `Any`, so that address-based calls (`tm_prefetch(addr)`)
/// can find the feature behind a range ([`lookup`] and a downcast).
pub(crate) trait FaultHandler: Any + Send + Sync {
    /// Serves a fault in a range registered with this handler.
    fn on_fault(&self, fault: &Fault) -> Served;

    /// Prepares `[addr, addr + len)` (inside this handler's range) for a
    /// system call that writes it (`write`) or reads it in kernel mode,
    /// where no fault signal can be served, and holds it so until
    /// [`FaultHandler::unpin`]. Returns how many bytes from `addr` are
    /// ready. The default, 0, means "cannot": the call then runs as it is.
    /// Runs in a signal handler.
    fn pin(&self, _addr: usize, _len: usize, _write: bool, _tid: u32, _kind: PinKind) -> usize {
        0
    }

    /// Releases what [`FaultHandler::pin`] returned for `[addr, addr + len)`.
    fn unpin(&self, _addr: usize, _len: usize, _kind: PinKind) {}
}

/// What a pin is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PinKind {
    /// A system call's access, for as long as the call: at most half of a
    /// region's budget at once (faults must always find victims).
    Call,
    /// An asynchronous I/O's (Linux AIO), until its completion is reaped:
    /// any size, the budget grows by it meanwhile.
    Io,
}

/// A registration: the handler, and the fork generation that made it.
struct Slot {
    handler: Arc<dyn FaultHandler>,
    generation: u64,
}

static TABLE: RangeTable<Arc<Slot>> = RangeTable::new();
static INSTALL: Once = Once::new();

/// Consecutive spurious faults at one address before the router gives up
/// and forwards (a page whose state and pte disagree would otherwise loop
/// forever).
const REPEAT_LIMIT: u32 = 1_000_000;

thread_local! {
    /// This thread's kernel id, cached (gettid is a system call).
    static TID: Cell<u32> = const { Cell::new(0) };
    /// Consecutive spurious faults: (address, count).
    static REPEATS: Cell<(usize, u32)> = const { Cell::new((0, 0)) };
}

/// Threads pinning, or holding pins, for their system calls: a thread id
/// per pin set (0: free), read by fills on any thread (the handler-thread
/// path serves them on another). Full, a set goes unlisted: its fills wait
/// as for anyone's pins.
static PIN_HOLDERS: [AtomicU32; 32] = [const { AtomicU32::new(0) }; 32];

/// Whether thread `tid` is pinning or holds pages pinned for a system call:
/// its own pins, which a fill for it that finds every other page spared
/// would wait for in vain (a bounce buffer's copy faults in what its pins
/// could not cover, with them held).
pub(crate) fn holds_call_pins(tid: u32) -> bool {
    PIN_HOLDERS.iter().any(|h| h.load(Ordering::Relaxed) == tid)
}

/// Lists `tid` in [`PIN_HOLDERS`]; false when it is full.
fn list_pin_holder(tid: u32) -> bool {
    PIN_HOLDERS.iter().any(|h| {
        h.compare_exchange(0, tid, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    })
}

/// Takes one listing of `tid` off [`PIN_HOLDERS`].
fn unlist_pin_holder(tid: u32) {
    if let Some(h) = PIN_HOLDERS.iter().find(|h| h.load(Ordering::Relaxed) == tid) {
        h.store(0, Ordering::Relaxed);
    }
}

/// Keeps a range registered; dropping it unregisters the range and waits
/// until no handler runs on it.
pub(crate) struct RangeGuard {
    slot: Arc<Slot>,
}

impl std::fmt::Debug for RangeGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeGuard").finish_non_exhaustive()
    }
}

impl Drop for RangeGuard {
    fn drop(&mut self) {
        if self.slot.generation != fork_generation() {
            // A forked child's copy: the parent's table entry is ignored
            // here and pruned by the next registration; no handler of ours
            // can be running on it.
            return;
        }
        // Handlers run inside the table's read-side section, so once the
        // removal's grace period is over none runs on the range.
        TABLE.remove(|_, _, s| Arc::ptr_eq(s, &self.slot));
    }
}

/// Registers `[start, start + len)` with `handler`, installs the signal
/// handlers (once) and refuses io_uring in the process (once: see
/// `kernel_access::uring`). Fails if the range overlaps one registered in
/// this process.
pub(crate) fn register(
    start: usize,
    len: usize,
    handler: Arc<dyn FaultHandler>,
) -> Result<RangeGuard, Error> {
    install()?;
    crate::kernel_access::refuse_io_uring();
    let generation = fork_generation();
    // Ranges copied from a parent by fork() are not ours.
    let stale = TABLE.remove(|_, _, s| s.generation != generation);
    drop(stale);
    let slot = Arc::new(Slot { handler, generation });
    let end = start
        .checked_add(len)
        .ok_or_else(|| Error::Usage(format!("fault range {start:#x}+{len} wraps around")))?;
    TABLE
        .insert(start, end, slot.clone())
        .map_err(|e| Error::Usage(format!("fault range {start:#x}..{end:#x}: {e}")))?;
    Ok(RangeGuard { slot })
}

/// The handler of type `H` registered for `addr` in this process, if any
/// (not for use in a signal handler: the clone may outlive the
/// registration, and dropping it may free the handler).
pub(crate) fn lookup<H: FaultHandler>(addr: usize) -> Option<Arc<H>> {
    let generation = fork_generation();
    let h: Arc<dyn Any + Send + Sync> = TABLE.read(addr, |e| {
        e.filter(|e| e.value.generation == generation)
            .map(|e| e.value.handler.clone())
    })?;
    h.downcast().ok()
}

/// Whether `addr` lies in a range that the parent registered before this
/// process was forked from it (until the child registers a range of its
/// own, which drops the parent's entries).
pub(crate) fn registered_by_parent(addr: usize) -> bool {
    let generation = fork_generation();
    TABLE.read(addr, |e| e.is_some_and(|e| e.value.generation != generation))
}

/// Where the first registered range that meets `[addr, addr + len)`
/// starts (at or below `addr` when `addr` lies in it): this process's, or
/// after a fork its parent's (the child's copy may be tiered memory too,
/// and treating it as such costs only a copy).
pub(crate) fn first_registered_in(addr: usize, len: usize) -> Option<usize> {
    let end = addr.saturating_add(len.max(1));
    TABLE.read_from(addr, |e| e.filter(|e| e.start < end).map(|e| e.start))
}

/// Pages held for one kernel-mode access: up to a few registered ranges
/// the buffer crosses (no allocation: this runs in the SIGSYS handler).
pub(crate) struct KernelPins {
    segments: [(usize, usize, Option<Arc<Slot>>); 4],
    /// Pins the owner's lender holds for a `vfork` child ([`vfork`]).
    loan: Option<vfork::Loan>,
    /// Bytes from the buffer's start that are ready for the kernel.
    pub(crate) ready: usize,
    kind: PinKind,
    /// Listed in [`PIN_HOLDERS`].
    listed: bool,
}

impl Drop for KernelPins {
    fn drop(&mut self) {
        for (addr, len, slot) in &mut self.segments {
            if let Some(s) = slot.take() {
                s.handler.unpin(*addr, *len, self.kind);
            }
        }
        if self.listed {
            unlist_pin_holder(tid());
        }
    }
}

/// Prepares `[addr, addr + len)` for a system call that writes it
/// (`write`) or reads it: the parts in registered ranges are pinned by
/// their handlers. `ready` says how much of the buffer, from its start, the
/// call may use: all of it, or less when a handler could not pin more.
/// Memory outside registered ranges is plain memory and always ready.
pub(crate) fn pin_for_kernel(addr: usize, len: usize, write: bool) -> KernelPins {
    pin(addr, len, write, PinKind::Call)
}

/// [`pin_for_kernel`] for an asynchronous I/O: the pins last until the
/// value drops, which may be long after the call ([`PinKind::Io`]).
pub(crate) fn pin_for_io(addr: usize, len: usize, write: bool) -> KernelPins {
    pin(addr, len, write, PinKind::Io)
}

fn pin(addr: usize, len: usize, write: bool, kind: PinKind) -> KernelPins {
    const NONE: (usize, usize, Option<Arc<Slot>>) = (0, 0, None);
    let mut pins = KernelPins {
        segments: [NONE, NONE, NONE, NONE],
        loan: None,
        ready: 0,
        kind,
        listed: false,
    };
    // A vfork child borrows the pins from the owner's lender (for its
    // calls: it starts no I/O that outlives it).
    if kind == PinKind::Call && vfork::lending() && first_registered_in(addr, len).is_some() {
        if let Some(loan) = vfork::borrow(addr, len, write) {
            pins.ready = loan.ready;
            pins.loan = Some(loan);
            return pins;
        }
    }
    let end = addr.saturating_add(len);
    let generation = fork_generation();
    let mut at = addr;
    // Listed while it pins too: the fills of its later pages find its
    // earlier ones pinned. A call's pins are dropped on the thread that
    // took them (in its trap); an I/O's may end on another.
    pins.listed = kind == PinKind::Call && list_pin_holder(tid());
    for seg in 0..pins.segments.len() {
        if at >= end {
            break;
        }
        // The range containing `at`, or the next one up: the plain memory
        // before it needs nothing.
        let found = TABLE.read_from(at, |e| e.map(|e| (e.start, e.end, e.value.clone())));
        let Some((start, range_end, slot)) =
            found.filter(|(s, _, sl)| *s < end && sl.generation == generation)
        else {
            at = end;
            break;
        };
        at = at.max(start);
        let want = end.min(range_end) - at;
        let got = slot.handler.pin(at, want, write, tid(), kind);
        pins.segments[seg] = (at, got, Some(slot));
        at += got;
        if got < want {
            break;
        }
    }
    pins.ready = at.min(end) - addr;
    if pins.listed && pins.segments.iter().all(|s| s.1 == 0) {
        // Nothing pinned: nothing of its own to wait for.
        unlist_pin_holder(tid());
        pins.listed = false;
    }
    pins
}

/// Serves a fault at `addr` on the calling thread's behalf, as if it had
/// taken it: the lender's way in for a `vfork` child's fault where nothing
/// could be pinned ([`vfork`]).
pub(crate) fn serve_here(addr: usize, write: bool) {
    let fault = Fault {
        signal: Signal::Bus,
        addr,
        write,
        tid: tid(),
    };
    let generation = fork_generation();
    TABLE.read(addr, |e| {
        e.filter(|e| e.value.generation == generation)
            .map(|e| e.value.handler.on_fault(&fault))
    });
}

/// A number that changes in a `fork()`ed child: state stamped with another
/// generation was copied from the parent and is not this process's.
pub(crate) fn fork_generation() -> u64 {
    tiermem_sys::thread::fork_generation()
}

fn install() -> Result<(), Error> {
    let mut result = Ok(());
    INSTALL.call_once(|| {
        tiermem_sys::thread::at_fork(
            Some(before_fork),
            Some(after_fork_in_parent),
            Some(after_fork_in_child),
        );
        // SIGBUS runs on the faulting thread's stack (a fault that evicts
        // needs more than an alternate stack may have); SIGSEGV on the
        // alternate stack if the thread has one, because a stack overflow
        // raises it too (Rust's overflow report chains behind us).
        result = signal::install(FaultSignalKind::Bus, dispatch, false)
            .and_then(|()| signal::install(FaultSignalKind::Segv, dispatch, true))
            .map_err(|errno| Error::Sys {
                what: "installing the SIGBUS/SIGSEGV handlers",
                errno,
            });
    });
    result?;
    if !signal::installed(FaultSignalKind::Bus) || !signal::installed(FaultSignalKind::Segv) {
        return Err(Error::Usage(
            "tiermem's SIGBUS/SIGSEGV handlers could not be installed earlier in this process".into(),
        ));
    }
    Ok(())
}

extern "C" fn before_fork() {
    TABLE.before_fork();
}

extern "C" fn after_fork_in_parent() {
    TABLE.after_fork_in_parent();
}

extern "C" fn after_fork_in_child() {
    TABLE.after_fork_in_child();
}

fn tid() -> u32 {
    TID.with(|t| {
        let v = t.get();
        if v != 0 {
            return v;
        }
        let v = tiermem_sys::thread::gettid();
        t.set(v);
        v
    })
}

/// Counts a spurious fault at `addr`; true once the limit is passed.
fn repeated(addr: usize) -> bool {
    REPEATS.with(|r| {
        let (a, n) = r.get();
        let n = if a == addr { n + 1 } else { 1 };
        r.set((addr, n));
        n > REPEAT_LIMIT
    })
}

/// What runs once before a fault on tiered memory that cannot be served
/// ends the process.
static LAST_WORDS: OnceLock<fn()> = OnceLock::new();
/// 0: not run yet; 1: running; 2: done.
static LAST_WORDS_STATE: AtomicU8 = AtomicU8::new(0);
/// How long the last words may take before the process is killed.
const LAST_WORDS_LIMIT: Duration = Duration::from_secs(10);

/// Registers `f` to run once, on the faulting thread, before a SIGBUS on a
/// tiered page that could not be served (a page poisoned by a failed read,
/// a full far store) takes the default action and ends the process: not
/// when the program has its own SIGBUS handler. Transparent mode writes
/// its report and summary there.
///
/// `f` runs in a signal handler and is not held to async-signal safety:
/// it is a best effort from a dying process. The interrupted code may hold
/// a lock `f` needs (the C library's allocator or stdio, for instance), so
/// a timer kills the process (SIGKILL) if `f` has not returned within 10 s:
/// it never hangs. Other threads that die meanwhile wait for it. The
/// first registration stays.
pub fn set_last_words(f: fn()) {
    let _ = LAST_WORDS.set(f);
}

/// Runs the last words if a SIGBUS is about to end the process.
fn before_death(kind: FaultSignalKind) {
    let Some(f) = LAST_WORDS.get() else { return };
    // A vfork child's death is not the process's.
    if kind != FaultSignalKind::Bus
        || !signal::chained_is_default(kind)
        || tiermem_sys::thread::in_vfork_child()
    {
        return;
    }
    if LAST_WORDS_STATE
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // Another thread is saying them: the process ends once it is done
        // (or its timer fires).
        while LAST_WORDS_STATE.load(Ordering::Acquire) == 1 {
            tiermem_sys::thread::sleep(Duration::from_millis(1));
        }
        return;
    }
    let _timer = tiermem_sys::process::KillTimer::arm(LAST_WORDS_LIMIT);
    f();
    LAST_WORDS_STATE.store(2, Ordering::Release);
}

/// Whether `addr` lies in a range registered by this process.
fn ours(addr: usize) -> bool {
    let generation = fork_generation();
    TABLE.read(addr, |e| e.is_some_and(|e| e.value.generation == generation))
}

/// The signal callback for both signals.
fn dispatch(f: &SignalFault) -> Disposition {
    if f.kind == FaultSignalKind::Bus && f.code == BUS_MCEERR_AR {
        // A poisoned page (tiermem's marker or real hardware poison): the
        // access fails.
        if ours(f.addr) {
            before_death(f.kind);
        }
        return Disposition::Forward;
    }
    // A vfork child has the owner's lender serve it ([`vfork`]): its
    // descriptors are not the engine's.
    if f.kind == FaultSignalKind::Bus
        && vfork::lending()
        && ours(f.addr)
        && vfork::serve_fault(f.addr, f.write)
    {
        return Disposition::Retry;
    }
    let fault = Fault {
        signal: f.kind,
        addr: f.addr,
        write: f.write,
        tid: tid(),
    };
    let generation = fork_generation();
    // The handler runs inside the table's read-side section: no reference
    // count to take and drop per fault, and an unregistration's grace
    // period waits for handlers running on the range.
    let served = TABLE.read(f.addr, |e| {
        e.filter(|e| e.value.generation == generation)
            .map(|e| e.value.handler.on_fault(&fault))
    });
    match served {
        Some(Served::Resolved) => {
            REPEATS.with(|r| r.set((0, 0)));
            Disposition::Retry
        }
        Some(Served::Spurious) if !repeated(f.addr) => Disposition::Retry,
        Some(_) => {
            // A tiered page that could not be served (poisoned).
            before_death(f.kind);
            Disposition::Forward
        }
        None => Disposition::Forward,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    use std::time::Duration;
    use tiermem_sys::mm::{MapOptions, Mapping, Protection, UserAccess};

    struct Counting(AtomicUsize);

    impl FaultHandler for Counting {
        fn on_fault(&self, _: &Fault) -> Served {
            self.0.fetch_add(1, Ordering::Relaxed);
            Served::Forward
        }
    }

    #[test]
    fn register_lookup_unregister() {
        let h = Arc::new(Counting(AtomicUsize::new(0)));
        // Addresses no mapping uses: the router only stores them.
        let base = 0x7e00_0000_0000usize;
        let g = register(base, 4096, h.clone()).unwrap();
        let found = lookup::<Counting>(base + 4095).expect("registered");
        assert!(lookup::<Counting>(base + 4096).is_none());
        assert!(lookup::<crate::engine::RegionCore>(base).is_none(), "wrong type");
        let e = register(base + 2048, 4096, h.clone()).unwrap_err();
        assert!(e.to_string().contains("overlaps"), "{e}");
        drop(found);
        drop(g);
        assert!(lookup::<Counting>(base).is_none());
        let _g = register(base + 2048, 4096, h).unwrap();
    }

    /// A page protected `PROT_NONE`: the handler opens it (SIGSEGV,
    /// Resolved), counts the fault, and can be told to dawdle so that a
    /// racing unregistration must wait for it.
    struct Gate {
        map: Mapping,
        user: UserAccess,
        faults: AtomicU64,
        running: AtomicBool,
        dawdle: AtomicBool,
    }

    impl Gate {
        fn new() -> Arc<Gate> {
            let (map, user) = Mapping::anonymous(4096, &MapOptions::default()).unwrap();
            map.protect(0, 4096, Protection::None).unwrap();
            Arc::new(Gate {
                map,
                user,
                faults: AtomicU64::new(0),
                running: AtomicBool::new(false),
                dawdle: AtomicBool::new(false),
            })
        }
        fn close(&self) {
            self.map.protect(0, 4096, Protection::None).unwrap();
        }
        fn touch(&self) -> u64 {
            self.map.user_atomics(&self.user)[0].load(Ordering::Relaxed)
        }
    }

    impl FaultHandler for Gate {
        fn on_fault(&self, f: &Fault) -> Served {
            assert_eq!(f.signal, Signal::Segv);
            self.running.store(true, Ordering::SeqCst);
            if self.dawdle.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
            self.faults.fetch_add(1, Ordering::Relaxed);
            let ok = self.map.protect(0, 4096, Protection::ReadWrite).is_ok();
            self.running.store(false, Ordering::SeqCst);
            if ok {
                Served::Resolved
            } else {
                Served::Forward
            }
        }
    }

    /// Threads fault continuously on their own ranges while another thread
    /// registers, faults on and unregisters ranges as fast as it can: every
    /// fault reaches its handler exactly once (none lost, no deadlock), and
    /// an unregistration returns only once its handler has finished.
    #[test]
    fn registration_churn_while_faulting() {
        let faulters: Vec<(Arc<Gate>, RangeGuard)> = (0..2)
            .map(|_| {
                let g = Gate::new();
                let guard = register(g.map.addr(), 4096, g.clone()).unwrap();
                (g, guard)
            })
            .collect();
        let stop = AtomicBool::new(false);
        let rounds = 3000u64;
        std::thread::scope(|s| {
            for (g, _) in &faulters {
                let stop = &stop;
                s.spawn(move || {
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        g.close();
                        g.touch();
                        n += 1;
                    }
                    assert_eq!(g.faults.load(Ordering::Relaxed), n, "a fault was lost or doubled");
                });
            }
            for k in 0..rounds {
                let g = Gate::new();
                let guard = register(g.map.addr(), 4096, g.clone()).unwrap();
                g.touch();
                assert_eq!(g.faults.load(Ordering::Relaxed), 1);
                if k % 500 == 0 {
                    // An unregistration racing a slow handler waits for it.
                    g.close();
                    g.dawdle.store(true, Ordering::Relaxed);
                    let g2 = g.clone();
                    let t = std::thread::spawn(move || g2.touch());
                    while !g.running.load(Ordering::SeqCst) {
                        std::thread::yield_now();
                    }
                    drop(guard);
                    assert!(
                        !g.running.load(Ordering::SeqCst),
                        "unregistered under a running handler"
                    );
                    t.join().unwrap();
                } else {
                    drop(guard);
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        for (g, _) in &faulters {
            assert!(g.faults.load(Ordering::Relaxed) > 0);
        }
    }
}
