//! Classic fault serving, as in UMap: handler threads poll the userfaultfd,
//! read fault messages in batches, and resolve them while the faulting
//! threads sleep in the kernel. Serves kernel-mode accesses (a `read(2)`
//! into a non-resident page) that the in-context design cannot, at the
//! price of a thread wake-up per fault (~10 us on the same CPU, ~50-120 us
//! across CPUs on our machines).
//!
//! Shutdown: the region writes the stop eventfd, each thread sees it at its
//! next poll, finishes the batch in hand and exits; the region joins them
//! before unregistering the range. A panic in a handler aborts the process:
//! a dead handler would leave every faulting thread asleep forever.

use super::{RegionCore, Server};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::thread::JoinHandle;
use tiermem_sys::event::{poll_readable, EventFd};
use tiermem_sys::uffd::FaultEvent;

/// The handler threads of one region.
pub(crate) struct HandlerThreads {
    stop: Arc<EventFd>,
    threads: Vec<JoinHandle<()>>,
}

impl HandlerThreads {
    /// Starts `n` threads, pinned round robin to `cpus` if given.
    pub(crate) fn start(
        core: &Arc<RegionCore>,
        n: usize,
        cpus: &[usize],
    ) -> Result<HandlerThreads, crate::Error> {
        let stop = Arc::new(EventFd::new().map_err(|errno| crate::Error::Sys {
            what: "eventfd for handler threads",
            errno,
        })?);
        let mut threads = Vec::with_capacity(n);
        for k in 0..n {
            let core = core.clone();
            let thread_stop = stop.clone();
            let t = super::spawn_runtime_thread(
                "tiermem-fault",
                k,
                cpus,
                "faulting threads would hang",
                move || serve(&core, &thread_stop),
            );
            match t {
                Ok(t) => threads.push(t),
                Err(e) => {
                    HandlerThreads { stop, threads }.stop();
                    return Err(e.into());
                }
            }
        }
        Ok(HandlerThreads { stop, threads })
    }

    /// Stops and joins the threads.
    pub(crate) fn stop(self) {
        let _ = self.stop.notify();
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn serve(core: &RegionCore, stop: &EventFd) {
    let mut events = [FaultEvent::default(); 64];
    loop {
        let ready = match poll_readable(&[core.uffd().as_fd(), stop.as_fd()], 1000) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("tiermem: poll on userfaultfd failed: {e}");
                return;
            }
        };
        if ready & 0b10 != 0 {
            return;
        }
        if ready & 0b01 == 0 {
            continue;
        }
        let n = match core.uffd().read_faults(&mut events) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("tiermem: reading userfaultfd failed: {e}");
                return;
            }
        };
        // Serve in address order and once per page: several threads may
        // wait on one page, and COPY wakes them all.
        let page_mask = !(core.page_bytes() - 1);
        let batch = &mut events[..n];
        batch.sort_unstable_by_key(|e| (e.address & page_mask, !e.write));
        let mut last = usize::MAX;
        for e in batch.iter() {
            let page = e.address & page_mask;
            if page == last && !e.wp {
                continue;
            }
            last = page;
            if !core.mapping.contains(e.address) {
                core.resolve_outside(e.address);
                continue;
            }
            core.resolve(e.address, e.write, e.tid, Server::HandlerThread);
        }
    }
}
