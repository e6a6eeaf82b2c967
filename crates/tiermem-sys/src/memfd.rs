//! `memfd_create`, `ftruncate` and `fallocate` on anonymous files.
//!
//! ```
//! use tiermem_sys::memfd::Memfd;
//! let fd = Memfd::create("pool", false).unwrap();
//! fd.set_len(1 << 20).unwrap();
//! fd.punch_hole(0, 4096).unwrap();
//! ```

use crate::errno::{check, Errno};
use crate::fdguard::GuardedFd;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// An anonymous memory-backed file.
#[derive(Debug)]
pub struct Memfd {
    fd: GuardedFd,
}

impl Memfd {
    /// Creates a memfd (close-on-exec), backed by hugetlbfs 2 MiB pages if
    /// `huge_2m`.
    pub fn create(name: &str, huge_2m: bool) -> Result<Memfd, Errno> {
        let cname = CString::new(name).map_err(|_| Errno(libc::EINVAL))?;
        let mut flags = libc::MFD_CLOEXEC;
        if huge_2m {
            flags |= libc::MFD_HUGETLB | crate::uapi::MAP_HUGE_2MB as libc::c_uint;
        }
        // SAFETY: cname is a valid NUL-terminated string for the call.
        let fd = check(unsafe { libc::memfd_create(cname.as_ptr(), flags) })?;
        // SAFETY: fd was just returned by the kernel and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Memfd {
            fd: GuardedFd::new(fd),
        })
    }

    /// Opens another process's memfd through `/proc/<pid>/fd/<fd>` (a new
    /// open file description of the same file, read-write): how processes
    /// that were not forked from one another (MPI ranks of one node) share
    /// one. Needs the same rights as reading that process's `/proc` entry.
    pub fn open_peer(pid: u32, fd: i32) -> Result<Memfd, Errno> {
        let path = CString::new(format!("/proc/{pid}/fd/{fd}")).map_err(|_| Errno(libc::EINVAL))?;
        // SAFETY: path is a valid NUL-terminated string for the call.
        let fd = check(unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) })?;
        // SAFETY: fd was just returned by the kernel and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Memfd {
            fd: GuardedFd::new(fd),
        })
    }

    /// The descriptor number (what [`Memfd::open_peer`] takes in another
    /// process).
    pub fn raw(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Sets the file size (`ftruncate`); the file stays sparse.
    pub fn set_len(&self, len: u64) -> Result<(), Errno> {
        set_len(self.fd.as_fd(), len)
    }

    /// Frees the pages of a range, keeping the size.
    pub fn punch_hole(&self, offset: u64, len: u64) -> Result<(), Errno> {
        punch_hole(self.fd.as_fd(), offset, len)
    }
}

impl From<Memfd> for OwnedFd {
    fn from(m: Memfd) -> OwnedFd {
        m.fd.into_owned()
    }
}

impl AsFd for Memfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Whether `fd` is a file of a memory file system without a size limit
/// (a memfd, or a tmpfs mounted with `size=0`): a write to it, through a
/// mapping too, cannot fail for lack of space (only for lack of memory). A
/// file of a sized tmpfs (/dev/shm) can: ENOSPC from `write`, SIGBUS on a
/// store through a mapping, EFAULT part-way from a `read` into one.
pub fn unbounded_memory(fd: BorrowedFd<'_>) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    // SAFETY: statfs is plain data.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor and struct; the kernel fills it.
    let r = unsafe { libc::syscall(libc::SYS_fstatfs, fd.as_raw_fd(), &mut st) };
    r == 0 && st.f_type as i64 == TMPFS_MAGIC && st.f_blocks == 0
}

/// `ftruncate(fd, len)`.
pub fn set_len(fd: BorrowedFd<'_>, len: u64) -> Result<(), Errno> {
    // SAFETY: plain syscall on a borrowed, open descriptor.
    check(unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) }).map(|_| ())
}

/// `fallocate(fd, PUNCH_HOLE | KEEP_SIZE, offset, len)`.
pub fn punch_hole(fd: BorrowedFd<'_>, offset: u64, len: u64) -> Result<(), Errno> {
    fallocate(
        fd,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        offset,
        len,
    )
}

/// `fallocate(fd, 0, offset, len)`: reserves blocks so later writes cannot
/// fail for lack of space.
pub fn allocate(fd: BorrowedFd<'_>, offset: u64, len: u64) -> Result<(), Errno> {
    fallocate(fd, 0, offset, len)
}

/// `fallocate` as a raw system call: the C library's is a cancellation
/// point, and a store frees its space in `free()` (a discard), where a
/// thread with a cancel pending must not be unwound holding the heap.
fn fallocate(fd: BorrowedFd<'_>, mode: i32, offset: u64, len: u64) -> Result<(), Errno> {
    // SAFETY: plain syscall on a borrowed, open descriptor, integer arguments.
    let r = unsafe {
        libc::syscall(
            libc::SYS_fallocate,
            fd.as_raw_fd(),
            mode,
            offset as i64,
            len as i64,
        )
    };
    check(r as i32).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::{MapOptions, Mapping};

    #[test]
    fn memfd_is_sparse_and_holes_read_zero() {
        let m = Memfd::create("t", false).unwrap();
        m.set_len(1 << 20).unwrap();
        let (map, _) = Mapping::shared(m.as_fd(), 0, 1 << 20, 4096, &MapOptions::default()).unwrap();
        map.fill(8192, 4096, 7);
        let st = std::fs::metadata(format!("/proc/self/fd/{}", m.as_fd().as_raw_fd())).unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::size(&st), 1 << 20);
        m.punch_hole(8192, 4096).unwrap();
        assert!(map.range(8192, 4096).is_zero());
        allocate(m.as_fd(), 0, 4096).unwrap();
    }

    #[test]
    fn only_memory_without_a_size_limit_is_unbounded() {
        let m = Memfd::create("t", false).unwrap();
        assert!(unbounded_memory(m.as_fd()), "a memfd has no size limit");
        let disk = std::fs::File::open("/proc/self/exe").unwrap();
        assert!(!unbounded_memory(disk.as_fd()), "not a memory file system");
        if let Ok(shm) = std::fs::File::open("/dev/shm") {
            // Mounted with a size (by default half the memory) everywhere
            // we know of.
            assert!(!unbounded_memory(shm.as_fd()), "/dev/shm has a size");
        }
    }

    #[test]
    fn bad_name_is_rejected() {
        assert_eq!(Memfd::create("a\0b", false).unwrap_err(), Errno(libc::EINVAL));
    }
}
