//! Far memory that tiermem can map a second time: the sources of an
//! [`Overshadow`](crate::overshadow::Overshadow).
//!
//! Paper 2 starts from memory that the program can read by load and store
//! but that is slow, and that a DMA engine can copy. tiermem needs one more
//! property: it must be able to map the same pages a second time (at the
//! overshadow's `to`), so far memory is always a shared mapping of a file
//! descriptor:
//!
//! - [`FarMemory::alloc`]: anonymous far memory, a memfd of its own (the
//!   memory far store's kind of backing: same speed as near memory here);
//! - [`FarMemory::map_file`]: a range of a file (really slower while its
//!   pages are not in the page cache).
//!
//! Every live far allocation is entered in a process-wide registry, so the
//! overshadow can find the descriptor and offset behind an address that C
//! code hands in.
//!
//! ```
//! use tiermem::far::FarMemory;
//! let far = FarMemory::alloc(1 << 20)?;
//! far.as_atomic_u64()[0].store(7, std::sync::atomic::Ordering::Relaxed);
//! assert_eq!(far.len(), 1 << 20);
//! # Ok::<(), tiermem::Error>(())
//! ```

use crate::Error;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};
use tiermem_sys::memfd::Memfd;
use tiermem_sys::mm::{base_page_size, MapOptions, Mapping, UserAccess};

/// What backs a far allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FarKind {
    /// A memfd of this process.
    Memory,
    /// A regular file.
    File,
}

impl FarKind {
    /// `memory` or `file`.
    pub fn name(self) -> &'static str {
        match self {
            FarKind::Memory => "memory",
            FarKind::File => "file",
        }
    }
}

/// The descriptor behind far memory; shared by the allocation and every
/// overshadow of it, so that freeing the allocation during an overshadow is
/// safe.
#[derive(Debug)]
pub(crate) struct Backing {
    pub(crate) fd: OwnedFd,
    pub(crate) kind: FarKind,
    /// For files: a second open file description without readahead, for
    /// the movers. Their reads then fetch exactly their chunk, so a reader
    /// of an overshadow's first page does not wait for a readahead window
    /// of the device's size (8 MiB here) started by the mover's first read.
    pub(crate) mover_fd: Option<OwnedFd>,
}

impl Backing {
    /// The descriptor movers read from.
    pub(crate) fn mover_fd(&self) -> BorrowedFd<'_> {
        self.mover_fd.as_ref().unwrap_or(&self.fd).as_fd()
    }
}

/// Where an address of far memory comes from.
#[derive(Clone, Debug)]
pub(crate) struct FarSource {
    pub(crate) backing: Arc<Backing>,
    /// Offset in the descriptor of the first byte asked for.
    pub(crate) fd_offset: u64,
}

struct Entry {
    addr: usize,
    len: usize,
    backing: Arc<Backing>,
    fd_offset: u64,
}

/// Live far allocations. Written on allocation and free only.
static REGISTRY: RwLock<Vec<Entry>> = RwLock::new(Vec::new());

/// Finds the far memory holding all of `[addr, addr + len)`.
pub(crate) fn lookup(addr: usize, len: usize) -> Option<FarSource> {
    let g = REGISTRY.read().unwrap_or_else(|p| p.into_inner());
    g.iter()
        .find(|e| addr >= e.addr && addr.checked_add(len).is_some_and(|end| end <= e.addr + e.len))
        .map(|e| FarSource {
            backing: e.backing.clone(),
            fd_offset: e.fd_offset + (addr - e.addr) as u64,
        })
}

/// One far allocation, mapped read-write (or read-only for a read-only
/// file) at [`FarMemory::addr`]; unmapped and unregistered on drop.
pub struct FarMemory {
    // Field order: the mapping goes before the descriptor it maps.
    map: Mapping,
    user: UserAccess,
    backing: Arc<Backing>,
}

impl std::fmt::Debug for FarMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FarMemory")
            .field("addr", &format_args!("{:#x}", self.map.addr()))
            .field("len", &self.map.len())
            .field("kind", &self.backing.kind)
            .finish()
    }
}

impl FarMemory {
    /// `len` bytes (rounded up to whole pages) of zeroed far memory.
    pub fn alloc(len: usize) -> Result<FarMemory, Error> {
        if len == 0 {
            return Err(Error::Usage("far allocation of 0 bytes".into()));
        }
        let page = base_page_size();
        let len = len
            .checked_next_multiple_of(page)
            .ok_or_else(|| Error::Usage(format!("far allocation of {len} bytes is too large")))?;
        let fd = Memfd::create("tiermem-far", false).map_err(|errno| Error::Sys {
            what: "memfd_create for far memory",
            errno,
        })?;
        fd.set_len(len as u64).map_err(|errno| Error::Sys {
            what: "sizing far memory",
            errno,
        })?;
        let opts = MapOptions {
            noreserve: true,
            ..Default::default()
        };
        let (map, user) = Mapping::shared(fd.as_fd(), 0, len, page, &opts)?;
        Ok(Self::register(map, user, OwnedFd::from(fd), FarKind::Memory, 0))
    }

    /// Maps `len` bytes of the file at `path` from `offset` (a multiple of
    /// the page size) as far memory, read-write if `writable`.
    ///
    /// The range must lie inside the file (no `SIGBUS` past its end).
    pub fn map_file(path: &Path, offset: u64, len: usize, writable: bool) -> Result<FarMemory, Error> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| Error::Usage(format!("far file {}: {e}", path.display())))?;
        Self::map_fd(OwnedFd::from(file), offset, len, writable)
            .map_err(|e| Error::Usage(format!("far file {}: {e}", path.display())))
    }

    /// As [`FarMemory::map_file`], for an open descriptor (kept open until
    /// the allocation and every overshadow of it are gone).
    pub fn map_fd(fd: OwnedFd, offset: u64, len: usize, writable: bool) -> Result<FarMemory, Error> {
        let page = base_page_size();
        if len == 0 || !len.is_multiple_of(page) || !offset.is_multiple_of(page as u64) {
            return Err(Error::Usage(format!(
                "far file range {offset}+{len}: length must be non-zero and offset and length multiples of {page}"
            )));
        }
        let size = std::fs::File::from(fd.try_clone().map_err(Error::Thread)?)
            .metadata()
            .map_err(Error::Thread)?
            .len();
        if offset.checked_add(len as u64).is_none_or(|end| end > size) {
            return Err(Error::Usage(format!(
                "far file range {offset}+{len} leaves the file of {size} bytes"
            )));
        }
        let opts = MapOptions {
            read_only: !writable,
            ..Default::default()
        };
        let (map, user) = Mapping::shared(fd.as_fd(), offset, len, page, &opts)?;
        Ok(Self::register(map, user, fd, FarKind::File, offset))
    }

    fn register(map: Mapping, user: UserAccess, fd: OwnedFd, kind: FarKind, fd_offset: u64) -> FarMemory {
        let mover_fd = (kind == FarKind::File)
            .then(|| {
                // Best effort: without it the movers share the readahead.
                let f = std::fs::File::open(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
                tiermem_sys::file::no_readahead(f.as_fd()).ok()?;
                Some(OwnedFd::from(f))
            })
            .flatten();
        let backing = Arc::new(Backing { fd, kind, mover_fd });
        REGISTRY.write().unwrap_or_else(|p| p.into_inner()).push(Entry {
            addr: map.addr(),
            len: map.len(),
            backing: backing.clone(),
            fd_offset,
        });
        FarMemory { map, user, backing }
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.map.addr()
    }

    /// Start as a pointer (for C).
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false: allocations are never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// What backs it.
    pub fn kind(&self) -> FarKind {
        self.backing.kind
    }

    /// The descriptor behind it (to drop a file's cache, say).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.backing.fd.as_fd()
    }

    /// The memory as 64-bit atomics (writing a read-only file mapping
    /// raises SIGSEGV).
    pub fn as_atomic_u64(&self) -> &[AtomicU64] {
        self.map.user_atomics(&self.user)
    }

    /// Drops this mapping's page-table entries (the data stays in the
    /// memfd or file) so that a file's pages can leave the page cache
    /// (see `tiermem_sys::file::drop_cache`).
    pub fn unmap_pages(&self) -> Result<(), Error> {
        Ok(self.map.unmap_shared_pages(0, self.map.len())?)
    }

    /// Copies `src` in at `offset`.
    pub fn write_bytes(&self, offset: usize, src: &[u8]) {
        self.map.write_bytes(offset, src)
    }
}

impl Drop for FarMemory {
    fn drop(&mut self) {
        let addr = self.map.addr();
        REGISTRY
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|e| e.addr != addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn allocations_are_registered_until_freed() {
        let a = FarMemory::alloc(5000).unwrap();
        assert_eq!(a.len(), 8192, "rounded up to pages");
        assert_eq!(a.kind(), FarKind::Memory);
        a.as_atomic_u64()[1].store(3, Ordering::Relaxed);
        let s = lookup(a.addr() + 4096, 4096).unwrap();
        assert_eq!(s.fd_offset, 4096);
        assert!(
            lookup(a.addr() + 4096, 8192).is_none(),
            "range leaves the allocation"
        );
        let addr = a.addr();
        drop(a);
        assert!(lookup(addr, 4096).is_none());
        assert!(matches!(FarMemory::alloc(0), Err(Error::Usage(_))));
    }

    #[test]
    fn file_ranges_are_checked() {
        let p = std::env::temp_dir().join(format!("tiermem-far-{}", std::process::id()));
        std::fs::write(&p, vec![7u8; 16384]).unwrap();
        let f = FarMemory::map_file(&p, 4096, 8192, false).unwrap();
        assert_eq!(f.kind(), FarKind::File);
        assert_eq!(
            f.as_atomic_u64()[0].load(Ordering::Relaxed),
            0x0707_0707_0707_0707
        );
        assert_eq!(lookup(f.addr(), 8192).unwrap().fd_offset, 4096);
        assert!(f.backing.mover_fd.is_some(), "files get a mover descriptor");
        for (off, len) in [(0, 20480), (100, 4096), (0, 0), (0, 100)] {
            let e = FarMemory::map_file(&p, off, len, false).unwrap_err();
            assert!(matches!(e, Error::Usage(_)), "{off}+{len}: {e}");
        }
        let e = FarMemory::map_file(Path::new("/nonexistent/x"), 0, 4096, false).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x"), "{e}");
        drop(f);
        std::fs::remove_file(p).unwrap();
    }
}
