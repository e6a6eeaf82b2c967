//! In-context fault serving: a region's faults are resolved by the faulting
//! thread itself, in the router's signal handler (`UFFD_FEATURE_SIGBUS`),
//! so no thread is woken: the cheapest design on machines where a cross-CPU
//! wake-up costs ~50 us.
//!
//! A region registers its range with the [fault router](crate::fault), and
//! [`RegionCore`] is its handler: SIGBUS is a missing or write-protect fault
//! of the in-context design; SIGSEGV is a write to a run that `wp-async`
//! froze read-only for eviction, and the writer waits for the page instead
//! of crashing. [`RegionCore::resolve`] does not allocate.

use super::{Outcome, RegionCore, Server};
use crate::config::{DirtyTracking, FaultPath};
use crate::fault::{Fault, FaultHandler, PinKind, Served, Signal};
use crate::page::PageState;

impl FaultHandler for RegionCore {
    fn on_fault(&self, f: &Fault) -> Served {
        match f.signal {
            Signal::Bus => {
                if self.fault_path() != FaultPath::InContext {
                    return Served::Forward;
                }
                match self.resolve(f.addr, f.write, f.tid, Server::InContext) {
                    Outcome::Resolved => Served::Resolved,
                    Outcome::Spurious => Served::Spurious,
                    Outcome::Poisoned => Served::Forward,
                }
            }
            Signal::Segv => {
                if self.config.dirty_tracking != DirtyTracking::WpAsync {
                    return Served::Forward;
                }
                // The page is frozen for eviction: wait for it, then retry
                // (the freeze is lifted before the page state is published).
                let i = self.page_of(f.addr);
                if self.pages.load(i).state() == PageState::Busy {
                    self.wait_page(i);
                }
                Served::Spurious
            }
        }
    }

    fn pin(&self, addr: usize, len: usize, write: bool, tid: u32, kind: PinKind) -> usize {
        RegionCore::pin(self, addr, len, write, tid, kind)
    }

    fn unpin(&self, addr: usize, len: usize, kind: PinKind) {
        RegionCore::unpin(self, addr, len, kind)
    }
}
