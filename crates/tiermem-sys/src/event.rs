//! `eventfd` and `poll`, for waking and stopping handler threads; a pipe
//! for one process to wait for a word from another (fork).

use crate::errno::{check, check_size, Errno};
use crate::fdguard::GuardedFd;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A non-blocking eventfd.
#[derive(Debug)]
pub struct EventFd {
    fd: GuardedFd,
}

impl EventFd {
    /// Creates an eventfd (close-on-exec, non-blocking).
    pub fn new() -> Result<EventFd, Errno> {
        // SAFETY: eventfd takes plain integer arguments.
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        // SAFETY: fresh descriptor owned by us.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EventFd {
            fd: GuardedFd::new(fd),
        })
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

/// A pipe carrying one byte from one process to another (a forked child
/// telling its parent it is done), both ends close-on-exec.
#[derive(Debug)]
pub struct Pipe {
    read: Option<GuardedFd>,
    write: Option<GuardedFd>,
}

impl Pipe {
    /// A new pipe.
    pub fn new_cloexec() -> Result<Pipe, Errno> {
        let (r, w) = crate::splice::pipe_fds()?;
        Ok(Pipe {
            read: Some(GuardedFd::new(r)),
            write: Some(GuardedFd::new(w)),
        })
    }

    /// A pipe with no ends: every operation is a no-op.
    pub fn closed() -> Pipe {
        Pipe {
            read: None,
            write: None,
        }
    }

    /// Closes the write end (the waiting side, so that the other side's
    /// death reads as end of file).
    pub fn close_write(&mut self) {
        self.write = None;
    }

    /// Blocks until a byte arrives or every write end is closed.
    pub fn wait_readable_byte(&self) {
        let Some(r) = &self.read else { return };
        let mut b = 0u8;
        loop {
            // SAFETY: reads one byte into a local; a raw system call (not
            // a cancellation point: this runs in a fork handler).
            let n = unsafe { libc::syscall(libc::SYS_read, r.as_raw_fd(), &mut b as *mut u8, 1) };
            if n >= 0 || Errno::last().raw() != libc::EINTR {
                return;
            }
        }
    }

    /// Writes one byte (best effort).
    pub fn write_byte(&self) {
        let Some(w) = &self.write else { return };
        let b = 1u8;
        // SAFETY: writes one byte from a local.
        unsafe { libc::syscall(libc::SYS_write, w.as_raw_fd(), &b as *const u8, 1) };
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
    // Untrapped: see `crate::splice::pipe_fds`.
    let r = unsafe {
        crate::trampoline::untrapped_syscall(
            libc::SYS_poll,
            [
                p.as_mut_ptr() as u64,
                fds.len() as u64,
                timeout_ms as i64 as u64,
                0,
                0,
                0,
            ],
        ) as libc::c_int
    };
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
