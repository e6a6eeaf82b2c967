/*
 * tiermem.h: the C API of tiermem.
 *
 * tiermem gives a program a virtual region larger than its near-memory
 * budget. Pages move between near memory and a far store (a memory pool or
 * a file) on page faults, served with userfaultfd, transparently to the code
 * that reads and writes the region.
 *
 *     struct tm_config cfg;
 *     tm_config_init(&cfg, 64u << 20, 16u << 20);   // 64 MiB over 16 MiB
 *     tm_region *r;
 *     int rc = tm_region_create(&cfg, &r);
 *     if (rc != TM_OK) {
 *         fprintf(stderr, "%s: %s\n", tm_strerror(rc), tm_last_error());
 *         exit(1);
 *     }
 *     double *a = tm_region_base(r);            // use it like any memory
 *     ...
 *     tm_region_destroy(r);
 *
 * Link with -ltiermem (shared; add -Wl,-rpath,DIR for the directory of
 * libtiermem.so, or set LD_LIBRARY_PATH), or with libtiermem.a plus
 * -lgcc_s -lutil -lrt -lpthread -lm -ldl (static; what Rust's standard
 * library needs, scripts/ctest.sh links with exactly this line).
 * Linux only (userfaultfd).
 *
 * Conventions
 * - Functions returning int return 0 (TM_OK) or more on success and one of
 *   the negative TM_E* codes below on failure; functions returning a
 *   pointer return NULL on failure. After any failure, tm_last_error()
 *   gives the details as text, for the calling thread.
 * - A NULL pointer or an unknown enumeration value is reported as TM_EINVAL;
 *   it is never undefined behaviour. A dangling handle (one already
 *   destroyed) cannot be detected and is undefined behaviour, as with free().
 * - No C++ exception or Rust panic ever leaves a tiermem function: an
 *   internal failure is reported as TM_EINTERNAL.
 * - Every function may be called from any thread. A region handle may be
 *   used by several threads at once, except tm_region_destroy, which must
 *   not race with any other use of the handle or of the region's memory.
 * - Versioned structs (struct tm_config, struct tm_stats) start with
 *   struct_size = sizeof(the struct as the caller compiled it), so that
 *   later versions can append fields without breaking older programs.
 * - Memory locks: a region's pages move between near and far memory and
 *   cannot be locked. Regions created after mlockall(MCL_FUTURE) are made
 *   out of the lock. mlockall(MCL_CURRENT) after a region exists locks its
 *   range: the handler-thread fault path then serves the kernel's fault-in
 *   of the whole range once (within the budget), and the lock is taken off
 *   the region's mappings at the first eviction it refuses; the far store
 *   in memory is not populated, the region's metadata is (about 21 bytes
 *   per page of the range). Under `tiermem run`, mlockall, mlock and
 *   mlock2 leave tiered memory out (docs/transparent.md, "Memory locks").
 *
 * Error codes (stable; never renumbered)
 *   TM_OK            0  success
 *   TM_EINVAL       -1  invalid argument or configuration: NULL pointer,
 *                       unknown enum value, size of zero or not a multiple
 *                       of the page size, near budget below 4 pages, far
 *                       file directory missing or file existing, a pointer
 *                       tm_free_global did not hand out
 *   TM_ENOMEM       -2  out of memory or address space, or the global
 *                       region has no free range that large
 *   TM_EUNSUPPORTED -3  the kernel lacks a userfaultfd feature the
 *                       configuration needs (or the file system O_DIRECT)
 *   TM_EIO          -4  far-store I/O error
 *   TM_ENOSPC       -5  far store full
 *   TM_EHUGEPAGES   -6  the 2 MiB huge page pool has too few free pages;
 *                       the message says how many to reserve
 *   TM_EPERM        -7  permission denied (userfaultfd not allowed for
 *                       this user, far file directory not writable)
 *   TM_EINTERNAL    -8  internal error: a bug, please report it
 *   TM_EWORKER      -9  a team worker failed (returned non-zero, crashed
 *                       or was killed); the other workers were stopped
 *   TM_EFORKED     -10  a handle (region, team, SVM, segment, overshadow)
 *                       or an allocation (tm_malloc_global, tm_far_alloc)
 *                       made by the parent before fork(), used in the child:
 *                       refused, nothing of the parent's touched (docs/fork.md)
 *                       Thread creation refused at a task limit (pids cgroup,
 *                       RLIMIT_NPROC) is TM_ENOMEM, with the limit named.
 */
#ifndef TIERMEM_H
#define TIERMEM_H

/* ------------------------------------------------------------------------
 * Version
 * --------------------------------------------------------------------- */

#define TIERMEM_VERSION_MAJOR 0
#define TIERMEM_VERSION_MINOR 1
#define TIERMEM_VERSION_PATCH 0
/* The header's version as one number, to compare with tm_version(). */
#define TIERMEM_VERSION \
  (TIERMEM_VERSION_MAJOR * 10000 + TIERMEM_VERSION_MINOR * 100 + TIERMEM_VERSION_PATCH)

/* ------------------------------------------------------------------------
 * Attributes (all in one place; empty where the compiler lacks them)
 * --------------------------------------------------------------------- */

#if defined(__cplusplus) && (__cplusplus >= 201103L)
#define tm_attr_noexcept noexcept
#elif defined(__cplusplus)
#define tm_attr_noexcept throw()
#else
#define tm_attr_noexcept
#endif

#if defined(__cplusplus) && (__cplusplus >= 201703L)
#define tm_decl_nodiscard [[nodiscard]]
#elif defined(__GNUC__) || defined(__clang__)
#define tm_decl_nodiscard __attribute__((warn_unused_result))
#else
#define tm_decl_nodiscard
#endif

#if defined(__GNUC__) || defined(__clang__)
#define tm_decl_export __attribute__((visibility("default")))
#define tm_attr_malloc __attribute__((malloc))
#define tm_attr_alloc_size(i) __attribute__((alloc_size(i)))
#define tm_attr_const __attribute__((const))
#define tm_attr_returns_nonnull __attribute__((returns_nonnull))
#else
#define tm_decl_export
#define tm_attr_malloc
#define tm_attr_alloc_size(i)
#define tm_attr_const
#define tm_attr_returns_nonnull
#endif

#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t, uint64_t, int32_t */

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Error codes (see the list at the top; equal to tiermem::ErrorCode)
 * --------------------------------------------------------------------- */

#define TM_OK 0
#define TM_EINVAL (-1)
#define TM_ENOMEM (-2)
#define TM_EUNSUPPORTED (-3)
#define TM_EIO (-4)
#define TM_ENOSPC (-5)
#define TM_EHUGEPAGES (-6)
#define TM_EPERM (-7)
#define TM_EINTERNAL (-8)
#define TM_EWORKER (-9)
#define TM_EFORKED (-10)

/* ------------------------------------------------------------------------
 * Configuration values (stable; never renumbered). Each default is 0.
 * --------------------------------------------------------------------- */

/* tm_config.far_kind: a memory pool in this process (memfd); default. */
#define TM_FAR_MEMORY 0
/* tm_config.far_kind: a file, named by far_path. */
#define TM_FAR_FILE 1

/* tm_config.policy: first filled, first evicted; default. */
#define TM_POLICY_FIFO 0
/* tm_config.policy: CLOCK (second chance) over the accesses user space can
 * observe (write-protect faults, re-faults). */
#define TM_POLICY_CLOCK 1
/* tm_config.policy: scan-resistant: for loops over more data than the
 * budget, keeps a stable part resident (about half the data movement of
 * FIFO on a sweep twice the budget). */
#define TM_POLICY_SCAN 2
/* tm_config.policy: adaptive: FIFO until evictions come back in the order
 * they left (a loop larger than the budget), then scan-resistant, and back
 * to FIFO when scan evicts pages that come straight back. */
#define TM_POLICY_AUTO 3

/* tm_config.page_size_bytes: 2 MiB transparent huge pages. Each 2 MiB block
 * is filled with 512 small pages at once and then collapsed into one huge
 * page (MADV_COLLAPSE); a block the kernel cannot collapse stays on small
 * pages (correct, slower to translate). */
#define TM_PAGE_THP 2097153

/* tm_config.install: pages are installed with UFFDIO_COPY from the far
 * store and evicted pages freed with MADV_DONTNEED. */
#define TM_INSTALL_COPY 0
/* tm_config.install: page frames are recycled: evicted pages are moved
 * (UFFDIO_MOVE) into a ring of frames that receive new data and are moved
 * into place, with no page allocation and no kernel copy. Pages moved in
 * for a read are writable and compared with their far copy at eviction.
 * Needs Linux 6.8, 4 KiB pages and TM_DIRTY_WP_FAULT (else: copies). */
#define TM_INSTALL_MOVE 1
/* tm_config.install: recycling when the region has no movers (faulting
 * threads evict into the ring and fill from it), copies with movers;
 * default. */
#define TM_INSTALL_AUTO 2

/* tm_config.movers: one mover that stands down while the program keeps
 * every CPU busy, and while trials without it show the program running
 * faster (docs/movers.md). */
#define TM_MOVERS_AUTO 65535

/* tm_advise() advice. */
#define TM_ADVICE_NORMAL 0     /* back to the default heuristics */
#define TM_ADVICE_SEQUENTIAL 1 /* prefetch aggressively from the first fault */
#define TM_ADVICE_RANDOM 2     /* do not prefetch */
#define TM_ADVICE_WILLNEED 3   /* prefetch now */
#define TM_ADVICE_DONTNEED 4   /* evict now; the data is kept (unlike MADV_DONTNEED) */

/* tm_config.fault_path: faults are served on the faulting thread, in a
 * SIGBUS handler: no thread wake-up, the fastest design; default. System
 * calls that move data into or out of the region in kernel mode (read,
 * pread, recv, getrandom, write, pwrite, send, and fread/fwrite through
 * them) are trapped by a seccomp filter and served: on a regular file with
 * the buffer's pages brought in and pinned, on a pipe, socket or device
 * through a bounce buffer of plain memory (nothing pinned while the call
 * blocks) (TIERMEM_KERNEL_ACCESS=trap, the default). The same filter keeps
 * the program's own signal calls made inside the C library (sigvec,
 * setcontext, aio and timer helper threads) from blocking or taking
 * SIGBUS/SIGSEGV/SIGSYS. Not served through libtiermem: readv/writev/
 * recvmsg/sendmsg and other iovec calls (the preload library serves them),
 * io_uring, and accesses by other processes (process_vm_readv, /proc/PID/mem,
 * ptrace): on a page that is not resident these fail with EFAULT (EIO for
 * /proc/PID/mem). With TIERMEM_KERNEL_ACCESS=off every kernel access to a
 * missing or write-protected page fails with EFAULT. */
#define TM_FAULT_IN_CONTEXT 0
/* tm_config.fault_path: faults are served by handler threads reading the
 * userfaultfd, also the faults the kernel takes on the process's behalf
 * (every system call above, iovec calls too, and another process's
 * process_vm_readv/writev); each fault pays a thread wake-up. Not served on
 * either path: /proc/PID/mem and ptrace(PEEKDATA/POKEDATA), i.e. debuggers
 * (the kernel faults there without allowing a retry, so a userfaultfd
 * cannot answer; EIO on a missing page): call tm_touch first. */
#define TM_FAULT_HANDLER_THREAD 1

/* tm_config.dirty_tracking: pages are installed write-protected and the
 * first write takes a write-protect fault; default. */
#define TM_DIRTY_WP_FAULT 0
/* tm_config.dirty_tracking: writes un-protect pages in the kernel without
 * a fault (UFFD_FEATURE_WP_ASYNC, Linux 6.7+); eviction asks PAGEMAP_SCAN
 * which pages were written. */
#define TM_DIRTY_WP_ASYNC 1

/* ------------------------------------------------------------------------
 * Types
 * --------------------------------------------------------------------- */

/* A tiered region. Opaque: created by tm_region_create, consumed by
 * tm_region_destroy. */
typedef struct tm_region tm_region;

/* Everything that defines a region. Fill it with tm_config_init, then
 * change what you need. Fields are naturally aligned with explicit padding;
 * new fields are only ever appended (version 1 is 72 bytes, version 2 104). */
struct tm_config {
  uint32_t struct_size;       /* sizeof(struct tm_config); set by tm_config_init. A value
                                 below the version-1 size is TM_EINVAL. */
  uint32_t reserved0;         /* padding; must be 0 (tm_config_init sets it). */
  uint64_t virt_bytes;        /* size of the virtual range in bytes; a non-zero multiple of
                                 the page size, at most 64 TiB. No default (an argument of
                                 tm_config_init). */
  uint64_t near_bytes;        /* near-memory budget in bytes: at most this much is resident
                                 at once; at least 4 pages unless >= virt_bytes. No default
                                 (an argument of tm_config_init). */
  uint64_t page_size_bytes;   /* page size in bytes: 4096 (default), 2097152 (2 MiB pages
                                 from the hugetlbfs pool; reserve them first) or
                                 TM_PAGE_THP (2 MiB transparent huge pages, no pool). */
  int32_t far_kind;           /* where evicted pages go: TM_FAR_MEMORY (default) or
                                 TM_FAR_FILE. */
  uint32_t reserved1;         /* padding; must be 0 (tm_config_init sets it). */
  const char *far_path;       /* TM_FAR_FILE only: a directory (an unnamed file is created in
                                 it) or a new file name (created mode 0600, removed with the
                                 region; an existing file is refused, unless it is a far file
                                 whose process no longer runs: that leftover is removed, with
                                 a line on stderr). Any bytes but NUL; read
                                 during tm_region_create only. Default NULL; must be NULL with
                                 TM_FAR_MEMORY. */
  int32_t far_direct;         /* TM_FAR_FILE only: 1 opens the file with O_DIRECT (bypasses
                                 the page cache), 0 does not. Default 0. */
  int32_t policy;             /* replacement policy: TM_POLICY_FIFO (default). */
  int32_t fault_path;         /* TM_FAULT_IN_CONTEXT (default) or TM_FAULT_HANDLER_THREAD. */
  int32_t dirty_tracking;     /* TM_DIRTY_WP_FAULT (default) or TM_DIRTY_WP_ASYNC. */
  uint32_t evict_batch_pages; /* pages evicted together when the budget is full, 1 to 512;
                                 contiguous victims share one unmap (one TLB shootdown).
                                 Default 64. */
  uint32_t handler_threads;   /* TM_FAULT_HANDLER_THREAD only: number of handler threads, at
                                 least 1. Default 1. */
  /* Struct version 2 (the fields appended to version 1; both are in
   * tiermem 0.1, tm_version() 100). Zero is the default for every field
   * below, so programs built against version 1 keep working. */
  uint32_t movers;            /* dedicated data-mover threads (paper 1's data movement
                                 cores): prefetch ahead of demand and evict behind it.
                                 Default 0: all movement happens in faults.
                                 TM_MOVERS_AUTO: one that works only while a CPU is
                                 free for it and while it makes the program faster. */
  int32_t prefetch_off;       /* 1 turns fault-triggered stream prefetch off. Default 0
                                 (prefetch on whenever movers > 0). */
  uint32_t prefetch_max_pages; /* largest prefetch window in pages, 4 to 2048; 0 = default
                                 (512). */
  int32_t install;            /* TM_INSTALL_AUTO (default), _COPY or _MOVE. */
  const int32_t *mover_cpus;  /* CPUs to pin the movers to, round robin; NULL (default) =
                                 unpinned. Read during tm_region_create only. */
  uint32_t mover_cpu_count;   /* entries in mover_cpus; default 0. */
  int32_t fault_around_off;   /* 1 turns fault-around off: a demand fault outside any
                                 prefetch stream then installs only its own page. Default
                                 0: up to 16 missing neighbours come with it, in the same
                                 call, while the thread's faults show spatial locality
                                 (4 KiB pages). */
};

/* A snapshot of a region's statistics; counters count since creation. Set
 * struct_size = sizeof(struct tm_stats) before calling tm_region_stats. */
struct tm_stats {
  uint32_t struct_size;            /* set by the caller; tm_region_stats leaves it alone. */
  uint32_t reserved0;              /* padding; written as 0. */
  uint64_t faults_zero_fill;       /* first touches of never-written pages (count). */
  uint64_t faults_far_fill;        /* pages read back from the far store (count). */
  uint64_t faults_write_protect;   /* first writes to clean pages, TM_DIRTY_WP_FAULT (count). */
  uint64_t evictions;              /* pages evicted from near memory (count). */
  uint64_t evict_calls;            /* unmap calls issued for evictions (count). */
  uint64_t write_backs;            /* evicted pages written to the far store because they
                                      were dirty (count); clean ones are dropped. */
  uint64_t bytes_in;               /* bytes read from the far store. */
  uint64_t bytes_out;              /* bytes written to the far store. */
  uint64_t io_errors;              /* far-store I/O errors (count). */
  uint64_t poisoned_pages;         /* pages made inaccessible by errors (count). */
  uint64_t resident_bytes;         /* bytes resident in near memory now; <= near_bytes. */
  uint64_t fault_ns_total;         /* time spent serving faults, nanoseconds. */
  uint64_t fault_p50_ns;           /* median fault service time, nanoseconds. */
  uint64_t fault_p90_ns;           /* 90th percentile fault service time, nanoseconds. */
  uint64_t fault_p99_ns;           /* 99th percentile fault service time, nanoseconds. */
  uint64_t time_lock_list_ns;      /* page-state and replacement-list bookkeeping, ns. */
  uint64_t time_pte_ns;            /* installing page table entries, ns. */
  uint64_t time_tlb_ns;            /* unmapping and write-protecting (TLB shootdowns), ns. */
  uint64_t time_transfer_ns;       /* moving data to and from the far store, ns. */
  uint64_t time_misc_ns;           /* everything else inside fault handling, ns. */
  uint64_t threads;                /* application threads that took a fault (count; exact
                                      up to 256, further threads count as one). */
  uint64_t tlb_shootdowns_machine; /* TLB-shootdown interrupts on the whole machine since
                                      creation, from /proc/interrupts (includes other
                                      processes; count). */
  /* Struct version 2 (appended to version 1, as in struct tm_config). */
  uint64_t prefetch_issued;        /* pages asked for by the prefetcher (count). */
  uint64_t prefetch_used;          /* prefetched pages a stream then passed (count). */
  uint64_t prefetch_wasted;        /* prefetched pages evicted before use (count). */
  uint64_t mover_fills;            /* pages filled by mover threads (count). */
  uint64_t mover_evictions;        /* pages evicted by mover threads (count). */
  uint64_t inline_evictions;       /* pages evicted by faulting threads themselves (count). */
};

/* ------------------------------------------------------------------------
 * Version and errors
 * --------------------------------------------------------------------- */

/* The library's version: major * 10000 + minor * 100 + patch. Equal to
 * TIERMEM_VERSION when header and library match. */
tm_decl_export int tm_version(void) tm_attr_noexcept tm_attr_const;

/* A static, never-freed description of an error code: "success" for 0,
 * "unknown error code" for a value that is not a TM_E* code. */
tm_decl_export const char *tm_strerror(int code) tm_attr_noexcept tm_attr_returns_nonnull;

/* The detailed message of the calling thread's last failed tiermem call,
 * prefixed by the function's name ("tm_region_create: invalid
 * configuration: ..."), or "" if none has failed. The string belongs to the
 * thread and stays valid until the thread's next tiermem call; copy it to
 * keep it. A successful call does not clear it. */
tm_decl_export const char *tm_last_error(void) tm_attr_noexcept tm_attr_returns_nonnull;

/* ------------------------------------------------------------------------
 * Configuration
 * --------------------------------------------------------------------- */

/* Fills *cfg with struct_size, the two sizes (bytes) and the defaults of
 * every other field (documented in struct tm_config). Does nothing if cfg
 * is NULL (tm_last_error says so). The TIERMEM_* environment variables are
 * NOT applied: they configure only the global region. */
tm_decl_export void tm_config_init(struct tm_config *cfg, uint64_t virt_bytes,
                                   uint64_t near_bytes) tm_attr_noexcept;

/* ------------------------------------------------------------------------
 * Regions
 * --------------------------------------------------------------------- */

/* Creates a region as *cfg describes and stores its handle in *out.
 * Returns TM_OK, or a negative code with *out set to NULL (when out is not
 * NULL): TM_EINVAL (NULL cfg or out, bad struct_size, bad field),
 * TM_EHUGEPAGES, TM_EUNSUPPORTED, TM_EPERM, TM_ENOMEM, TM_ENOSPC (a far
 * file whose file system has no room for one eviction batch, for a region
 * that evicts; tm_last_error names it), ... The region's
 * memory starts as zeros. With TIERMEM_VERBOSE=1 in the environment the
 * effective configuration is printed on stderr. */
tm_decl_nodiscard tm_decl_export int tm_region_create(const struct tm_config *cfg,
                                                      tm_region **out) tm_attr_noexcept;

/* Unmaps the region and frees its near memory and far store; returns
 * TM_OK. NULL is a no-op returning TM_OK.
 *
 * The call consumes the handle, exactly as free() consumes a pointer: a
 * second tm_region_destroy (or any other use) of the same handle is
 * undefined behaviour and cannot be reported. Writing
 *     tm_region_destroy(r); r = NULL;
 * makes a repeated destroy the harmless no-op above. No thread may use the
 * region's memory during or after the call. */
tm_decl_export int tm_region_destroy(tm_region *r) tm_attr_noexcept;

/* The first byte of the region's range (page aligned); NULL if r is NULL.
 * The range is tm_region_size(r) bytes long. */
tm_decl_export void *tm_region_base(const tm_region *r) tm_attr_noexcept;

/* The size of the region's range in bytes (virt_bytes); 0 if r is NULL. */
tm_decl_export size_t tm_region_size(const tm_region *r) tm_attr_noexcept;

/* Copies a snapshot of the region's statistics into *out. out->struct_size
 * must be set by the caller (a multiple of 8, at least 16): the fields
 * that fit in it are filled, bytes beyond this library's struct are zeroed.
 * Returns TM_OK or TM_EINVAL (NULL r or out, bad struct_size). */
tm_decl_export int tm_region_stats(const tm_region *r, struct tm_stats *out) tm_attr_noexcept;

/* Writes back the dirty pages and drops every resident page, leaving near
 * memory empty. Returns the number of pages evicted (>= 0, saturated at
 * INT_MAX) or a negative code (TM_EIO, TM_ENOSPC: the pages whose
 * write-back failed stay resident). Pages held by a system call in
 * progress (a recv into the region, blocked) are waited for up to a
 * second, then left resident. */
tm_decl_export int tm_region_evict_all(tm_region *r) tm_attr_noexcept;

/* Forgets the bytes [offset, offset + len) of the region: they read as
 * zeros again and give back their near memory and far-store space. offset
 * and len (bytes) must be multiples of the page size and the range inside
 * the region. Returns TM_OK or TM_EINVAL. */
tm_decl_export int tm_region_discard(tm_region *r, size_t offset, size_t len) tm_attr_noexcept;

/* Asks for [addr, addr + len) to be brought into near memory: queued to
 * the region's mover threads, or done before returning when it has none
 * or their queue is full (with either far store). Pages already resident
 * are skipped; a page the far store cannot read stays where it is (a hint:
 * the next access retries and reports). The range must lie in one tiermem
 * region (any region of the process, including the global one). Returns
 * TM_OK or TM_EINVAL. */
tm_decl_export int tm_prefetch(const void *addr, size_t len) tm_attr_noexcept;

/* Makes [addr, addr + len) of one tiermem region resident now, on the
 * calling thread and without a page fault; returns the number of pages of
 * the range resident afterwards, or TM_EINVAL / TM_EFORKED. For debuggers:
 * /proc/<pid>/mem and ptrace(PTRACE_PEEKDATA) cannot have a page brought in
 * (on either fault path: the kernel gives a userfaultfd no chance to serve
 * them and they fail with EIO), so gdb shows evicted or untouched pages as
 * "Cannot access memory". In gdb: `call (int) tm_touch(p, 4096)`, then
 * `x/4gx p` (docs/design.md "Kernel accesses"). */
tm_decl_export int tm_touch(const void *addr, size_t len) tm_attr_noexcept;

/* Access advice for [addr, addr + len) of one tiermem region: one of the
 * TM_ADVICE_* values. Returns TM_OK, TM_EINVAL, or for TM_ADVICE_DONTNEED
 * TM_EIO / TM_ENOSPC when write-back fails (those pages stay resident). */
tm_decl_export int tm_advise(const void *addr, size_t len, int advice) tm_attr_noexcept;

/* ------------------------------------------------------------------------
 * The process-wide region (paper 1's malloc_global / free_global)
 * --------------------------------------------------------------------- */

/* Allocates size bytes of tiered memory from one process-wide region,
 * created at the first call of tm_malloc_global from the environment,
 * read then and only then:
 *   TIERMEM_FAR        virtual size, bytes with K/M/G/T suffix; default twice
 *                      the physical memory, in whole GiB (address space, not
 *                      memory: metadata grows with the pages used)
 *   TIERMEM_NEAR       near budget, bytes with K/M/G/T suffix or a share of
 *                      physical memory (25%); default 1G
 *   TIERMEM_PAGE_SIZE  4K (default) or 2M
 *   TIERMEM_FAR_FILE, TIERMEM_FAR_DIRECT, TIERMEM_POLICY, TIERMEM_FAULT_PATH,
 *   TIERMEM_DIRTY, TIERMEM_EVICT_BATCH, TIERMEM_HANDLER_THREADS,
 *   TIERMEM_HANDLER_CPUS, TIERMEM_VERBOSE: see docs/configuration.md.
 *   TIERMEM_GLOBAL_HEAP  tiered (default), or 2m / 1g / thp: a huge-page heap
 *                      without tiering (paper 3) of TIERMEM_FAR bytes, pages
 *                      of that size from the pool, falling back 1g -> 2m ->
 *                      THP -> 4k with one warning line; its allocations are
 *                      page aligned and take whole pages.
 * An invalid value prints a warning on stderr and keeps the default.
 * The memory is 64-byte aligned, page aligned from one page up. As with
 * malloc, its contents are unspecified: pages never used before, or
 * given back whole by tm_free_global, read as zeros; the rest of a page
 * shared with earlier allocations keeps their bytes. size 0 returns a
 * unique pointer. Returns NULL on failure (region full or not creatable;
 * details in tm_last_error). */
tm_decl_nodiscard tm_decl_export void *tm_malloc_global(size_t size) tm_attr_noexcept
    tm_attr_malloc tm_attr_alloc_size(1);

/* Frees memory from tm_malloc_global; whole pages it covered give back
 * their near memory and far-store space. NULL is a no-op returning TM_OK.
 * A pointer tm_malloc_global did not return, or one already freed, is
 * TM_EINVAL (detected: the pointer is checked, never dereferenced); before
 * the first tm_malloc_global every non-NULL pointer is. */
tm_decl_export int tm_free_global(void *ptr) tm_attr_noexcept;

/* ------------------------------------------------------------------------
 * Segments and huge page pools (docs/hugepages.md)
 *
 * A segment is one contiguous range on 1 GiB pages (two-level page walks,
 * one TLB entry per gigabyte), populated and locked when created and never
 * tiered or remapped: the application takes no page faults on it. When
 * the 1 GiB pool is short it falls back to 2 MiB pages with a warning on
 * stderr, unless TM_SEGMENT_NO_FALLBACK; when the pools are too small the
 * error (TM_EHUGEPAGES, tm_last_error) names the command that fixes it.
 *
 *     tm_segment *s;
 *     if (tm_segment_create(1ul << 30, 0, &s) == TM_OK) {
 *         uint64_t *table = tm_segment_base(s);
 *         ...
 *         tm_segment_destroy(s);
 *     }
 * --------------------------------------------------------------------- */

/* tm_segment_create flags */
#define TM_SEGMENT_2M 1          /* 2 MiB pages instead of 1 GiB */
#define TM_SEGMENT_NO_FALLBACK 2 /* fail rather than fall back to 2 MiB pages */

typedef struct tm_segment tm_segment;

/* A segment of `bytes` (rounded up to whole pages; 0, or more than the
 * machine's memory, is TM_EINVAL). */
tm_decl_nodiscard tm_decl_export int tm_segment_create(size_t bytes, int flags, tm_segment **out) tm_attr_noexcept;
/* Its start (aligned to its page size), size, and page size in bytes
 * (1073741824 or 2097152); NULL/0 for a NULL handle. */
tm_decl_export void *tm_segment_base(const tm_segment *s) tm_attr_noexcept;
tm_decl_export size_t tm_segment_size(const tm_segment *s) tm_attr_noexcept;
tm_decl_export size_t tm_segment_page_size(const tm_segment *s) tm_attr_noexcept;
/* Unmaps it and returns its pages to the pool. NULL is a no-op. */
tm_decl_export int tm_segment_destroy(tm_segment *s) tm_attr_noexcept;

/* Makes `pages` huge pages of `page_size` bytes (2097152 or 1073741824)
 * available in addition to those in use, growing the pool (needs root;
 * TM_EPERM otherwise). Stores the pages then available in *available (may
 * be NULL); fewer than asked is TM_EHUGEPAGES (memory fragmented). A pool
 * larger than the machine's memory (MemTotal) is TM_EINVAL, the pool left
 * as it was. The static pool of paper 3: call it at start-up, or set
 * TIERMEM_HUGEPAGES=2M:512,1G:2 for the process-wide region. */
tm_decl_nodiscard tm_decl_export int tm_hugepages_reserve(size_t page_size, uint64_t pages,
                                                          uint64_t *available) tm_attr_noexcept;

/* ------------------------------------------------------------------------
 * Team regions: partially separated page tables (docs/team.md)
 *
 * One tiered region shared by N worker processes at the same address, each
 * with its own page table: a worker holds translations only for the pages
 * it touched, and evicting a page interrupts only the workers that map it.
 *
 *     static int work(tm_team_worker *w, void *arg) {
 *         double *a = tm_team_worker_base(w);
 *         int r = tm_team_worker_rank(w), n = tm_team_worker_count(w);
 *         ... compute on the rank's share of a ...
 *         return tm_team_barrier(w) == TM_OK ? 0 : 1;
 *     }
 *     tm_team *t;
 *     tm_team_create(1ul << 30, 256ul << 20, 4, TM_TEAM_PIN, &t);
 *     int rc = tm_team_run(t, TM_TEAM_PROCESSES, work, NULL);
 *     tm_team_destroy(t);
 *
 * Workers are fork()ed: call tm_team_run from a process with one thread
 * (or one whose other threads hold no locks the workers need), and let
 * worker functions return rather than exit().
 * --------------------------------------------------------------------- */

/* tm_team_create flags */
#define TM_TEAM_SHARER_AWARE 1 /* evict pages fewest other workers map */
#define TM_TEAM_PIN 2          /* pin worker r to CPU r % online CPUs */
#define TM_TEAM_NO_FAULT_AROUND 4 /* one page per fault; by default a fault also
                                   * brings the neighbours the worker's recent
                                   * faults call for (up to 16 pages) */
#define TM_TEAM_DIRTY_TRACKING 8 /* read faults map write-protected and
                                  * evictions write back only written pages:
                                  * pays where much is only read, costs a
                                  * fault per cluster read, then written; a
                                  * system call writing into a page the
                                  * worker only read fails with EFAULT; on
                                  * Linux < 5.19 the team runs without it */
/* tm_team_run kinds */
#define TM_TEAM_PROCESSES 0 /* a page table per worker (PSPT) */
#define TM_TEAM_THREADS 1   /* threads of this process: one page table */

typedef struct tm_team tm_team;
typedef struct tm_team_worker tm_team_worker;
/* A worker function: return 0 for success. */
typedef int (*tm_team_fn)(tm_team_worker *w, void *arg);

/* Team counters, summed over all members. */
struct tm_team_stats {
    uint64_t missing_faults;   /* fills from far memory or with zeros */
    uint64_t minor_faults;     /* near pages mapped for one more member */
    uint64_t evictions;        /* pages evicted */
    uint64_t evict_calls;      /* eviction runs (one unmap each) */
    uint64_t bytes_in;         /* bytes read from far memory */
    uint64_t bytes_out;        /* bytes written to far memory */
    uint64_t victims_unmapped; /* evicted pages no member mapped */
    uint64_t victims_self;     /* ... only the evicting member mapped */
    uint64_t victims_other;    /* ... one other member mapped */
    uint64_t victims_many;     /* ... several members mapped */
};

/* A team region of virt_bytes (a non-zero multiple of the page size, at
 * most 64 TiB; TM_EINVAL otherwise) over near_bytes for `workers` workers (1 to
 * 53). This process may use it too (to initialise or check data). */
tm_decl_nodiscard tm_decl_export int tm_team_create(size_t virt_bytes, size_t near_bytes, int workers,
                                                    int flags, tm_team **out) tm_attr_noexcept;
/* Runs fn(worker, arg) on every worker and waits for all. TM_EWORKER if
 * one returned non-zero, crashed or was killed (the others are stopped at
 * their next barrier; details in tm_last_error). */
tm_decl_export int tm_team_run(tm_team *t, int kind, tm_team_fn fn, void *arg) tm_attr_noexcept;
/* Inside a worker function: rank (0..count-1), count, region address,
 * barrier (TM_EWORKER if a worker died). */
tm_decl_export int tm_team_worker_rank(const tm_team_worker *w) tm_attr_noexcept;
tm_decl_export int tm_team_worker_count(const tm_team_worker *w) tm_attr_noexcept;
tm_decl_export void *tm_team_worker_base(const tm_team_worker *w) tm_attr_noexcept;
tm_decl_export int tm_team_barrier(tm_team_worker *w) tm_attr_noexcept;
/* Processes that already exist (MPI ranks on one node): rank 0 creates a
 * named team of `ranks` ranks (files in /dev/shm until it is destroyed),
 * ranks 1..ranks-1 attach; tm_team_sync is their barrier. */
tm_decl_nodiscard tm_decl_export int tm_team_create_named(const char *name, size_t virt_bytes,
                                                          size_t near_bytes, int ranks, int flags,
                                                          tm_team **out) tm_attr_noexcept;
tm_decl_nodiscard tm_decl_export int tm_team_attach(const char *name, int rank, tm_team **out) tm_attr_noexcept;
tm_decl_export int tm_team_sync(tm_team *t) tm_attr_noexcept;
/* The region (same address in every member), its size, this process's
 * rank (the creator of tm_team_create is rank `workers`), counters. */
tm_decl_export void *tm_team_base(const tm_team *t) tm_attr_noexcept;
tm_decl_export size_t tm_team_size(const tm_team *t) tm_attr_noexcept;
tm_decl_export int tm_team_rank(const tm_team *t) tm_attr_noexcept;
tm_decl_export int tm_team_stats(const tm_team *t, struct tm_team_stats *out) tm_attr_noexcept;
/* Leaves the team; the creator also removes it. NULL is a no-op. */
tm_decl_export int tm_team_destroy(tm_team *t) tm_attr_noexcept;

/* ------------------------------------------------------------------------
 * Shared virtual memory (paper 5: Lam et al., "Rhymes"; docs/svm.md)
 *
 * A heap shared by N processes at the same address. Each page is, per
 * process, in SPM mode (the shared home copy, release consistency) or DSM
 * mode (a private cached copy: scope consistency with lock ids, twins and
 * byte-exact diffs, write notices). Locks order updates; a barrier makes
 * every process's updates visible to all.
 *
 *     static int work(void *arg) {
 *         long *c = tm_svm_malloc(4096);          // same address everywhere
 *         tm_svm_set_mode(c, 4096, TM_SVM_DSM);
 *         tm_svm_lock(0); c[0] += 1; tm_svm_unlock(0);
 *         return tm_svm_barrier() == TM_OK && c[0] == tm_svm_procs() ? 0 : 1;
 *     }
 *     tm_svm *s;
 *     tm_svm_create(64ul << 20, 4, TM_SVM_PIN, &s);
 *     int rc = tm_svm_run(s, work, NULL);
 *     tm_svm_destroy(s);
 *
 * Processes are fork()ed (call tm_svm_run from a process with one thread);
 * one thread per process uses the SVM. tm_svm_malloc is collective: every
 * process makes the same calls in the same order; whole pages.
 *
 * Inside an MPI job (a library built with the `mpi` feature, the program
 * started by mpirun), the same calls span nodes: tm_svm_create is collective
 * over MPI_COMM_WORLD and takes procs = 0 or the world size (anything else:
 * TM_EINVAL); tm_svm_run runs fn once in every rank, without forking;
 * tm_svm_rank/tm_svm_procs are the MPI rank and size. The program may call
 * MPI_Init_thread(MPI_THREAD_MULTIPLE) itself, or let tiermem initialise
 * (and finalise) MPI. Pages homed on another node are cached copies (SPM
 * there keeps release consistency). Do not pass SVM memory to MPI calls.
 * See docs/svm.md and examples/c/svm_mpi.c.
 * --------------------------------------------------------------------- */

/* tm_svm_create flags */
#define TM_SVM_NONCOHERENT 1 /* SPM pages: clwb written lines at release,
                              * clflushopt others' lines at acquire */
#define TM_SVM_PIN 2         /* pin process r to CPU r % online CPUs */
/* tm_svm_set_mode modes */
#define TM_SVM_SPM 0
#define TM_SVM_DSM 1

typedef struct tm_svm tm_svm;
typedef int (*tm_svm_fn)(void *arg);

struct tm_svm_stats {
    uint64_t read_faults;       /* DSM / read-only private read faults */
    uint64_t write_faults;      /* DSM write faults (twins made) */
    uint64_t spm_write_faults;  /* writes to write-protected SPM pages */
    uint64_t fetches;           /* home pages copied into private copies */
    uint64_t diffs;             /* pages diffed against their twins */
    uint64_t diff_runs;         /* byte runs applied to home copies */
    uint64_t diff_bytes;        /* bytes applied to home copies */
    uint64_t notices_sent;      /* write notices attached to locks */
    uint64_t notices_received;  /* write notices read at acquires */
    uint64_t invalidations;     /* cached copies dropped */
    uint64_t lines_flushed;     /* cache lines written back (noncoherent) */
    uint64_t lines_invalidated; /* cache lines invalidated (noncoherent) */
};

/* A team of `procs` processes (1 to 53) sharing heap_bytes (a multiple of
 * 4 KiB). In an MPI job: procs 0 or the world size; TM_SVM_PIN is ignored
 * (the launcher binds ranks). */
tm_decl_nodiscard tm_decl_export int tm_svm_create(size_t heap_bytes, int procs, int flags,
                                                   tm_svm **out) tm_attr_noexcept;
/* Forks the processes; each runs fn(arg) and waits for all. TM_EWORKER if
 * one returned non-zero, crashed or was killed (the others stop at their
 * next barrier or lock wait). In an MPI job: runs fn(arg) in this rank
 * (every rank calls it); TM_EWORKER if a rank's fn returned non-zero (the
 * others stop at their next wait); a rank that dies ends the job. */
tm_decl_export int tm_svm_run(tm_svm *s, tm_svm_fn fn, void *arg) tm_attr_noexcept;
/* Inside fn: rank (0..procs-1) and count; TM_EINVAL outside tm_svm_run. */
tm_decl_export int tm_svm_rank(void) tm_attr_noexcept;
tm_decl_export int tm_svm_procs(void) tm_attr_noexcept;
/* Nodes the processes span (1 for a forked team). */
tm_decl_export int tm_svm_nodes(void) tm_attr_noexcept;
/* Collective allocation / free (NULL and tm_last_error on failure). */
tm_decl_export void *tm_svm_malloc(size_t size) tm_attr_noexcept;
/* The same, with the pages homed on the ranks of an MPI job in turn (page
 * i on rank i % ranks) instead of one block per rank. */
tm_decl_export void *tm_svm_malloc_cyclic(size_t size) tm_attr_noexcept;
tm_decl_export int tm_svm_free(void *ptr) tm_attr_noexcept;
/* Numbered locks 0..127. lock: invalidates cached copies named in the
 * lock's write notices; TM_EWORKER if the holder died. unlock: applies the
 * diffs of dirty pages and attaches write notices; TM_EINVAL if not held. */
tm_decl_export int tm_svm_lock(int id) tm_attr_noexcept;
tm_decl_export int tm_svm_unlock(int id) tm_attr_noexcept;
/* Applies everyone's diffs, then drops every cached copy whose home changed. */
tm_decl_export int tm_svm_barrier(void) tm_attr_noexcept;
/* Page mode of whole pages for this process only (TM_SVM_SPM, TM_SVM_DSM);
 * a dirty DSM page's diff is applied first. */
tm_decl_export int tm_svm_set_mode(void *ptr, size_t len, int mode) tm_attr_noexcept;
/* "Read-only private": cached privately, validated only at barriers;
 * writing such pages raises SIGSEGV. */
tm_decl_export int tm_svm_hint_read_only(void *ptr, size_t len) tm_attr_noexcept;
/* Counters of the last tm_svm_run, all processes. */
tm_decl_export int tm_svm_stats(const tm_svm *s, struct tm_svm_stats *out) tm_attr_noexcept;
/* NULL is a no-op. */
tm_decl_export int tm_svm_destroy(tm_svm *s) tm_attr_noexcept;

/* ------------------------------------------------------------------------
 * Far memory and Overshadow (paper 2: Hori et al., "Overshadow")
 *
 * Far memory that tiermem can map a second time: tm_far_alloc (a memfd of
 * its own, as fast as near memory on this machine) or a page-aligned range
 * of a file (slow while its pages are not in the page cache).
 *
 * tm_overshadow_create maps the far range a second time at *to and starts
 * a copy into near memory on tiermem's mover thread. *to is readable at
 * once and shows the far bytes; each chunk of pages switches to its near
 * copy atomically when its copy is done (one mremap, one TLB flush per
 * chunk; readers never see a torn page). A write to a page that has not
 * switched yet copies and switches that page first (or waits while the
 * mover copies it) and is never lost; writes go to the near copy only,
 * never to `from`. After tm_overshadow_wait every page is near.
 * tm_overshadow_destroy is safe at any time, also during the copy, and
 * unmaps *to. Several overshadows may be in flight.
 * --------------------------------------------------------------------- */

/* tm_overshadow_create_ex flags: switch each chunk as soon as it is copied
 * (default; what tm_overshadow_create does). */
#define TM_OVERSHADOW_PER_PAGE 0
/* tm_overshadow_create_ex flags: switch all pages after the whole copy
 * (the paper's first prototype, for comparison). */
#define TM_OVERSHADOW_WHOLE 1

/* size bytes (rounded up to whole pages) of zeroed far memory; NULL on
 * failure (size 0: TM_EINVAL in tm_last_error). Free with tm_far_free. */
tm_decl_nodiscard tm_decl_export void *tm_far_alloc(size_t size) tm_attr_noexcept;

/* Maps len bytes of the file at path from offset (offset and len multiples
 * of the page size, the range inside the file) as far memory, read-write
 * if writable is non-zero, and stores the address in *out (NULL on
 * failure). Returns TM_OK or TM_EINVAL. Unmap with tm_far_free. */
tm_decl_export int tm_far_map_file(const char *path, uint64_t offset, size_t len, int writable,
                                   void **out) tm_attr_noexcept;

/* Frees a tm_far_alloc allocation or unmaps a tm_far_map_file range;
 * overshadows of it stay valid. NULL is a no-op returning TM_OK; any other
 * pointer tiermem did not return, or one freed already, is TM_EINVAL. */
tm_decl_export int tm_far_free(void *ptr) tm_attr_noexcept;

/* Overshadows size bytes of far memory at from (page aligned, inside one
 * tm_far_alloc / tm_far_map_file range) with per-page switch and stores
 * the near address in *to (NULL on failure). Returns TM_OK or TM_EINVAL
 * (NULL to, size 0, unaligned, not far memory tiermem can map twice),
 * TM_ENOMEM. */
tm_decl_export int tm_overshadow_create(const void *from, size_t size, void **to) tm_attr_noexcept;

/* As tm_overshadow_create, with flags TM_OVERSHADOW_PER_PAGE or
 * TM_OVERSHADOW_WHOLE (anything else: TM_EINVAL). */
tm_decl_export int tm_overshadow_create_ex(const void *from, size_t size, int flags,
                                           void **to) tm_attr_noexcept;

/* Waits until every page of the overshadow at to is near. Returns TM_OK,
 * TM_EIO (reading the far memory failed), or TM_EINVAL (to is not the
 * address of a live overshadow). */
tm_decl_export int tm_overshadow_wait(void *to) tm_attr_noexcept;

/* Never blocks: 1 if every page is near (or the copy failed, which
 * tm_overshadow_wait reports), 0 while copying, TM_EINVAL for an unknown
 * to. */
tm_decl_export int tm_overshadow_test(void *to) tm_attr_noexcept;

/* Ends the overshadow at to, at any time (a copy in progress stops after
 * its current chunk), and unmaps to. Returns TM_OK or TM_EINVAL (unknown
 * to, or destroyed already). If another thread is inside
 * tm_overshadow_wait(to) meanwhile, to stays mapped until that wait
 * returns (when the copy ends). */
tm_decl_export int tm_overshadow_destroy(void *to) tm_attr_noexcept;

#ifdef __cplusplus
}
#endif

#endif /* TIERMEM_H */
