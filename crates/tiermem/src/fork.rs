//! `fork()` of a process whose tiered memory its child must see: the
//! transparent heap and the static arrays it took over (`OnFork::Copy`).
//! Regions made through the API are `MADV_DONTFORK` instead (docs/fork.md).
//!
//! A child inherits the ptes of resident pages (copy-on-write), but not
//! the userfaultfd registration, so an evicted page would read as zeros.
//! So, around every `fork` (`pthread_atfork`):
//!
//! 1. prepare (parent): close the page-transition gate and wait until no
//!    thread holds a page of such a region in transition, so that each
//!    page is resident or in the far store;
//! 2. child: copy every far page of those regions into its (now plain,
//!    untiered) memory from the far store, then tell the parent;
//! 3. parent: wait for the child's word (or its death), then reopen the
//!    gate: until then no eviction can overwrite what the child copies.
//!
//! The child therefore sees the parent's data as of the fork, in private
//! memory, and does not tier it. `fork()` through the preload library
//! refuses (ENOMEM, with a message) when the far data would not fit
//! ([`copy_bytes`]); `vfork`, `posix_spawn` and `system()` copy nothing.

use crate::engine::RegionCore;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once, Weak};
use tiermem_sys::event::Pipe;

/// Serialises registration and forks. A spin lock, not a mutex: the
/// prepare handler takes it and the parent and child handlers release it
/// (a mutex held by another thread at the fork would stay locked forever
/// in the child). The mutexes below are only taken under it, so they are
/// never held at a fork.
static LOCK: AtomicBool = AtomicBool::new(false);
/// Regions copied into children.
static REGIONS: Mutex<Vec<Weak<RegionCore>>> = Mutex::new(Vec::new());
/// Between prepare and the parent/child handlers: the regions, and the
/// pipe on which the child says it is done.
static FORKING: Mutex<Option<(Vec<Arc<RegionCore>>, Pipe)>> = Mutex::new(None);
static HOOKS: Once = Once::new();

fn lock() {
    let backoff = crossbeam_utils::Backoff::new();
    // Acquire: the registry as the last holder left it.
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        backoff.snooze();
    }
}

fn unlock() {
    // Release: our edits before the next holder's.
    LOCK.store(false, Ordering::Release);
}

fn guard<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Copies `core`'s data into every child this process forks from now on.
pub(crate) fn register(core: &Arc<RegionCore>) {
    HOOKS.call_once(|| {
        tiermem_sys::thread::at_fork(Some(prepare), Some(in_parent), Some(in_child));
    });
    core.pages.set_gated();
    // Forks that run no fork handlers are made to run ours.
    crate::kernel_access::guard(core.config.kernel_access);
    lock();
    {
        let mut g = guard(&REGIONS);
        g.retain(|w| w.strong_count() > 0);
        g.push(Arc::downgrade(core));
    }
    unlock();
}

/// The registered regions this process made. A forked child's copies of
/// its parent's regions are plain memory that the child owns: copying the
/// far pages of those into a grandchild would overwrite what the child
/// wrote with the parent's old data from the far store the two share.
/// Call with `LOCK` held.
fn own_regions() -> Vec<Arc<RegionCore>> {
    let here = crate::fault::fork_generation();
    guard(&REGIONS)
        .iter()
        .filter_map(Weak::upgrade)
        .filter(|c| c.generation == here)
        .collect()
}

/// Bytes a child would copy from far stores if this process forked now.
pub fn copy_bytes() -> u64 {
    lock();
    let regions = own_regions();
    unlock();
    regions
        .iter()
        .map(|c| c.pages.far_pages().count() as u64 * c.page_bytes() as u64)
        .sum()
}

extern "C" fn prepare() {
    lock();
    let regions = own_regions();
    if regions.is_empty() {
        return;
    }
    for r in &regions {
        r.forked.store(true, Ordering::Relaxed);
    }
    crate::page::close_fork_gate();
    match Pipe::new_cloexec() {
        Ok(p) => *guard(&FORKING) = Some((regions, p)),
        Err(e) => {
            // Without the pipe the parent cannot wait for the child: keep
            // the gate closed only through the fork itself.
            eprintln!("tiermem: fork: no pipe ({e}); the child copies while the parent goes on");
            *guard(&FORKING) = Some((regions, Pipe::closed()));
        }
    }
}

extern "C" fn in_parent() {
    if let Some((_, mut pipe)) = guard(&FORKING).take() {
        // The child's byte, or end of file if it died: either way it no
        // longer reads our far stores.
        pipe.close_write();
        pipe.wait_readable_byte();
        crate::page::open_fork_gate();
    }
    unlock();
}

extern "C" fn in_child() {
    crate::page::reset_fork_gate_in_child();
    if let Some((regions, pipe)) = guard(&FORKING).take() {
        for c in &regions {
            if let Err(e) = c.copy_far_pages_into_child() {
                eprintln!(
                    "tiermem: fork: the child could not copy tiered memory ({e}); it exits \
                     rather than run with pages it cannot read"
                );
                tiermem_sys::process::exit_now(70);
            }
        }
        pipe.write_byte();
    }
    // What was copied is the child's own memory now, and so is everything
    // else it inherited: forget the parent's regions here.
    guard(&REGIONS).clear();
    unlock();
}

/// The process that made an object: a handle or an allocation inherited
/// by a `fork()`ed child belongs to the parent (its range is absent in the
/// child and its far store is shared with the parent), so every operation
/// on it in the child is refused with [`Error::Forked`](crate::Error::Forked)
/// and touches nothing.
///
/// ```
/// let made = tiermem::fork::ProcessBound::here();
/// assert!(made.check("tm_region_discard", "region").is_ok());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessBound {
    generation: u64,
}

impl ProcessBound {
    /// Stamps an object made now, in this process.
    pub fn here() -> ProcessBound {
        ProcessBound {
            generation: crate::fault::fork_generation(),
        }
    }

    /// Whether the object was made in this process (not inherited by fork).
    pub fn is_here(&self) -> bool {
        self.generation == crate::fault::fork_generation()
    }

    /// `Ok` in the process that made the object; in a forked child, the
    /// error naming the call (`what`) and the kind of object.
    pub fn check(&self, what: &str, object: &str) -> Result<(), crate::Error> {
        if self.is_here() {
            return Ok(());
        }
        Err(inherited(what, object))
    }
}

/// The error for `what` called in a forked child on the parent's `object`.
pub(crate) fn inherited(what: &str, object: &str) -> crate::Error {
    let what = if what.is_empty() {
        String::new()
    } else {
        format!("{what}: ")
    };
    crate::Error::Forked(format!(
        "{what}this {object} was made by the parent process before fork(); a forked child \
         cannot use it (its memory is not mapped here and its far store is the parent's), and \
         nothing of the parent's was touched. Create new ones in the child"
    ))
}
