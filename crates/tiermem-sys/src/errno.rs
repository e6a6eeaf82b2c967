//! The raw error number of a failed system call.

use std::fmt;

/// A raw `errno` value, kept as the kernel returned it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// The calling thread's current `errno`.
    pub fn last() -> Errno {
        Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }

    /// The raw number.
    pub fn raw(self) -> i32 {
        self.0
    }

    /// `EAGAIN`: try again (uffd ioctls answer this while the address space changes).
    pub fn is_again(self) -> bool {
        self.0 == libc::EAGAIN
    }

    /// `EINTR`.
    pub fn is_interrupted(self) -> bool {
        self.0 == libc::EINTR
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Errno({}: {})", self.0, self)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // io::Error's Display includes strerror and the number.
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> Self {
        std::io::Error::from_raw_os_error(e.0)
    }
}

/// Turns a `-1`-on-error return value into a `Result`.
pub(crate) fn check(ret: libc::c_int) -> Result<libc::c_int, Errno> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

/// Same for `ssize_t` returns.
pub(crate) fn check_size(ret: libc::ssize_t) -> Result<usize, Errno> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_error() {
        let s = Errno(libc::ENOSPC).to_string();
        assert!(s.contains("No space left"), "{s}");
        assert!(Errno(libc::EAGAIN).is_again());
        assert!(!Errno(libc::EIO).is_again());
        assert!(check(-1).is_err());
        assert_eq!(check(3).unwrap(), 3);
    }
}
