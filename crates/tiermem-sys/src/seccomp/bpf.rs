//! The BPF filter program: building it ([`filter`]) and loading it ([`load`]).

use super::*;

/// Which offset of an instruction a fixup patches.
#[derive(Clone, Copy)]
enum Offset {
    /// `jt` (8 bits).
    True,
    /// `jf` (8 bits).
    False,
    /// `k` of an unconditional jump (32 bits).
    Always,
}

/// A BPF program under construction, with forward jumps to labels.
struct Asm {
    code: Vec<SockFilter>,
    /// (instruction, label, which offset) to patch.
    fixups: Vec<(usize, usize, Offset)>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }
    fn here(&mut self, l: usize) {
        self.labels[l] = Some(self.code.len());
    }
    fn stmt(&mut self, code: u16, k: u32) {
        self.code.push(SockFilter {
            code,
            jt: 0,
            jf: 0,
            k,
        });
    }
    /// `if A op k goto t else goto f` (None: fall through).
    fn jump(&mut self, code: u16, k: u32, t: Option<usize>, f: Option<usize>) {
        let at = self.code.len();
        self.code.push(SockFilter {
            code,
            jt: 0,
            jf: 0,
            k,
        });
        if let Some(t) = t {
            self.fixups.push((at, t, Offset::True));
        }
        if let Some(f) = f {
            self.fixups.push((at, f, Offset::False));
        }
    }
    /// `goto l`, however far (conditional jumps reach 255 instructions).
    fn ja(&mut self, l: usize) {
        self.fixups.push((self.code.len(), l, Offset::Always));
        self.stmt(uapi::BPF_JMP_JA, 0);
    }
    /// Resolves the jumps; None when one is farther than 255 instructions
    /// or the program longer than the kernel takes.
    fn finish(mut self) -> Option<Vec<SockFilter>> {
        if self.code.len() > BPF_MAXINSNS {
            return None;
        }
        for (at, l, which) in self.fixups {
            let target = self.labels[l]?;
            let off = target.checked_sub(at + 1)?;
            match which {
                Offset::True => self.code[at].jt = u8::try_from(off).ok()?,
                Offset::False => self.code[at].jf = u8::try_from(off).ok()?,
                Offset::Always => self.code[at].k = u32::try_from(off).ok()?,
            }
        }
        Some(self.code)
    }
}

/// Emits a test of the 64-bit word at `lo_off` (low half) and `lo_off + 4`
/// (high half) of `seccomp_data` against each of `ranges`: jumps to `hit`
/// when it lies in one, falls through otherwise.
fn in_ranges(a: &mut Asm, lo_off: u32, ranges: &[(u64, u64)], hit: usize) {
    let hi_off = lo_off + 4;
    for &(lo, hi) in ranges {
        let (lh, ll, hh, hl) = ((lo >> 32) as u32, lo as u32, (hi >> 32) as u32, hi as u32);
        let (next, upper) = (a.label(), a.label());
        // x >= lo: x.hi > lo.hi, or x.hi == lo.hi and x.lo >= lo.lo.
        a.stmt(uapi::BPF_LD_W_ABS, hi_off);
        a.jump(uapi::BPF_JMP_JGT_K, lh, Some(upper), None);
        a.jump(uapi::BPF_JMP_JEQ_K, lh, None, Some(next));
        a.stmt(uapi::BPF_LD_W_ABS, lo_off);
        a.jump(uapi::BPF_JMP_JGE_K, ll, Some(upper), Some(next));
        // x < hi: x.hi < hi.hi, or x.hi == hi.hi and x.lo < hi.lo.
        a.here(upper);
        a.stmt(uapi::BPF_LD_W_ABS, hi_off);
        a.jump(uapi::BPF_JMP_JGT_K, hh, Some(next), None);
        a.jump(uapi::BPF_JMP_JEQ_K, hh, None, Some(hit));
        a.stmt(uapi::BPF_LD_W_ABS, lo_off);
        a.jump(uapi::BPF_JMP_JGE_K, hl, Some(next), Some(hit));
        a.here(next);
    }
}

/// Emits the test every trap starts with: calls made through the
/// trampoline (whose `syscall` returns to `ip`), and calls made from
/// anywhere but this image's C library (`sites`; none: any code is), go to
/// `pass`; the others fall through.
fn from_this_c_library(a: &mut Asm, ip: u64, sites: &[(u64, u64)], pass: usize) {
    let not_ours = a.label();
    a.stmt(uapi::BPF_LD_W_ABS, uapi::SECCOMP_DATA_IP);
    a.jump(uapi::BPF_JMP_JEQ_K, ip as u32, None, Some(not_ours));
    a.stmt(uapi::BPF_LD_W_ABS, uapi::SECCOMP_DATA_IP + 4);
    a.jump(uapi::BPF_JMP_JEQ_K, (ip >> 32) as u32, Some(pass), None);
    a.here(not_ours);
    if !sites.is_empty() {
        let from_libc = a.label();
        in_ranges(a, uapi::SECCOMP_DATA_IP, sites, from_libc);
        // An unsigned A >= 0: always taken.
        a.jump(uapi::BPF_JMP_JGE_K, 0, Some(pass), None);
        a.here(from_libc);
    }
}

/// The filter: `rules`' calls trap when their buffer argument lies in one
/// of `ranges` and the call is made from one of `sites` (the C library's
/// code in the image that loads the filter; any code when `sites` is
/// empty), unless made from the trampoline (whose `syscall` returns to
/// `ip`); 64-bit comparisons done on the two halves.
///
/// `sites` is what keeps other program images safe: the filter outlives
/// `execve`, and a program the process runs next (a shell, any tool) that
/// has no SIGSYS handler for it, or none yet, would be killed by a trap.
/// Its own C library sits elsewhere (the addresses are randomised per
/// image), so its calls are never trapped, whatever its buffers.
///
/// One check block per set of tested arguments the rules use (17 + 10 per
/// site, then 12 + 10 per range instructions per argument), reached through
/// a stub of one unconditional jump each; an error, not a panic, when the
/// program does not fit classic BPF.
/// Calls refused ([`Refusal`]) fail with `ENOSYS`, trapping first when made
/// from `sites` if so asked.
///
/// With `guard`, it also traps the signal calls of this image's C library
/// that could take SIGBUS, SIGSEGV or SIGSYS away from tiermem
/// ([`super::guard`]): `rt_sigaction` that sets any action or asks for
/// one of those three, `rt_sigprocmask` that may block (how is not
/// `SIG_UNBLOCK`, a set is given), and every `rt_sigsuspend`; and the
/// forks that run no fork handlers: `fork` and a `clone` that shares
/// nothing but starts the child on the caller's stack, as a fork does (a
/// `clone3`, whose flags a filter cannot read, fails with ENOSYS: the C
/// library then makes a `clone`); and `close`, `dup2`, `dup3` of a number
/// where tiermem's descriptors are, and a `close_range` over them
/// ([`crate::fdguard`]): `syscall(SYS_close_range, 3, ~0U, 0)` and the C
/// library's internal closes do not pass through the interposers.
pub(super) fn filter(
    ranges: &[(u64, u64)],
    ip: u64,
    sites: &[(u64, u64)],
    rules: &[TrapRule],
    guard: bool,
) -> Result<Vec<SockFilter>, TrapError> {
    if let Some(r) = rules
        .iter()
        .find(|r| r.refusal == Refusal::No && r.pointer_args >= 1 << 6)
    {
        return Err(TrapError::BadRule {
            nr: r.nr,
            args: r.pointer_args,
        });
    }
    let mut a = Asm {
        code: Vec::new(),
        fixups: Vec::new(),
        labels: Vec::new(),
    };
    let allow = a.label();
    // Refused calls: `trapped` tests where the call comes from, `enosys`
    // fails it (each reached through a stub, as the argument blocks are).
    let (trapped, trapped_stub, enosys, enosys_stub) = (a.label(), a.label(), a.label(), a.label());
    let any_refused = rules.iter().any(|r| r.refusal != Refusal::No);
    let mut used: Vec<u8> = rules
        .iter()
        .filter(|r| r.refusal == Refusal::No)
        .map(|r| r.pointer_args)
        .collect();
    used.sort_unstable();
    used.dedup();
    // Label of the block of each set of tested arguments the rules use,
    // and of the stub that jumps there: the dispatch's conditional jumps
    // reach 255 instructions, the stubs' any distance.
    let args: Vec<usize> = used.iter().map(|_| a.label()).collect();
    let stubs: Vec<usize> = used.iter().map(|_| a.label()).collect();
    let at = |k: u8| used.iter().position(|&u| u == k).expect("a used set");
    // The system call number first, and nothing else for the calls not
    // trapped: the kernel then finds (by emulating the filter with the
    // number alone) that they are always allowed and skips the filter for
    // them altogether (seccomp's action cache), so the fault path's ioctls
    // and rt_sigreturn pay nothing.
    a.stmt(uapi::BPF_LD_W_ABS, uapi::SECCOMP_DATA_ARCH);
    a.jump(uapi::BPF_JMP_JEQ_K, uapi::AUDIT_ARCH_X86_64, None, Some(allow));
    a.stmt(uapi::BPF_LD_W_ABS, uapi::SECCOMP_DATA_NR);
    for r in rules {
        let to = match r.refusal {
            Refusal::No => stubs[at(r.pointer_args)],
            Refusal::Quiet => enosys_stub,
            Refusal::Trapped => trapped_stub,
        };
        a.jump(uapi::BPF_JMP_JEQ_K, r.nr as u32, Some(to), None);
    }
    let guards = [
        libc::SYS_rt_sigaction,
        libc::SYS_rt_sigprocmask,
        libc::SYS_rt_sigsuspend,
        libc::SYS_clone,
        libc::SYS_fork,
        libc::SYS_clone3,
        libc::SYS_close,
        libc::SYS_close_range,
        libc::SYS_dup2,
        libc::SYS_dup3,
    ]
    .map(|nr| (nr, a.label(), a.label()));
    let (fd_low, fd_high) = crate::fdguard::window();
    if guard {
        for &(nr, _, stub) in &guards {
            a.jump(uapi::BPF_JMP_JEQ_K, nr as u32, Some(stub), None);
        }
    }
    a.here(allow);
    a.stmt(uapi::BPF_RET_K, uapi::SECCOMP_RET_ALLOW);
    for &k in &used {
        a.here(stubs[at(k)]);
        a.ja(args[at(k)]);
    }
    if any_refused {
        a.here(trapped_stub);
        a.ja(trapped);
        a.here(enosys_stub);
        a.ja(enosys);
    }
    if guard {
        for &(_, l, stub) in &guards {
            a.here(stub);
            a.ja(l);
        }
    }
    if guard {
        // Jumps go forward only, and reach 255 instructions: each block of
        // the guard ends in its own returns.
        let arg = |k: u32| uapi::SECCOMP_DATA_ARGS + 8 * k;
        for &(nr, l, _) in &guards {
            let (pass, trap, enosys) = (a.label(), a.label(), a.label());
            a.here(l);
            from_this_c_library(&mut a, ip, sites, pass);
            match nr {
                libc::SYS_rt_sigaction => {
                    // An action given: trap. A query: only for the three.
                    a.stmt(uapi::BPF_LD_W_ABS, arg(1));
                    a.jump(uapi::BPF_JMP_JEQ_K, 0, None, Some(trap));
                    a.stmt(uapi::BPF_LD_W_ABS, arg(1) + 4);
                    a.jump(uapi::BPF_JMP_JEQ_K, 0, None, Some(trap));
                    a.stmt(uapi::BPF_LD_W_ABS, arg(0));
                    for sig in [libc::SIGBUS, libc::SIGSEGV, libc::SIGSYS] {
                        a.jump(uapi::BPF_JMP_JEQ_K, sig as u32, Some(trap), None);
                    }
                    a.jump(uapi::BPF_JMP_JGE_K, 0, Some(pass), None);
                }
                libc::SYS_rt_sigprocmask => {
                    // SIG_UNBLOCK, or no set: nothing gets blocked.
                    a.stmt(uapi::BPF_LD_W_ABS, arg(0));
                    a.jump(uapi::BPF_JMP_JEQ_K, libc::SIG_UNBLOCK as u32, Some(pass), None);
                    a.stmt(uapi::BPF_LD_W_ABS, arg(1));
                    a.jump(uapi::BPF_JMP_JEQ_K, 0, None, Some(trap));
                    a.stmt(uapi::BPF_LD_W_ABS, arg(1) + 4);
                    a.jump(uapi::BPF_JMP_JEQ_K, 0, Some(pass), Some(trap));
                }
                libc::SYS_clone => {
                    // A thread, a vfork (CLONE_VM), or a child on a stack
                    // of its own: run.
                    a.stmt(uapi::BPF_LD_W_ABS, arg(0));
                    a.jump(uapi::BPF_JMP_JSET_K, libc::CLONE_VM as u32, Some(pass), None);
                    a.stmt(uapi::BPF_LD_W_ABS, arg(1));
                    a.jump(uapi::BPF_JMP_JEQ_K, 0, None, Some(pass));
                    a.stmt(uapi::BPF_LD_W_ABS, arg(1) + 4);
                    a.jump(uapi::BPF_JMP_JEQ_K, 0, Some(trap), Some(pass));
                }
                libc::SYS_clone3 => a.jump(uapi::BPF_JMP_JGE_K, 0, Some(enosys), None),
                // A descriptor where tiermem's are (`fdguard`): trap, and
                // the guard leaves tiermem's open. The kernel takes these
                // arguments as unsigned int: the low half only.
                libc::SYS_close | libc::SYS_dup2 | libc::SYS_dup3 => {
                    a.stmt(uapi::BPF_LD_W_ABS, arg(if nr == libc::SYS_close { 0 } else { 1 }));
                    a.jump(uapi::BPF_JMP_JGE_K, fd_low, None, Some(pass));
                    a.jump(uapi::BPF_JMP_JGE_K, fd_high, Some(pass), Some(trap));
                }
                libc::SYS_close_range => {
                    // Closing (not CLOSE_RANGE_CLOEXEC) a range that meets
                    // the window: first < high and last >= low.
                    a.stmt(uapi::BPF_LD_W_ABS, arg(2));
                    a.jump(uapi::BPF_JMP_JSET_K, libc::CLOSE_RANGE_CLOEXEC, Some(pass), None);
                    a.stmt(uapi::BPF_LD_W_ABS, arg(0));
                    a.jump(uapi::BPF_JMP_JGE_K, fd_high, Some(pass), None);
                    a.stmt(uapi::BPF_LD_W_ABS, arg(1));
                    a.jump(uapi::BPF_JMP_JGE_K, fd_low, Some(trap), Some(pass));
                }
                _ => a.jump(uapi::BPF_JMP_JGE_K, 0, Some(trap), None),
            }
            a.here(enosys);
            a.stmt(uapi::BPF_RET_K, uapi::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
            a.here(pass);
            a.stmt(uapi::BPF_RET_K, uapi::SECCOMP_RET_ALLOW);
            a.here(trap);
            a.stmt(uapi::BPF_RET_K, uapi::SECCOMP_RET_TRAP | GUARD_DATA);
        }
    }
    if any_refused {
        // Made from this image's C library: a trap, whose callback says
        // why. From anywhere else (a library's own `syscall` instruction,
        // another image): ENOSYS, as no other image has the handler. With
        // no sites known, anywhere would trap: ENOSYS alone.
        a.here(trapped);
        if !sites.is_empty() {
            from_this_c_library(&mut a, ip, sites, enosys);
            a.stmt(uapi::BPF_RET_K, uapi::SECCOMP_RET_TRAP | TRAP_DATA);
        }
        a.here(enosys);
        a.stmt(uapi::BPF_RET_K, uapi::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
    }
    // Classic BPF jumps only forward: each argument check ends in its own
    // returns.
    let arg_off = |k: usize| uapi::SECCOMP_DATA_ARGS + 8 * k as u32;
    for &k in &used {
        a.here(args[at(k)]);
        let pass = a.label();
        from_this_c_library(&mut a, ip, sites, pass);
        // Each argument's test ends in a trap of its own, within reach.
        for j in (0..6).filter(|j| k & (1 << j) != 0) {
            let (hit, next) = (a.label(), a.label());
            in_ranges(&mut a, arg_off(j), ranges, hit);
            a.ja(next);
            a.here(hit);
            a.stmt(uapi::BPF_RET_K, uapi::SECCOMP_RET_TRAP | TRAP_DATA);
            a.here(next);
        }
        if k == 0 {
            // No argument tested: always.
            a.stmt(uapi::BPF_RET_K, uapi::SECCOMP_RET_TRAP | TRAP_DATA);
        }
        a.here(pass);
        a.stmt(uapi::BPF_RET_K, uapi::SECCOMP_RET_ALLOW);
    }
    a.finish().ok_or(TrapError::FilterTooLarge {
        sites: sites.len(),
        ranges: ranges.len(),
    })
}

pub(super) fn load(prog: &[SockFilter]) -> Result<(), TrapError> {
    let fprog = SockFprog {
        len: prog.len() as u16,
        filter: prog.as_ptr(),
    };
    let seccomp = || {
        // SAFETY: fprog points to `prog`, alive for the call; TSYNC applies
        // the filter to every thread of the process.
        unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                uapi::SECCOMP_SET_MODE_FILTER,
                uapi::SECCOMP_FILTER_FLAG_TSYNC,
                &fprog as *const SockFprog,
            )
        }
    };
    let mut r = seccomp();
    if r != 0 && Errno::last().raw() == libc::EACCES {
        // Without CAP_SYS_ADMIN, filters need no-new-privileges.
        // SAFETY: prctl with plain integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(TrapError::Sys {
                what: "prctl(PR_SET_NO_NEW_PRIVS)",
                errno: Errno::last(),
            });
        }
        r = seccomp();
    }
    match r {
        0 => Ok(()),
        // With TSYNC, a positive result names a thread that could not be
        // synchronised.
        r if r > 0 => Err(TrapError::Sys {
            what: "seccomp(TSYNC): a thread has another filter",
            errno: Errno(libc::ESRCH),
        }),
        _ => Err(TrapError::Sys {
            what: "seccomp(SET_MODE_FILTER)",
            errno: Errno::last(),
        }),
    }
}
