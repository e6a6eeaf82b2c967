//! A pipe used as a page-reference buffer: `splice` from a shmem file takes
//! references to its pages instead of copying them.
//!
//! Team-mode eviction relies on this: splice a page of the shared region
//! into the pipe, punch it out of the file (the kernel unmaps it from every
//! process that maps it), then splice the pipe into the far store. A write
//! that lands between the first splice and the punch goes to the very page
//! the pipe holds, so it is written back, never lost; a write after the
//! punch faults and waits for the page.
//!
//! ```
//! use tiermem_sys::{memfd::Memfd, splice::Pipe};
//! let src = Memfd::create("src", false).unwrap();
//! src.set_len(4096).unwrap();
//! let dst = Memfd::create("dst", false).unwrap();
//! dst.set_len(4096).unwrap();
//! let pipe = Pipe::new(1 << 16).unwrap();
//! pipe.fill_from(&src, 0, 4096).unwrap();
//! pipe.drain_to(&dst, 0, 4096).unwrap();
//! ```

use crate::errno::{check, check_size, Errno};
use crate::fdguard::GuardedFd;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

/// An owned pipe (both ends, close-on-exec).
#[derive(Debug)]
pub struct Pipe {
    read: GuardedFd,
    write: GuardedFd,
    capacity: usize,
}

/// A transfer out of the pipe that stopped part-way: `done` bytes reached
/// the destination (in order, from the start), the rest are still queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Short {
    /// Bytes moved before the error.
    pub done: usize,
    /// The error.
    pub errno: Errno,
}

/// A new close-on-exec pipe: (read end, write end).
///
/// Untrapped (as all of tiermem's calls with pointers): the descriptors'
/// array may lie on a tiered stack, and a trapped call in fork handlers
/// (fault gate closed) or in the kernel-access trap's own handler could
/// never be served.
pub(crate) fn pipe_fds() -> Result<(OwnedFd, OwnedFd), Errno> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid 2-element out array.
    check(unsafe {
        crate::trampoline::untrapped_syscall(
            libc::SYS_pipe2,
            [fds.as_mut_ptr() as u64, libc::O_CLOEXEC as u64, 0, 0, 0, 0],
        ) as libc::c_int
    })?;
    // SAFETY: both descriptors are new and owned by us alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Pipe {
    /// Creates a pipe holding at least `capacity` bytes (`F_SETPIPE_SZ`;
    /// an unprivileged process is limited by /proc/sys/fs/pipe-max-size).
    pub fn new(capacity: usize) -> Result<Pipe, Errno> {
        let (read, write) = pipe_fds()?;
        // Guarded at once: a guarded descriptor closes through a raw system
        // call, and this runs in fault handlers, where the C library's
        // close (a cancellation point) must not run, failure or not.
        let (read, write) = (GuardedFd::new(read), GuardedFd::new(write));
        // SAFETY: fcntl on our own descriptor with an integer argument.
        let got =
            check(unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, capacity as libc::c_int) })?;
        Ok(Pipe {
            read,
            write,
            capacity: got as usize,
        })
    }

    /// Bytes the pipe holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Splices `len` bytes of `src` at `offset` into the pipe (all of them,
    /// or an error). The pipe must be empty enough.
    pub fn fill_from(&self, src: &impl AsFd, offset: u64, len: usize) -> Result<(), Errno> {
        self.splice_all(
            src.as_fd().as_raw_fd(),
            Some(offset),
            self.write.as_raw_fd(),
            None,
            len,
        )
        .map_err(|short| short.errno)
    }

    /// Splices `len` bytes out of the pipe into `dst` at `offset`. On an
    /// error (a full file) says how many reached `dst`.
    pub fn drain_to(&self, dst: &impl AsFd, offset: u64, len: usize) -> Result<(), Short> {
        self.splice_all(
            self.read.as_raw_fd(),
            None,
            dst.as_fd().as_raw_fd(),
            Some(offset),
            len,
        )
    }

    /// Reads up to `len` bytes out of the pipe into the start of `map`;
    /// returns how many (0 when the pipe is empty).
    pub fn read_into(&self, map: &crate::mm::Mapping, len: usize) -> usize {
        let len = len.min(map.len());
        let avail = self.queued();
        if avail == 0 {
            return 0;
        }
        // SAFETY: map is a live mapping of at least `len` bytes, written only
        // through this call while the caller holds it; `avail` bytes are
        // queued, so the read does not block.
        // Raw read: glibc's is a cancellation point (this runs in faults).
        let r = unsafe {
            libc::syscall(
                libc::SYS_read,
                self.read.as_raw_fd(),
                map.as_ptr(),
                len.min(avail),
            )
        };
        r.max(0) as usize
    }

    /// Takes references to the pages of `ranges` (`(offset, len)` in
    /// `map`, page-aligned) into the pipe (`vmsplice`, one call per 8
    /// ranges, without blocking): the pipe then holds the pages
    /// themselves, not copies. A write to one of them before it is
    /// unmapped is in what the pipe gives back; unmapping it does not free
    /// it while the pipe holds it. How an eviction reads dirty victims
    /// after one batched unmap instead of write-protecting each first
    /// (issue 36). Returns the bytes taken, in order: fewer than asked
    /// when the pipe is full.
    ///
    /// The pages must be present: a missing page of a userfaultfd region
    /// would fault to its handler, which may be the calling thread.
    pub fn take_pages(&self, map: &crate::mm::Mapping, ranges: &[(usize, usize)]) -> Result<usize, Errno> {
        const VEC: usize = 8;
        let mut taken = 0;
        for chunk in ranges.chunks(VEC) {
            let mut iov = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; VEC];
            let want = map.iovecs(chunk, &mut iov);
            // SAFETY: the iovecs describe mapped memory of this process,
            // which vmsplice only reads. Untrapped: the pages lie in the
            // kernel-access window, whose buffers the filter traps.
            let r = unsafe {
                crate::trampoline::untrapped_syscall(
                    libc::SYS_vmsplice,
                    [
                        self.write.as_raw_fd() as u64,
                        iov.as_ptr() as u64,
                        chunk.len() as u64,
                        libc::SPLICE_F_NONBLOCK as u64,
                        0,
                        0,
                    ],
                )
            };
            match check_size(r as isize) {
                Ok(n) => {
                    taken += n;
                    if n < want {
                        break;
                    }
                }
                Err(Errno(libc::EAGAIN)) => break,
                Err(e) if taken == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(taken)
    }

    /// Reads exactly `len` queued bytes out of the pipe into `map` at
    /// `offset` (they must be queued: the call does not wait for more).
    /// On an error says how many were read.
    pub fn read_exact_into(&self, map: &crate::mm::Mapping, offset: usize, len: usize) -> Result<(), Short> {
        map.check_range(offset, len);
        let mut done = 0;
        while done < len {
            // SAFETY: the destination lies in the mapping (checked above),
            // which the caller lets this call write. Untrapped: the
            // destination may be a far store's memory.
            let r = unsafe {
                crate::trampoline::untrapped_syscall(
                    libc::SYS_read,
                    [
                        self.read.as_raw_fd() as u64,
                        map.as_ptr().add(offset + done) as u64,
                        (len - done) as u64,
                        0,
                        0,
                        0,
                    ],
                )
            };
            match check_size(r as isize) {
                Ok(0) => {
                    return Err(Short {
                        done,
                        errno: Errno(libc::EIO),
                    })
                }
                Ok(n) => done += n,
                Err(Errno(libc::EINTR)) => continue,
                Err(errno) => return Err(Short { done, errno }),
            }
        }
        Ok(())
    }

    /// Bytes queued in the pipe (FIONREAD); 0 if the call fails.
    fn queued(&self) -> usize {
        let mut avail: libc::c_int = 0;
        // SAFETY: FIONREAD writes an int we own.
        if unsafe { libc::ioctl(self.read.as_raw_fd(), libc::FIONREAD, &mut avail) } != 0 {
            return 0;
        }
        avail.max(0) as usize
    }

    /// Throws away whatever the pipe holds (after a failed drain).
    pub fn clear(&self) {
        let mut buf = [0u8; 4096];
        loop {
            // Queued bytes first, so that the read below never blocks.
            let avail = self.queued();
            if avail == 0 {
                return;
            }
            let want = avail.min(buf.len());
            // SAFETY: buf is valid for `want` bytes; `avail` bytes are queued.
            if unsafe { libc::syscall(libc::SYS_read, self.read.as_raw_fd(), buf.as_mut_ptr(), want) } <= 0 {
                return;
            }
        }
    }

    fn splice_all(
        &self,
        from: libc::c_int,
        from_off: Option<u64>,
        to: libc::c_int,
        to_off: Option<u64>,
        len: usize,
    ) -> Result<(), Short> {
        let mut done = 0;
        while done < len {
            let mut fo = from_off.map(|o| (o + done as u64) as libc::loff_t);
            let mut tof = to_off.map(|o| (o + done as u64) as libc::loff_t);
            let fp = fo
                .as_mut()
                .map_or(std::ptr::null_mut(), |o| o as *mut libc::loff_t);
            let tp = tof
                .as_mut()
                .map_or(std::ptr::null_mut(), |o| o as *mut libc::loff_t);
            // SAFETY: both descriptors are open; the offset pointers are
            // either null (pipe side) or point to locals.
            let r = check_size(unsafe {
                // Raw: glibc's splice is a cancellation point.
                libc::syscall(
                    libc::SYS_splice,
                    from,
                    fp,
                    to,
                    tp,
                    len - done,
                    libc::SPLICE_F_MOVE,
                ) as isize
            });
            match r {
                Ok(0) => {
                    return Err(Short {
                        done,
                        errno: Errno(libc::EIO),
                    })
                }
                Ok(n) => done += n,
                Err(Errno(libc::EINTR)) => continue,
                Err(errno) => return Err(Short { done, errno }),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memfd::Memfd;
    use crate::mm::{MapOptions, Mapping};

    #[test]
    fn taken_pages_keep_writes_made_before_the_unmap() {
        let (map, _u) = Mapping::anonymous(8 * 4096, &MapOptions::default()).unwrap();
        map.fill(0, 8 * 4096, b'a');
        let pipe = Pipe::new(1 << 16).unwrap();
        let taken = pipe
            .take_pages(&map, &[(4096, 4096), (5 * 4096, 2 * 4096)])
            .unwrap();
        assert_eq!(taken, 3 * 4096);
        // After the take, before the unmap: must be in what the pipe holds.
        map.write_bytes(4096 + 7, b"B");
        map.write_bytes(6 * 4096 + 9, b"C");
        // SAFETY: the test owns the mapping's contents.
        unsafe { map.discard(4096, 4096, false) }.unwrap();
        // SAFETY: as above.
        unsafe { map.discard(5 * 4096, 2 * 4096, false) }.unwrap();
        let mut now = [1u8; 1];
        map.copy_out(4096 + 7, &mut now);
        assert_eq!(now[0], 0, "the unmapped page reads as zeros");
        let (dst, _u) = Mapping::anonymous(4 * 4096, &MapOptions::default()).unwrap();
        pipe.read_exact_into(&dst, 4096, 3 * 4096).unwrap();
        let mut got = vec![0u8; 3 * 4096];
        dst.copy_out(4096, &mut got);
        assert_eq!(got[7], b'B');
        assert_eq!(got[2 * 4096 + 9], b'C');
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, &b)| b == b'a' || i == 7 || i == 2 * 4096 + 9));
    }

    /// A file system of two pages (root only: a tmpfs mount), removed on
    /// drop.
    struct TwoPages(std::path::PathBuf);

    impl TwoPages {
        fn mount() -> Option<TwoPages> {
            let dir = std::env::temp_dir().join(format!("tiermem-splice-{}", std::process::id()));
            std::fs::create_dir_all(&dir).ok()?;
            let mounted = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=8k", "tiermem-test"])
                .arg(&dir)
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !mounted {
                let _ = std::fs::remove_dir(&dir);
                eprintln!("skipped: mounting a two-page tmpfs needs root");
                return None;
            }
            Some(TwoPages(dir))
        }
    }

    impl Drop for TwoPages {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
            let _ = std::fs::remove_dir(&self.0);
        }
    }

    #[test]
    fn a_drain_into_a_full_file_says_how_much_it_wrote() {
        let Some(fs) = TwoPages::mount() else { return };
        let src = Memfd::create("src", false).unwrap();
        src.set_len(3 * 4096).unwrap();
        let (map, _u) = Mapping::shared(src.as_fd(), 0, 3 * 4096, 4096, &MapOptions::default()).unwrap();
        for k in 0..3 {
            map.fill(k * 4096, 4096, b'a' + k as u8);
        }
        let pipe = Pipe::new(1 << 16).unwrap();
        pipe.fill_from(&src, 0, 3 * 4096).unwrap();
        let dst = std::fs::File::create(fs.0.join("far")).unwrap();
        let short = pipe.drain_to(&dst, 0, 3 * 4096).unwrap_err();
        assert_eq!(
            short,
            Short {
                done: 2 * 4096,
                errno: Errno(libc::ENOSPC)
            }
        );
        // The rest is still queued, from where the drain stopped.
        let (rest, _r) = Mapping::anonymous(4096, &MapOptions::default()).unwrap();
        pipe.read_exact_into(&rest, 0, 4096).unwrap();
        let mut got = vec![0u8; 4096];
        rest.copy_out(0, &mut got);
        assert!(got.iter().all(|&b| b == b'c'));
    }

    #[test]
    fn a_full_pipe_takes_a_prefix() {
        let (map, _u) = Mapping::anonymous(64 * 4096, &MapOptions::default()).unwrap();
        map.fill(0, 64 * 4096, 1);
        let pipe = Pipe::new(4 * 4096).unwrap();
        let ranges: Vec<(usize, usize)> = (0..32).map(|k| (2 * k * 4096, 4096)).collect();
        let taken = pipe.take_pages(&map, &ranges).unwrap();
        assert_eq!(taken, pipe.capacity());
    }

    #[test]
    fn splice_keeps_writes_made_before_the_punch() {
        let src = Memfd::create("src", false).unwrap();
        src.set_len(8192).unwrap();
        let (map, _u) = Mapping::shared(src.as_fd(), 0, 8192, 4096, &MapOptions::default()).unwrap();
        map.fill(0, 8192, b'a');
        let pipe = Pipe::new(1 << 16).unwrap();
        assert!(pipe.capacity() >= 1 << 16);
        pipe.fill_from(&src, 0, 4096).unwrap();
        // After the splice, before the punch: must reach the far copy.
        map.write_bytes(100, b"B");
        src.punch_hole(0, 4096).unwrap();
        let mut now = [1u8; 1];
        map.copy_out(100, &mut now);
        assert_eq!(now[0], 0, "the punched page reads as zeros");
        let dst = Memfd::create("dst", false).unwrap();
        dst.set_len(4096).unwrap();
        pipe.drain_to(&dst, 0, 4096).unwrap();
        let (d, _u) = Mapping::shared(dst.as_fd(), 0, 4096, 4096, &MapOptions::default()).unwrap();
        let mut got = vec![0u8; 4096];
        d.copy_out(0, &mut got);
        assert_eq!(got[100], b'B');
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, &c)| c == if i == 100 { b'B' } else { b'a' }));
        pipe.fill_from(&dst, 0, 4096).unwrap();
        let (bounce, _b) = Mapping::anonymous(8192, &MapOptions::default()).unwrap();
        assert_eq!(pipe.read_into(&bounce, 8192), 4096);
        let mut one = [0u8];
        bounce.copy_out(100, &mut one);
        assert_eq!(&one, b"B");
        assert_eq!(pipe.read_into(&bounce, 8192), 0);
        pipe.fill_from(&dst, 0, 4096).unwrap();
        pipe.clear();
        assert_eq!(pipe.read_into(&bounce, 8192), 0);
        assert!(Pipe::new(1 << 16).unwrap().drain_to(&dst, 0, 0).is_ok());
    }
}
