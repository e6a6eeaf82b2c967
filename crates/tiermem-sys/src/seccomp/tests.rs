use super::sites::{c_libraries_mapped, vdso_code};
use super::*;

/// `read` (buffer: argument 1) and `getrandom` (argument 0): one rule
/// per argument position the filter checks.
fn read_and_getrandom() -> [TrapRule; 2] {
    [
        TrapRule::buffer(libc::SYS_read, 1),
        TrapRule::buffer(libc::SYS_getrandom, 0),
    ]
}

/// Runs a filter over a fake seccomp_data (the BPF subset used here).
fn run(prog: &[SockFilter], nr: i64, ip: u64, args: [u64; 6]) -> u32 {
    let word = |off: u32| -> u32 {
        match off {
            0 => nr as u32,
            4 => uapi::AUDIT_ARCH_X86_64,
            8 => ip as u32,
            12 => (ip >> 32) as u32,
            o => {
                let k = ((o - 16) / 8) as usize;
                if (o - 16) % 8 == 0 {
                    args[k] as u32
                } else {
                    (args[k] >> 32) as u32
                }
            }
        }
    };
    let (mut pc, mut acc) = (0usize, 0u32);
    loop {
        let i = prog[pc];
        pc += 1;
        let jump = |cond: bool| if cond { i.jt as usize } else { i.jf as usize };
        match i.code {
            uapi::BPF_LD_W_ABS => acc = word(i.k),
            uapi::BPF_RET_K => return i.k,
            uapi::BPF_JMP_JEQ_K => pc += jump(acc == i.k),
            uapi::BPF_JMP_JGE_K => pc += jump(acc >= i.k),
            uapi::BPF_JMP_JGT_K => pc += jump(acc > i.k),
            uapi::BPF_JMP_JSET_K => pc += jump(acc & i.k != 0),
            uapi::BPF_JMP_JA => pc += i.k as usize,
            c => panic!("opcode {c:#x}"),
        }
    }
}

#[test]
fn exact_ranges_trap_only_inside() {
    let rules = [TrapRule::buffer(libc::SYS_read, 1)];
    let ranges = [
        (0x5555_5555_8000, 0x5555_9555_8000),
        (0x7_ffff_f000, 0x8_0000_1000),
    ];
    let ip = 0x10ff_ffe0_0019;
    let p = filter(&ranges, ip, &[], &rules, false).unwrap();
    let trap = uapi::SECCOMP_RET_TRAP | TRAP_DATA;
    let read = |buf: u64| run(&p, libc::SYS_read, 0x1234, [3, buf, 10, 0, 0, 0]);
    for (lo, hi) in ranges {
        assert_eq!(read(lo), trap);
        assert_eq!(read(hi - 1), trap);
        assert_eq!(read(lo - 1), uapi::SECCOMP_RET_ALLOW);
        assert_eq!(read(hi), uapi::SECCOMP_RET_ALLOW);
    }
    assert_eq!(read(0x5555_0000_0000), uapi::SECCOMP_RET_ALLOW);
    assert_eq!(read(0x6000_0000_0000), uapi::SECCOMP_RET_ALLOW);
    // Other calls, and the trampoline's own, pass.
    assert_eq!(
        run(&p, libc::SYS_write, 0, [1, ranges[0].0, 1, 0, 0, 0]),
        uapi::SECCOMP_RET_ALLOW
    );
    assert_eq!(
        run(&p, libc::SYS_read, ip, [1, ranges[0].0, 1, 0, 0, 0]),
        uapi::SECCOMP_RET_ALLOW
    );
    // And the window.
    let w = filter(&[(0x1100_0000_0000, 0x5100_0000_0000)], ip, &[], &rules, false).unwrap();
    assert_eq!(
        run(&w, libc::SYS_read, 0, [0, 0x1100_0000_0000, 1, 0, 0, 0]),
        trap
    );
    assert_eq!(
        run(&w, libc::SYS_read, 0, [0, 0x50ff_ffff_ffff, 1, 0, 0, 0]),
        trap
    );
    assert_eq!(
        run(&w, libc::SYS_read, 0, [0, 0x5100_0000_0000, 1, 0, 0, 0]),
        uapi::SECCOMP_RET_ALLOW
    );
    assert_eq!(
        run(&w, libc::SYS_read, 0, [0, 0x10ff_ffff_ffff, 1, 0, 0, 0]),
        uapi::SECCOMP_RET_ALLOW
    );
}

#[test]
fn only_calls_from_the_c_library_trap() {
    let rules = read_and_getrandom();
    let window = (0x1100_0000_0000, 0x5100_0000_0000);
    let statics = (0x5555_5555_8000, 0x5555_5655_8000);
    // Two text segments (glibc before 2.34: libc and libpthread), one
    // straddling a 4 GiB boundary.
    let sites = [
        (0x7f12_3450_0000, 0x7f12_3468_0000),
        (0x7f12_ffff_f000, 0x7f13_0000_1000),
    ];
    let ip = 0x10ff_ffe0_0019;
    let p = filter(&[window, statics], ip, &sites, &rules, false).unwrap();
    let trap = uapi::SECCOMP_RET_TRAP | TRAP_DATA;
    let allow = uapi::SECCOMP_RET_ALLOW;
    let read = |from: u64, buf: u64| run(&p, libc::SYS_read, from, [3, buf, 10, 0, 0, 0]);
    for &(lo, hi) in &sites {
        for from in [lo, lo + 2, hi - 1] {
            assert_eq!(read(from, window.0), trap, "{from:#x}");
            assert_eq!(read(from, statics.1 - 1), trap, "{from:#x}");
            assert_eq!(read(from, 0x7ffc_0000_0000), allow, "{from:#x}");
            assert_eq!(
                run(&p, libc::SYS_getrandom, from, [window.0 + 64, 8, 0, 0, 0, 0]),
                trap
            );
        }
        // Another image's code: its own C library, its executable.
        for from in [lo - 1, hi, 0x5555_5555_5000, 0x7f99_0000_1234, 0x1500_0000_0000] {
            assert_eq!(read(from, window.0), allow, "{from:#x}");
            assert_eq!(read(from, statics.0), allow, "{from:#x}");
            assert_eq!(
                run(&p, libc::SYS_getrandom, from, [window.0 + 64, 8, 0, 0, 0, 0]),
                allow
            );
        }
    }
    // The trampoline's calls run.
    assert_eq!(read(ip, window.0), allow);
}

#[test]
fn this_images_c_library_is_found() {
    let sites = call_sites();
    assert!(!sites.is_empty());
    let inside = |f: usize| sites.iter().any(|&(lo, hi)| (lo..hi).contains(&(f as u64)));
    assert!(inside(libc::read as *const () as usize));
    assert!(inside(libc::fread as *const () as usize));
    // Not this crate's code: a raw system call from it is not the C
    // library's.
    assert!(!inside(call_sites as *const () as usize));
}

#[test]
fn the_vdso_is_a_call_site() {
    // SAFETY: reading the auxiliary vector.
    let vdso = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    if vdso == 0 {
        return;
    }
    let code = vdso_code();
    assert!(!code.is_empty());
    // The vDSO's text lies in its mapping, just after its header.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let line = maps.lines().find(|l| l.ends_with("[vdso]")).unwrap();
    let (lo, hi) = line.split_whitespace().next().unwrap().split_once('-').unwrap();
    let (lo, hi) = (
        u64::from_str_radix(lo, 16).unwrap(),
        u64::from_str_radix(hi, 16).unwrap(),
    );
    assert!(
        code.iter().all(|&(a, b)| lo <= a && a < b && b <= hi),
        "{code:x?} in {lo:#x}..{hi:#x}"
    );
    let sites = call_sites();
    assert!(
        code.iter().all(|r| sites.contains(r)),
        "{code:x?} not in {sites:x?}"
    );
    // The C library's mapped code, seen in /proc/self/maps, is covered.
    let mapped = c_libraries_mapped();
    assert!(!mapped.is_empty());
    let inside = |a: u64| sites.iter().any(|&(lo, hi)| (lo..hi).contains(&a));
    assert!(mapped.iter().all(|&(lo, _)| inside(lo) || inside(lo + 4096)));
    assert!(inside(libc::read as *const () as u64));
}

#[test]
fn oversized_filters_are_errors_not_panics() {
    let rules = read_and_getrandom();
    let ip = 0x10ff_ffe0_0019;
    let window = [(0x1100_0000_0000u64, 0x5100_0000_0000u64)];
    let sites = |n: u64| -> Vec<(u64, u64)> {
        (0..n)
            .map(|k| (0x7f00_0000_0000 + k * 0x10_0000, 0x7f00_0000_8000 + k * 0x10_0000))
            .collect()
    };
    let ranges = |n: u64| -> Vec<(u64, u64)> {
        (0..n)
            .map(|k| (0x5555_0000_0000 + k * 0x10_0000, 0x5555_0000_8000 + k * 0x10_0000))
            .collect()
    };
    // Many sites: still a working filter while the jumps fit.
    let many = sites(20);
    let p = filter(&window, ip, &many, &rules, false).unwrap();
    let trap = uapi::SECCOMP_RET_TRAP | TRAP_DATA;
    for &(lo, hi) in &many {
        assert_eq!(run(&p, libc::SYS_read, lo, [3, window[0].0, 8, 0, 0, 0]), trap);
        assert_eq!(
            run(&p, libc::SYS_read, hi, [3, window[0].0, 8, 0, 0, 0]),
            uapi::SECCOMP_RET_ALLOW
        );
        assert_eq!(
            run(&p, libc::SYS_getrandom, hi - 1, [window[0].0, 8, 0, 0, 0, 0]),
            trap
        );
    }
    // With the signal guard too (its blocks end in returns of their own:
    // one shared set was out of reach once the descriptor calls came in,
    // with the two sites of every real process).
    for n in [1, 2, 8, 20] {
        let p = filter(&window, ip, &sites(n), &rules, true);
        assert!(p.is_ok(), "{n} sites with the guard: {:?}", p.map(|p| p.len()));
    }
    // Past BPF's reach: an error naming the sizes.
    for (s, r) in [
        (sites(64), window.to_vec()),
        (sites(2), ranges(64)),
        (sites(500), ranges(500)),
    ] {
        match filter(&r, ip, &s, &rules, false) {
            Err(TrapError::FilterTooLarge { sites, ranges }) => {
                assert_eq!((sites, ranges), (s.len(), r.len()))
            }
            other => panic!(
                "{} sites, {} ranges: {:?}",
                s.len(),
                r.len(),
                other.map(|p| p.len())
            ),
        }
    }
    for args in [1 << 6, 0xff] {
        let bad = [TrapRule::pointers(libc::SYS_read, args)];
        assert!(matches!(
            filter(&window, ip, &[], &bad, false),
            Err(TrapError::BadRule { args: a, .. }) if a == args
        ));
    }
}

#[test]
fn an_always_rule_traps_whatever_its_arguments_but_only_from_the_c_library() {
    let window = [(0x1000_0000_0000u64, 0x2000_0000_0000u64)];
    let ip = 0x7000_0000_1000;
    let libc_at = [(0x7f00_0000_0000u64, 0x7f00_0010_0000u64)];
    let rules = [
        TrapRule::buffer(libc::SYS_read, 1),
        TrapRule::always(libc::SYS_io_submit),
    ];
    let p = filter(&window, ip, &libc_at, &rules, false).unwrap();
    let trap = uapi::SECCOMP_RET_TRAP | TRAP_DATA;
    let from_libc = libc_at[0].0 + 64;
    // Plain memory everywhere: io_submit traps all the same, read does not.
    assert_eq!(
        run(&p, libc::SYS_io_submit, from_libc, [7, 1, 0x5000, 0, 0, 0]),
        trap
    );
    assert_eq!(run(&p, libc::SYS_io_submit, from_libc, [0; 6]), trap);
    assert_eq!(
        run(&p, libc::SYS_read, from_libc, [3, 0x5000, 8, 0, 0, 0]),
        uapi::SECCOMP_RET_ALLOW
    );
    // Not from this image's C library, or through the trampoline: never.
    assert_eq!(
        run(&p, libc::SYS_io_submit, 0x5555_0000_0000, [7, 1, 0x5000, 0, 0, 0]),
        uapi::SECCOMP_RET_ALLOW
    );
    assert_eq!(
        run(&p, libc::SYS_io_submit, ip, [7, 1, 0x5000, 0, 0, 0]),
        uapi::SECCOMP_RET_ALLOW
    );
}

#[test]
fn a_refused_call_fails_with_enosys_from_anywhere_and_traps_from_the_c_library() {
    let window = [(0x1100_0000_0000u64, 0x5100_0000_0000u64)];
    let ip = 0x10ff_ffe0_0019;
    let libc_at = [(0x7f00_0000_0000u64, 0x7f00_0010_0000u64)];
    let rules = [
        TrapRule::buffer(libc::SYS_read, 1),
        TrapRule::always(libc::SYS_io_submit),
        TrapRule::refused(libc::SYS_io_uring_setup, Refusal::Trapped),
    ];
    let enosys = uapi::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    let trap = uapi::SECCOMP_RET_TRAP | TRAP_DATA;
    let p = filter(&window, ip, &libc_at, &rules, false).unwrap();
    let from_libc = libc_at[0].0 + 64;
    assert_eq!(
        run(&p, libc::SYS_io_uring_setup, from_libc, [8, 0x5000, 0, 0, 0, 0]),
        trap
    );
    // A library's own instruction, another image, the trampoline: ENOSYS
    // without a signal.
    for at in [0x5555_0000_0000, 0x7f00_0010_0000, ip] {
        assert_eq!(
            run(&p, libc::SYS_io_uring_setup, at, [8, 0x5000, 0, 0, 0, 0]),
            enosys
        );
    }
    // The other rules are as they were.
    assert_eq!(run(&p, libc::SYS_io_submit, from_libc, [0; 6]), trap);
    assert_eq!(
        run(&p, libc::SYS_read, from_libc, [3, 0x1100_0000_1000, 8, 0, 0, 0]),
        trap
    );
    assert_eq!(
        run(&p, libc::SYS_read, from_libc, [3, 0x5000, 8, 0, 0, 0]),
        uapi::SECCOMP_RET_ALLOW
    );
    assert_eq!(
        run(&p, libc::SYS_io_uring_enter, from_libc, [0; 6]),
        uapi::SECCOMP_RET_ALLOW
    );
    // No C library known: never a trap, which could reach an image
    // without the handler.
    let p = filter(&window, ip, &[], &rules[2..], false).unwrap();
    assert_eq!(run(&p, libc::SYS_io_uring_setup, from_libc, [0; 6]), enosys);
    // Quietly: never a trap (no guard keeps SIGSYS open).
    let quiet = [TrapRule::refused(libc::SYS_io_uring_setup, Refusal::Quiet)];
    let p = filter(&window, ip, &libc_at, &quiet, false).unwrap();
    assert_eq!(run(&p, libc::SYS_io_uring_setup, from_libc, [0; 6]), enosys);
    assert_eq!(
        run(&p, libc::SYS_read, from_libc, [3, 0x1100_0000_1000, 8, 0, 0, 0]),
        uapi::SECCOMP_RET_ALLOW
    );
}

#[test]
fn the_signal_guard_traps_what_could_take_the_fault_signals_away() {
    let rules = read_and_getrandom();
    let sites = [(0x7f12_3450_0000, 0x7f12_3468_0000)];
    let ip = 0x10ff_ffe0_0019;
    let p = filter(&[(0x1100_0000_0000, 0x5100_0000_0000)], ip, &sites, &rules, true).unwrap();
    let guard = uapi::SECCOMP_RET_TRAP | GUARD_DATA;
    let allow = uapi::SECCOMP_RET_ALLOW;
    let libc_ip = sites[0].0 + 0x100;
    let act = 0x7ffc_1234_5678;
    let call =
        |nr: i64, from: u64, args: [u64; 4]| run(&p, nr, from, [args[0], args[1], args[2], args[3], 0, 0]);
    // rt_sigaction: any new action, and queries of the three signals.
    for sig in [
        libc::SIGINT,
        libc::SIGBUS,
        libc::SIGSEGV,
        libc::SIGSYS,
        libc::SIGUSR1,
    ] {
        assert_eq!(
            call(libc::SYS_rt_sigaction, libc_ip, [sig as u64, act, 0, 8]),
            guard
        );
        // A pointer above 4 GiB with a zero low half is still a pointer.
        assert_eq!(
            call(libc::SYS_rt_sigaction, libc_ip, [sig as u64, 1 << 40, 0, 8]),
            guard
        );
    }
    for sig in [libc::SIGBUS, libc::SIGSEGV, libc::SIGSYS] {
        assert_eq!(
            call(libc::SYS_rt_sigaction, libc_ip, [sig as u64, 0, act, 8]),
            guard
        );
    }
    assert_eq!(
        call(libc::SYS_rt_sigaction, libc_ip, [libc::SIGINT as u64, 0, act, 8]),
        allow
    );
    // rt_sigprocmask: whatever may block.
    for how in [libc::SIG_BLOCK, libc::SIG_SETMASK, 7] {
        assert_eq!(
            call(libc::SYS_rt_sigprocmask, libc_ip, [how as u64, act, 0, 8]),
            guard
        );
        assert_eq!(
            call(libc::SYS_rt_sigprocmask, libc_ip, [how as u64, 0, act, 8]),
            allow
        );
    }
    assert_eq!(
        call(
            libc::SYS_rt_sigprocmask,
            libc_ip,
            [libc::SIG_UNBLOCK as u64, act, 0, 8]
        ),
        allow
    );
    assert_eq!(call(libc::SYS_rt_sigsuspend, libc_ip, [act, 8, 0, 0]), guard);
    // Forks that run no fork handlers; threads and vforks run.
    let fork_flags = (libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD) as u64;
    assert_eq!(call(libc::SYS_clone, libc_ip, [fork_flags, 0, 0, act]), guard);
    assert_eq!(call(libc::SYS_fork, libc_ip, [0, 0, 0, 0]), guard);
    let thread_flags = (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_SIGHAND) as u64;
    assert_eq!(call(libc::SYS_clone, libc_ip, [thread_flags, act, 0, 0]), allow);
    let vfork_flags = (libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD) as u64;
    assert_eq!(call(libc::SYS_clone, libc_ip, [vfork_flags, act, 0, 0]), allow);
    assert_eq!(
        call(libc::SYS_clone, libc_ip, [libc::SIGCHLD as u64, act, 0, 0]),
        allow
    );
    assert_eq!(
        call(libc::SYS_clone, libc_ip, [libc::SIGCHLD as u64, 1 << 40, 0, 0]),
        allow
    );
    assert_eq!(
        call(libc::SYS_clone3, libc_ip, [act, 88, 0, 0]),
        uapi::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
    );
    assert_eq!(call(libc::SYS_clone3, 0x5555_5555_5000, [act, 88, 0, 0]), allow);
    // Descriptors where tiermem's are: close, dup2/dup3 onto, close_range
    // over them; not below, not CLOSE_RANGE_CLOEXEC, not from elsewhere.
    let (low, high) = crate::fdguard::window();
    let (low, high) = (low as u64, high as u64);
    for fd in [low, low + 5, high - 1] {
        assert_eq!(
            call(libc::SYS_close, libc_ip, [fd, 0, 0, 0]),
            guard,
            "close({fd})"
        );
        // The upper half of an unsigned int argument is ignored.
        assert_eq!(call(libc::SYS_close, libc_ip, [fd | 1 << 40, 0, 0, 0]), guard);
        assert_eq!(
            call(libc::SYS_dup2, libc_ip, [0, fd, 0, 0]),
            guard,
            "dup2(0, {fd})"
        );
        assert_eq!(
            call(libc::SYS_dup3, libc_ip, [0, fd, 0, 0]),
            guard,
            "dup3(0, {fd})"
        );
        assert_eq!(call(libc::SYS_close, 0x5555_5555_5000, [fd, 0, 0, 0]), allow);
    }
    if low > 3 {
        assert_eq!(call(libc::SYS_close, libc_ip, [low - 1, 0, 0, 0]), allow);
        assert_eq!(
            call(libc::SYS_dup2, libc_ip, [low, 3, 0, 0]),
            allow,
            "dup2 of one of tiermem's"
        );
        assert_eq!(call(libc::SYS_close_range, libc_ip, [3, low - 1, 0, 0]), allow);
    }
    assert_eq!(call(libc::SYS_close, libc_ip, [high, 0, 0, 0]), allow);
    assert_eq!(
        call(libc::SYS_close_range, libc_ip, [3, u32::MAX as u64, 0, 0]),
        guard
    );
    assert_eq!(
        call(libc::SYS_close_range, libc_ip, [low + 1, low + 1, 0, 0]),
        guard
    );
    assert_eq!(
        call(libc::SYS_close_range, libc_ip, [high, u32::MAX as u64, 0, 0]),
        allow
    );
    let cloexec = libc::CLOSE_RANGE_CLOEXEC as u64;
    assert_eq!(
        call(libc::SYS_close_range, libc_ip, [3, u32::MAX as u64, cloexec, 0]),
        allow
    );
    // Not from this image's C library, or through the trampoline: run.
    for from in [ip, sites[0].1, 0x5555_5555_5000] {
        assert_eq!(
            call(libc::SYS_rt_sigaction, from, [libc::SIGSEGV as u64, act, 0, 8]),
            allow
        );
        assert_eq!(call(libc::SYS_rt_sigprocmask, from, [0, act, 0, 8]), allow);
        assert_eq!(call(libc::SYS_rt_sigsuspend, from, [act, 8, 0, 0]), allow);
    }
    // The buffer traps are unchanged.
    assert_eq!(
        call(libc::SYS_read, libc_ip, [3, 0x1100_0000_0000, 1, 0]),
        uapi::SECCOMP_RET_TRAP | TRAP_DATA
    );
    assert_eq!(call(libc::SYS_write, libc_ip, [1, act, 1, 0]), allow);
    // Without the guard none of them traps.
    let q = filter(&[(0x1100_0000_0000, 0x5100_0000_0000)], ip, &sites, &rules, false).unwrap();
    assert_eq!(
        run(&q, libc::SYS_rt_sigaction, libc_ip, [11, act, 0, 8, 0, 0]),
        allow
    );
    assert_eq!(
        run(&q, libc::SYS_rt_sigprocmask, libc_ip, [0, act, 0, 8, 0, 0]),
        allow
    );
}

#[test]
fn filter_jumps_resolve() {
    let w = Window {
        lo: 0x1100_0000_0000,
        hi: 0x5100_0000_0000,
    };
    let p = filter(
        &[(w.lo, w.hi)],
        0x10ff_ffe0_0000,
        &[(0x7f00_0000_0000, 0x7f00_0020_0000)],
        &read_and_getrandom(),
        false,
    )
    .unwrap();
    // One check block per argument position used (0 and 1), not six.
    assert_eq!(
        p.iter()
            .filter(|i| i.k == uapi::SECCOMP_RET_TRAP | TRAP_DATA)
            .count(),
        2
    );
    assert!(matches!(
        install(Window { lo: 5, hi: 1 << 33 }, 0, &[], |_| {}),
        Err(TrapError::BadWindow(..))
    ));
}

#[test]
fn rules_with_several_pointers_trap_on_any_of_them() {
    let mut rules: Vec<TrapRule> = read_and_getrandom().to_vec();
    // Enough calls (and sites) that the blocks lie beyond a conditional
    // jump's reach from the dispatch: its stubs' long jumps get there.
    for nr in 0..120 {
        rules.push(TrapRule::pointers(1000 + nr, 0x3f));
    }
    rules.push(TrapRule::pointers(libc::SYS_poll, 0x3f));
    let ranges = [(0x1100_0000_0000, 0x5100_0000_0000)];
    let prog = filter(&ranges, 0x1234, &[], &rules, false).unwrap();
    let inside = 0x1100_0000_1000u64;
    for k in 0..6 {
        let mut args = [3u64, 4096, 0, 0, 0, 0];
        assert_eq!(
            run(&prog, libc::SYS_poll, 0x9999, args),
            uapi::SECCOMP_RET_ALLOW,
            "poll, argument {k} outside"
        );
        args[k] = inside;
        assert_eq!(
            run(&prog, libc::SYS_poll, 0x9999, args),
            uapi::SECCOMP_RET_TRAP | TRAP_DATA,
            "poll, argument {k} inside"
        );
        // The trampoline's own calls pass.
        assert_eq!(run(&prog, libc::SYS_poll, 0x1234, args), uapi::SECCOMP_RET_ALLOW);
        assert_eq!(
            run(&prog, 1119, 0x9999, args),
            uapi::SECCOMP_RET_TRAP | TRAP_DATA,
            "the last rule"
        );
    }
    // A rule tests the arguments it names, no others: poll's first only
    // (the others may hold leftovers).
    let poll = [TrapRule::buffer(libc::SYS_poll, 0)];
    let prog = filter(&ranges, 0x1234, &[], &poll, false).unwrap();
    let leftovers = [0x7fff_0000_0000, 1, 0, inside, inside, inside];
    assert_eq!(
        run(&prog, libc::SYS_poll, 0x9999, leftovers),
        uapi::SECCOMP_RET_ALLOW
    );
    let prog = filter(&ranges, 0x1234, &[], &rules, false).unwrap();
    // The one-argument rules still see their argument only.
    assert_eq!(
        run(&prog, libc::SYS_read, 0x9999, [inside, 0, 0, 0, 0, 0]),
        uapi::SECCOMP_RET_ALLOW
    );
    assert_eq!(
        run(&prog, libc::SYS_read, 0x9999, [0, inside, 0, 0, 0, 0]),
        uapi::SECCOMP_RET_TRAP | TRAP_DATA
    );
}

#[test]
fn a_string_runs_on_only_through_readable_bytes_without_a_nul() {
    let page = crate::mm::base_page_size();
    // SAFETY: a fresh private mapping of three pages, the middle one made
    // unreadable; freed at the end.
    unsafe {
        let m = libc::mmap(
            std::ptr::null_mut(),
            3 * page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(m, libc::MAP_FAILED);
        let base = m as usize;
        std::ptr::write_bytes(m.cast::<u8>(), b'a', 3 * page);
        assert_eq!(
            libc::mprotect((base + page) as *mut libc::c_void, page, libc::PROT_NONE),
            0
        );
        // Readable, no NUL, across more than one of the probe's chunks.
        assert!(c_string_runs_to(base + 10, base + page));
        // An empty range: nothing stops it.
        assert!(c_string_runs_to(base, base));
        // A NUL on the way ends the string.
        *((base + 700) as *mut u8) = 0;
        assert!(!c_string_runs_to(base + 10, base + page));
        assert!(c_string_runs_to(base + 701, base + page));
        // An unreadable byte on the way: the kernel's to refuse.
        assert!(!c_string_runs_to(base + page - 8, base + page + 8));
        assert!(!c_string_runs_to(base + page + 1, base + 2 * page + 8));
        libc::munmap(m, 3 * page);
    }
}
