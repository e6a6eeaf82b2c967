! tiermem.f90: the Fortran module of tiermem, over its C API.
!
! The same functions, constants and structs as include/tiermem.h (read it
! for what each does, its defaults and its errors), declared with
! iso_c_binding, plus what a Fortran code expects on top: region memory as
! Fortran pointer arrays of any shape, the process-wide allocator as
! allocate/deallocate, error messages as Fortran strings.
!
!     use tiermem
!     type(tm_config) :: cfg
!     type(c_ptr) :: r
!     real(c_double), pointer :: a(:,:)
!     call tm_config_init(cfg, 64_c_int64_t * 2**20, 16_c_int64_t * 2**20)
!     if (tm_region_create(cfg, r) /= TM_OK) then
!       write (error_unit, '(a)') tm_last_error()
!       error stop
!     end if
!     call tm_region_array(r, a, [2048, 4096])   ! 64 MiB of doubles
!     a = 1.0_c_double                           ! pages move in and out
!     rc = tm_region_destroy(r)                  ! a is gone: nullify(a)
!
! Build: gfortran -c include/tiermem.f90 (makes tiermem.mod and tiermem.o:
! the module has procedures, so link its object too), then
! gfortran -I<dir of tiermem.mod> prog.f90 tiermem.o -L<dir of libtiermem.so>
! -ltiermem -Wl,-rpath,<that dir>. Standard Fortran 2008 and iso_c_binding;
! docs/fortran.md.
!
! Types: Fortran has no unsigned integers, so uint32_t and uint64_t fields
! are integer(c_int32_t) and integer(c_int64_t) (values above 2**31-1 or
! 2**63-1 read as negative); size_t is integer(c_size_t). Handles (tm_region,
! tm_team, tm_team_worker, tm_segment) are type(c_ptr). Addresses passed to
! tm_prefetch, tm_touch and tm_advise are type(c_ptr): c_loc(a) of a
! contiguous array. Functions return integer(c_int) codes (TM_OK or a
! negative TM_E* code), as in C.
!
! Not bound here: shared virtual memory (tm_svm_*), far memory and
! Overshadow (tm_far_*, tm_overshadow_*); call them through your own
! bind(C) interfaces if needed. Renamed: tm_team_stats is the type, the
! function is tm_team_stats_get (Fortran names are case-insensitive).
module tiermem
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: error_unit
  implicit none
  private

  ! Everything of iso_c_binding a caller needs for the declarations below
  ! (c_ptr, c_int, c_double, c_loc, c_f_pointer, ...) comes with `use tiermem`.
  public :: c_ptr, c_funptr, c_null_ptr, c_null_funptr, c_associated, c_loc, c_funloc, c_f_pointer, &
            c_int, c_int32_t, c_int64_t, c_size_t, c_float, c_double, c_double_complex, c_char, &
            c_null_char, c_sizeof

  ! ---------------------------------------------------------------------
  ! Version
  ! ---------------------------------------------------------------------
  integer(c_int), parameter, public :: TIERMEM_VERSION_MAJOR = 0
  integer(c_int), parameter, public :: TIERMEM_VERSION_MINOR = 1
  integer(c_int), parameter, public :: TIERMEM_VERSION_PATCH = 0
  !> The module's version as one number, to compare with tm_version().
  integer(c_int), parameter, public :: TIERMEM_VERSION = &
    TIERMEM_VERSION_MAJOR * 10000 + TIERMEM_VERSION_MINOR * 100 + TIERMEM_VERSION_PATCH

  ! ---------------------------------------------------------------------
  ! Error codes (stable; the list at the top of tiermem.h says what each means)
  ! ---------------------------------------------------------------------
  integer(c_int), parameter, public :: TM_OK = 0
  integer(c_int), parameter, public :: TM_EINVAL = -1
  integer(c_int), parameter, public :: TM_ENOMEM = -2
  integer(c_int), parameter, public :: TM_EUNSUPPORTED = -3
  integer(c_int), parameter, public :: TM_EIO = -4
  integer(c_int), parameter, public :: TM_ENOSPC = -5
  integer(c_int), parameter, public :: TM_EHUGEPAGES = -6
  integer(c_int), parameter, public :: TM_EPERM = -7
  integer(c_int), parameter, public :: TM_EINTERNAL = -8
  integer(c_int), parameter, public :: TM_EWORKER = -9
  integer(c_int), parameter, public :: TM_EFORKED = -10

  ! ---------------------------------------------------------------------
  ! Configuration values (tm_config fields; each default is 0)
  ! ---------------------------------------------------------------------
  integer(c_int), parameter, public :: TM_FAR_MEMORY = 0
  integer(c_int), parameter, public :: TM_FAR_FILE = 1
  integer(c_int), parameter, public :: TM_POLICY_FIFO = 0
  integer(c_int), parameter, public :: TM_POLICY_CLOCK = 1
  integer(c_int), parameter, public :: TM_POLICY_SCAN = 2
  integer(c_int), parameter, public :: TM_POLICY_AUTO = 3
  !> tm_config%page_size_bytes: 2 MiB transparent huge pages.
  integer(c_int64_t), parameter, public :: TM_PAGE_THP = 2097153_c_int64_t
  integer(c_int), parameter, public :: TM_INSTALL_COPY = 0
  integer(c_int), parameter, public :: TM_INSTALL_MOVE = 1
  integer(c_int), parameter, public :: TM_INSTALL_AUTO = 2
  !> tm_config%movers: one mover, working only while a CPU is free for it
  !> and while it makes the program faster.
  integer(c_int), parameter, public :: TM_MOVERS_AUTO = 65535
  integer(c_int), parameter, public :: TM_FAULT_IN_CONTEXT = 0
  integer(c_int), parameter, public :: TM_FAULT_HANDLER_THREAD = 1
  integer(c_int), parameter, public :: TM_DIRTY_WP_FAULT = 0
  integer(c_int), parameter, public :: TM_DIRTY_WP_ASYNC = 1

  ! tm_advise advice
  integer(c_int), parameter, public :: TM_ADVICE_NORMAL = 0
  integer(c_int), parameter, public :: TM_ADVICE_SEQUENTIAL = 1
  integer(c_int), parameter, public :: TM_ADVICE_RANDOM = 2
  integer(c_int), parameter, public :: TM_ADVICE_WILLNEED = 3
  integer(c_int), parameter, public :: TM_ADVICE_DONTNEED = 4

  ! tm_segment_create flags
  integer(c_int), parameter, public :: TM_SEGMENT_2M = 1
  integer(c_int), parameter, public :: TM_SEGMENT_NO_FALLBACK = 2

  ! tm_team_create flags and tm_team_run kinds
  integer(c_int), parameter, public :: TM_TEAM_SHARER_AWARE = 1
  integer(c_int), parameter, public :: TM_TEAM_PIN = 2
  integer(c_int), parameter, public :: TM_TEAM_NO_FAULT_AROUND = 4
  integer(c_int), parameter, public :: TM_TEAM_DIRTY_TRACKING = 8
  integer(c_int), parameter, public :: TM_TEAM_PROCESSES = 0
  integer(c_int), parameter, public :: TM_TEAM_THREADS = 1

  ! ---------------------------------------------------------------------
  ! Structs: field for field struct tm_config, struct tm_stats and struct
  ! tm_team_stats (scripts/ftest.sh compares every offset with the C side)
  ! ---------------------------------------------------------------------

  !> Everything that defines a region: fill it with tm_config_init, then
  !> change what you need (fields and defaults: struct tm_config in tiermem.h).
  type, bind(C), public :: tm_config
    integer(c_int32_t) :: struct_size
    integer(c_int32_t) :: reserved0
    integer(c_int64_t) :: virt_bytes
    integer(c_int64_t) :: near_bytes
    integer(c_int64_t) :: page_size_bytes
    integer(c_int32_t) :: far_kind
    integer(c_int32_t) :: reserved1
    !> TM_FAR_FILE: c_loc of a NUL-terminated path (trim(p) // c_null_char)
    !> that lives until tm_region_create returns.
    type(c_ptr) :: far_path
    integer(c_int32_t) :: far_direct
    integer(c_int32_t) :: policy
    integer(c_int32_t) :: fault_path
    integer(c_int32_t) :: dirty_tracking
    integer(c_int32_t) :: evict_batch_pages
    integer(c_int32_t) :: handler_threads
    integer(c_int32_t) :: movers
    integer(c_int32_t) :: prefetch_off
    integer(c_int32_t) :: prefetch_max_pages
    integer(c_int32_t) :: install
    !> c_loc of an integer(c_int32_t) array of CPUs, or c_null_ptr.
    type(c_ptr) :: mover_cpus
    integer(c_int32_t) :: mover_cpu_count
    integer(c_int32_t) :: fault_around_off
  end type tm_config

  !> A snapshot of a region's statistics (fields: struct tm_stats in
  !> tiermem.h). tm_region_stats sets struct_size itself.
  type, bind(C), public :: tm_stats
    integer(c_int32_t) :: struct_size
    integer(c_int32_t) :: reserved0
    integer(c_int64_t) :: faults_zero_fill
    integer(c_int64_t) :: faults_far_fill
    integer(c_int64_t) :: faults_write_protect
    integer(c_int64_t) :: evictions
    integer(c_int64_t) :: evict_calls
    integer(c_int64_t) :: write_backs
    integer(c_int64_t) :: bytes_in
    integer(c_int64_t) :: bytes_out
    integer(c_int64_t) :: io_errors
    integer(c_int64_t) :: poisoned_pages
    integer(c_int64_t) :: resident_bytes
    integer(c_int64_t) :: fault_ns_total
    integer(c_int64_t) :: fault_p50_ns
    integer(c_int64_t) :: fault_p90_ns
    integer(c_int64_t) :: fault_p99_ns
    integer(c_int64_t) :: time_lock_list_ns
    integer(c_int64_t) :: time_pte_ns
    integer(c_int64_t) :: time_tlb_ns
    integer(c_int64_t) :: time_transfer_ns
    integer(c_int64_t) :: time_misc_ns
    integer(c_int64_t) :: threads
    integer(c_int64_t) :: tlb_shootdowns_machine
    integer(c_int64_t) :: prefetch_issued
    integer(c_int64_t) :: prefetch_used
    integer(c_int64_t) :: prefetch_wasted
    integer(c_int64_t) :: mover_fills
    integer(c_int64_t) :: mover_evictions
    integer(c_int64_t) :: inline_evictions
  end type tm_stats

  !> Team counters, summed over all members (struct tm_team_stats).
  type, bind(C), public :: tm_team_stats
    integer(c_int64_t) :: missing_faults
    integer(c_int64_t) :: minor_faults
    integer(c_int64_t) :: evictions
    integer(c_int64_t) :: evict_calls
    integer(c_int64_t) :: bytes_in
    integer(c_int64_t) :: bytes_out
    integer(c_int64_t) :: victims_unmapped
    integer(c_int64_t) :: victims_self
    integer(c_int64_t) :: victims_other
    integer(c_int64_t) :: victims_many
  end type tm_team_stats

  ! ---------------------------------------------------------------------
  ! The C functions, bound under their own names where Fortran can call
  ! them as they are
  ! ---------------------------------------------------------------------
  public :: tm_version, tm_config_init, tm_region_create, tm_region_base, tm_region_size, &
            tm_region_evict_all, tm_region_discard, tm_prefetch, tm_touch, tm_advise, &
            tm_malloc_global, tm_free_global, tm_segment_create, tm_segment_base, tm_segment_size, &
            tm_segment_page_size, tm_hugepages_reserve, tm_team_create, tm_team_run, &
            tm_team_worker_rank, tm_team_worker_count, tm_team_worker_base, tm_team_barrier, &
            tm_team_sync, tm_team_base, tm_team_size, tm_team_rank, tm_team_stats_get
  ! Module procedures over the C functions (Fortran strings, handles set to
  ! c_null_ptr when consumed, tm_stats%struct_size set).
  public :: tm_strerror, tm_last_error, tm_region_destroy, tm_region_stats, tm_segment_destroy, &
            tm_team_destroy, tm_team_create_named, tm_team_attach
  ! Arrays over region and global memory.
  public :: tm_region_array, tm_allocate_global, tm_deallocate_global

  interface
    !> The library's version: major * 10000 + minor * 100 + patch.
    function tm_version() bind(C, name='tm_version')
      import :: c_int
      integer(c_int) :: tm_version
    end function tm_version

    !> Fills cfg with struct_size, the two sizes (bytes) and the defaults.
    subroutine tm_config_init(cfg, virt_bytes, near_bytes) bind(C, name='tm_config_init')
      import :: tm_config, c_int64_t
      type(tm_config), intent(out) :: cfg
      integer(c_int64_t), value :: virt_bytes, near_bytes
    end subroutine tm_config_init

    !> Creates a region as cfg describes; r is its handle (c_null_ptr on failure).
    function tm_region_create(cfg, r) bind(C, name='tm_region_create')
      import :: tm_config, c_ptr, c_int
      type(tm_config), intent(in) :: cfg
      type(c_ptr), intent(out) :: r
      integer(c_int) :: tm_region_create
    end function tm_region_create

    !> The first byte of the region's range (page aligned).
    function tm_region_base(r) bind(C, name='tm_region_base')
      import :: c_ptr
      type(c_ptr), value :: r
      type(c_ptr) :: tm_region_base
    end function tm_region_base

    !> The size of the region's range in bytes.
    function tm_region_size(r) bind(C, name='tm_region_size')
      import :: c_ptr, c_size_t
      type(c_ptr), value :: r
      integer(c_size_t) :: tm_region_size
    end function tm_region_size

    !> Writes back dirty pages and empties near memory; pages evicted or a TM_E* code.
    function tm_region_evict_all(r) bind(C, name='tm_region_evict_all')
      import :: c_ptr, c_int
      type(c_ptr), value :: r
      integer(c_int) :: tm_region_evict_all
    end function tm_region_evict_all

    !> Forgets bytes [offset, offset + len) of the region (page multiples): zeros again.
    function tm_region_discard(r, offset, len) bind(C, name='tm_region_discard')
      import :: c_ptr, c_size_t, c_int
      type(c_ptr), value :: r
      integer(c_size_t), value :: offset, len
      integer(c_int) :: tm_region_discard
    end function tm_region_discard

    !> Asks for [addr, addr + len) to be brought into near memory.
    function tm_prefetch(addr, len) bind(C, name='tm_prefetch')
      import :: c_ptr, c_size_t, c_int
      type(c_ptr), value :: addr
      integer(c_size_t), value :: len
      integer(c_int) :: tm_prefetch
    end function tm_prefetch

    !> Makes [addr, addr + len) resident now; pages resident afterwards or a TM_E* code.
    function tm_touch(addr, len) bind(C, name='tm_touch')
      import :: c_ptr, c_size_t, c_int
      type(c_ptr), value :: addr
      integer(c_size_t), value :: len
      integer(c_int) :: tm_touch
    end function tm_touch

    !> Access advice (TM_ADVICE_*) for [addr, addr + len) of one region.
    function tm_advise(addr, len, advice) bind(C, name='tm_advise')
      import :: c_ptr, c_size_t, c_int
      type(c_ptr), value :: addr
      integer(c_size_t), value :: len
      integer(c_int), value :: advice
      integer(c_int) :: tm_advise
    end function tm_advise

    !> size bytes from the process-wide region (c_null_ptr on failure).
    function tm_malloc_global(size) bind(C, name='tm_malloc_global')
      import :: c_ptr, c_size_t
      integer(c_size_t), value :: size
      type(c_ptr) :: tm_malloc_global
    end function tm_malloc_global

    !> Frees memory from tm_malloc_global (c_null_ptr: no-op).
    function tm_free_global(ptr) bind(C, name='tm_free_global')
      import :: c_ptr, c_int
      type(c_ptr), value :: ptr
      integer(c_int) :: tm_free_global
    end function tm_free_global

    !> A segment of bytes on 1 GiB (or 2 MiB) pages, never tiered.
    function tm_segment_create(bytes, flags, s) bind(C, name='tm_segment_create')
      import :: c_ptr, c_size_t, c_int
      integer(c_size_t), value :: bytes
      integer(c_int), value :: flags
      type(c_ptr), intent(out) :: s
      integer(c_int) :: tm_segment_create
    end function tm_segment_create

    !> The segment's start.
    function tm_segment_base(s) bind(C, name='tm_segment_base')
      import :: c_ptr
      type(c_ptr), value :: s
      type(c_ptr) :: tm_segment_base
    end function tm_segment_base

    !> The segment's size in bytes.
    function tm_segment_size(s) bind(C, name='tm_segment_size')
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: tm_segment_size
    end function tm_segment_size

    !> The segment's page size in bytes.
    function tm_segment_page_size(s) bind(C, name='tm_segment_page_size')
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: tm_segment_page_size
    end function tm_segment_page_size

    !> Makes `pages` more huge pages of page_size bytes available (root).
    function tm_hugepages_reserve(page_size, pages, available) bind(C, name='tm_hugepages_reserve')
      import :: c_size_t, c_int64_t, c_int
      integer(c_size_t), value :: page_size
      integer(c_int64_t), value :: pages
      integer(c_int64_t), intent(out) :: available
      integer(c_int) :: tm_hugepages_reserve
    end function tm_hugepages_reserve

    !> A team region of virt_bytes over near_bytes for `workers` worker processes.
    function tm_team_create(virt_bytes, near_bytes, workers, flags, t) bind(C, name='tm_team_create')
      import :: c_size_t, c_int, c_ptr
      integer(c_size_t), value :: virt_bytes, near_bytes
      integer(c_int), value :: workers, flags
      type(c_ptr), intent(out) :: t
      integer(c_int) :: tm_team_create
    end function tm_team_create

    !> Runs fn(worker, arg) on every worker and waits for all. fn is
    !> c_funloc of an `integer(c_int) function f(w, arg) bind(C)` with
    !> `type(c_ptr), value :: w, arg`, returning 0 for success.
    function tm_team_run(t, kind, fn, arg) bind(C, name='tm_team_run')
      import :: c_ptr, c_funptr, c_int
      type(c_ptr), value :: t
      integer(c_int), value :: kind
      type(c_funptr), value :: fn
      type(c_ptr), value :: arg
      integer(c_int) :: tm_team_run
    end function tm_team_run

    !> Inside a worker function: its rank (0..count-1).
    function tm_team_worker_rank(w) bind(C, name='tm_team_worker_rank')
      import :: c_ptr, c_int
      type(c_ptr), value :: w
      integer(c_int) :: tm_team_worker_rank
    end function tm_team_worker_rank

    !> Inside a worker function: the number of workers.
    function tm_team_worker_count(w) bind(C, name='tm_team_worker_count')
      import :: c_ptr, c_int
      type(c_ptr), value :: w
      integer(c_int) :: tm_team_worker_count
    end function tm_team_worker_count

    !> Inside a worker function: the region's address.
    function tm_team_worker_base(w) bind(C, name='tm_team_worker_base')
      import :: c_ptr
      type(c_ptr), value :: w
      type(c_ptr) :: tm_team_worker_base
    end function tm_team_worker_base

    !> Inside a worker function: waits for every worker (TM_EWORKER if one died).
    function tm_team_barrier(w) bind(C, name='tm_team_barrier')
      import :: c_ptr, c_int
      type(c_ptr), value :: w
      integer(c_int) :: tm_team_barrier
    end function tm_team_barrier

    !> The barrier of a named team's ranks.
    function tm_team_sync(t) bind(C, name='tm_team_sync')
      import :: c_ptr, c_int
      type(c_ptr), value :: t
      integer(c_int) :: tm_team_sync
    end function tm_team_sync

    !> The team region's address (the same in every member).
    function tm_team_base(t) bind(C, name='tm_team_base')
      import :: c_ptr
      type(c_ptr), value :: t
      type(c_ptr) :: tm_team_base
    end function tm_team_base

    !> The team region's size in bytes.
    function tm_team_size(t) bind(C, name='tm_team_size')
      import :: c_ptr, c_size_t
      type(c_ptr), value :: t
      integer(c_size_t) :: tm_team_size
    end function tm_team_size

    !> This process's rank in the team.
    function tm_team_rank(t) bind(C, name='tm_team_rank')
      import :: c_ptr, c_int
      type(c_ptr), value :: t
      integer(c_int) :: tm_team_rank
    end function tm_team_rank

    !> The team's counters (C: tm_team_stats; renamed because Fortran names
    !> are case-insensitive and the type is tm_team_stats).
    function tm_team_stats_get(t, out) bind(C, name='tm_team_stats')
      import :: c_ptr, c_int, tm_team_stats
      type(c_ptr), value :: t
      type(tm_team_stats), intent(out) :: out
      integer(c_int) :: tm_team_stats_get
    end function tm_team_stats_get
  end interface

  ! The C functions behind the module procedures below.
  interface
    function c_strerror(code) bind(C, name='tm_strerror')
      import :: c_int, c_ptr
      integer(c_int), value :: code
      type(c_ptr) :: c_strerror
    end function c_strerror

    function c_last_error() bind(C, name='tm_last_error')
      import :: c_ptr
      type(c_ptr) :: c_last_error
    end function c_last_error

    function c_strlen(s) bind(C, name='strlen')
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: c_strlen
    end function c_strlen

    function c_region_destroy(r) bind(C, name='tm_region_destroy')
      import :: c_ptr, c_int
      type(c_ptr), value :: r
      integer(c_int) :: c_region_destroy
    end function c_region_destroy

    function c_region_stats(r, out) bind(C, name='tm_region_stats')
      import :: c_ptr, c_int, tm_stats
      type(c_ptr), value :: r
      type(tm_stats), intent(inout) :: out
      integer(c_int) :: c_region_stats
    end function c_region_stats

    function c_segment_destroy(s) bind(C, name='tm_segment_destroy')
      import :: c_ptr, c_int
      type(c_ptr), value :: s
      integer(c_int) :: c_segment_destroy
    end function c_segment_destroy

    function c_team_destroy(t) bind(C, name='tm_team_destroy')
      import :: c_ptr, c_int
      type(c_ptr), value :: t
      integer(c_int) :: c_team_destroy
    end function c_team_destroy

    function c_team_create_named(name, virt_bytes, near_bytes, ranks, flags, t) &
        bind(C, name='tm_team_create_named')
      import :: c_char, c_size_t, c_int, c_ptr
      character(kind=c_char), intent(in) :: name(*)
      integer(c_size_t), value :: virt_bytes, near_bytes
      integer(c_int), value :: ranks, flags
      type(c_ptr), intent(out) :: t
      integer(c_int) :: c_team_create_named
    end function c_team_create_named

    function c_team_attach(name, rank, t) bind(C, name='tm_team_attach')
      import :: c_char, c_int, c_ptr
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int), value :: rank
      type(c_ptr), intent(out) :: t
      integer(c_int) :: c_team_attach
    end function c_team_attach
  end interface

  !> Maps region memory onto a Fortran pointer array:
  !>     call tm_region_array(r, a, dims [, offset] [, stat])
  !> points `a` (real(c_double), real(c_float), integer(c_int32_t),
  !> integer(c_int64_t) or complex(c_double_complex), rank 1 to 3) at the
  !> region's memory from byte `offset` (integer(c_size_t), default 0, a
  !> multiple of the element size) with shape `dims` (default integers, one
  !> per dimension), which must fit in the region. On failure `a` is
  !> disassociated and stat is TM_EINVAL (with no stat: a message on stderr
  !> and error stop). `a` is valid until tm_region_destroy(r). For other
  !> types or ranks: call c_f_pointer(tm_region_base(r), a, dims).
  interface tm_region_array
    module procedure region_array_r8_1, region_array_r8_2, region_array_r8_3
    module procedure region_array_r4_1, region_array_r4_2, region_array_r4_3
    module procedure region_array_i4_1, region_array_i4_2, region_array_i4_3
    module procedure region_array_i8_1, region_array_i8_2, region_array_i8_3
    module procedure region_array_z8_1, region_array_z8_2, region_array_z8_3
  end interface tm_region_array

  !> Allocates a Fortran pointer array from the process-wide region:
  !>     call tm_allocate_global(a, dims [, stat])
  !> (types and ranks as tm_region_array). On failure `a` is disassociated
  !> and stat is TM_EINVAL (dims) or TM_ENOMEM (tm_malloc_global failed:
  !> the region full or not creatable, details in tm_last_error()) (with no
  !> stat: a message on stderr and error stop). As with allocate, the
  !> contents are undefined. Free with tm_deallocate_global.
  interface tm_allocate_global
    module procedure allocate_global_r8_1, allocate_global_r8_2, allocate_global_r8_3
    module procedure allocate_global_r4_1, allocate_global_r4_2, allocate_global_r4_3
    module procedure allocate_global_i4_1, allocate_global_i4_2, allocate_global_i4_3
    module procedure allocate_global_i8_1, allocate_global_i8_2, allocate_global_i8_3
    module procedure allocate_global_z8_1, allocate_global_z8_2, allocate_global_z8_3
  end interface tm_allocate_global

  !> Frees an array from tm_allocate_global and disassociates it:
  !>     call tm_deallocate_global(a [, stat])
  !> A disassociated `a` is a no-op. An array tm_allocate_global did not
  !> return is TM_EINVAL (stat; with no stat: a message and error stop).
  interface tm_deallocate_global
    module procedure deallocate_global_r8_1, deallocate_global_r8_2, deallocate_global_r8_3
    module procedure deallocate_global_r4_1, deallocate_global_r4_2, deallocate_global_r4_3
    module procedure deallocate_global_i4_1, deallocate_global_i4_2, deallocate_global_i4_3
    module procedure deallocate_global_i8_1, deallocate_global_i8_2, deallocate_global_i8_3
    module procedure deallocate_global_z8_1, deallocate_global_z8_2, deallocate_global_z8_3
  end interface tm_deallocate_global

  ! Where zero-size arrays from tm_allocate_global point: they take no
  ! memory, and c_loc of a zero-size array (to free it) is not allowed.
  integer(c_int64_t), target, save :: zero_size_anchor(1)

contains

  !> A description of an error code: "success" for TM_OK, "unknown error
  !> code" for a value that is not a TM_E* code.
  function tm_strerror(code) result(s)
    integer(c_int), intent(in) :: code
    character(len=:), allocatable :: s
    s = fortran_string(c_strerror(code))
  end function tm_strerror

  !> The calling thread's last failed tiermem call, as "function: details",
  !> or "" if none has failed.
  function tm_last_error() result(s)
    character(len=:), allocatable :: s
    s = fortran_string(c_last_error())
  end function tm_last_error

  !> Destroys the region (as the C function) and sets r to c_null_ptr, so
  !> that a second destroy is a harmless no-op. Pointer arrays onto the
  !> region are dangling afterwards.
  function tm_region_destroy(r) result(rc)
    type(c_ptr), intent(inout) :: r
    integer(c_int) :: rc
    rc = c_region_destroy(r)
    r = c_null_ptr
  end function tm_region_destroy

  !> A snapshot of the region's statistics in st (struct_size set here).
  function tm_region_stats(r, st) result(rc)
    type(c_ptr), intent(in) :: r
    type(tm_stats), intent(out) :: st
    integer(c_int) :: rc
    st%struct_size = int(c_sizeof(st), c_int32_t)
    rc = c_region_stats(r, st)
  end function tm_region_stats

  !> Destroys the segment and sets s to c_null_ptr.
  function tm_segment_destroy(s) result(rc)
    type(c_ptr), intent(inout) :: s
    integer(c_int) :: rc
    rc = c_segment_destroy(s)
    s = c_null_ptr
  end function tm_segment_destroy

  !> Leaves the team (the creator also removes it) and sets t to c_null_ptr.
  function tm_team_destroy(t) result(rc)
    type(c_ptr), intent(inout) :: t
    integer(c_int) :: rc
    rc = c_team_destroy(t)
    t = c_null_ptr
  end function tm_team_destroy

  !> Rank 0 of existing processes creates the team `name` (trailing blanks
  !> ignored) of `ranks` ranks.
  function tm_team_create_named(name, virt_bytes, near_bytes, ranks, flags, t) result(rc)
    character(len=*), intent(in) :: name
    integer(c_size_t), intent(in) :: virt_bytes, near_bytes
    integer(c_int), intent(in) :: ranks, flags
    type(c_ptr), intent(out) :: t
    integer(c_int) :: rc
    rc = c_team_create_named(trim(name) // c_null_char, virt_bytes, near_bytes, ranks, flags, t)
  end function tm_team_create_named

  !> Ranks 1..ranks-1 attach to the team `name`.
  function tm_team_attach(name, rank, t) result(rc)
    character(len=*), intent(in) :: name
    integer(c_int), intent(in) :: rank
    type(c_ptr), intent(out) :: t
    integer(c_int) :: rc
    rc = c_team_attach(trim(name) // c_null_char, rank, t)
  end function tm_team_attach

  ! A copy of the NUL-terminated C string at p ("" for c_null_ptr).
  function fortran_string(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer(c_size_t) :: n, i
    if (.not. c_associated(p)) then
      s = ''
      return
    end if
    n = c_strlen(p)
    call c_f_pointer(p, chars, [n])
    allocate (character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function fortran_string

  ! Bytes of an array of `dims` elements of `elem` bytes for an array of
  ! rank `rank`, or -1 if dims is not one non-negative extent per
  ! dimension or the product overflows.
  function array_bytes(dims, rank, elem) result(nbytes)
    integer, intent(in) :: dims(:)
    integer, intent(in) :: rank
    integer(c_size_t), intent(in) :: elem
    integer(c_size_t) :: nbytes
    integer :: i
    nbytes = -1
    if (size(dims) /= rank .or. any(dims < 0)) return
    nbytes = elem
    do i = 1, rank
      if (dims(i) > 0) then
        if (nbytes > huge(nbytes) / dims(i)) then
          nbytes = -1
          return
        end if
      end if
      nbytes = nbytes * dims(i)
    end do
  end function array_bytes

  ! Sets stat to code if present, else prints `what: message` and stops.
  subroutine fail(what, message, code, stat)
    character(len=*), intent(in) :: what, message
    integer(c_int), intent(in) :: code
    integer(c_int), intent(out), optional :: stat
    if (present(stat)) then
      stat = code
      return
    end if
    write (error_unit, '(a)') what // ': ' // message
    flush (error_unit)
    error stop
  end subroutine fail

  ! The address of tm_region_array's array, checked (c_null_ptr after fail()).
  function region_slice(r, dims, rank, elem, offset, stat) result(p)
    type(c_ptr), intent(in) :: r
    integer, intent(in) :: dims(:)
    integer, intent(in) :: rank
    integer(c_size_t), intent(in) :: elem
    integer(c_size_t), intent(in), optional :: offset
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    integer(c_size_t) :: off, bytes, region_bytes
    integer(c_signed_char), pointer :: region(:)
    character(len=160) :: why
    p = c_null_ptr
    off = 0
    if (present(offset)) off = offset
    bytes = array_bytes(dims, rank, elem)
    region_bytes = tm_region_size(r)
    if (.not. c_associated(r)) then
      call fail('tm_region_array', 'the region handle is c_null_ptr', TM_EINVAL, stat)
    else if (bytes < 0) then
      write (why, '(a, i0, a)') 'dims must be ', rank, ' non-negative extents (one per dimension of the array)'
      call fail('tm_region_array', trim(why), TM_EINVAL, stat)
    else if (off < 0 .or. mod(off, elem) /= 0) then
      write (why, '(a, i0, a, i0)') 'offset ', off, ' is not a non-negative multiple of the element size ', elem
      call fail('tm_region_array', trim(why), TM_EINVAL, stat)
    else if (off > region_bytes .or. bytes > region_bytes - off) then
      write (why, '(i0, a, i0, a, i0, a)') bytes, ' bytes from offset ', off, ' do not fit in the region (', &
        region_bytes, ' bytes)'
      call fail('tm_region_array', trim(why), TM_EINVAL, stat)
    else
      p = tm_region_base(r)
      if (off > 0 .and. off < region_bytes) then
        ! Standard pointer arithmetic: the address of byte off + 1 of the region.
        call c_f_pointer(p, region, [region_bytes])
        p = c_loc(region(off + 1))
      end if
      if (present(stat)) stat = TM_OK
    end if
  end function region_slice

  ! tm_malloc_global for tm_allocate_global (c_null_ptr after fail()).
  function global_block(dims, rank, elem, stat) result(p)
    integer, intent(in) :: dims(:)
    integer, intent(in) :: rank
    integer(c_size_t), intent(in) :: elem
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    integer(c_size_t) :: bytes
    character(len=160) :: why
    p = c_null_ptr
    bytes = array_bytes(dims, rank, elem)
    if (bytes < 0) then
      write (why, '(a, i0, a)') 'dims must be ', rank, ' non-negative extents (one per dimension of the array)'
      call fail('tm_allocate_global', trim(why), TM_EINVAL, stat)
    else if (bytes == 0) then
      p = c_loc(zero_size_anchor)
      if (present(stat)) stat = TM_OK
    else
      p = tm_malloc_global(bytes)
      if (.not. c_associated(p)) then
        call fail('tm_allocate_global', tm_last_error(), TM_ENOMEM, stat)
      else if (present(stat)) then
        stat = TM_OK
      end if
    end if
  end function global_block

  ! tm_free_global for tm_deallocate_global; .true. if freed.
  function global_free(p, stat) result(ok)
    type(c_ptr), intent(in) :: p
    integer(c_int), intent(out), optional :: stat
    logical :: ok
    integer(c_int) :: rc
    rc = tm_free_global(p)
    ok = rc == TM_OK
    if (ok) then
      if (present(stat)) stat = TM_OK
    else
      call fail('tm_deallocate_global', tm_last_error(), rc, stat)
    end if
  end function global_free

  subroutine region_array_r8_1(r, a, dims, offset, stat)
    type(c_ptr), intent(in) :: r
    real(c_double), pointer, intent(out) :: a(:)
    integer, intent(in) :: dims(:)
    integer(c_size_t), intent(in), optional :: offset
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = region_slice(r, dims, 1, int(storage_size(a) / 8, c_size_t), offset, stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine region_array_r8_1

  subroutine region_array_r8_2(r, a, dims, offset, stat)
    type(c_ptr), intent(in) :: r
    real(c_double), pointer, intent(out) :: a(:,:)
    integer, intent(in) :: dims(:)
    integer(c_size_t), intent(in), optional :: offset
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = region_slice(r, dims, 2, int(storage_size(a) / 8, c_size_t), offset, stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine region_array_r8_2

  subroutine region_array_r8_3(r, a, dims, offset, stat)
    type(c_ptr), intent(in) :: r
    real(c_double), pointer, intent(out) :: a(:,:,:)
    integer, intent(in) :: dims(:)
    integer(c_size_t), intent(in), optional :: offset
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = region_slice(r, dims, 3, int(storage_size(a) / 8, c_size_t), offset, stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine region_array_r8_3

  subroutine region_array_r4_1(r, a, dims, offset, stat)
    type(c_ptr), intent(in) :: r
    real(c_float), pointer, intent(out) :: a(:)
    integer, intent(in) :: dims(:)
    integer(c_size_t), intent(in), optional :: offset
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = region_slice(r, dims, 1, int(storage_size(a) / 8, c_size_t), offset, stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine region_array_r4_1

  subroutine region_array_r4_2(r, a, dims, offset, stat)
    type(c_ptr), intent(in) :: r
    real(c_float), pointer, intent(out) :: a(:,:)
    integer, intent(in) :: dims(:)
    integer(c_size_t), intent(in), optional :: offset
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = region_slice(r, dims, 2, int(storage_size(a) / 8, c_size_t), offset, stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine region_array_r4_2

  subroutine region_array_r4_3(r, a, dims, offset, stat)
    type(c_ptr), intent(in) :: r
    real(c_float), pointer, intent(out) :: a(:,:,:)
    integer, intent(in) :: dims(:)
    integer(c_size_t), intent(in), optional :: offset
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = region_slice(r, dims, 3, int(storage_size(a) / 8, c_size_t), offset, stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine region_array_r4_3

  subroutine region_array_i4_1(r, a, dims, offset, stat)
    type(c_ptr), intent(in) :: r
    integer(c_int32_t), pointer, intent(out) :: a(:)
    integer, intent(in) :: dims(:)
    integer(c_size_t), intent(in), optional :: offset
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = region_slice(r, dims, 1, int(storage_size(a) / 8, c_size_t), offset, stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine region_array_i4_1

  subroutine region_array_i4_2(r, a, dims, offset, stat)
    type(c_ptr), intent(in) :: r
    integer(c_int32_t), pointer, intent(out) :: a(:,:)
    integer, intent(in) :: dims(:)
    integer(c_size_t), intent(in), optional :: offset
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = region_slice(r, dims, 2, int(storage_size(a) / 8, c_size_t), offset, stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine region_array_i4_2

  subroutine region_array_i4_3(r, a, dims, offset, stat)
    type(c_ptr), intent(in) :: r
    integer(c_int32_t), pointer, intent(out) :: a(:,:,:)
    integer, intent(in) :: dims(:)
    integer(c_size_t), intent(in), optional :: offset
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = region_slice(r, dims, 3, int(storage_size(a) / 8, c_size_t), offset, stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine region_array_i4_3

  subroutine region_array_i8_1(r, a, dims, offset, stat)
    type(c_ptr), intent(in) :: r
    integer(c_int64_t), pointer, intent(out) :: a(:)
    integer, intent(in) :: dims(:)
    integer(c_size_t), intent(in), optional :: offset
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = region_slice(r, dims, 1, int(storage_size(a) / 8, c_size_t), offset, stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine region_array_i8_1

  subroutine region_array_i8_2(r, a, dims, offset, stat)
    type(c_ptr), intent(in) :: r
    integer(c_int64_t), pointer, intent(out) :: a(:,:)
    integer, intent(in) :: dims(:)
    integer(c_size_t), intent(in), optional :: offset
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = region_slice(r, dims, 2, int(storage_size(a) / 8, c_size_t), offset, stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine region_array_i8_2

  subroutine region_array_i8_3(r, a, dims, offset, stat)
    type(c_ptr), intent(in) :: r
    integer(c_int64_t), pointer, intent(out) :: a(:,:,:)
    integer, intent(in) :: dims(:)
    integer(c_size_t), intent(in), optional :: offset
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = region_slice(r, dims, 3, int(storage_size(a) / 8, c_size_t), offset, stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine region_array_i8_3

  subroutine region_array_z8_1(r, a, dims, offset, stat)
    type(c_ptr), intent(in) :: r
    complex(c_double_complex), pointer, intent(out) :: a(:)
    integer, intent(in) :: dims(:)
    integer(c_size_t), intent(in), optional :: offset
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = region_slice(r, dims, 1, int(storage_size(a) / 8, c_size_t), offset, stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine region_array_z8_1

  subroutine region_array_z8_2(r, a, dims, offset, stat)
    type(c_ptr), intent(in) :: r
    complex(c_double_complex), pointer, intent(out) :: a(:,:)
    integer, intent(in) :: dims(:)
    integer(c_size_t), intent(in), optional :: offset
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = region_slice(r, dims, 2, int(storage_size(a) / 8, c_size_t), offset, stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine region_array_z8_2

  subroutine region_array_z8_3(r, a, dims, offset, stat)
    type(c_ptr), intent(in) :: r
    complex(c_double_complex), pointer, intent(out) :: a(:,:,:)
    integer, intent(in) :: dims(:)
    integer(c_size_t), intent(in), optional :: offset
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = region_slice(r, dims, 3, int(storage_size(a) / 8, c_size_t), offset, stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine region_array_z8_3

  subroutine allocate_global_r8_1(a, dims, stat)
    real(c_double), pointer, intent(out) :: a(:)
    integer, intent(in) :: dims(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = global_block(dims, 1, int(storage_size(a) / 8, c_size_t), stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine allocate_global_r8_1

  subroutine allocate_global_r8_2(a, dims, stat)
    real(c_double), pointer, intent(out) :: a(:,:)
    integer, intent(in) :: dims(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = global_block(dims, 2, int(storage_size(a) / 8, c_size_t), stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine allocate_global_r8_2

  subroutine allocate_global_r8_3(a, dims, stat)
    real(c_double), pointer, intent(out) :: a(:,:,:)
    integer, intent(in) :: dims(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = global_block(dims, 3, int(storage_size(a) / 8, c_size_t), stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine allocate_global_r8_3

  subroutine allocate_global_r4_1(a, dims, stat)
    real(c_float), pointer, intent(out) :: a(:)
    integer, intent(in) :: dims(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = global_block(dims, 1, int(storage_size(a) / 8, c_size_t), stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine allocate_global_r4_1

  subroutine allocate_global_r4_2(a, dims, stat)
    real(c_float), pointer, intent(out) :: a(:,:)
    integer, intent(in) :: dims(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = global_block(dims, 2, int(storage_size(a) / 8, c_size_t), stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine allocate_global_r4_2

  subroutine allocate_global_r4_3(a, dims, stat)
    real(c_float), pointer, intent(out) :: a(:,:,:)
    integer, intent(in) :: dims(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = global_block(dims, 3, int(storage_size(a) / 8, c_size_t), stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine allocate_global_r4_3

  subroutine allocate_global_i4_1(a, dims, stat)
    integer(c_int32_t), pointer, intent(out) :: a(:)
    integer, intent(in) :: dims(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = global_block(dims, 1, int(storage_size(a) / 8, c_size_t), stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine allocate_global_i4_1

  subroutine allocate_global_i4_2(a, dims, stat)
    integer(c_int32_t), pointer, intent(out) :: a(:,:)
    integer, intent(in) :: dims(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = global_block(dims, 2, int(storage_size(a) / 8, c_size_t), stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine allocate_global_i4_2

  subroutine allocate_global_i4_3(a, dims, stat)
    integer(c_int32_t), pointer, intent(out) :: a(:,:,:)
    integer, intent(in) :: dims(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = global_block(dims, 3, int(storage_size(a) / 8, c_size_t), stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine allocate_global_i4_3

  subroutine allocate_global_i8_1(a, dims, stat)
    integer(c_int64_t), pointer, intent(out) :: a(:)
    integer, intent(in) :: dims(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = global_block(dims, 1, int(storage_size(a) / 8, c_size_t), stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine allocate_global_i8_1

  subroutine allocate_global_i8_2(a, dims, stat)
    integer(c_int64_t), pointer, intent(out) :: a(:,:)
    integer, intent(in) :: dims(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = global_block(dims, 2, int(storage_size(a) / 8, c_size_t), stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine allocate_global_i8_2

  subroutine allocate_global_i8_3(a, dims, stat)
    integer(c_int64_t), pointer, intent(out) :: a(:,:,:)
    integer, intent(in) :: dims(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = global_block(dims, 3, int(storage_size(a) / 8, c_size_t), stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine allocate_global_i8_3

  subroutine allocate_global_z8_1(a, dims, stat)
    complex(c_double_complex), pointer, intent(out) :: a(:)
    integer, intent(in) :: dims(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = global_block(dims, 1, int(storage_size(a) / 8, c_size_t), stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine allocate_global_z8_1

  subroutine allocate_global_z8_2(a, dims, stat)
    complex(c_double_complex), pointer, intent(out) :: a(:,:)
    integer, intent(in) :: dims(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = global_block(dims, 2, int(storage_size(a) / 8, c_size_t), stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine allocate_global_z8_2

  subroutine allocate_global_z8_3(a, dims, stat)
    complex(c_double_complex), pointer, intent(out) :: a(:,:,:)
    integer, intent(in) :: dims(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    nullify(a)
    p = global_block(dims, 3, int(storage_size(a) / 8, c_size_t), stat)
    if (c_associated(p)) call c_f_pointer(p, a, dims)
  end subroutine allocate_global_z8_3

  subroutine deallocate_global_r8_1(a, stat)
    real(c_double), pointer, intent(inout) :: a(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    p = c_null_ptr
    if (associated(a)) then
      if (size(a) > 0) p = c_loc(a)
    end if
    if (global_free(p, stat)) nullify(a)
  end subroutine deallocate_global_r8_1

  subroutine deallocate_global_r8_2(a, stat)
    real(c_double), pointer, intent(inout) :: a(:,:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    p = c_null_ptr
    if (associated(a)) then
      if (size(a) > 0) p = c_loc(a)
    end if
    if (global_free(p, stat)) nullify(a)
  end subroutine deallocate_global_r8_2

  subroutine deallocate_global_r8_3(a, stat)
    real(c_double), pointer, intent(inout) :: a(:,:,:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    p = c_null_ptr
    if (associated(a)) then
      if (size(a) > 0) p = c_loc(a)
    end if
    if (global_free(p, stat)) nullify(a)
  end subroutine deallocate_global_r8_3

  subroutine deallocate_global_r4_1(a, stat)
    real(c_float), pointer, intent(inout) :: a(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    p = c_null_ptr
    if (associated(a)) then
      if (size(a) > 0) p = c_loc(a)
    end if
    if (global_free(p, stat)) nullify(a)
  end subroutine deallocate_global_r4_1

  subroutine deallocate_global_r4_2(a, stat)
    real(c_float), pointer, intent(inout) :: a(:,:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    p = c_null_ptr
    if (associated(a)) then
      if (size(a) > 0) p = c_loc(a)
    end if
    if (global_free(p, stat)) nullify(a)
  end subroutine deallocate_global_r4_2

  subroutine deallocate_global_r4_3(a, stat)
    real(c_float), pointer, intent(inout) :: a(:,:,:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    p = c_null_ptr
    if (associated(a)) then
      if (size(a) > 0) p = c_loc(a)
    end if
    if (global_free(p, stat)) nullify(a)
  end subroutine deallocate_global_r4_3

  subroutine deallocate_global_i4_1(a, stat)
    integer(c_int32_t), pointer, intent(inout) :: a(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    p = c_null_ptr
    if (associated(a)) then
      if (size(a) > 0) p = c_loc(a)
    end if
    if (global_free(p, stat)) nullify(a)
  end subroutine deallocate_global_i4_1

  subroutine deallocate_global_i4_2(a, stat)
    integer(c_int32_t), pointer, intent(inout) :: a(:,:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    p = c_null_ptr
    if (associated(a)) then
      if (size(a) > 0) p = c_loc(a)
    end if
    if (global_free(p, stat)) nullify(a)
  end subroutine deallocate_global_i4_2

  subroutine deallocate_global_i4_3(a, stat)
    integer(c_int32_t), pointer, intent(inout) :: a(:,:,:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    p = c_null_ptr
    if (associated(a)) then
      if (size(a) > 0) p = c_loc(a)
    end if
    if (global_free(p, stat)) nullify(a)
  end subroutine deallocate_global_i4_3

  subroutine deallocate_global_i8_1(a, stat)
    integer(c_int64_t), pointer, intent(inout) :: a(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    p = c_null_ptr
    if (associated(a)) then
      if (size(a) > 0) p = c_loc(a)
    end if
    if (global_free(p, stat)) nullify(a)
  end subroutine deallocate_global_i8_1

  subroutine deallocate_global_i8_2(a, stat)
    integer(c_int64_t), pointer, intent(inout) :: a(:,:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    p = c_null_ptr
    if (associated(a)) then
      if (size(a) > 0) p = c_loc(a)
    end if
    if (global_free(p, stat)) nullify(a)
  end subroutine deallocate_global_i8_2

  subroutine deallocate_global_i8_3(a, stat)
    integer(c_int64_t), pointer, intent(inout) :: a(:,:,:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    p = c_null_ptr
    if (associated(a)) then
      if (size(a) > 0) p = c_loc(a)
    end if
    if (global_free(p, stat)) nullify(a)
  end subroutine deallocate_global_i8_3

  subroutine deallocate_global_z8_1(a, stat)
    complex(c_double_complex), pointer, intent(inout) :: a(:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    p = c_null_ptr
    if (associated(a)) then
      if (size(a) > 0) p = c_loc(a)
    end if
    if (global_free(p, stat)) nullify(a)
  end subroutine deallocate_global_z8_1

  subroutine deallocate_global_z8_2(a, stat)
    complex(c_double_complex), pointer, intent(inout) :: a(:,:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    p = c_null_ptr
    if (associated(a)) then
      if (size(a) > 0) p = c_loc(a)
    end if
    if (global_free(p, stat)) nullify(a)
  end subroutine deallocate_global_z8_2

  subroutine deallocate_global_z8_3(a, stat)
    complex(c_double_complex), pointer, intent(inout) :: a(:,:,:)
    integer(c_int), intent(out), optional :: stat
    type(c_ptr) :: p
    p = c_null_ptr
    if (associated(a)) then
      if (size(a) > 0) p = c_loc(a)
    end if
    if (global_free(p, stat)) nullify(a)
  end subroutine deallocate_global_z8_3

end module tiermem
