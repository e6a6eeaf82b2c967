//! Far-store files: created mode 0600, sparse, optionally `O_DIRECT`.
//!
//! A path naming a directory gets an unnamed `O_TMPFILE` inside it (gone
//! when closed); a path naming a file that does not exist yet is created and
//! unlinked again when the [`FarFile`] is dropped, if the name still names
//! the file tiermem created (same device and inode): a file renamed behind
//! tiermem's back, and whatever took its name, are left alone. An existing
//! file is never overwritten, with two exceptions that are tiermem's own
//! far files, recognised by the tag every named far file gets (an extended
//! attribute `user.tiermem.far` naming the creating process and program
//! image): one whose process no longer runs (a killed run's leftover:
//! swept, see [`FarFile::swept`]), and one that an earlier image of this
//! very process created (an `exec` wrapper that `exec`ed the program after
//! it had made its heap: the image that made it is gone).

use crate::errno::{check, Errno};
use crate::fdguard::GuardedFd;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Errors creating a far file.
#[derive(Debug, Error)]
pub enum FileError {
    /// The directory does not exist.
    #[error("far file {path}: directory does not exist")]
    NoDirectory {
        /// The path given.
        path: PathBuf,
    },
    /// The file exists already.
    #[error(
        "far file {path} exists{}; tiermem never overwrites a file: remove it, or give a directory",
        match in_use_by { Some(pid) => format!(" (the far file of process {pid}, which runs)"), None => String::new() }
    )]
    Exists {
        /// The path given.
        path: PathBuf,
        /// The live process whose far file it is, if it is one.
        in_use_by: Option<u32>,
    },
    /// Permission denied or read-only file system.
    #[error("far file {path} cannot be created: {errno} (directory not writable?)")]
    NotWritable {
        /// The path given.
        path: PathBuf,
        /// What the kernel said.
        errno: Errno,
    },
    /// The file system refuses `O_DIRECT`.
    #[error("far file {path}: the file system does not support O_DIRECT ({errno})")]
    DirectUnsupported {
        /// The path given.
        path: PathBuf,
        /// What the kernel said.
        errno: Errno,
    },
    /// Any other failure.
    #[error("far file {path}: {errno}")]
    Other {
        /// The path given.
        path: PathBuf,
        /// What the kernel said.
        errno: Errno,
    },
}

/// An open far-store file.
#[derive(Debug)]
pub struct FarFile {
    fd: GuardedFd,
    /// The name to unlink on drop (None for an O_TMPFILE), and the
    /// (device, inode) it must still name then.
    created: Option<(PathBuf, (u64, u64))>,
    direct: bool,
    owner_pid: u32,
    /// The path given at creation: the directory of an unnamed file, or
    /// the file's name.
    given: PathBuf,
    /// The process whose leftover far file had the name and was removed.
    swept: Option<u32>,
}

/// The extended attribute that marks a named far file as tiermem's.
const TAG: &std::ffi::CStr = c"user.tiermem.far";

/// Who made a named far file: the process and its program image (a number
/// drawn once per image: `exec` keeps the pid, not this).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FarFileOwner {
    /// The creating process.
    pub pid: u32,
    /// The creating program image.
    pub image: u64,
}

impl FarFileOwner {
    /// This process, this image.
    pub fn me() -> FarFileOwner {
        static IMAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let image = *IMAGE.get_or_init(|| {
            // Distinct per image of a pid: the clock has moved on by the
            // time an exec'd image makes its first far file.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            t ^ (&IMAGE as *const _ as u64).rotate_left(32)
        });
        FarFileOwner {
            pid: std::process::id(),
            image,
        }
    }

    fn encode(self) -> String {
        format!("pid {} image {:x}", self.pid, self.image)
    }

    fn decode(s: &str) -> Option<FarFileOwner> {
        let mut w = s.split_whitespace();
        match (w.next(), w.next(), w.next(), w.next()) {
            (Some("pid"), Some(pid), Some("image"), Some(image)) => Some(FarFileOwner {
                pid: pid.parse().ok()?,
                image: u64::from_str_radix(image, 16).ok()?,
            }),
            _ => None,
        }
    }
}

/// The tiermem process that made the far file named `path`, if `path` is
/// one (tagged; file systems without user extended attributes tag
/// nothing).
pub fn far_file_owner(path: &Path) -> Option<FarFileOwner> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut buf = [0u8; 64];
    // SAFETY: c and TAG are NUL-terminated; buf is writable for its length.
    let n = unsafe { libc::lgetxattr(c.as_ptr(), TAG.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n <= 0 {
        return None;
    }
    FarFileOwner::decode(std::str::from_utf8(&buf[..n as usize]).ok()?)
}

/// What [`sweep_leftover`] found at a far file's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leftover {
    /// Nothing there (or nothing left now).
    Free,
    /// The far file of a process that no longer runs: removed.
    Swept(u32),
    /// The far file of a process that runs (this one too).
    InUse(u32),
    /// Something that is not tiermem's far file.
    Foreign,
}

/// Removes the far file named `path` if it is a leftover: tiermem's, of a
/// process that no longer runs, or of an earlier image of this process
/// (an exec wrapper's). The name is unlinked only if it still names the
/// file judged (same device and inode).
pub fn sweep_leftover(path: &Path) -> Leftover {
    use std::os::unix::fs::MetadataExt;
    let Ok(before) = std::fs::symlink_metadata(path) else {
        return Leftover::Free;
    };
    let Some(owner) = far_file_owner(path).filter(|_| before.file_type().is_file()) else {
        return Leftover::Foreign;
    };
    let me = FarFileOwner::me();
    let earlier_image = owner.pid == me.pid && owner.image != me.image;
    // A zombie holds no files: it counts as ended.
    if !earlier_image && crate::process::running(owner.pid) {
        return Leftover::InUse(owner.pid);
    }
    let same =
        std::fs::symlink_metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == (before.dev(), before.ino()));
    if same {
        let _ = std::fs::remove_file(path);
    }
    Leftover::Swept(owner.pid)
}

/// Removes the far file named `path` if `pid` made it (or it carries no
/// tag at all, on a file system without extended attributes: a launcher
/// that saw the name free before it started `pid` knows whose it is).
/// For a launcher after its program ended, however it ended.
pub fn remove_far_file_of(path: &Path, pid: u32) -> bool {
    let Ok(m) = std::fs::symlink_metadata(path) else {
        return false;
    };
    let ours = match far_file_owner(path) {
        Some(o) => o.pid == pid,
        None => m.file_type().is_file(),
    };
    ours && std::fs::remove_file(path).is_ok()
}

/// Removes the far file named `path` if this process, in this image, made
/// it: at exit, for a far file whose [`FarFile`] is never dropped (a heap
/// that lives as long as the process).
pub fn remove_own_far_file(path: &Path) -> bool {
    far_file_owner(path) == Some(FarFileOwner::me()) && std::fs::remove_file(path).is_ok()
}

/// A file system's size and free space, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsSpace {
    /// Size of the file system.
    pub total: u64,
    /// Free for an unprivileged writer.
    pub free: u64,
}

impl FarFile {
    /// Creates the far file for `path` (a directory or a new file name).
    /// A name that holds a leftover far file ([`sweep_leftover`]) is
    /// swept first.
    pub fn create(path: &Path, direct: bool) -> Result<FarFile, FileError> {
        match Self::create_once(path, direct) {
            Err(FileError::Exists { path, .. }) => match sweep_leftover(&path) {
                Leftover::Swept(pid) => {
                    let mut f = Self::create_once(&path, direct)?;
                    // An earlier image of this process is no news.
                    f.swept = Some(pid).filter(|&p| p != std::process::id());
                    Ok(f)
                }
                Leftover::InUse(pid) => Err(FileError::Exists {
                    path,
                    in_use_by: Some(pid),
                }),
                Leftover::Free => Self::create_once(&path, direct),
                Leftover::Foreign => Err(FileError::Exists {
                    path,
                    in_use_by: None,
                }),
            },
            r => r,
        }
    }

    fn create_once(path: &Path, direct: bool) -> Result<FarFile, FileError> {
        let is_dir = path.is_dir();
        let parent = if is_dir {
            path.to_path_buf()
        } else {
            path.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
        };
        // `dir/` names a directory, never a file to create.
        let names_dir = path.as_os_str().as_bytes().ends_with(b"/");
        if !parent.is_dir() || (names_dir && !is_dir) {
            return Err(FileError::NoDirectory {
                path: path.to_path_buf(),
            });
        }
        let mut flags = libc::O_RDWR | libc::O_CLOEXEC;
        if direct {
            flags |= libc::O_DIRECT;
        }
        let (target, created) = if is_dir {
            (path, None)
        } else {
            (path, Some(path.to_path_buf()))
        };
        flags |= if is_dir {
            libc::O_TMPFILE
        } else {
            libc::O_CREAT | libc::O_EXCL
        };
        let c = CString::new(target.as_os_str().as_bytes()).map_err(|_| FileError::Other {
            path: path.to_path_buf(),
            errno: Errno(libc::EINVAL),
        })?;
        // SAFETY: c is NUL-terminated; mode is passed for O_CREAT/O_TMPFILE.
        let r = unsafe { libc::open(c.as_ptr(), flags, 0o600 as libc::c_uint) };
        let fd = check(r).map_err(|errno| {
            let path = path.to_path_buf();
            match errno.raw() {
                libc::EEXIST => FileError::Exists {
                    path,
                    in_use_by: None,
                },
                libc::EACCES | libc::EROFS | libc::EPERM => FileError::NotWritable { path, errno },
                // The directory exists (checked above) but refuses new names
                // (procfs, sysfs).
                libc::ENOENT => FileError::NotWritable { path, errno },
                libc::EINVAL if direct => FileError::DirectUnsupported { path, errno },
                _ => FileError::Other { path, errno },
            }
        })?;
        // SAFETY: the kernel returned a fresh descriptor that we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let created = match created {
            Some(p) => {
                let v = FarFileOwner::me().encode();
                // SAFETY: a valid descriptor, a NUL-terminated name and a
                // value of the length passed. Best effort: a file system
                // without user attributes leaves the file untagged.
                unsafe {
                    libc::fsetxattr(fd.as_raw_fd(), TAG.as_ptr(), v.as_ptr().cast(), v.len(), 0);
                }
                Some((
                    p,
                    identity(fd.as_fd()).map_err(|errno| FileError::Other {
                        path: path.to_path_buf(),
                        errno,
                    })?,
                ))
            }
            None => None,
        };
        Ok(FarFile {
            fd: GuardedFd::new(fd),
            created,
            direct,
            owner_pid: std::process::id(),
            given: path.to_path_buf(),
            swept: None,
        })
    }

    /// The process whose leftover far file had this file's name and was
    /// removed to make it (a killed run's), if any.
    pub fn swept(&self) -> Option<u32> {
        self.swept
    }

    /// Whether the file was opened with `O_DIRECT`.
    pub fn direct(&self) -> bool {
        self.direct
    }

    /// The file's name, if it has one.
    pub fn path(&self) -> Option<&Path> {
        self.created.as_ref().map(|(p, _)| p.as_path())
    }

    /// The path given at creation (a directory for an unnamed file).
    pub fn location(&self) -> &Path {
        &self.given
    }

    /// Bytes free on the file's file system for an unprivileged writer.
    pub fn fs_free_bytes(&self) -> Result<u64, Errno> {
        self.fs_space().map(|s| s.free)
    }

    /// Size and free space of the file's file system. One `fstatfs`
    /// system call (not the C library's `fstatvfs`, which may read
    /// /proc/mounts), no allocation: callable from a signal handler.
    pub fn fs_space(&self) -> Result<FsSpace, Errno> {
        // SAFETY: statfs is plain data.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor and struct; the kernel fills it.
        let r = unsafe { libc::syscall(libc::SYS_fstatfs, self.fd.as_raw_fd(), &mut st) };
        check(r as i32)?;
        let unit = if st.f_frsize > 0 { st.f_frsize } else { st.f_bsize } as u64;
        Ok(FsSpace {
            total: st.f_blocks * unit,
            free: st.f_bavail * unit,
        })
    }
}

impl AsFd for FarFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for FarFile {
    fn drop(&mut self) {
        // A fork()ed child holding a copy must not delete its parent's file,
        // and a name that now names another file (ours was renamed, another
        // took the name) is not ours to delete.
        if let Some((p, id)) = &self.created {
            use std::os::unix::fs::MetadataExt;
            let still_ours = std::fs::symlink_metadata(p).is_ok_and(|m| (m.dev(), m.ino()) == *id);
            if std::process::id() == self.owner_pid && still_ours {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// The (device, inode) of an open file.
fn identity(fd: BorrowedFd<'_>) -> Result<(u64, u64), Errno> {
    // SAFETY: stat is plain data, filled by the kernel.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a valid struct.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok((st.st_dev, st.st_ino))
}

/// Writes a file's dirty pages back and drops its pages from the page
/// cache (`fdatasync`, then `posix_fadvise(POSIX_FADV_DONTNEED)` over the
/// whole file), so that the next reads come from the device.
pub fn drop_cache(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    // SAFETY: plain syscall on a borrowed, open descriptor.
    check(unsafe { libc::fdatasync(fd.as_raw_fd()) })?;
    // SAFETY: as above; posix_fadvise returns the error instead of setting errno.
    let r = unsafe { libc::posix_fadvise(fd.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r != 0 {
        return Err(Errno(r));
    }
    Ok(())
}

/// Turns readahead off for reads through this open file description
/// (`posix_fadvise(POSIX_FADV_RANDOM)`): a `pread` reads what it asks for.
pub fn no_readahead(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    // SAFETY: plain syscall on a borrowed, open descriptor; posix_fadvise
    // returns the error instead of setting errno.
    let r = unsafe { libc::posix_fadvise(fd.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    if r != 0 {
        return Err(Errno(r));
    }
    Ok(())
}

/// Starts reading `[offset, offset + len)` of a file into the page cache
/// without waiting (`posix_fadvise(POSIX_FADV_WILLNEED)`).
pub fn will_need(fd: BorrowedFd<'_>, offset: u64, len: u64) -> Result<(), Errno> {
    // SAFETY: plain syscall on a borrowed, open descriptor; posix_fadvise
    // returns the error instead of setting errno.
    let r = unsafe {
        libc::posix_fadvise(
            fd.as_raw_fd(),
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_WILLNEED,
        )
    };
    if r != 0 {
        return Err(Errno(r));
    }
    Ok(())
}

/// Pages of `[offset, offset + len)` of a file that are in the page cache
/// (`mincore` over a temporary read-only mapping).
pub fn cached_pages(fd: BorrowedFd<'_>, offset: u64, len: usize) -> Result<usize, Errno> {
    let page = crate::mm::base_page_size();
    let n = len.div_ceil(page);
    // SAFETY: a fresh read-only shared mapping at a kernel-chosen address.
    let p = unsafe {
        crate::raw::mmap(
            std::ptr::null_mut(),
            n * page,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Errno::last());
    }
    let mut vec = vec![0u8; n];
    // SAFETY: p maps n pages; vec has one byte per page.
    let r = unsafe { libc::mincore(p, n * page, vec.as_mut_ptr()) };
    let e = Errno::last();
    // SAFETY: unmapping the mapping made above, which nothing references.
    unsafe { crate::raw::munmap(p, n * page) };
    if r != 0 {
        return Err(e);
    }
    Ok(vec.iter().filter(|&&b| b & 1 != 0).count())
}

/// Whether the raw descriptor `fd` refers to a regular file (a plain
/// `fstat`, async-signal-safe; false when it fails).
pub fn fd_is_regular(fd: i32) -> bool {
    // SAFETY: a zeroed stat is a valid out-parameter; fstat only writes it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: any fd value is safe to pass; the kernel checks it.
    unsafe { libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG }
}

/// Whether this process may create files in the directory `dir`
/// (`access(W_OK | X_OK)`).
pub fn writable_dir(dir: &Path) -> bool {
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path; access reads nothing else.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

/// Appends `bytes` to the file `path` (created mode 0600), in one
/// `write` of an `O_APPEND` descriptor, so that the lines of concurrent
/// processes never interleave. Async-signal-safe (no allocation, no lock):
/// fit for a `fork` child handler.
pub fn append_record(path: &std::ffi::CStr, bytes: &[u8]) -> Result<(), Errno> {
    let flags = libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = check(unsafe { libc::open(path.as_ptr(), flags, 0o600 as libc::c_uint) })?;
    // SAFETY: `bytes` is readable for its length; fd is ours.
    let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    match n {
        n if n < 0 => Err(Errno::last()),
        n if n as usize != bytes.len() => Err(Errno(libc::EIO)),
        _ => Ok(()),
    }
}

/// Waits for an exclusive advisory lock (`flock(LOCK_EX)`) on `f`, held
/// until the file is closed: processes that read, change and write back a
/// machine-wide setting (the ranks of a job growing the huge page pool)
/// take turns.
pub fn lock_exclusive(f: &std::fs::File) -> Result<(), Errno> {
    loop {
        // SAFETY: flock on a descriptor `f` owns; no memory is passed.
        match check(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }) {
            Err(e) if e.0 == libc::EINTR => continue,
            r => return r.map(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_exclusive_takes_turns() {
        let p = std::env::temp_dir().join(format!("tiermem-lock-test-{}", std::process::id()));
        let a = std::fs::File::create(&p).unwrap();
        lock_exclusive(&a).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let p2 = p.clone();
        let t = std::thread::spawn(move || {
            // Another open file description: flock locks conflict.
            let b = std::fs::OpenOptions::new().write(true).open(&p2).unwrap();
            lock_exclusive(&b).unwrap();
            tx.send(()).unwrap();
        });
        let wait = std::time::Duration::from_millis(200);
        assert!(rx.recv_timeout(wait).is_err(), "the second lock did not wait");
        drop(a);
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the second lock once the first is closed");
        t.join().unwrap();
        let _ = std::fs::remove_file(&p);
    }
    use std::os::unix::fs::PermissionsExt;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tiermem-sys-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn named_file_is_0600_and_removed_on_drop() {
        let d = tmpdir("named");
        let p = d.join("far.bin");
        let f = FarFile::create(&p, false).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(f.fs_free_bytes().unwrap() > 0);
        let space = f.fs_space().unwrap();
        assert!(space.total >= space.free && space.total > 0, "{space:?}");
        assert!(matches!(
            FarFile::create(&p, false),
            Err(FileError::Exists { .. })
        ));
        drop(f);
        assert!(!p.exists());
        std::fs::remove_dir_all(d).unwrap();
    }

    /// Tags `path` as `owner`'s far file (what `create` writes).
    fn tag(path: &Path, owner: FarFileOwner) {
        let c = CString::new(path.as_os_str().as_bytes()).unwrap();
        let v = owner.encode();
        // SAFETY: NUL-terminated name and path, a value of the length passed.
        let r = unsafe { libc::lsetxattr(c.as_ptr(), TAG.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
        assert_eq!(r, 0, "{}", Errno::last());
    }

    /// A pid that ran and ended.
    fn dead_pid() -> u32 {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    }

    #[test]
    fn leftovers_are_swept_live_and_foreign_files_kept() {
        let d = tmpdir("leftover");
        let p = d.join("far.bin");
        // Ours and live: refused, naming the process.
        std::mem::forget(FarFile::create(&p, false).unwrap());
        if far_file_owner(&p).is_none() {
            eprintln!("skipped: {} has no user extended attributes", d.display());
            return;
        }
        assert_eq!(far_file_owner(&p), Some(FarFileOwner::me()));
        let e = FarFile::create(&p, false).unwrap_err();
        assert!(
            matches!(e, FileError::Exists { in_use_by: Some(pid), .. } if pid == std::process::id()),
            "{e}"
        );
        // A killed run's: swept, and said.
        let dead = dead_pid();
        tag(&p, FarFileOwner { pid: dead, image: 1 });
        let f = FarFile::create(&p, false).unwrap();
        assert_eq!(f.swept(), Some(dead));
        drop(f);
        assert!(!p.exists());
        // An earlier image of this process (an exec wrapper's): swept quietly.
        std::mem::forget(FarFile::create(&p, false).unwrap());
        let me = FarFileOwner::me();
        tag(
            &p,
            FarFileOwner {
                image: me.image ^ 1,
                ..me
            },
        );
        let f = FarFile::create(&p, false).unwrap();
        assert_eq!(f.swept(), None);
        drop(f);
        // Not tiermem's: never touched.
        std::fs::write(&p, b"data").unwrap();
        assert!(matches!(
            FarFile::create(&p, false),
            Err(FileError::Exists { in_use_by: None, .. })
        ));
        assert_eq!(sweep_leftover(&p), Leftover::Foreign);
        assert!(remove_far_file_of(&p, dead), "untagged: the launcher's call");
        // A launcher removes its program's file, not another's.
        std::mem::forget(FarFile::create(&p, false).unwrap());
        assert!(!remove_far_file_of(&p, dead));
        assert!(remove_own_far_file(&p));
        assert_eq!(sweep_leftover(&p), Leftover::Free);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn dropped_cache_is_not_resident() {
        let d = tmpdir("cache");
        let f = FarFile::create(&d, false).unwrap();
        let (m, _) = {
            crate::memfd::set_len(f.as_fd(), 1 << 20).unwrap();
            crate::mm::Mapping::anonymous(1 << 20, &Default::default()).unwrap()
        };
        m.fill(0, 1 << 20, 3);
        m.pwrite(f.as_fd(), 0, 1 << 20, 0).unwrap();
        assert!(cached_pages(f.as_fd(), 0, 1 << 20).unwrap() > 0);
        drop_cache(f.as_fd()).unwrap();
        assert_eq!(cached_pages(f.as_fd(), 0, 1 << 20).unwrap(), 0);
        no_readahead(f.as_fd()).unwrap();
        assert_eq!(m.pread(f.as_fd(), 0, 4096, 0).unwrap(), 4096);
        assert_eq!(cached_pages(f.as_fd(), 0, 1 << 20).unwrap(), 1, "no readahead");
        will_need(f.as_fd(), 0, 1 << 20).unwrap();
        let t = std::time::Instant::now();
        while cached_pages(f.as_fd(), 0, 1 << 20).unwrap() < 256 {
            assert!(t.elapsed().as_secs() < 5, "WILLNEED reads the range");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn directory_gets_an_unnamed_file() {
        let d = tmpdir("dir");
        let f = FarFile::create(&d, false).unwrap();
        assert!(f.path().is_none());
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn missing_and_readonly_directories_are_clear_errors() {
        let e = FarFile::create(Path::new("/nonexistent-tiermem/dir/far"), false).unwrap_err();
        assert!(matches!(e, FileError::NoDirectory { .. }), "{e}");
        assert!(e.to_string().contains("does not exist"));
        let e = FarFile::create(Path::new("/proc/far.bin"), false).unwrap_err();
        assert!(
            matches!(e, FileError::NotWritable { .. } | FileError::Other { .. }),
            "{e}"
        );
        // A directory without write permission (root ignores modes, so use
        // a read-only bind of the idea: /proc/self is never writable).
        let d = tmpdir("ro");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o500)).unwrap();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(matches!(
                FarFile::create(&d.join("x"), false),
                Err(FileError::NotWritable { .. })
            ));
        }
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn records_are_appended_whole() {
        let dir = std::env::temp_dir().join(format!("tiermem-append-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let c = CString::new(dir.as_os_str().as_bytes()).unwrap();
        append_record(&c, b"").unwrap();
        assert_eq!(std::fs::read(&dir).unwrap(), b"");
        append_record(&c, b"f\n").unwrap();
        append_record(&c, b"x sh\n").unwrap();
        assert_eq!(std::fs::read(&dir).unwrap(), b"f\nx sh\n");
        std::fs::remove_file(&dir).unwrap();
        let bad = CString::new("/nonexistent-dir/x").unwrap();
        assert_eq!(append_record(&bad, b"f\n"), Err(Errno(libc::ENOENT)));
    }
}
