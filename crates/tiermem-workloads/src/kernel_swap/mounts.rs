//! `/proc/self/mountinfo` (mount points, filesystem types) and the kernel's `\ooo` path escaping.

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// Undoes the kernel's `\ooo` escaping of paths in `/proc/swaps` and
/// `/proc/self/mountinfo`.
pub(super) fn unescape_octal(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\' && i + 3 < s.len() && s[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = s[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
            out.push(v as u8);
            i += 4;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

/// One line of `/proc/self/mountinfo`, the parts we use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Mount {
    pub(super) mount_point: PathBuf,
    pub(super) fstype: String,
}

pub(super) fn mounts() -> Vec<Mount> {
    fs::read("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

pub(super) fn parse_mountinfo(text: &[u8]) -> Vec<Mount> {
    text.split(|&b| b == b'\n')
        .filter_map(|line| {
            let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            // id parent major:minor root mount_point options [optional...] - fstype source super
            let mount_point = fields.get(4)?;
            let sep = fields.iter().position(|f| *f == b"-")?;
            let fstype = fields.get(sep + 1)?;
            Some(Mount {
                mount_point: PathBuf::from(OsString::from_vec(unescape_octal(mount_point))),
                fstype: String::from_utf8_lossy(fstype).into_owned(),
            })
        })
        .collect()
}

/// The filesystem type holding `path` (the longest mount point that is a
/// prefix of its canonical form).
pub(super) fn fstype_of(path: &Path) -> Option<String> {
    let path = path.canonicalize().ok()?;
    mounts()
        .into_iter()
        .filter(|m| path.starts_with(&m.mount_point))
        // Later mounts over the same point hide earlier ones: on equal
        // length, the last one wins.
        .fold(None::<Mount>, |best, m| match best {
            Some(b) if b.mount_point.as_os_str().len() > m.mount_point.as_os_str().len() => Some(b),
            _ => Some(m),
        })
        .map(|m| m.fstype)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mountinfo() {
        let text = b"22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
35 22 0:30 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
40 22 0:31 / /mnt/with\\040space rw - tmpfs tmpfs rw\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].mount_point, Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(m[1].fstype, "cgroup2");
        assert_eq!(m[2].mount_point, Path::new("/mnt/with space"));
        assert_eq!(m[2].fstype, "tmpfs");
    }

    #[test]
    fn unescapes_octal() {
        assert_eq!(unescape_octal(b"a\\040b\\011c\\134"), b"a b\tc\\".to_vec());
        // Not an escape: too short, or not octal digits.
        assert_eq!(unescape_octal(b"x\\04"), b"x\\04".to_vec());
        assert_eq!(unescape_octal(b"x\\089y"), b"x\\089y".to_vec());
        // The root is always mounted: some mount holds /.
        assert!(fstype_of(Path::new("/")).is_some());
    }
}
