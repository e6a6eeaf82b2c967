//! Tests of the C API through its exported functions, called as a C program calls them.

use std::ffi::{c_char, c_int, c_void, CStr, CString, OsStr};
use std::mem::{offset_of, size_of, MaybeUninit};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::ptr;

use tiermem::{Config, ErrorCode};
use tiermem_sys::hugetlb::{self, HugePageSize};

use super::*;
use crate::config::config_from_c;
use crate::ffi::{call, Failure};

const PAGE: u64 = 4096;

fn last_error() -> String {
    // SAFETY: tm_last_error returns a valid NUL-terminated string that
    // lives until this thread's next tiermem call; we copy it at once.
    unsafe { CStr::from_ptr(tm_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn config(virt: u64, near: u64) -> tm_config {
    let mut c = MaybeUninit::<tm_config>::uninit();
    // SAFETY: c is a writable tm_config of this version.
    unsafe { tm_config_init(c.as_mut_ptr(), virt, near) };
    // SAFETY: tm_config_init wrote every field.
    unsafe { c.assume_init() }
}

/// Creates a region, returning the code and the handle.
fn create(c: &tm_config) -> (c_int, *mut tm_region) {
    let mut r: *mut tm_region = ptr::dangling_mut();
    // SAFETY: c is an initialised tm_config whose far_path (if any)
    // outlives the call; r is writable.
    let rc = unsafe { tm_region_create(c, &mut r) };
    (rc, r)
}

/// Expects creation to fail with `code` and a message containing `what`.
#[track_caller]
fn expect_create_error(c: &tm_config, code: c_int, what: &str) {
    let (rc, r) = create(c);
    assert_eq!(rc, code, "{}", last_error());
    assert!(r.is_null(), "*out must be NULL after a failure");
    let msg = last_error();
    assert!(msg.starts_with("tm_region_create: "), "{msg}");
    assert!(msg.contains(what), "{msg:?} should mention {what:?}");
}

fn stats(r: *const tm_region) -> tm_stats {
    let mut s = tm_stats {
        struct_size: size_of::<tm_stats>() as u32,
        ..tm_stats::default()
    };
    // SAFETY: r is a live handle; s is a full tm_stats.
    assert_eq!(unsafe { tm_region_stats(r, &mut s) }, TM_OK, "{}", last_error());
    s
}

#[test]
fn config_init_gives_core_defaults() {
    let c = config(1 << 30, 1 << 28);
    let d = Config::new(1 << 30, 1 << 28);
    assert_eq!(c.struct_size as usize, size_of::<tm_config>());
    assert_eq!((c.virt_bytes, c.near_bytes), (1 << 30, 1 << 28));
    assert_eq!(c.page_size_bytes, 4096);
    assert_eq!(c.far_kind, TM_FAR_MEMORY);
    assert!(c.far_path.is_null());
    assert_eq!(c.far_direct, 0);
    assert_eq!(c.policy, TM_POLICY_FIFO);
    assert_eq!(c.fault_path, TM_FAULT_IN_CONTEXT);
    assert_eq!(c.dirty_tracking, TM_DIRTY_WP_FAULT);
    assert_eq!(c.evict_batch_pages as usize, d.evict_batch_pages);
    assert_eq!(c.handler_threads as usize, d.handler_threads);
    // SAFETY: c is initialised; far_path is NULL.
    assert_eq!(unsafe { config_from_c(&c) }.unwrap(), d, "round trip");
    // NULL is refused without a crash.
    // SAFETY: NULL is allowed.
    unsafe { tm_config_init(ptr::null_mut(), 1, 1) };
    assert!(last_error().contains("cfg is NULL"));
}

#[test]
fn movers_auto_is_asked_for_and_read_back() {
    let mut c = config(1 << 30, 1 << 28);
    c.movers = TM_MOVERS_AUTO;
    // SAFETY: c is initialised; far_path is NULL.
    let rust = unsafe { config_from_c(&c) }.unwrap();
    assert_eq!((rust.movers, rust.movers_auto), (1, true));
    assert_eq!(tm_config::from_defaults(&rust).movers, TM_MOVERS_AUTO);
    c.movers = 2;
    // SAFETY: as above.
    let rust = unsafe { config_from_c(&c) }.unwrap();
    assert_eq!((rust.movers, rust.movers_auto), (2, false));
}

#[test]
fn create_write_through_evictions_and_destroy() {
    let (virt, near) = (8u64 << 20, 2u64 << 20);
    let (rc, r) = create(&config(virt, near));
    assert_eq!(rc, TM_OK, "{}", last_error());
    // SAFETY: r is live.
    let (base, size) = unsafe { (tm_region_base(r), tm_region_size(r)) };
    assert!(!base.is_null());
    assert_eq!(base as usize % PAGE as usize, 0);
    assert_eq!(size as u64, virt);
    let words = size / 8;
    let p = base.cast::<u64>();
    for i in 0..words {
        // SAFETY: i < words, inside the region's range, which the
        // region keeps mapped until destroy; faults are served.
        unsafe { p.add(i).write_volatile(i as u64 ^ 0xa5a5) };
    }
    for i in 0..words {
        // SAFETY: as above.
        assert_eq!(unsafe { p.add(i).read_volatile() }, i as u64 ^ 0xa5a5, "word {i}");
    }
    let s = stats(r);
    assert_eq!(s.struct_size as usize, size_of::<tm_stats>());
    // At most one zero fill per page (fault-around fills neighbours).
    assert!(s.faults_zero_fill > 0 && s.faults_zero_fill <= virt / PAGE);
    assert!(s.evictions > 0 && s.evict_calls > 0 && s.write_backs > 0);
    assert!(s.faults_far_fill > 0 && s.bytes_in > 0 && s.bytes_out > 0);
    assert!(s.resident_bytes <= near);
    assert!(s.threads >= 1);
    assert!(s.fault_p50_ns <= s.fault_p90_ns && s.fault_p90_ns <= s.fault_p99_ns);
    let split = s.time_lock_list_ns + s.time_pte_ns + s.time_tlb_ns + s.time_transfer_ns + s.time_misc_ns;
    assert!(split >= s.fault_ns_total, "costs cover fault time: {s:?}");

    // SAFETY: r is live.
    let n = unsafe { tm_region_evict_all(r) };
    assert!(n > 0, "{n}: {}", last_error());
    assert_eq!(stats(r).resident_bytes, 0);
    // SAFETY: r is live; the first page is inside the range.
    assert_eq!(unsafe { tm_region_discard(r, 0, PAGE as usize) }, TM_OK);
    // SAFETY: as above.
    assert_eq!(unsafe { p.read_volatile() }, 0, "discarded pages read as zero");
    // SAFETY: as above.
    let last = unsafe { p.add(words - 1).read_volatile() };
    assert_eq!(last, (words as u64 - 1) ^ 0xa5a5);
    // SAFETY: r is live; the arguments are checked.
    assert_eq!(unsafe { tm_region_discard(r, 1, PAGE as usize) }, TM_EINVAL);
    assert!(last_error().contains("page aligned"));

    // SAFETY: r is live and not used afterwards.
    assert_eq!(unsafe { tm_region_destroy(r) }, TM_OK);
    // SAFETY: NULL is a no-op.
    assert_eq!(unsafe { tm_region_destroy(ptr::null_mut()) }, TM_OK);
}

#[test]
fn handler_thread_and_wp_async_configs_work() {
    for (fp, dt) in [
        (TM_FAULT_HANDLER_THREAD, TM_DIRTY_WP_FAULT),
        (TM_FAULT_IN_CONTEXT, TM_DIRTY_WP_ASYNC),
    ] {
        let mut c = config(1 << 20, 64 << 10);
        c.fault_path = fp;
        c.dirty_tracking = dt;
        c.evict_batch_pages = 4;
        let (rc, r) = create(&c);
        if rc == TM_EUNSUPPORTED {
            eprintln!("skipping {fp}/{dt}: {}", last_error());
            continue;
        }
        assert_eq!(rc, TM_OK, "{}", last_error());
        // SAFETY: r is live; every byte of the range is written and read
        // through the mapping the region keeps.
        unsafe {
            let p = tm_region_base(r).cast::<u8>();
            let n = tm_region_size(r);
            for i in (0..n).step_by(512) {
                p.add(i).write_volatile((i / 512) as u8);
            }
            for i in (0..n).step_by(512) {
                assert_eq!(p.add(i).read_volatile(), (i / 512) as u8);
            }
        }
        assert!(stats(r).evictions > 0);
        // SAFETY: r is live and not used afterwards.
        assert_eq!(unsafe { tm_region_destroy(r) }, TM_OK);
    }
}

#[test]
fn bad_configs_give_einval_with_a_message() {
    expect_create_error(&config(0, 1 << 20), TM_EINVAL, "virt_bytes must not be zero");
    expect_create_error(
        &config(PAGE + 1, 1 << 20),
        TM_EINVAL,
        "not a multiple of the page size",
    );
    expect_create_error(&config(1 << 20, 3 * PAGE), TM_EINVAL, "minimum");
    expect_create_error(&config(1 << 20, 0), TM_EINVAL, "near_bytes must not be zero");

    // One field of a good config set wrong, and what the message names.
    type Spoil = fn(&mut tm_config);
    let cases: [(Spoil, &str); 12] = [
        (|c| c.page_size_bytes = 8192, "page_size_bytes = 8192"),
        (|c| c.far_kind = 7, "far_kind = 7"),
        (|c| c.policy = -1, "policy = -1"),
        (|c| c.fault_path = 2, "fault_path = 2"),
        (|c| c.dirty_tracking = 9, "dirty_tracking = 9"),
        (|c| c.evict_batch_pages = 0, "evict_batch_pages"),
        (|c| c.far_direct = 2, "far_direct = 2"),
        (|c| c.far_direct = 1, "TM_FAR_MEMORY"),
        (|c| c.far_kind = TM_FAR_FILE, "far_path is NULL"),
        (|c| c.reserved1 = 1, "reserved"),
        (|c| c.struct_size = 16, "struct_size = 16"),
        (|c| c.struct_size = 1 << 20, "implausibly large"),
    ];
    for (set, what) in cases {
        let mut c = config(1 << 20, 1 << 20);
        set(&mut c);
        expect_create_error(&c, TM_EINVAL, what);
    }
}

#[test]
fn larger_struct_from_a_newer_caller() {
    #[repr(C)]
    struct Newer {
        base: tm_config,
        extra: u64,
    }
    let mut n = Newer {
        base: config(1 << 20, 1 << 20),
        extra: 0,
    };
    n.base.struct_size = size_of::<Newer>() as u32;
    let (rc, r) = create(&n.base);
    assert_eq!(rc, TM_OK, "zeroed unknown fields are accepted: {}", last_error());
    // SAFETY: r is live and not used afterwards.
    assert_eq!(unsafe { tm_region_destroy(r) }, TM_OK);
    n.extra = 1;
    expect_create_error(
        &n.base,
        TM_EINVAL,
        &format!("byte {} is set", size_of::<tm_config>()),
    );
}

#[test]
fn null_pointers_give_einval() {
    let mut r: *mut tm_region = ptr::null_mut();
    // SAFETY: NULL cfg is allowed; r is writable.
    assert_eq!(unsafe { tm_region_create(ptr::null(), &mut r) }, TM_EINVAL);
    assert_eq!(last_error(), "tm_region_create: cfg is NULL");
    let c = config(1 << 20, 1 << 20);
    // SAFETY: NULL out is allowed.
    assert_eq!(unsafe { tm_region_create(&c, ptr::null_mut()) }, TM_EINVAL);
    assert_eq!(last_error(), "tm_region_create: out is NULL");
    // SAFETY: NULL handles are allowed everywhere.
    unsafe {
        assert!(tm_region_base(ptr::null()).is_null());
        assert_eq!(tm_region_size(ptr::null()), 0);
        assert!(last_error().contains("NULL"));
        let mut s = tm_stats {
            struct_size: size_of::<tm_stats>() as u32,
            ..Default::default()
        };
        assert_eq!(tm_region_stats(ptr::null(), &mut s), TM_EINVAL);
        assert_eq!(tm_region_evict_all(ptr::null_mut()), TM_EINVAL);
        assert_eq!(tm_region_discard(ptr::null_mut(), 0, 0), TM_EINVAL);
    }
    let (rc, r) = create(&c);
    assert_eq!(rc, TM_OK);
    // SAFETY: r is live; NULL out is allowed.
    assert_eq!(unsafe { tm_region_stats(r, ptr::null_mut()) }, TM_EINVAL);
    let mut s = tm_stats::default();
    // SAFETY: as above; struct_size 0 is refused before any write.
    assert_eq!(unsafe { tm_region_stats(r, &mut s) }, TM_EINVAL);
    assert!(last_error().contains("sizeof(struct tm_stats)"));
    // SAFETY: r is live and not used afterwards.
    assert_eq!(unsafe { tm_region_destroy(r) }, TM_OK);
}

#[test]
fn stats_fill_what_fits() {
    let (rc, r) = create(&config(1 << 20, 1 << 20));
    assert_eq!(rc, TM_OK);
    // SAFETY: r is live; the first word is inside the range.
    unsafe { tm_region_base(r).cast::<u64>().write_volatile(1) };
    // An older, shorter struct: the header and the first two counters.
    let mut short = [u64::MAX; 3];
    short[0] = 24; // struct_size = 24, reserved0 = 0 (little endian)
                   // SAFETY: `short` is 24 writable bytes, aligned for tm_stats.
    assert_eq!(unsafe { tm_region_stats(r, short.as_mut_ptr().cast()) }, TM_OK);
    assert_eq!(short, [24, 1, 0]);
    // A newer, longer struct: unknown tail zeroed.
    let mut long = [u64::MAX; 30];
    long[0] = 240;
    // SAFETY: `long` is 240 writable bytes, aligned for tm_stats.
    assert_eq!(unsafe { tm_region_stats(r, long.as_mut_ptr().cast()) }, TM_OK);
    assert_eq!(long[0], 240, "struct_size is not written");
    assert_eq!(long[1], 1, "one zero fill");
    assert!(long[23..].iter().all(|&w| w == 0), "{long:?}");
    let mut odd = [0u64; 3];
    odd[0] = 20;
    // SAFETY: as above; a size that is not a multiple of 8 is refused.
    assert_eq!(unsafe { tm_region_stats(r, odd.as_mut_ptr().cast()) }, TM_EINVAL);
    // SAFETY: r is live and not used afterwards.
    assert_eq!(unsafe { tm_region_destroy(r) }, TM_OK);
}

#[test]
fn far_files_take_any_bytes_and_missing_directories_fail() {
    let missing = c"/nonexistent-tiermem-dir-\xff/far";
    let mut c = config(1 << 20, 1 << 19);
    c.far_kind = TM_FAR_FILE;
    c.far_path = missing.as_ptr();
    expect_create_error(&c, TM_EINVAL, "directory does not exist");

    // A file name that is not UTF-8, in a directory that exists.
    let dir = std::env::temp_dir();
    let mut name = dir.as_os_str().as_bytes().to_vec();
    name.extend_from_slice(b"/tiermem-capi-\xe9\xff-");
    name.extend_from_slice(std::process::id().to_string().as_bytes());
    let path = CString::new(name.clone()).unwrap();
    c.far_path = path.as_ptr();
    let (rc, r) = create(&c);
    assert_eq!(rc, TM_OK, "{}", last_error());
    let file = PathBuf::from(OsStr::from_bytes(&name));
    assert!(file.exists(), "the far file is created under its exact name");
    // SAFETY: r is live.
    unsafe {
        let p = tm_region_base(r).cast::<u8>();
        for i in (0..tm_region_size(r)).step_by(PAGE as usize) {
            p.add(i).write_volatile(3);
        }
    }
    assert!(stats(r).bytes_out > 0, "pages went to the file");
    // SAFETY: r is live and not used afterwards.
    assert_eq!(unsafe { tm_region_destroy(r) }, TM_OK);
    assert!(!file.exists(), "the far file goes with the region");
}

#[test]
fn huge_pages_beyond_the_pool_give_ehugepages() {
    let available = hugetlb::pool(HugePageSize::Size2M).map_or(0, |p| p.available());
    let huge = 2u64 << 20;
    let near = (available + 4) * huge;
    let mut c = config(2 * near, near);
    c.page_size_bytes = huge;
    expect_create_error(&c, TM_EHUGEPAGES, "nr_hugepages");
}

#[test]
fn error_strings() {
    assert_eq!(tm_strerror_str(TM_OK), "success");
    for code in TM_EFORKED..=TM_EINVAL {
        let e = ErrorCode::from_raw(code).unwrap();
        assert_eq!(tm_strerror_str(code), e.message(), "code {code}");
    }
    assert_eq!(tm_strerror_str(1), "unknown error code");
    assert_eq!(tm_strerror_str(-11), "unknown error code");
    // A fresh thread has no error yet.
    std::thread::spawn(|| assert_eq!(last_error(), ""))
        .join()
        .unwrap();
}

fn tm_strerror_str(code: c_int) -> String {
    // SAFETY: tm_strerror always returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(tm_strerror(code)) }
        .to_str()
        .unwrap()
        .to_owned()
}

#[test]
fn panics_become_einternal() {
    let r: Result<(), c_int> = call("tm_test", || panic!("boom {}", 42));
    assert_eq!(r, Err(TM_EINTERNAL));
    let msg = last_error();
    assert!(
        msg.starts_with("tm_test: internal error (panic: boom 42)"),
        "{msg}"
    );
    let r: Result<(), c_int> = call("tm_test", || std::panic::panic_any(7u8));
    assert_eq!(r, Err(TM_EINTERNAL));
    assert!(last_error().contains("(no message)"));
    // A NUL inside a message does not truncate or lose it.
    let r: Result<(), c_int> = call("tm_test", || Err(Failure::invalid("a\0b")));
    assert_eq!(r, Err(TM_EINVAL));
    assert_eq!(last_error(), "tm_test: a\\0b");
}

/// The only test that touches the process-wide region: it sets the
/// environment before the first use.
#[test]
fn global_malloc_and_free() {
    std::env::set_var("TIERMEM_FAR", "16M");
    std::env::set_var("TIERMEM_NEAR", "4M");
    // SAFETY: NULL is a no-op.
    assert_eq!(unsafe { tm_free_global(ptr::null_mut()) }, TM_OK);
    let n = 8 << 20;
    let p = tm_malloc_global(n).cast::<u8>();
    assert!(!p.is_null(), "{}", last_error());
    assert_eq!(p as usize % PAGE as usize, 0);
    for i in (0..n).step_by(1000) {
        // SAFETY: i < n, inside the allocation.
        unsafe { p.add(i).write_volatile(i as u8) };
    }
    for i in (0..n).step_by(1000) {
        // SAFETY: as above.
        assert_eq!(unsafe { p.add(i).read_volatile() }, i as u8);
    }
    assert!(
        tm_malloc_global(12 << 20).is_null(),
        "TIERMEM_FAR=16M was applied"
    );
    assert!(last_error().contains("no free range"), "{}", last_error());
    let small = tm_malloc_global(10);
    assert!(!small.is_null());
    let mut local = 0u64;
    // SAFETY: the pointer is checked, never dereferenced.
    let rc = unsafe { tm_free_global(ptr::addr_of_mut!(local).cast()) };
    assert_eq!(rc, TM_EINVAL);
    assert!(
        last_error().contains("not in the global region"),
        "{}",
        last_error()
    );
    // SAFETY: both came from tm_malloc_global and are not used again.
    unsafe {
        assert_eq!(tm_free_global(small), TM_OK);
        assert_eq!(tm_free_global(p.cast()), TM_OK);
        assert_eq!(tm_free_global(p.cast()), TM_EINVAL, "double free is detected");
    }
    assert!(last_error().contains("not allocated by tm_malloc_global"));
}

#[test]
fn overshadow_through_the_c_api() {
    let far = tm_far_alloc(3 * PAGE as usize);
    assert!(!far.is_null(), "{}", last_error());
    let words = far.cast::<u64>();
    // SAFETY: far maps 3 pages read-write.
    unsafe { words.add(700).write(77) };
    let mut to: *mut c_void = ptr::null_mut();
    // SAFETY: to is writable.
    let rc = unsafe { tm_overshadow_create(far, 3 * PAGE as usize, &mut to) };
    assert_eq!(rc, TM_OK);
    // SAFETY: to maps 3 pages, readable at once; a write waits.
    unsafe {
        assert_eq!(to.cast::<u64>().add(700).read_volatile(), 77);
        to.cast::<u64>().add(1).write_volatile(5);
    }
    assert_eq!(tm_overshadow_wait(to), TM_OK);
    assert_eq!(tm_overshadow_test(to), 1);
    // SAFETY: as above; from is unchanged by writes to `to`.
    unsafe {
        assert_eq!(to.cast::<u64>().add(1).read_volatile(), 5);
        assert_eq!(words.add(1).read(), 0);
    }
    assert_eq!(tm_overshadow_destroy(to), TM_OK);
    assert_eq!(tm_overshadow_destroy(to), TM_EINVAL, "double destroy");
    assert!(last_error().contains("not the `to` of a live overshadow"));
    assert_eq!(tm_overshadow_test(to), TM_EINVAL);
    assert_eq!(tm_overshadow_wait(ptr::null_mut()), TM_EINVAL);
    // SAFETY: NULL out pointer is refused before any write.
    let rc = unsafe { tm_overshadow_create(far, 4096, ptr::null_mut()) };
    assert_eq!(rc, TM_EINVAL);
    // SAFETY: to is writable.
    unsafe {
        assert_eq!(tm_overshadow_create_ex(far, 4096, 9, &mut to), TM_EINVAL);
        assert!(to.is_null());
        assert_eq!(tm_overshadow_create(far, 0, &mut to), TM_EINVAL);
        assert_eq!(
            tm_overshadow_create(far.cast::<u8>().add(1).cast(), 4096, &mut to),
            TM_EINVAL
        );
        let stack = [0u8; 8];
        let page = (stack.as_ptr() as usize & !4095) as *const c_void;
        assert_eq!(tm_overshadow_create(page, 4096, &mut to), TM_EINVAL);
        assert!(last_error().contains("not far memory"));
    }
    assert_eq!(tm_far_free(far), TM_OK);
    assert_eq!(tm_far_free(far), TM_EINVAL, "double free");
    assert_eq!(tm_far_free(ptr::null_mut()), TM_OK);
    let mut out: *mut c_void = ptr::dangling_mut();
    let path = CString::new("/nonexistent/far").unwrap();
    // SAFETY: valid string and out pointer.
    let rc = unsafe { tm_far_map_file(path.as_ptr(), 0, 4096, 0, &mut out) };
    assert_eq!(rc, TM_EINVAL);
    assert!(out.is_null());
}

/// The header and this crate must agree on every number and on the
/// layout of both structs.
#[test]
fn header_matches_the_abi() {
    let header = include_str!("../../../include/tiermem.h");
    let mut defines = std::collections::HashMap::new();
    for line in header.lines() {
        let mut it = line.split_whitespace();
        if it.next() != Some("#define") {
            continue;
        }
        let (Some(name), Some(value)) = (it.next(), it.next()) else {
            continue;
        };
        if let Ok(v) = value.trim_matches(['(', ')']).parse::<i64>() {
            defines.insert(name.to_owned(), v);
        }
    }
    let expected: &[(&str, c_int)] = &[
        ("TIERMEM_VERSION_MAJOR", TIERMEM_VERSION_MAJOR),
        ("TIERMEM_VERSION_MINOR", TIERMEM_VERSION_MINOR),
        ("TIERMEM_VERSION_PATCH", TIERMEM_VERSION_PATCH),
        ("TM_OK", TM_OK),
        ("TM_EINVAL", TM_EINVAL),
        ("TM_ENOMEM", TM_ENOMEM),
        ("TM_EUNSUPPORTED", TM_EUNSUPPORTED),
        ("TM_EIO", TM_EIO),
        ("TM_ENOSPC", TM_ENOSPC),
        ("TM_EHUGEPAGES", TM_EHUGEPAGES),
        ("TM_EPERM", TM_EPERM),
        ("TM_EINTERNAL", TM_EINTERNAL),
        ("TM_FAR_MEMORY", TM_FAR_MEMORY),
        ("TM_FAR_FILE", TM_FAR_FILE),
        ("TM_POLICY_FIFO", TM_POLICY_FIFO),
        ("TM_POLICY_CLOCK", TM_POLICY_CLOCK),
        ("TM_POLICY_SCAN", TM_POLICY_SCAN),
        ("TM_POLICY_AUTO", TM_POLICY_AUTO),
        ("TM_INSTALL_COPY", TM_INSTALL_COPY),
        ("TM_INSTALL_MOVE", TM_INSTALL_MOVE),
        ("TM_INSTALL_AUTO", TM_INSTALL_AUTO),
        ("TM_MOVERS_AUTO", TM_MOVERS_AUTO as c_int),
        ("TM_SEGMENT_2M", TM_SEGMENT_2M),
        ("TM_SEGMENT_NO_FALLBACK", TM_SEGMENT_NO_FALLBACK),
        ("TM_ADVICE_NORMAL", TM_ADVICE_NORMAL),
        ("TM_ADVICE_SEQUENTIAL", TM_ADVICE_SEQUENTIAL),
        ("TM_ADVICE_RANDOM", TM_ADVICE_RANDOM),
        ("TM_ADVICE_WILLNEED", TM_ADVICE_WILLNEED),
        ("TM_ADVICE_DONTNEED", TM_ADVICE_DONTNEED),
        ("TM_FAULT_IN_CONTEXT", TM_FAULT_IN_CONTEXT),
        ("TM_FAULT_HANDLER_THREAD", TM_FAULT_HANDLER_THREAD),
        ("TM_DIRTY_WP_FAULT", TM_DIRTY_WP_FAULT),
        ("TM_DIRTY_WP_ASYNC", TM_DIRTY_WP_ASYNC),
        ("TM_EWORKER", TM_EWORKER),
        ("TM_EFORKED", TM_EFORKED),
        ("TM_TEAM_SHARER_AWARE", TM_TEAM_SHARER_AWARE),
        ("TM_TEAM_PIN", TM_TEAM_PIN),
        ("TM_TEAM_NO_FAULT_AROUND", TM_TEAM_NO_FAULT_AROUND),
        ("TM_TEAM_DIRTY_TRACKING", TM_TEAM_DIRTY_TRACKING),
        ("TM_TEAM_PROCESSES", TM_TEAM_PROCESSES),
        ("TM_TEAM_THREADS", TM_TEAM_THREADS),
        ("TM_OVERSHADOW_PER_PAGE", TM_OVERSHADOW_PER_PAGE),
        ("TM_OVERSHADOW_WHOLE", TM_OVERSHADOW_WHOLE),
        ("TM_SVM_NONCOHERENT", TM_SVM_NONCOHERENT),
        ("TM_SVM_PIN", TM_SVM_PIN),
        ("TM_SVM_SPM", TM_SVM_SPM),
        ("TM_SVM_DSM", TM_SVM_DSM),
    ];
    for (name, value) in expected {
        assert_eq!(defines.get(*name), Some(&i64::from(*value)), "{name}");
    }
    assert_eq!(defines.get("TM_PAGE_THP"), Some(&(TM_PAGE_THP as i64)));
    assert_eq!(
        defines.len(),
        expected.len() + 1,
        "numeric macros in the header without a Rust twin: {defines:?}"
    );
    assert_eq!(TIERMEM_VERSION, tm_version());
    assert_eq!(
        format!("{TIERMEM_VERSION_MAJOR}.{TIERMEM_VERSION_MINOR}.{TIERMEM_VERSION_PATCH}"),
        env!("CARGO_PKG_VERSION")
    );

    macro_rules! offsets {
        ($t:ty: $($f:ident),*) => { vec![$((stringify!($f), offset_of!($t, $f))),*] };
    }
    let config = offsets!(tm_config: struct_size, reserved0, virt_bytes, near_bytes,
        page_size_bytes, far_kind, reserved1, far_path, far_direct, policy, fault_path,
        dirty_tracking, evict_batch_pages, handler_threads, movers, prefetch_off,
        prefetch_max_pages, install, mover_cpus, mover_cpu_count, fault_around_off);
    let stats = offsets!(tm_stats: struct_size, reserved0, faults_zero_fill, faults_far_fill,
        faults_write_protect, evictions, evict_calls, write_backs, bytes_in, bytes_out,
        io_errors, poisoned_pages, resident_bytes, fault_ns_total, fault_p50_ns, fault_p90_ns,
        fault_p99_ns, time_lock_list_ns, time_pte_ns, time_tlb_ns, time_transfer_ns,
        time_misc_ns, threads, tlb_shootdowns_machine, prefetch_issued, prefetch_used,
        prefetch_wasted, mover_fills, mover_evictions, inline_evictions);
    assert_eq!(c_layout(header, "tm_config"), config);
    assert_eq!(c_layout(header, "tm_stats"), stats);
}

/// Field names and offsets of `struct NAME { ... };` in the header,
/// laid out with natural alignment (the types used are all
/// fixed-width or pointers).
fn c_layout(header: &str, name: &str) -> Vec<(&'static str, usize)> {
    let start = header
        .find(&format!("struct {name} {{"))
        .expect("struct in header");
    let body = &header[start..];
    let mut body = &body[body.find('{').unwrap() + 1..body.find("};").unwrap()];
    // Drop the comments, then read one declaration per ';'.
    let mut code = String::new();
    while let Some(open) = body.find("/*") {
        code += &body[..open];
        body = &body[open + body[open..].find("*/").unwrap() + 2..];
    }
    code += body;
    let mut at = 0usize;
    let mut out = Vec::new();
    for decl in code.split(';').map(str::trim).filter(|d| !d.is_empty()) {
        let (ty, field) = decl.rsplit_once([' ', '*']).unwrap();
        let size = match ty.trim() {
            "uint32_t" | "int32_t" => 4,
            "uint64_t" => 8,
            "const char" | "const int32_t" => size_of::<*const c_char>(),
            other => panic!("unexpected type {other:?} in struct {name}"),
        };
        at = at.next_multiple_of(size);
        out.push((&*String::leak(field.to_owned()), at));
        at += size;
    }
    out
}
