//! [`MemRange`]: a borrowed byte range used as the source of a copy.

use super::*;

/// A borrowed byte range of mapped memory, used as the source of a copy.
#[derive(Clone, Copy, Debug)]
pub struct MemRange<'a> {
    pub(super) addr: usize,
    pub(super) len: usize,
    pub(super) _map: PhantomData<&'a Mapping>,
}

impl<'a> MemRange<'a> {
    /// A range over ordinary Rust memory.
    pub fn from_bytes(bytes: &'a [u8]) -> MemRange<'a> {
        MemRange {
            addr: bytes.as_ptr() as usize,
            len: bytes.len(),
            _map: PhantomData,
        }
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty range.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A sub-range.
    pub fn sub(&self, offset: usize, len: usize) -> MemRange<'a> {
        assert!(offset <= self.len && len <= self.len - offset);
        MemRange {
            addr: self.addr + offset,
            len,
            _map: PhantomData,
        }
    }

    /// `pwrite`s the range to `fd` at `file_offset`; returns bytes written.
    pub fn pwrite_to(&self, fd: BorrowedFd<'_>, file_offset: u64) -> Result<usize, Errno> {
        retry_eintr(|| {
            // SAFETY: the source range is mapped readable for 'a. A raw
            // system call: glibc's pwrite is a cancellation point, and the
            // source may be a region page this thread owns (write-back), so
            // the kernel-access filter must let it through.
            unsafe {
                crate::trampoline::untrapped_syscall(
                    libc::SYS_pwrite64,
                    [
                        fd.as_raw_fd() as u64,
                        self.addr as u64,
                        self.len as u64,
                        file_offset,
                        0,
                        0,
                    ],
                ) as libc::ssize_t
            }
        })
    }

    /// Copies the bytes out.
    pub fn copy_to(&self, dst: &mut [u8]) {
        assert_eq!(dst.len(), self.len);
        // SAFETY: the range is mapped for 'a; dst is distinct Rust memory.
        unsafe { std::ptr::copy_nonoverlapping(self.addr as *const u8, dst.as_mut_ptr(), self.len) }
    }

    /// Whether the bytes equal those of `other` (same length).
    pub fn same_bytes(&self, other: MemRange<'_>) -> bool {
        if self.len != other.len {
            return false;
        }
        // SAFETY: both ranges are mapped and readable for their lifetimes;
        // u8 accepts any contents; the caller's protocol keeps writers out.
        let (a, b) = unsafe {
            (
                std::slice::from_raw_parts(self.addr as *const u8, self.len),
                std::slice::from_raw_parts(other.addr as *const u8, other.len),
            )
        };
        // Not `a == b`: that calls libc's bcmp, and this runs on the fault
        // path (eviction's VERIFY check inside a SIGBUS handler), where a
        // first call's lazy binding and a sanitizer's interceptor overflowed
        // a PTHREAD_STACK_MIN thread's stack (test_signals under ASan). An
        // OR of XORs per 256 bytes vectorizes and calls nothing.
        a.chunks(256)
            .zip(b.chunks(256))
            .all(|(x, y)| x.iter().zip(y).fold(0u8, |acc, (p, q)| acc | (p ^ q)) == 0)
    }

    /// The byte-exact runs where this range differs from `twin` (same
    /// length), as `(offset, len)` pairs appended to `out`; returns the
    /// bytes that differ. Words are compared first, so equal stretches cost
    /// one compare per 8 bytes; inside a differing word only the bytes that
    /// changed join a run, so applying the runs never writes a byte that was
    /// not changed here (multiple writers of one page, paper 5's diffs).
    pub fn diff_runs(&self, twin: MemRange<'_>, out: &mut Vec<(u32, u32)>) -> usize {
        assert_eq!(self.len, twin.len, "diff of ranges of different lengths");
        // SAFETY: both ranges are mapped and readable for their lifetimes;
        // u8 accepts any contents; the caller's protocol keeps writers out
        // (the SVM diffs its own private copy against its own twin).
        let (a, b) = unsafe {
            (
                std::slice::from_raw_parts(self.addr as *const u8, self.len),
                std::slice::from_raw_parts(twin.addr as *const u8, twin.len),
            )
        };
        let mut run: Option<(usize, usize)> = None; // (start, end)
        let mut differ = 0;
        let mut push = |start: usize, end: usize, run: &mut Option<(usize, usize)>| match run {
            Some((_, e)) if *e == start => *e = end,
            _ => {
                if let Some((s, e)) = run.take() {
                    out.push((s as u32, (e - s) as u32));
                }
                *run = Some((start, end));
            }
        };
        let words = self.len / 8;
        for (k, (x, y)) in a.chunks_exact(8).zip(b.chunks_exact(8)).enumerate() {
            let d = u64::from_ne_bytes(x.try_into().expect("8 bytes"))
                ^ u64::from_ne_bytes(y.try_into().expect("8 bytes"));
            if d == 0 {
                continue;
            }
            let mut m = byte_mask(d);
            differ += m.count_ones() as usize;
            while m != 0 {
                let s = m.trailing_zeros();
                let len = (!(m >> s)).trailing_zeros();
                push(k * 8 + s as usize, k * 8 + (s + len) as usize, &mut run);
                m &= !(((1u32 << len) - 1) << s);
            }
        }
        for i in words * 8..self.len {
            if a[i] != b[i] {
                differ += 1;
                push(i, i + 1, &mut run);
            }
        }
        if let Some((s, e)) = run {
            out.push((s as u32, (e - s) as u32));
        }
        differ
    }

    /// Whether every byte is zero.
    pub fn is_zero(&self) -> bool {
        // SAFETY: the range is mapped for 'a and readable; reading it as u8 is
        // valid for any contents; no writer touches it (caller's protocol).
        let bytes = unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) };
        // An OR over each 512-byte chunk, without an early exit inside it,
        // vectorises (a byte-by-byte `all` does not: ~10x slower on a page).
        bytes.chunks(512).all(|c| c.iter().fold(0u8, |a, &b| a | b) == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_runs_are_byte_exact() {
        let mut a = vec![0u8; 4096];
        let b = a.clone();
        a[0] = 1;
        a[2] = 1; // byte 1 unchanged: two runs
        a[7] = 1;
        a[8] = 1; // across a word boundary: one run
        a[4095] = 9;
        for x in &mut a[64..80] {
            *x = 0xff; // two whole words
        }
        a[80] = 3;
        let mut out = Vec::new();
        let n = MemRange::from_bytes(&a).diff_runs(MemRange::from_bytes(&b), &mut out);
        assert_eq!(n, 22);
        assert_eq!(out, vec![(0, 1), (2, 1), (7, 2), (64, 17), (4095, 1)]);
        // Applying the runs to a third copy writes exactly those bytes.
        let (m, _) = Mapping::anonymous(4096, &MapOptions::default()).unwrap();
        m.fill(0, 4096, 0x55);
        m.copy_runs(0, MemRange::from_bytes(&a), &out);
        let mut got = vec![0u8; 4096];
        m.copy_out(0, &mut got);
        for (i, (&g, &w)) in got.iter().zip(&a).enumerate() {
            assert_eq!(g, if w != 0 { w } else { 0x55 }, "byte {i}");
        }
        out.clear();
        assert_eq!(
            MemRange::from_bytes(&b).diff_runs(MemRange::from_bytes(&b), &mut out),
            0
        );
        assert!(out.is_empty());
    }

    #[test]
    fn diff_runs_match_a_byte_by_byte_diff() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200 {
            let b: Vec<u8> = (0..4096).map(|_| rnd() as u8).collect();
            let mut a = b.clone();
            for _ in 0..(rnd() % 300) {
                let i = (rnd() % 4096) as usize;
                a[i] = a[i].wrapping_add(1 + (rnd() % 255) as u8);
            }
            let mut want = Vec::new();
            for i in 0..4096 {
                if a[i] != b[i] {
                    match want.last_mut() {
                        Some((s, l)) if *s + *l == i as u32 => *l += 1,
                        _ => want.push((i as u32, 1u32)),
                    }
                }
            }
            let mut out = Vec::new();
            let n = MemRange::from_bytes(&a).diff_runs(MemRange::from_bytes(&b), &mut out);
            assert_eq!(out, want);
            assert_eq!(n, want.iter().map(|r| r.1 as usize).sum::<usize>());
            // The fused form writes the same bytes and counts the same.
            let (m, _) = Mapping::anonymous(4096, &MapOptions::default()).unwrap();
            m.write_bytes(0, &b);
            let (bytes, runs) = m.apply_diff(0, MemRange::from_bytes(&a), MemRange::from_bytes(&b));
            assert_eq!((bytes, runs), (n, want.len()));
            let mut got = vec![0u8; 4096];
            m.copy_out(0, &mut got);
            assert_eq!(got, a);
        }
    }
}
