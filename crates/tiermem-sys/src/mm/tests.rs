use super::*;

#[test]
fn replace_switches_between_shared_and_private() {
    let fd = crate::memfd::Memfd::create("svm-test", false).unwrap();
    fd.set_len(8192).unwrap();
    let (home, _) = Mapping::shared(fd.as_fd(), 0, 8192, 4096, &MapOptions::default()).unwrap();
    home.fill(0, 8192, 7);
    let (m, user) = Mapping::anonymous(8192, &MapOptions::default()).unwrap();
    m.replace_shared(0, 8192, fd.as_fd(), 0, Protection::ReadWrite)
        .unwrap();
    assert_eq!(
        m.user_atomics_u8(&user)[100].load(std::sync::atomic::Ordering::Relaxed),
        7
    );
    m.user_atomics_u8(&user)[5].store(9, std::sync::atomic::Ordering::Relaxed);
    let mut b = [0u8; 1];
    home.copy_out(5, &mut b);
    assert_eq!(b[0], 9);
    m.replace_private(4096, 4096, Protection::ReadWrite).unwrap();
    assert_eq!(
        m.user_atomics_u32(&user)[1024].load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    m.user_atomics_u8(&user)[4096].store(1, std::sync::atomic::Ordering::Relaxed);
    home.copy_out(4096, &mut b);
    assert_eq!(b[0], 7, "private page does not write through");
    assert!(m.replace_private(100, 4096, Protection::None).is_err());
}

#[test]
fn anonymous_mapping_reads_zero_and_keeps_writes() {
    let (m, mut user) = Mapping::anonymous(64 << 10, &MapOptions::default()).unwrap();
    assert_eq!(m.len(), 64 << 10);
    assert!(m.range(0, m.len()).is_zero());
    m.user_slice_mut::<u32>(&mut user)[100] = 0xdead_beef;
    let mut b = [0u8; 4];
    m.copy_out(400, &mut b);
    assert_eq!(u32::from_ne_bytes(b), 0xdead_beef);
}

#[test]
fn discard_ranges_drops_exactly_the_ranges_in_few_calls() {
    let (m, _) = Mapping::anonymous(256 * 4096, &MapOptions::default()).unwrap();
    m.fill(0, m.len(), 7);
    // Every other page, and one run of three: 67 ranges.
    let mut ranges: Vec<(usize, usize)> = (0..64).map(|k| (2 * k * 4096, 4096)).collect();
    ranges.extend([(130 * 4096, 4096), (140 * 4096, 3 * 4096), (200 * 4096, 4096)]);
    // SAFETY: the test owns the mapping's contents.
    let calls = unsafe { m.discard_ranges(&ranges) }.unwrap();
    let dropped = |p: usize| ranges.iter().any(|&(o, l)| p * 4096 >= o && p * 4096 < o + l);
    for p in 0..256 {
        let mut b = [0u8; 1];
        m.copy_out(p * 4096 + 17, &mut b);
        assert_eq!(b[0], if dropped(p) { 0 } else { 7 }, "page {p}");
    }
    if batched_discard() {
        assert_eq!(calls, ranges.len().div_ceil(DISCARD_VECTOR));
    } else {
        eprintln!("process_madvise(PIDFD_SELF, MADV_DONTNEED) refused here: one madvise per range");
        assert_eq!(calls, ranges.len());
    }
}

#[test]
fn zero_and_unaligned_lengths_are_rejected() {
    assert!(matches!(
        Mapping::anonymous(0, &MapOptions::default()),
        Err(MmError::BadLength { .. })
    ));
    assert!(matches!(
        Mapping::anonymous(4097, &MapOptions::default()),
        Err(MmError::BadLength { .. })
    ));
}

#[test]
fn aligned_mapping_starts_on_the_boundary() {
    let opts = MapOptions {
        align: 2 << 20,
        ..Default::default()
    };
    let (m, _) = Mapping::anonymous(4 << 20, &opts).unwrap();
    assert_eq!(m.addr() % (2 << 20), 0);
    m.fill(0, m.len(), 1);
}

#[test]
fn locked_mapping_is_resident() {
    let (m, mut user) = Mapping::anonymous(64 << 10, &MapOptions::default()).unwrap();
    m.lock(0, m.len())
        .expect("mlock of 64 KiB (RLIMIT_MEMLOCK is at least that)");
    m.user_slice_mut::<u64>(&mut user)[100] = 7;
    assert_eq!(m.user_slice_mut::<u64>(&mut user)[100], 7);
}

/// Pages filled one by one collapse into one transparent huge page; a
/// block with a hole does not (when THP is not disabled outright).
#[test]
fn collapse_makes_a_full_block_huge() {
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if thp.contains("[never]") {
        eprintln!("skipped: transparent huge pages are disabled ([never])");
        return;
    }
    let block = 2 << 20;
    let opts = MapOptions {
        align: block,
        ..Default::default()
    };
    let (m, mut user) = Mapping::anonymous(2 * block, &opts).unwrap();
    m.advise(0, m.len(), Advice::NoHugePage).unwrap();
    let words = m.user_slice_mut::<u64>(&mut user);
    for (i, w) in words.iter_mut().enumerate() {
        *w = i as u64;
    }
    m.advise(0, m.len(), Advice::HugePage).unwrap();
    match m.advise(0, block, Advice::Collapse) {
        Ok(()) => assert!(crate::pagemap::anon_huge_bytes(m.addr()).unwrap().unwrap() >= block as u64),
        // No free huge page right now: nothing to check beyond the data.
        Err(MmError::Advise { errno, .. }) if errno.raw() == libc::EAGAIN || errno.raw() == libc::ENOMEM => {}
        Err(e) => panic!("collapse of a full block: {e}"),
    }
    let words = m.user_slice_mut::<u64>(&mut user);
    assert!(words.iter().enumerate().all(|(i, &w)| w == i as u64));
}

#[test]
fn discard_zeroes_private_memory() {
    let (m, _) = Mapping::anonymous(16 << 10, &MapOptions::default()).unwrap();
    m.fill(0, 16 << 10, 0xab);
    // SAFETY: no references into m exist.
    unsafe { m.discard(4096, 4096, false).unwrap() };
    assert!(m.range(4096, 4096).is_zero());
    assert!(!m.range(0, 4096).is_zero());
}

#[test]
fn copy_between_mappings_and_files() {
    let (a, _) = Mapping::anonymous(8192, &MapOptions::default()).unwrap();
    let (b, _) = Mapping::anonymous(8192, &MapOptions::default()).unwrap();
    a.write_bytes(10, b"hello");
    b.copy_in(4096, a.range(10, 5));
    let mut out = [0u8; 5];
    b.copy_out(4096, &mut out);
    assert_eq!(&out, b"hello");

    let f = tempfile_fd();
    assert_eq!(b.pwrite(f.as_fd(), 4096, 4096, 8192).unwrap(), 4096);
    assert_eq!(a.pread(f.as_fd(), 0, 4096, 8192).unwrap(), 4096);
    a.copy_out(0, &mut out);
    assert_eq!(&out, b"hello");
}

#[test]
fn protect_and_remap() {
    let (mut m, mut user) = Mapping::anonymous(8192, &MapOptions::default()).unwrap();
    m.protect(0, 4096, Protection::Read).unwrap();
    m.protect(0, 4096, Protection::ReadWrite).unwrap();
    m.fill(0, 8192, 3);
    m.remap(&mut user, 16384).unwrap();
    assert_eq!(m.len(), 16384);
    assert_eq!(m.user_slice_mut::<u8>(&mut user)[8191], 3);
    assert_eq!(m.user_slice_mut::<u8>(&mut user)[8192], 0);
}

/// VMAs of this process that overlap `[addr, addr + len)` (other tests
/// map and unmap meanwhile: count only our range).
fn vmas_in(addr: usize, len: usize) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|l| {
            let (a, b) = l.split(' ').next()?.split_once('-')?;
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            ))
        })
        .filter(|&(a, b)| a < addr + len && b > addr)
        .count()
}

#[test]
fn moved_pages_replace_a_read_only_view_and_merge() {
    use crate::memfd::Memfd;
    let len = 1 << 20;
    let fd = Memfd::create("move", false).unwrap();
    fd.set_len(len as u64).unwrap();
    let (far, _) = Mapping::shared(fd.as_fd(), 0, len, 4096, &MapOptions::default()).unwrap();
    far.fill(0, len, 0x5a);
    let ro = MapOptions {
        read_only: true,
        align: 2 << 20,
        ..Default::default()
    };
    let (view, _) = Mapping::shared(fd.as_fd(), 0, len, 4096, &ro).unwrap();
    assert_eq!(view.addr() % (2 << 20), 0);
    let (near, _) = Mapping::anonymous(len, &MapOptions::default()).unwrap();
    for k in 0..4 {
        let off = k * (len / 4);
        near.populate_write(off, len / 4).unwrap();
        near.copy_in(off, far.range(off, len / 4));
        near.move_pages_to(off, len / 4, &view, off).unwrap();
    }
    assert!(view.range(0, len).same_bytes(far.range(0, len)));
    // The moved pieces merged into one VMA; the near range stays mapped
    // (zeros), the far view was replaced.
    assert_eq!(vmas_in(view.addr(), len), 1, "moved pieces merged");
    assert!(near.range(0, 4096).is_zero());
    far.unmap_shared_pages(0, len).unwrap();
    assert!(
        far.range(0, 1).same_bytes(MemRange::from_bytes(&[0x5a])),
        "data stays in the file"
    );
    view.fill(0, 4096, 1); // writable now: the pages are the near copies
    assert!(far.range(0, 1).same_bytes(MemRange::from_bytes(&[0x5a])));
    assert!(matches!(
        near.move_pages_to(0, 4096, &view, 4096 * 3 + 1),
        Err(MmError::Remap { .. })
    ));
}

#[test]
fn dontfork_mapping_is_absent_in_the_child() {
    let opts = MapOptions {
        dontfork: true,
        ..Default::default()
    };
    let (m, _) = Mapping::anonymous(4096, &opts).unwrap();
    let maps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let line = maps
        .lines()
        .skip_while(|l| !l.starts_with(&format!("{:x}-", m.addr())))
        .find(|l| l.starts_with("VmFlags"))
        .unwrap()
        .to_owned();
    assert!(line.contains(" dc"), "{line}");
}

use std::os::fd::{AsFd, OwnedFd};
fn tempfile_fd() -> OwnedFd {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags_tmp()
        .open(std::env::temp_dir())
        .unwrap();
    OwnedFd::from(f)
}
trait TmpFlag {
    fn custom_flags_tmp(&mut self) -> &mut Self;
}
impl TmpFlag for std::fs::OpenOptions {
    fn custom_flags_tmp(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_TMPFILE)
    }
}

#[test]
fn streaming_copy_matches_memcpy_aligned_or_not() {
    let len = 3 * 4096;
    let (src, _) = Mapping::anonymous(len, &MapOptions::default()).unwrap();
    let (a, _) = Mapping::anonymous(len, &MapOptions::default()).unwrap();
    let (b, _) = Mapping::anonymous(len, &MapOptions::default()).unwrap();
    for i in 0..len {
        src.fill(i, 1, (i * 7 % 251) as u8);
    }
    // Whole aligned pages (streamed), then an unaligned tail (memcpy).
    a.copy_in_streaming(0, src.range(0, 2 * 4096));
    a.copy_in_streaming(2 * 4096 + 8, src.range(2 * 4096 + 8, 100));
    b.copy_in(0, src.range(0, 2 * 4096));
    b.copy_in(2 * 4096 + 8, src.range(2 * 4096 + 8, 100));
    assert!(a.range(0, len).same_bytes(b.range(0, len)));
    assert!(!a.range(0, 4096).is_zero() && a.range(2 * 4096 + 108, 4096 - 108).is_zero());
}

#[test]
fn shared_at_maps_the_same_file_at_a_chosen_address() {
    let fd = crate::memfd::Memfd::create("at", false).unwrap();
    fd.set_len(8192).unwrap();
    let (a, _ua) = Mapping::shared(fd.as_fd(), 0, 8192, 4096, &MapOptions::default()).unwrap();
    a.write_bytes(10, b"x");
    let want = a.addr();
    // Occupied: refused, the existing mapping untouched.
    assert!(Mapping::shared_at(fd.as_fd(), 0, 8192, 4096, want).is_err());
    drop(a);
    let (b, _ub) = Mapping::shared_at(fd.as_fd(), 0, 8192, 4096, want).unwrap();
    assert_eq!(b.addr(), want);
    let mut got = [0u8];
    b.copy_out(10, &mut got);
    assert_eq!(&got, b"x");
    assert!(Mapping::shared_at(fd.as_fd(), 0, 100, 4096, want).is_err());
    assert!(Mapping::shared_at(fd.as_fd(), 0, 4096, 4096, want + 1).is_err());
}
