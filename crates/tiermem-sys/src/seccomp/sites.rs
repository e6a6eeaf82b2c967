//! The code ranges whose calls a filter traps: the C libraries mapped in
//! this image and the vDSO, found from the ELF program headers.

use super::*;

/// The code ranges whose calls the filters of this image trap (see
/// [`call_sites`]).
static SITES: OnceLock<Vec<(u64, u64)>> = OnceLock::new();

const PT_LOAD: u32 = 1;
const PT_INTERP: u32 = 3;
const PF_X: u32 = 1;

/// Where this image's C library makes its system calls: the executable
/// segments of the loaded objects that define `read`, `fread`, `recvfrom`,
/// `getrandom`, `write`, `syscall`, ... (glibc's `libc.so.6`; `libpthread`
/// too before glibc 2.34; the executable itself when the C library is
/// linked in statically), and of the objects named like a C library
/// (`libc.so.*`, `libpthread.so.*`, musl's), in case another library wraps
/// those functions; the vDSO's code (glibc 2.41 and later make
/// `getrandom` from it); and every executable mapping in `/proc/self/maps`
/// of a file named like a C library, which covers the C libraries of link
/// namespaces that `dl_iterate_phdr` does not show (an `LD_AUDIT`
/// module's, a `dlmopen(LM_ID_NEWLM)`). Empty if none is found (the
/// filters then trap calls from any code). Computed once per image, when
/// the first filter is loaded: a C library loaded later (a new namespace)
/// is not a call site, and its calls on a page that is not resident fail
/// with `EFAULT`.
///
/// The executable of a dynamically linked program is never a call site
/// (a non-PIE one that takes the address of `read` holds a canonical PLT
/// entry that `&read` and `dlsym` resolve to). A statically linked program
/// is its own C library: its whole code is a call site, at fixed addresses
/// when it is not a static PIE, so a static non-PIE program it `exec`s
/// whose code overlaps and that makes such a call on a buffer in the
/// trapped ranges is killed (build static programs with `-static-pie`).
///
/// Only calls made from there are trapped: every `read`, `fread`, `recv`,
/// `getrandom`, ... of the program and of its libraries, but not a raw
/// `syscall` instruction elsewhere (a static Go binary, a JIT), which meets
/// a non-resident page with `EFAULT` as without tiermem. And not the calls
/// of another program image: the filters outlive `execve`, and a program
/// the process runs next (a shell, any tool) has its C library at other,
/// randomised addresses.
pub fn call_sites() -> &'static [(u64, u64)] {
    SITES.get_or_init(|| {
        // The definitions, both as the linker resolved them for this
        // library and as the dynamic linker finds them by name (a non-PIE
        // executable may hold a canonical PLT entry for the former).
        let mut targets: Vec<usize> = vec![
            libc::read as *const () as usize,
            libc::pread64 as *const () as usize,
            libc::fread as *const () as usize,
            libc::recvfrom as *const () as usize,
            libc::getrandom as *const () as usize,
            libc::write as *const () as usize,
            libc::syscall as *const () as usize,
        ];
        for name in [c"read", c"fread", c"recvfrom", c"write", c"syscall"] {
            // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the
            // global scope.
            let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            if !p.is_null() {
                targets.push(p as usize);
            }
        }
        let mut search = SiteSearch {
            targets,
            found: Vec::new(),
        };
        // SAFETY: the callback only reads the loader's program headers
        // for the duration of each call; `search` outlives the iteration.
        unsafe {
            libc::dl_iterate_phdr(Some(visit_object), (&mut search as *mut SiteSearch).cast());
        }
        let mut found = search.found;
        if !found.is_empty() {
            // glibc >= 2.41 makes `getrandom` from the vDSO (its fallback
            // system call is the vDSO's own instruction).
            for r in vdso_code() {
                add_site(&mut found, r);
            }
            // C libraries of other link namespaces (`dlmopen`, `LD_AUDIT`),
            // which dl_iterate_phdr does not show: their mapped code.
            for r in c_libraries_mapped() {
                add_site(&mut found, r);
            }
        }
        found
    })
}

/// Adds `r` unless it overlaps a site already there (the same code seen
/// twice: program headers and `/proc/self/maps` round differently).
pub(super) fn add_site(found: &mut Vec<(u64, u64)>, r: (u64, u64)) {
    if r.0 < r.1 && !found.iter().any(|&(lo, hi)| r.0 < hi && lo < r.1) {
        found.push(r);
    }
}

/// Whether a file name (the last path component) is a C library's:
/// glibc's `libc.so.6` (`libc-2.*.so` before 2.34), `libpthread`, musl's.
pub(super) fn named_like_c_library(file: &[u8]) -> bool {
    [
        "libc.so",
        "libc-2.",
        "libpthread.so",
        "libpthread-",
        "libc.musl",
        "ld-musl",
    ]
    .iter()
    .any(|p| file.starts_with(p.as_bytes()))
}

/// The executable segments of the vDSO (`AT_SYSINFO_EHDR`), from its
/// program headers.
pub(super) fn vdso_code() -> Vec<(u64, u64)> {
    // SAFETY: getauxval reads the auxiliary vector; 0 when absent.
    let ehdr = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
    if ehdr == 0 {
        return Vec::new();
    }
    // SAFETY: the kernel maps the vDSO's ELF image at `ehdr`, readable,
    // for the life of the process: its header and program headers.
    let phdrs = unsafe {
        let h = &*(ehdr as *const libc::Elf64_Ehdr);
        std::slice::from_raw_parts(
            (ehdr + h.e_phoff as usize) as *const libc::Elf64_Phdr,
            h.e_phnum as usize,
        )
    };
    // The load bias: where the segment holding file offset 0 (the ELF
    // header) was meant to be.
    let Some(first) = phdrs.iter().find(|p| p.p_type == PT_LOAD && p.p_offset == 0) else {
        return Vec::new();
    };
    let bias = (ehdr as u64).wrapping_sub(first.p_vaddr);
    phdrs
        .iter()
        .filter(|p| p.p_type == PT_LOAD && p.p_flags & PF_X != 0)
        .map(|p| {
            (
                bias.wrapping_add(p.p_vaddr),
                bias.wrapping_add(p.p_vaddr + p.p_memsz),
            )
        })
        .collect()
}

/// The executable mappings of files named like a C library, from
/// `/proc/self/maps`: also those of link namespaces other than this
/// library's (`dlmopen(LM_ID_NEWLM)`, an `LD_AUDIT` module's), which
/// `dl_iterate_phdr` does not show. Empty without `/proc`.
pub(super) fn c_libraries_mapped() -> Vec<(u64, u64)> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in maps.lines() {
        // start-end perms offset dev inode path
        let mut f = line.split_ascii_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some(path) = f.nth(3) else { continue };
        if perms.as_bytes().get(2) != Some(&b'x') || !path.starts_with('/') {
            continue;
        }
        let file = path.rsplit('/').next().unwrap_or(path);
        if !named_like_c_library(file.as_bytes()) {
            continue;
        }
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        if let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) {
            out.push((lo, hi));
        }
    }
    out
}

struct SiteSearch {
    targets: Vec<usize>,
    found: Vec<(u64, u64)>,
}

/// `dl_iterate_phdr` callback: adds the executable segments of an object
/// that holds one of the targets.
unsafe extern "C" fn visit_object(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: `data` is the SiteSearch passed to dl_iterate_phdr, and
    // `info` the loader's description of one object, valid for this call.
    let (search, info) = unsafe { (&mut *data.cast::<SiteSearch>(), &*info) };
    if info.dlpi_phdr.is_null() {
        return 0;
    }
    // SAFETY: the loader's program headers of this object.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    // SAFETY: a non-null dlpi_name is the loader's NUL-terminated name.
    let unnamed = info.dlpi_name.is_null() || unsafe { *info.dlpi_name } == 0;
    if unnamed && phdrs.iter().any(|p| p.p_type == PT_INTERP) {
        // The executable of a dynamically linked program is not its C
        // library, even when it seems to define `read`: a non-PIE
        // executable that takes the address of `read` holds a canonical
        // PLT entry, which is where `&read` and `dlsym` point. Its code is
        // not randomised, so another non-PIE program this process runs
        // would share the call site and be killed by a trap.
        return 0;
    }
    let base = info.dlpi_addr;
    let holds = |t: usize| {
        phdrs.iter().any(|p| {
            p.p_type == PT_LOAD
                && p.p_flags & PF_X != 0
                && (base + p.p_vaddr..base + p.p_vaddr + p.p_memsz).contains(&(t as u64))
        })
    };
    // By name too: another preloaded library that wraps `read` (an I/O
    // tracer) makes the targets its own, but the C library still makes the
    // calls.
    let is_libc = !info.dlpi_name.is_null() && {
        // SAFETY: the loader's NUL-terminated path of this object.
        let path = unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_bytes();
        named_like_c_library(path.rsplit(|&b| b == b'/').next().unwrap_or(path))
    };
    if is_libc || search.targets.iter().any(|&t| holds(t)) {
        for p in phdrs
            .iter()
            .filter(|p| p.p_type == PT_LOAD && p.p_flags & PF_X != 0)
        {
            let r = (base + p.p_vaddr, base + p.p_vaddr + p.p_memsz);
            if !search.found.contains(&r) {
                search.found.push(r);
            }
        }
    }
    0
}
