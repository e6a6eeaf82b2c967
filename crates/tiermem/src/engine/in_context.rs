//! In-context fault serving: the faulting thread resolves its own fault in
//! a SIGBUS handler (`UFFD_FEATURE_SIGBUS`), so no thread is woken: the
//! cheapest design on machines where a cross-CPU wake-up costs ~50 us.
//!
//! A process-wide registry maps addresses to regions for the handler. The
//! same registry serves SIGSEGV for the `wp-async` freeze: a write to a run
//! being evicted hits a read-only range, and the writer waits for the page
//! instead of crashing; and a write to an overshadow page that has not
//! switched to near memory yet copies and switches that page first.
//!
//! Async-signal safety: the handler takes the registry's read lock (only
//! region creation and destruction write it, and they never touch region
//! memory), clones an `Arc` (never the last one: a region's destructor waits
//! for in-flight handlers), and runs [`RegionCore::resolve`], which does
//! not allocate.

use super::{Outcome, RegionCore, Server};
use crate::page::PageState;
use std::cell::Cell;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tiermem_sys::signal::{self, Disposition, FaultSignalKind, SignalFault, BUS_MCEERR_AR};
use tiermem_sys::thread::{fork_generation, gettid};

static REGIONS: RwLock<Vec<Arc<RegionCore>>> = RwLock::new(Vec::new());

thread_local! {
    /// This thread's kernel id, cached (gettid is a system call).
    static TID: Cell<u32> = const { Cell::new(0) };
    /// Consecutive faults at one address that changed nothing: a guard
    /// against looping forever if a page's state and its pte disagree.
    static REPEATS: Cell<(usize, u32)> = const { Cell::new((0, 0)) };
}

const REPEAT_LIMIT: u32 = 1_000_000;

fn tid() -> u32 {
    TID.with(|t| {
        let v = t.get();
        if v != 0 {
            return v;
        }
        let v = gettid();
        t.set(v);
        v
    })
}

/// Installs the SIGBUS handler (once) that serves tiered and team regions.
pub(crate) fn install_sigbus() -> Result<(), crate::Error> {
    signal::install(FaultSignalKind::Bus, on_sigbus, false).map_err(|errno| crate::Error::Sys {
        what: "installing the SIGBUS handler",
        errno,
    })
}

/// Installs the SIGSEGV handler (once) that serves the SVM heap,
/// overshadow writes and regions frozen for eviction.
pub(crate) fn install_sigsegv() -> Result<(), crate::Error> {
    signal::install(FaultSignalKind::Segv, on_sigsegv, true).map_err(|errno| crate::Error::Sys {
        what: "installing the SIGSEGV handler",
        errno,
    })
}

/// Adds a region to the registry and installs the signal handlers (once).
pub(crate) fn register(core: Arc<RegionCore>) -> Result<(), crate::Error> {
    install_sigbus()?;
    if core.config.dirty_tracking == crate::config::DirtyTracking::WpAsync {
        install_sigsegv()?;
    }
    let mut g = REGIONS.write().unwrap_or_else(|p| p.into_inner());
    let generation = fork_generation();
    // Entries copied from a parent by fork() are not ours: drop them.
    g.retain(|c| c.generation == generation);
    g.push(core);
    Ok(())
}

/// Removes a region and waits until no handler uses it any more.
pub(crate) fn unregister(core: &Arc<RegionCore>) {
    {
        let mut g = REGIONS.write().unwrap_or_else(|p| p.into_inner());
        g.retain(|c| !Arc::ptr_eq(c, core));
    }
    // In-flight handlers hold clones; the caller's reference is the last
    // one left once they return.
    while Arc::strong_count(core) > 1 {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// The region of this process that contains `addr`, if any.
pub(crate) fn lookup(addr: usize) -> Option<Arc<RegionCore>> {
    let g = REGIONS.read().unwrap_or_else(|p| p.into_inner());
    let generation = fork_generation();
    g.iter()
        .find(|c| c.contains(addr) && c.generation == generation)
        .cloned()
}

fn repeated(addr: usize) -> bool {
    REPEATS.with(|r| {
        let (a, n) = r.get();
        let n = if a == addr { n + 1 } else { 1 };
        r.set((addr, n));
        n > REPEAT_LIMIT
    })
}

fn on_sigbus(f: &SignalFault) -> Disposition {
    if f.code == BUS_MCEERR_AR {
        // A poisoned page (ours or real hardware poison): the access fails.
        return Disposition::Forward;
    }
    let Some(core) = lookup(f.addr) else {
        return crate::team::handle_fault(f).unwrap_or(Disposition::Forward);
    };
    if core.fault_path() != crate::config::FaultPath::InContext {
        return Disposition::Forward;
    }
    if repeated(f.addr) {
        return Disposition::Forward;
    }
    match core.resolve(f.addr, f.write, tid(), Server::InContext) {
        Outcome::Resolved => Disposition::Retry,
        Outcome::Poisoned => Disposition::Forward,
    }
}

/// The process's SIGSEGV callback: an access to a page of the SVM heap
/// (see [`crate::svm`]), a write to an overshadow page that has
/// not switched yet (see [`crate::overshadow`]), or a write to a run that a
/// region froze for eviction.
pub(crate) fn on_sigsegv(f: &SignalFault) -> Disposition {
    if let Some(d) = crate::svm::protocol::serve_fault(f.addr, f.write) {
        return d;
    }
    if let Some(ok) = crate::overshadow::serve_write_fault(f.addr) {
        return if ok && !repeated(f.addr) {
            Disposition::Retry
        } else {
            Disposition::Forward
        };
    }
    let Some(core) = lookup(f.addr) else {
        return Disposition::Forward;
    };
    if core.config.dirty_tracking != crate::config::DirtyTracking::WpAsync || repeated(f.addr) {
        return Disposition::Forward;
    }
    // The page is frozen for eviction: wait for it, then retry (the freeze
    // is lifted before the page state is published).
    let i = core.page_of(f.addr);
    if core.pages.load(i).state() == PageState::Busy {
        core.wait_page(i);
    }
    Disposition::Retry
}
