//! The executable's large static arrays (`.bss`, `.lbss`, `.data`,
//! `.ldata`: C and C++ globals, Fortran `COMMON` blocks, NPB's arrays
//! built with `-DDO_NOT_ALLOCATE_ARRAYS...`), taken over in place.
//!
//! They are mapped by the kernel before any code runs, so they cannot be
//! allocated from the heap. In the library's constructor (before the
//! program's own constructors) the page-aligned interior of each such
//! section of at least the threshold is saved (resident pages of `.bss`,
//! every page of `.data`), replaced with fresh anonymous memory that
//! becomes a tiered region sharing the heap's near budget, and written
//! back. System calls on it are trapped like the heap's. Without tiering
//! (a huge-page heap) the sections are advised for transparent huge pages.

use crate::settings::Settings;
use serde::Serialize;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;
use tiermem::region::NearBudget;
use tiermem::stats::RegionStats;
use tiermem::Region;
use tiermem_sys::mm::Mapping;

/// One section taken over.
#[derive(Clone, Debug, Serialize)]
pub struct StaticReport {
    /// Section name.
    pub section: String,
    /// Start of the range taken over.
    pub addr: usize,
    /// Bytes taken over.
    pub bytes: usize,
    /// What was done: `tiered`, `thp` or why nothing.
    pub how: String,
    /// The region's statistics (tiered).
    pub stats: Option<RegionStats>,
}

/// Regions of the sections: alive for the rest of the process (dropping
/// one would unmap the program's data).
static TAKEN: Mutex<Vec<(StaticReport, Option<Region>)>> = Mutex::new(Vec::new());

/// Whether `addr` lies in a static range taken over (tiered).
pub(crate) fn contains(addr: usize) -> bool {
    let g = TAKEN.lock().unwrap_or_else(|p| p.into_inner());
    g.iter()
        .any(|(r, region)| region.is_some() && addr >= r.addr && addr < r.addr + r.bytes)
}

/// Reports for the exit report.
pub(crate) fn reports() -> Vec<StaticReport> {
    let g = TAKEN.lock().unwrap_or_else(|p| p.into_inner());
    g.iter()
        .map(|(r, region)| StaticReport {
            stats: region.as_ref().map(Region::stats),
            ..r.clone()
        })
        .collect()
}

/// A section of the executable file.
struct Section {
    name: String,
    vaddr: u64,
    size: u64,
    flags: u64,
}

const SHF_WRITE: u64 = 1;
const SHF_ALLOC: u64 = 2;
const PT_PHDR: u32 = 6;
const PT_LOAD: u32 = 1;

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

fn read_at(f: &File, off: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut v = vec![0u8; len];
    f.read_exact_at(&mut v, off)?;
    Ok(v)
}

/// The writable allocated sections of the running executable and its load
/// bias (0 for a non-PIE executable).
fn sections() -> std::io::Result<(Vec<Section>, u64)> {
    let f = File::open("/proc/self/exe")?;
    let eh = read_at(&f, 0, 64)?;
    if &eh[..4] != b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return Err(std::io::Error::other("not a 64-bit little-endian ELF file"));
    }
    let (phoff, shoff) = (u64_at(&eh, 32), u64_at(&eh, 40));
    let (phentsize, phnum) = (u16_at(&eh, 54) as usize, u16_at(&eh, 56) as usize);
    let (shentsize, shnum, shstrndx) = (
        u16_at(&eh, 58) as usize,
        u16_at(&eh, 60) as usize,
        u16_at(&eh, 62) as usize,
    );
    // The load bias: where the program headers are now, minus where the
    // file says they are.
    let ph = read_at(&f, phoff, phentsize * phnum)?;
    let phdr_now = tiermem_sys::probe::auxv_phdr();
    let mut phdr_vaddr = None;
    for k in 0..phnum {
        let p = &ph[k * phentsize..];
        match u32_at(p, 0) {
            PT_PHDR => phdr_vaddr = Some(u64_at(p, 16)),
            PT_LOAD if phdr_vaddr.is_none() && u64_at(p, 8) == 0 => phdr_vaddr = Some(u64_at(p, 16) + phoff),
            _ => {}
        }
    }
    let bias = phdr_now.wrapping_sub(phdr_vaddr.unwrap_or(phdr_now));
    if shoff == 0 || shnum == 0 {
        return Ok((Vec::new(), bias)); // stripped of section headers
    }
    let sh = read_at(&f, shoff, shentsize * shnum)?;
    let strtab = {
        let s = &sh[shstrndx * shentsize..];
        read_at(&f, u64_at(s, 24), u64_at(s, 32) as usize)?
    };
    let mut out = Vec::new();
    for k in 0..shnum {
        let s = &sh[k * shentsize..];
        let name_off = u32_at(s, 0) as usize;
        let name: String = strtab[name_off.min(strtab.len())..]
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as char)
            .collect();
        out.push(Section {
            name,
            vaddr: u64_at(s, 16),
            size: u64_at(s, 32),
            flags: u64_at(s, 8),
        });
    }
    Ok((out, bias))
}

/// Takes over the large sections (see the module doc).
pub(crate) fn take_over(s: &Settings, budget: Option<&NearBudget>) {
    let (secs, bias) = match sections() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("tiermem: static arrays left alone: reading the executable: {e}");
            return;
        }
    };
    let page = 4096u64;
    for sec in secs {
        if !matches!(sec.name.as_str(), ".bss" | ".lbss" | ".data" | ".ldata")
            || sec.flags & (SHF_WRITE | SHF_ALLOC) != SHF_WRITE | SHF_ALLOC
        {
            continue;
        }
        let start = (sec.vaddr + bias).next_multiple_of(page) as usize;
        let end = ((sec.vaddr + bias + sec.size) / page * page) as usize;
        let (start, end) = around_environ(start, end);
        if end <= start || end - start < s.threshold {
            continue;
        }
        let mut report = StaticReport {
            section: sec.name.clone(),
            addr: start,
            bytes: end - start,
            how: String::new(),
            stats: None,
        };
        let region = if s.tiered() {
            let section_start = (sec.vaddr + bias) as usize;
            match tier(
                s,
                budget,
                section_start,
                start,
                end - start,
                sec.name.ends_with("bss"),
            ) {
                Ok(r) => {
                    report.how = "tiered".into();
                    Some(r)
                }
                Err(e) => {
                    report.how = format!("left alone: {e}");
                    eprintln!(
                        "tiermem: static {} ({} MiB) left alone: {e}",
                        sec.name,
                        (end - start) >> 20
                    );
                    None
                }
            }
        } else {
            report.how = match thp(start, end - start) {
                Ok(()) => "thp".into(),
                Err(e) => format!("left alone: {e}"),
            };
            None
        };
        TAKEN
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((report, region));
    }
}

extern "C" {
    static environ: *const *const libc::c_char;
}

/// `[start, end)` less the page holding the C library's `environ`, keeping
/// the larger side. A program that names `environ` has it copied into its
/// own `.bss` (a copy relocation, at the section's start), and tiermem
/// reads it while it takes the range over, when no touch of it can be
/// served.
fn around_environ(start: usize, end: usize) -> (usize, usize) {
    let at = (&raw const environ) as usize & !4095;
    if at < start || at >= end {
        return (start, end);
    }
    if at - start >= end - (at + 4096) {
        (start, at)
    } else {
        (at + 4096, end)
    }
}

/// Saves the range, replaces it with a tiered region and writes it back.
fn tier(
    s: &Settings,
    budget: Option<&NearBudget>,
    section_start: usize,
    start: usize,
    len: usize,
    bss: bool,
) -> Result<Region, String> {
    let config = s.region_config(len as u64)?;
    if config.virt_bytes as usize != len {
        return Err("not a whole number of the region's pages".into());
    }
    // A .bss page nobody touched is zero; .data pages hold the file's
    // initial values whether resident or not.
    let saved = save(start, len, bss);
    // SAFETY: the range is the executable's own writable data, saved above;
    // the program has not run yet (this is the library's constructor) and
    // nothing unmaps it (the region lives for the rest of the process).
    let (map, user) = unsafe { Mapping::take_over(start, len) }.map_err(|e| e.to_string())?;
    let mut region = Region::adopt(config, map, user, budget).map_err(|e| e.to_string())?;
    {
        let bytes: &mut [u8] = region.as_mut_slice();
        for (off, data) in &saved {
            bytes[*off..*off + data.len()].copy_from_slice(data);
        }
    }
    // Buffers starting anywhere in the section may run into the region.
    region
        .trap_kernel_access(section_start)
        .map_err(|e| e.to_string())?;
    Ok(region)
}

/// The non-zero pages of `[start, start + len)`: (offset, contents). For
/// `.bss`, only pages already resident can be non-zero.
fn save(start: usize, len: usize, bss: bool) -> Vec<(usize, Vec<u8>)> {
    let resident = if bss {
        tiermem_sys::mm::resident_pages(start, len)
    } else {
        vec![true; len / 4096]
    };
    let mut out = Vec::new();
    let mut page = vec![0u8; 4096];
    for (k, _) in resident.iter().enumerate().filter(|(_, &r)| r) {
        // SAFETY: the page is part of the executable's mapped, readable
        // data segment (a section of it), read before anything changes it.
        unsafe { tiermem_sys::mm::read_raw(start + k * 4096, &mut page) };
        if page.iter().any(|&b| b != 0) {
            out.push((k * 4096, page.clone()));
        }
    }
    out
}

/// Advises the range for transparent huge pages (untiered mode).
fn thp(start: usize, len: usize) -> Result<(), String> {
    let a = start.next_multiple_of(2 << 20);
    let b = (start + len) / (2 << 20) * (2 << 20);
    if b <= a {
        return Err("smaller than a huge page".into());
    }
    tiermem_sys::mm::advise_raw(a, b - a, tiermem_sys::mm::Advice::HugePage).map_err(|e| e.to_string())
}
