//! Starting programs: `execve`, `execv`, `execvp`, `execvpe`, `execl`,
//! `execle`, `execlp`, `fexecve`, `execveat`, `posix_spawn`,
//! `posix_spawnp`, `system` and `popen`.
//!
//! The kernel reads a new program's path, its argument and environment
//! strings and their pointer arrays in kernel mode. Where they lie in
//! tiered memory (a Python `subprocess.run` builds them in its object
//! arenas, which `tiermem run` tiers) an evicted page fails the call with
//! `EFAULT` on the in-context fault path ("OSError: [Errno 14] Bad
//! address"), and the kernel-access trap cannot serve it: `execve` is what
//! a `vfork` child and a `posix_spawn` child call, with every handler
//! reset in the latter (docs/design.md). So these functions copy all of it
//! into a plain anonymous mapping (never tiered) in user mode, where the
//! pages fault in as anywhere else, and run the C library's function on
//! the copies. glibc's `execv`, `execvp`, `posix_spawn`, `system`, ...
//! reach `execve` inside the C library, where no interposer sees them, so
//! each is interposed itself.
//!
//! The copy is unmapped when the call returns (it failed, or
//! `posix_spawn`'s child has started). A `vfork` child (`CLONE_VM` without
//! the owner's descriptors: Python's `subprocess` starts every program
//! that way) cannot serve a fault itself: the engine's descriptors are the
//! owner's, and the child may have closed its copies (`subprocess` closes
//! every one above 2 before `execve`). It copies through the owner's
//! lender thread instead: the lender pins a piece of
//! the strings (brings its pages in, keeps them from eviction), the child
//! copies that piece in user mode, the lender unpins ([`tiermem::vfork`]:
//! the same thread serves the child's faults).

use libc::{c_char, c_int, pid_t};
use std::ffi::CStr;
use std::sync::atomic::AtomicUsize;

extern "C" {
    static environ: *const *const c_char;
}

pub(crate) use tiermem_interpose::next;

/// The path, argument and environment vectors of an exec, copied into one
/// anonymous mapping.
struct Copies {
    map: usize,
    len: usize,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
}

impl Copies {
    /// Copies `path` (may be null) and the null-terminated vectors `argv`
    /// and `envp` (each may be null), in a `vfork` child through the
    /// owner's lender (module doc); None where that child has no lender or
    /// gave up on it, or where no mapping can be made (the call then runs
    /// on the originals).
    ///
    /// # Safety
    /// The arguments are what the C functions take: a NUL-terminated
    /// string, null-terminated arrays of them.
    unsafe fn new(
        path: *const c_char,
        argv: *const *const c_char,
        envp: *const *const c_char,
    ) -> Option<Copies> {
        let lend = !tiermem_sys::thread::owns_memory();
        if lend && !tiermem::vfork::lending() {
            return None;
        }
        GAVE_UP.with(|g| g.set(false));
        // SAFETY: the caller's vectors.
        let (argc, envc) = unsafe { (count(argv, lend), count(envp, lend)) };
        let mut strings = 0usize;
        // SAFETY: the caller's strings.
        let len_of = |s: *const c_char| {
            if s.is_null() {
                0
            } else if lend {
                borrowed_len(s as usize)
            } else {
                // SAFETY: the caller's NUL-terminated string.
                (unsafe { libc::strlen(s) }) + 1
            }
        };
        strings += len_of(path);
        for (v, n) in [(argv, argc), (envp, envc)] {
            for i in 0..n {
                // SAFETY: i is below the vector's count.
                strings += len_of(unsafe { entry(v, i, lend) });
            }
        }
        if GAVE_UP.with(|g| g.get()) {
            return None;
        }
        let slots = (argc + 1) + (envc + 1);
        let len = (slots * 8 + strings).next_multiple_of(4096);
        // A raw mmap: the preload library's own mmap would tier it.
        // SAFETY: an anonymous private mapping of len bytes.
        let map = unsafe {
            libc::syscall(
                libc::SYS_mmap,
                0usize,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1i32,
                0usize,
            )
        };
        if map < 0 {
            return None;
        }
        let map = map as usize;
        let slot_at = |k: usize| (map + k * 8) as *mut *const c_char;
        let mut text = map + slots * 8;
        let mut put = |s: *const c_char| -> *const c_char {
            if s.is_null() {
                return s;
            }
            // A string another thread lengthened since it was measured is
            // cut to the room left (and still ends in a NUL).
            let n = len_of(s).min(map + len - text);
            if n == 0 {
                return std::ptr::null();
            }
            // SAFETY: n bytes of the caller's string into the mapping,
            // which has room for them; its last byte made a NUL.
            unsafe {
                copy_in(s as usize, text, n, lend);
                *((text + n - 1) as *mut c_char) = 0;
            }
            let at = text as *const c_char;
            text += n;
            at
        };
        let path = put(path);
        let mut vector = |v: *const *const c_char, first: usize, n: usize| -> *const *const c_char {
            if v.is_null() {
                return v;
            }
            for i in 0..n {
                // SAFETY: slot first + i of the mapping's pointer slots; i
                // is below the vector's count.
                unsafe { *slot_at(first + i) = put(entry(v, i, lend)) };
            }
            // SAFETY: the terminating slot.
            unsafe { *slot_at(first + n) = std::ptr::null() };
            slot_at(first) as *const *const c_char
        };
        let argv = vector(argv, 0, argc);
        let envp = vector(envp, argc + 1, envc);
        let copies = Copies {
            map,
            len,
            path,
            argv,
            envp,
        };
        // Given up half way: the originals (dropping the copy unmaps it).
        (!GAVE_UP.with(|g| g.get())).then_some(copies)
    }
}

impl Drop for Copies {
    /// The call returned: the copy is unused (errno is kept).
    fn drop(&mut self) {
        unmap(self.map, self.len);
    }
}

fn unmap(map: usize, len: usize) {
    // SAFETY: errno is thread-local; the mapping is this module's.
    unsafe {
        let e = *libc::__errno_location();
        libc::syscall(libc::SYS_munmap, map, len);
        *libc::__errno_location() = e;
    }
}

/// Entries of a null-terminated vector before its null (read through the
/// lender where `lend`).
///
/// # Safety
/// `v` is null or a null-terminated array.
unsafe fn count(v: *const *const c_char, lend: bool) -> usize {
    let mut n = 0;
    if !v.is_null() {
        // SAFETY: within the array, up to its null.
        while !unsafe { entry(v, n, lend) }.is_null() {
            n += 1;
        }
    }
    n
}

/// Entry `i` of a vector (read through the lender where `lend`).
///
/// # Safety
/// `v[i]` exists.
unsafe fn entry(v: *const *const c_char, i: usize, lend: bool) -> *const c_char {
    // SAFETY: the caller's entry.
    let at = unsafe { v.add(i) };
    if !lend {
        // SAFETY: as above.
        return unsafe { *at };
    }
    let mut word = [0u8; 8];
    // SAFETY: 8 bytes of the caller's vector into `word`.
    unsafe { copy_in(at as usize, word.as_mut_ptr() as usize, 8, true) };
    usize::from_ne_bytes(word) as *const c_char
}

/// Copies `n` bytes from `from` to `to`: directly, or where `lend` piece
/// by piece as the lender pins them.
///
/// # Safety
/// Both ranges are valid for `n` bytes.
unsafe fn copy_in(from: usize, to: usize, n: usize, lend: bool) {
    if !lend {
        // SAFETY: the caller's ranges.
        unsafe { std::ptr::copy_nonoverlapping(from as *const u8, to as *mut u8, n) };
        return;
    }
    let mut done = 0;
    while done < n {
        let piece = borrow(from + done, n - done, |at, len| {
            // SAFETY: pinned bytes of the caller's range.
            unsafe { std::ptr::copy_nonoverlapping(at as *const u8, (to + done) as *mut u8, len) };
            len
        });
        done += piece.max(1).min(n - done);
    }
}

/// The length of the C string at `s`, its NUL included, read piece by
/// piece as the lender pins it.
fn borrowed_len(s: usize) -> usize {
    let mut len = 0;
    loop {
        let mut end = false;
        let piece = borrow(s + len, 4096 - (s + len) % 4096, |at, n| {
            // SAFETY: pinned bytes of the caller's string.
            let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, n) };
            match bytes.iter().position(|&b| b == 0) {
                Some(k) => {
                    end = true;
                    k + 1
                }
                None => n,
            }
        });
        len += piece.max(1);
        if end || GAVE_UP.with(|g| g.get()) {
            return len;
        }
    }
}

/// The process's environment.
fn env() -> *const *const c_char {
    // SAFETY: reading the C library's environ pointer.
    unsafe { environ }
}

type ExecveFn = unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;

/// Runs `f` on copies of `path`, `argv` and `envp`, or on the originals
/// where no copy can be made.
///
/// # Safety
/// As for the C functions.
unsafe fn with_copies<R>(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    f: impl FnOnce(*const c_char, *const *const c_char, *const *const c_char) -> R,
) -> R {
    // SAFETY: forwarded from the caller.
    match unsafe { Copies::new(path, argv, envp) } {
        Some(c) => f(c.path, c.argv, c.envp),
        None => f(path, argv, envp),
    }
}

fn missing(name: &str) -> c_int {
    eprintln!("tiermem: the C library's {name} is missing");
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

/// Defines `$name`, the C library's `execve` or `execvpe` (the same
/// arguments) run on copies, and `$for_execl`, the same function for
/// src/execl.c (`execl`, `execle`, `execlp`: C variadic functions, which
/// stable Rust cannot define).
macro_rules! exec_on_copies_fns {
    (
        $(#[$doc:meta])* fn $name:ident = $cname:literal ($path:ident);
        $(#[$execl_doc:meta])* fn $for_execl:ident
    ) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As for the C function.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            $path: *const c_char,
            argv: *const *const c_char,
            envp: *const *const c_char,
        ) -> c_int {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            // SAFETY: as for the C function.
            unsafe { exec_on_copies(&NEXT, $cname, $path, argv, envp) }
        }

        $(#[$execl_doc])*
        ///
        /// # Safety
        /// As for the C function.
        #[no_mangle]
        pub unsafe extern "C" fn $for_execl(
            $path: *const c_char, argv: *const *const c_char, envp: *const *const c_char,
        ) -> c_int {
            // SAFETY: as above.
            unsafe { $name($path, argv, envp) }
        }
    };
}

exec_on_copies_fns! {
    /// `execve(2)`, on copies (module doc).
    fn execve = c"execve" (path);
    /// `execve` for src/execl.c (`execl`, `execle`).
    fn tiermem_preload_execve
}

exec_on_copies_fns! {
    /// `execvpe(3)`, on copies.
    fn execvpe = c"execvpe" (file);
    /// `execvpe` for src/execl.c (`execlp`).
    fn tiermem_preload_execvpe
}

/// `execv(3)`: `execve` with the process's environment.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as above.
    unsafe { execve(path, argv, env()) }
}

/// Runs the C library's `name` (`execve` or `execvpe`, looked up into
/// `cache`) on copies of its arguments.
///
/// # Safety
/// As for `execve`.
unsafe fn exec_on_copies(
    cache: &AtomicUsize,
    name: &CStr,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let f = next(cache, name);
    if f == 0 {
        return missing(name.to_str().unwrap_or("exec"));
    }
    // SAFETY: the C library's function of that name and type.
    let real: ExecveFn = unsafe { std::mem::transmute(f) };
    // SAFETY: the caller's arguments, copied.
    unsafe { with_copies(path, argv, envp, |p, a, e| real(p, a, e)) }
}

/// `execvp(3)`: `execvpe` with the process's environment.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as above.
    unsafe { execvpe(file, argv, env()) }
}

/// `fexecve(3)`, on copies.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let f = next(&NEXT, c"fexecve");
    if f == 0 {
        return missing("fexecve");
    }
    // SAFETY: the C library's fexecve.
    let real: unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int =
        unsafe { std::mem::transmute(f) };
    // SAFETY: the caller's arguments, copied.
    unsafe { with_copies(std::ptr::null(), argv, envp, |_, a, e| real(fd, a, e)) }
}

/// `execveat(2)`, on copies.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    flags: c_int,
) -> c_int {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let f = next(&NEXT, c"execveat");
    // SAFETY: the caller's arguments, copied; the C library's execveat, or
    // the system call where this C library has no wrapper.
    unsafe {
        with_copies(path, argv, envp, |p, a, e| {
            if f == 0 {
                libc::syscall(libc::SYS_execveat, dirfd, p, a, e, flags) as c_int
            } else {
                let real: unsafe extern "C" fn(
                    c_int,
                    *const c_char,
                    *const *const c_char,
                    *const *const c_char,
                    c_int,
                ) -> c_int = std::mem::transmute(f);
                real(dirfd, p, a, e, flags)
            }
        })
    }
}

type SpawnFn = unsafe extern "C" fn(
    *mut pid_t,
    *const c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const *const c_char,
    *const *const c_char,
) -> c_int;

/// `posix_spawn` and `posix_spawnp` on copies: the call returns once the
/// child has run its program (or failed to), so the copy goes with it.
/// `f`: the C library's function (0: missing).
///
/// # Safety
/// As for the C functions.
unsafe fn spawn(
    f: usize,
    pid: *mut pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    if f == 0 {
        missing("posix_spawn");
        return libc::ENOSYS;
    }
    // SAFETY: the C library's function of this signature.
    let real: SpawnFn = unsafe { std::mem::transmute(f) };
    // SAFETY: the caller's arguments, copied.
    unsafe { with_copies(path, argv, envp, |p, a, e| real(pid, p, actions, attr, a, e)) }
}

/// Defines `$name`, the C library's `posix_spawn` or `posix_spawnp` (the
/// same arguments) run on copies.
macro_rules! spawn_on_copies_fn {
    ($(#[$doc:meta])* fn $name:ident = $cname:literal ($path:ident)) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As for the C function.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            pid: *mut pid_t,
            $path: *const c_char,
            actions: *const libc::posix_spawn_file_actions_t,
            attr: *const libc::posix_spawnattr_t,
            argv: *const *const c_char,
            envp: *const *const c_char,
        ) -> c_int {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            // SAFETY: as for the C function.
            unsafe { spawn(next(&NEXT, $cname), pid, $path, actions, attr, argv, envp) }
        }
    };
}

spawn_on_copies_fn! {
    /// `posix_spawn(3)`, on copies.
    fn posix_spawn = c"posix_spawn" (path)
}

spawn_on_copies_fn! {
    /// `posix_spawnp(3)`, on copies.
    fn posix_spawnp = c"posix_spawnp" (file)
}

/// Runs `f` with the command copied and `environ` pointing at a copy of
/// the environment: glibc's `system` and `popen` start the shell with
/// `posix_spawn` inside the C library, on `environ` as it is. The
/// environment is put back unless another thread changed it meanwhile
/// (`setenv` during `system` is a race without tiermem too); the copy is
/// then left mapped, as the new environment may point into it.
///
/// # Safety
/// `command` is a C string or null.
unsafe fn with_copied_environment<R>(command: *const c_char, f: impl FnOnce(*const c_char) -> R) -> R {
    let old = env();
    // SAFETY: the caller's command and the process's environment.
    let Some(c) = (unsafe { Copies::new(command, std::ptr::null(), old) }) else {
        return f(command);
    };
    // SAFETY: environ is the C library's; the copy stays mapped for the
    // call.
    unsafe { environ_ptr().write_volatile(c.envp) };
    let r = f(c.path);
    // SAFETY: as above.
    let restored = unsafe {
        let mine = environ_ptr().read_volatile() == c.envp;
        if mine {
            environ_ptr().write_volatile(old);
        }
        mine
    };
    if !restored {
        std::mem::forget(c);
    }
    r
}

fn environ_ptr() -> *mut *const *const c_char {
    std::ptr::addr_of!(environ) as *mut _
}

/// `system(3)`: its command and the environment on copies.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let f = next(&NEXT, c"system");
    if f == 0 {
        return missing("system");
    }
    // SAFETY: the C library's system.
    let real: unsafe extern "C" fn(*const c_char) -> c_int = unsafe { std::mem::transmute(f) };
    // SAFETY: the caller's command.
    unsafe { with_copied_environment(command, |c| real(c)) }
}

/// `popen(3)`: its command and the environment on copies.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let f = next(&NEXT, c"popen");
    if f == 0 {
        missing("popen");
        return std::ptr::null_mut();
    }
    // SAFETY: the C library's popen.
    let real: unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE =
        unsafe { std::mem::transmute(f) };
    // SAFETY: the caller's command.
    unsafe { with_copied_environment(command, |c| real(c, mode)) }
}

thread_local! {
    /// This `vfork` child could not borrow from the lender: its copy is
    /// given up.
    static GAVE_UP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// In a `vfork` child: has the owner's lender pin up to `len` bytes at
/// `addr`, runs `f` on what it pinned (address, length), lets go. Returns
/// `f`'s result; 0 once the child gave up (no lender slot came free
/// within a second: one killed while holding slots never lets go), after
/// which it runs on the originals (`EFAULT` at worst), never waits for
/// ever.
fn borrow(addr: usize, len: usize, f: impl FnOnce(usize, usize) -> usize) -> usize {
    if GAVE_UP.with(|g| g.get()) {
        return 0;
    }
    tiermem::vfork::with_borrowed(addr, len, f).unwrap_or_else(|| {
        GAVE_UP.with(|g| g.set(true));
        0
    })
}
