//! `eventfd` and `poll`, for waking and stopping handler threads.

use crate::errno::{check, check_size, Errno};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A non-blocking eventfd.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// Creates an eventfd (close-on-exec, non-blocking).
    pub fn new() -> Result<EventFd, Errno> {
        // SAFETY: eventfd takes plain integer arguments.
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        // SAFETY: fresh descriptor owned by us.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EventFd { fd })
    }

    /// Makes the descriptor readable.
    pub fn notify(&self) -> Result<(), Errno> {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64.
        check_size(unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) }).map(|_| ())
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Waits up to `timeout_ms` (-1: forever) until one of `fds` is readable.
/// Returns a bit mask of the readable ones (bit i for `fds[i]`, at most 64).
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout_ms: i32) -> Result<u64, Errno> {
    assert!(fds.len() <= 8);
    let mut p = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; 8];
    for (slot, fd) in p.iter_mut().zip(fds) {
        slot.fd = fd.as_raw_fd();
        slot.events = libc::POLLIN;
    }
    // SAFETY: p holds fds.len() initialised pollfds.
    let r = unsafe { libc::poll(p.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    match check(r) {
        Ok(_) => Ok(p[..fds.len()]
            .iter()
            .enumerate()
            .filter(|(_, q)| q.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0)
            .fold(0, |m, (i, _)| m | 1 << i)),
        Err(e) if e.is_interrupted() => Ok(0),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_makes_it_readable() {
        let a = EventFd::new().unwrap();
        let b = EventFd::new().unwrap();
        assert_eq!(poll_readable(&[a.as_fd(), b.as_fd()], 0).unwrap(), 0);
        b.notify().unwrap();
        assert_eq!(poll_readable(&[a.as_fd(), b.as_fd()], 1000).unwrap(), 0b10);
    }
}
