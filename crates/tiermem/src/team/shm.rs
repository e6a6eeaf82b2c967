//! The team's files: anonymous or named under /dev/shm, their identity,
//! and the sweep of named files whose creator died.

use super::*;

pub(super) fn shm_path(name: &str, part: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/tiermem-team.{name}.{part}"))
}

/// A file's (device, inode).
type FileId = (u64, u64);

/// The (device, inode) `path` names now (not following a symbolic link).
pub(super) fn named_identity(path: &std::path::Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// A named file this process created: removed by name only while the name
/// still names that file (same device and inode), and only by the process
/// that created it, as far files are (`tiermem_sys::file::FarFile`). A
/// file renamed behind tiermem's back, and whatever took its name (the
/// next job's team of the same name), are left alone; so is the name in a
/// `fork()`ed child dropping its copy.
pub(super) struct OwnFile {
    path: PathBuf,
    id: FileId,
    owner_pid: u32,
}

impl OwnFile {
    pub(super) fn new(path: PathBuf, file: &File) -> std::io::Result<OwnFile> {
        use std::os::unix::fs::MetadataExt;
        let m = file.metadata()?;
        Ok(OwnFile {
            path,
            id: (m.dev(), m.ino()),
            owner_pid: std::process::id(),
        })
    }

    pub(super) fn remove(&self) {
        if std::process::id() == self.owner_pid && named_identity(&self.path) == Some(self.id) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Removes the `/dev/shm/tiermem-team.<name>.*` files of teams that no
/// process holds any more (open or mapped): what a named team leaves when
/// its creator is killed. A file is created open (`O_CREAT`) and its
/// members keep it open or mapped, so a file no process holds belongs to
/// no live team. Only the owner (mode 0600) or root could hold it, and
/// their `/proc` entries are readable.
pub(super) fn sweep_stale_named() {
    const PREFIX: &str = "/dev/shm/tiermem-team.";
    let Ok(entries) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    // Each file with the (device, inode) its name names now: a file is
    // removed only if the name still names the file judged unheld.
    let mut names: std::collections::BTreeMap<String, Vec<(PathBuf, FileId)>> = Default::default();
    for e in entries.flatten() {
        let p = e.path();
        let s = p.to_string_lossy().into_owned();
        if let Some(rest) = s.strip_prefix(PREFIX) {
            if let (Some((name, _part)), Some(id)) = (rest.rsplit_once('.'), named_identity(&p)) {
                names.entry(name.to_owned()).or_default().push((p, id));
            }
        }
    }
    if names.is_empty() {
        return;
    }
    // Held files by (device, inode) (a descriptor's target, whatever its
    // name now) and by inode (a mapping of a /dev/shm file).
    let mut held = std::collections::BTreeSet::new();
    let mut mapped_inodes = std::collections::BTreeSet::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for pr in procs.flatten() {
        let dir = pr.path();
        if !pr
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        if let Ok(fds) = std::fs::read_dir(dir.join("fd")) {
            for fd in fds.flatten() {
                let is_shm = std::fs::read_link(fd.path()).is_ok_and(|l| l.starts_with("/dev/shm"));
                if let Some(id) = is_shm.then(|| named_identity_of_fd(&fd.path())).flatten() {
                    held.insert(id);
                }
            }
        }
        if let Ok(maps) = std::fs::read_to_string(dir.join("maps")) {
            // "start-end perms offset dev inode path"
            for line in maps.lines().filter(|l| l.contains("/dev/shm/")) {
                if let Some(ino) = line.split_whitespace().nth(4).and_then(|v| v.parse::<u64>().ok()) {
                    mapped_inodes.insert(ino);
                }
            }
        }
    }
    for files in names.values() {
        if files
            .iter()
            .all(|(_, id)| !held.contains(id) && !mapped_inodes.contains(&id.1))
        {
            for (f, id) in files {
                if named_identity(f) == Some(*id) {
                    let _ = std::fs::remove_file(f);
                }
            }
        }
    }
}

/// The (device, inode) of the file a `/proc/PID/fd/N` link opens.
pub(super) fn named_identity_of_fd(link: &std::path::Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(link).ok().map(|m| (m.dev(), m.ino()))
}

pub(super) fn valid_name(name: &str) -> Result<(), Error> {
    if name.is_empty()
        || name.len() > 100
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(Error::Usage(format!(
            "team name {name:?}: use 1 to 100 letters, digits, '-', '_' or '.'"
        )));
    }
    Ok(())
}

pub(super) fn anon_file(name: &str) -> Result<File, Error> {
    let fd = tiermem_sys::memfd::Memfd::create(name, false).map_err(|errno| Error::Sys {
        what: "creating a memfd for the team region",
        errno,
    })?;
    Ok(File::from(std::os::fd::OwnedFd::from(fd)))
}

pub(super) fn sized(f: File, len: usize, what: &'static str) -> Result<File, Error> {
    tiermem_sys::memfd::set_len(std::os::fd::AsFd::as_fd(&f), len as u64)
        .map_err(|errno| Error::Sys { what, errno })
        .map(|_| f)
}
