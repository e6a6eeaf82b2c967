! The Fortran module (include/tiermem.f90) against libtiermem: an
! allocatable array's worth of data tiered through a region and checked,
! the global allocator, errors, a far file, a team, a segment. Run by
! scripts/ftest.sh:
!   test_module          the cases; exits non-zero if a check failed
!   test_module layout   prints the sizes, offsets and constants the
!                        module declares, which ftest.sh compares with
!                        what a C compiler makes of include/tiermem.h
!   test_module no-stat  maps an array larger than its region without
!                        stat=: must end with a message and error stop
module team_work
  use tiermem
  implicit none
  integer, parameter :: team_words = 2 * 1024 * 1024 ! 16 MiB of int64

contains

  ! Each worker writes its half of the team region, then checks all of it.
  function work(w, arg) bind(C) result(rc)
    type(c_ptr), value :: w, arg
    integer(c_int) :: rc
    integer(c_int64_t), pointer :: v(:)
    integer :: rank, count, i, lo, hi
    rc = 1
    if (c_associated(arg)) return
    rank = tm_team_worker_rank(w)
    count = tm_team_worker_count(w)
    call c_f_pointer(tm_team_worker_base(w), v, [team_words])
    lo = rank * (team_words / count) + 1
    hi = (rank + 1) * (team_words / count)
    do i = lo, hi
      v(i) = 3_c_int64_t * i + 7
    end do
    if (tm_team_barrier(w) /= TM_OK) return
    do i = 1, team_words
      if (v(i) /= 3_c_int64_t * i + 7) return
    end do
    rc = 0
  end function work
end module team_work

program test_module
  use tiermem
  use team_work
  use, intrinsic :: iso_c_binding, only: c_intptr_t
  use, intrinsic :: iso_fortran_env, only: output_unit, error_unit
  implicit none
  integer, parameter :: mib = 1024 * 1024
  integer :: failures = 0, checks = 0
  character(len=16) :: mode

  mode = ''
  if (command_argument_count() >= 1) call get_command_argument(1, mode)
  if (mode == 'layout') then
    call print_layout()
    stop
  end if
  if (mode == 'no-stat') then
    call no_stat_case()
    stop 'no-stat: tm_region_array returned'
  end if

  call check(tm_version() == TIERMEM_VERSION, 'tm_version() equals TIERMEM_VERSION')
  call region_case()
  call error_case()
  call global_case()
  call far_file_case()
  call team_case()
  call segment_case()

  if (failures > 0) then
    write (error_unit, '(a, i0, a, i0, a)') 'test_module: ', failures, ' of ', checks, ' checks failed'
    error stop
  end if
  write (output_unit, '(a, i0, a)') 'test_module: all ', checks, ' checks passed'

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    checks = checks + 1
    if (.not. ok) then
      failures = failures + 1
      write (error_unit, '(a)') 'FAIL ' // what
    end if
  end subroutine check

  ! What the value at (i, j) of the test array is: exact in a double.
  pure function f(i, j, round) result(x)
    integer, intent(in) :: i, j, round
    real(c_double) :: x
    x = real(i, c_double) + 4096.0_c_double * real(j, c_double) + 0.25_c_double * round
  end function f

  ! 64 MiB of doubles as a 2-D array over 8 MiB of near memory.
  subroutine region_case()
    integer, parameter :: n1 = 1024, n2 = 8192 ! 64 MiB
    type(tm_config) :: cfg
    type(tm_stats) :: st
    type(c_ptr) :: r, p
    real(c_double), pointer :: a(:,:), too_big(:,:)
    integer(c_int64_t), pointer :: tail(:)
    integer :: i, j, bad, rc, stat, evicted
    call tm_config_init(cfg, 64_c_int64_t * mib, 8_c_int64_t * mib)
    call check(cfg%struct_size == c_sizeof(cfg), 'tm_config_init sets struct_size to c_sizeof(tm_config)')
    call check(cfg%evict_batch_pages == 64 .and. cfg%handler_threads == 1, 'tm_config_init sets the defaults')
    rc = tm_region_create(cfg, r)
    call check(rc == TM_OK, 'tm_region_create: ' // tm_last_error())
    if (rc /= TM_OK) return
    call check(tm_region_size(r) == 64_c_size_t * mib, 'tm_region_size')

    call tm_region_array(r, a, [n1, n2])
    call check(all(shape(a) == [n1, n2]), 'tm_region_array gives the shape asked for')
    p = c_loc(a)
    call check(c_associated(p, tm_region_base(r)), 'tm_region_array starts at tm_region_base')
    call check(tm_advise(c_loc(a), 64_c_size_t * mib, TM_ADVICE_SEQUENTIAL) == TM_OK, 'tm_advise')
    do j = 1, n2
      do i = 1, n1
        a(i, j) = f(i, j, 0)
      end do
    end do
    evicted = tm_region_evict_all(r)
    call check(evicted > 0, 'tm_region_evict_all evicted pages')
    call check(tm_prefetch(c_loc(a), 1_c_size_t * mib) == TM_OK, 'tm_prefetch')
    call check(tm_touch(c_loc(a(1, n2)), 4096_c_size_t) == 1, 'tm_touch makes one page resident')
    ! Churn: every page comes back from far memory, is changed, goes out again.
    bad = 0
    do j = 1, n2
      do i = 1, n1
        if (a(i, j) /= f(i, j, 0)) bad = bad + 1
        a(i, j) = f(i, j, 1)
      end do
    end do
    call check(bad == 0, 'every element read back after tm_region_evict_all')
    bad = 0
    do j = n2, 1, -1
      do i = 1, n1
        if (a(i, j) /= f(i, j, 1)) bad = bad + 1
      end do
    end do
    call check(bad == 0, 'every element read back after churn')

    ! A second array on the same memory from an offset: the second half.
    call tm_region_array(r, tail, [4 * mib], offset=32_c_size_t * mib)
    call check(size(tail) == 4 * mib, 'tm_region_array with an offset')
    call check(tail(1) == transfer(a(1, n2 / 2 + 1), 0_c_int64_t) .and. &
               tail(4 * mib) == transfer(a(n1, n2), 0_c_int64_t), 'the offset array aliases the region')
    call tm_region_array(r, too_big, [n1, n2], offset=8_c_size_t, stat=stat)
    call check(stat == TM_EINVAL .and. .not. associated(too_big), 'tm_region_array refuses what does not fit')
    call tm_region_array(r, too_big, [n1], stat=stat)
    call check(stat == TM_EINVAL, 'tm_region_array refuses dims of the wrong rank')

    call check(tm_region_discard(r, 0_c_size_t, 4096_c_size_t) == TM_OK, 'tm_region_discard')
    call check(all(a(1:512, 1) == 0) .and. a(1, 2) == f(1, 2, 1), 'a discarded page reads as zeros')

    call check(tm_region_stats(r, st) == TM_OK, 'tm_region_stats')
    call check(st%struct_size == c_sizeof(st), 'tm_region_stats keeps struct_size')
    call check(st%evictions > 0 .and. st%faults_far_fill > 0 .and. st%faults_zero_fill > 0 .and. &
               st%bytes_out > 0, 'the stats show zero fills, far fills and evictions')
    call check(st%resident_bytes <= 8_c_int64_t * mib, 'resident memory stays within the budget')
    write (output_unit, '(a, i0, a, i0, a, i0, a)') 'region: ', st%faults_far_fill, ' far fills, ', &
      st%evictions, ' evictions, ', st%bytes_out / mib, ' MiB written back'

    call check(tm_region_destroy(r) == TM_OK .and. .not. c_associated(r), 'tm_region_destroy nulls the handle')
    call check(tm_region_destroy(r) == TM_OK, 'a second tm_region_destroy is a no-op')
    nullify (a, tail)
  end subroutine region_case

  subroutine error_case()
    type(tm_config) :: cfg
    type(tm_stats) :: st
    type(c_ptr) :: r
    character(len=:), allocatable :: msg
    call tm_config_init(cfg, 0_c_int64_t, 8_c_int64_t * mib)
    call check(tm_region_create(cfg, r) == TM_EINVAL, 'a zero-size region is TM_EINVAL')
    call check(.not. c_associated(r), 'a failed tm_region_create leaves c_null_ptr')
    msg = tm_last_error()
    call check(index(msg, 'tm_region_create') == 1, 'tm_last_error names the function: "' // msg // '"')
    call tm_config_init(cfg, 64_c_int64_t * mib, 8_c_int64_t * mib)
    cfg%policy = 99
    call check(tm_region_create(cfg, r) == TM_EINVAL, 'an unknown policy is TM_EINVAL')
    call check(index(tm_last_error(), 'tm_region_create') == 1, 'tm_last_error for the policy')
    call check(tm_last_error() /= msg, 'tm_last_error has the new message')
    call check(tm_strerror(TM_OK) == 'success', 'tm_strerror(TM_OK)')
    call check(tm_strerror(12345) == 'unknown error code', 'tm_strerror of an unknown code')
    msg = tm_strerror(TM_EINVAL)
    call check(len(msg) > 0, 'tm_strerror(TM_EINVAL) is not empty')
    call check(msg /= tm_strerror(TM_ENOMEM), 'tm_strerror tells the codes apart')
    call check(tm_region_stats(c_null_ptr, st) == TM_EINVAL, 'tm_region_stats of c_null_ptr is TM_EINVAL')
    call check(tm_advise(c_null_ptr, 4096_c_size_t, 99) == TM_EINVAL, 'tm_advise outside a region')
  end subroutine error_case

  ! The process-wide region (ftest.sh sets TIERMEM_NEAR=4M: it evicts).
  subroutine global_case()
    real(c_double), pointer :: g(:,:), none(:)
    real(c_double), pointer :: p(:)
    integer(c_int32_t), pointer :: cube(:,:,:)
    type(c_ptr) :: raw
    integer :: i, j, stat, bad
    call tm_allocate_global(g, [512, 4096], stat=stat) ! 16 MiB
    call check(stat == TM_OK .and. associated(g), 'tm_allocate_global: ' // tm_last_error())
    if (stat /= TM_OK) return
    do j = 1, 4096
      do i = 1, 512
        g(i, j) = f(i, j, 2)
      end do
    end do
    bad = 0
    do j = 1, 4096
      do i = 1, 512
        if (g(i, j) /= f(i, j, 2)) bad = bad + 1
      end do
    end do
    call check(bad == 0, 'every element of a global array read back')
    call tm_deallocate_global(g, stat=stat)
    call check(stat == TM_OK .and. .not. associated(g), 'tm_deallocate_global')
    call tm_deallocate_global(g, stat=stat)
    call check(stat == TM_OK, 'tm_deallocate_global of a disassociated array is a no-op')

    call tm_allocate_global(cube, [16, 16, 16])
    cube = 5
    call check(sum(cube) == 5 * 16**3, 'a rank-3 integer array from tm_allocate_global')
    call tm_deallocate_global(cube)
    call tm_allocate_global(none, [0], stat=stat)
    call check(stat == TM_OK .and. size(none) == 0, 'a zero-size global array')
    call tm_deallocate_global(none, stat=stat)
    call check(stat == TM_OK, 'deallocating a zero-size global array')
    call tm_allocate_global(none, [-1], stat=stat)
    call check(stat == TM_EINVAL, 'tm_allocate_global of a negative extent is TM_EINVAL')

    raw = tm_malloc_global(1_c_size_t * mib)
    call check(c_associated(raw), 'tm_malloc_global: ' // tm_last_error())
    if (.not. c_associated(raw)) return
    call c_f_pointer(raw, p, [mib / 8])
    p = 1.5_c_double
    call check(sum(p) == 1.5_c_double * (mib / 8), 'memory from tm_malloc_global')
    call check(tm_free_global(raw) == TM_OK, 'tm_free_global')
    call check(tm_free_global(raw) == TM_EINVAL, 'a second tm_free_global is TM_EINVAL')
    call check(index(tm_last_error(), 'tm_free_global') == 1, 'tm_last_error after tm_free_global')
    allocate (p(8))
    call tm_deallocate_global(p, stat=stat)
    call check(stat == TM_EINVAL .and. associated(p), 'tm_deallocate_global of an ordinary pointer is TM_EINVAL')
    deallocate (p)
  end subroutine global_case

  ! Evictions into a far file named by a Fortran string (in the current
  ! directory), created by tm_region_create and removed by its destroy.
  subroutine far_file_case()
    character(len=*), parameter :: name = 'test_module.far'
    type(tm_config) :: cfg
    type(tm_stats) :: st
    type(c_ptr) :: r
    integer(c_int64_t), pointer :: v(:)
    character(kind=c_char, len=:), allocatable, target :: path
    logical :: exists
    integer :: i, rc
    path = name // c_null_char
    call tm_config_init(cfg, 16_c_int64_t * mib, 4_c_int64_t * mib)
    cfg%far_kind = TM_FAR_FILE
    cfg%far_path = c_loc(path)
    cfg%policy = TM_POLICY_CLOCK
    rc = tm_region_create(cfg, r)
    call check(rc == TM_OK, 'tm_region_create with a far file: ' // tm_last_error())
    if (rc /= TM_OK) return
    inquire (file=name, exist=exists)
    call check(exists, 'the far file has the name given')
    call tm_region_array(r, v, [2 * mib])
    do i = 1, 2 * mib
      v(i) = int(i, c_int64_t) * 11
    end do
    call check(all(v == [(int(i, c_int64_t) * 11, i = 1, 2 * mib)]), 'a region over a far file read back')
    rc = tm_region_stats(r, st)
    call check(rc == TM_OK .and. st%bytes_out > 0, 'the far file was written')
    rc = tm_region_destroy(r)
    inquire (file=name, exist=exists)
    call check(.not. exists, 'tm_region_destroy removes the far file')
  end subroutine far_file_case

  ! Two worker processes share a team region through a bind(C) function.
  subroutine team_case()
    type(c_ptr) :: t
    type(tm_team_stats) :: st
    integer(c_int64_t), pointer :: v(:)
    integer :: rc, i
    rc = tm_team_create(8_c_size_t * team_words, 4_c_size_t * mib, 2, 0, t)
    call check(rc == TM_OK, 'tm_team_create: ' // tm_last_error())
    if (rc /= TM_OK) return
    call check(tm_team_size(t) == 8_c_size_t * team_words, 'tm_team_size')
    call check(tm_team_rank(t) == 2, 'tm_team_rank of the creator')
    flush (output_unit) ! the workers are forked
    rc = tm_team_run(t, TM_TEAM_PROCESSES, c_funloc(work), c_null_ptr)
    call check(rc == TM_OK, 'tm_team_run: ' // tm_last_error())
    call c_f_pointer(tm_team_base(t), v, [team_words])
    call check(all(v == [(3_c_int64_t * i + 7, i = 1, team_words)]), 'the creator sees what the workers wrote')
    call check(tm_team_stats_get(t, st) == TM_OK .and. st%evictions > 0, 'tm_team_stats shows evictions')
    write (output_unit, '(a)') 'team: workers that fail on purpose (tiermem team lines expected):'
    flush (output_unit)
    call check(tm_team_run(t, TM_TEAM_PROCESSES, c_funloc(work), tm_team_base(t)) == TM_EWORKER, &
               'a worker returning non-zero is TM_EWORKER')
    call check(tm_team_destroy(t) == TM_OK .and. .not. c_associated(t), 'tm_team_destroy')
  end subroutine team_case

  ! A 2 MiB-page segment when the pool has a free page; else skipped.
  subroutine segment_case()
    type(c_ptr) :: s
    integer(c_int64_t), pointer :: v(:)
    integer :: rc
    rc = tm_segment_create(2_c_size_t * mib, TM_SEGMENT_2M, s)
    if (rc == TM_EHUGEPAGES .or. rc == TM_EPERM .or. rc == TM_EUNSUPPORTED) then
      write (output_unit, '(a)') 'skipped: segment (' // tm_last_error() // ')'
      return
    end if
    call check(rc == TM_OK, 'tm_segment_create: ' // tm_last_error())
    if (rc /= TM_OK) return
    call check(tm_segment_page_size(s) == 2_c_size_t * mib, 'tm_segment_page_size')
    call check(tm_segment_size(s) == 2_c_size_t * mib, 'tm_segment_size')
    call c_f_pointer(tm_segment_base(s), v, [mib / 4])
    v = 42
    call check(sum(v) == 42_c_int64_t * (mib / 4), 'segment memory')
    call check(tm_segment_destroy(s) == TM_OK .and. .not. c_associated(s), 'tm_segment_destroy')
  end subroutine segment_case

  subroutine no_stat_case()
    type(tm_config) :: cfg
    type(c_ptr) :: r
    real(c_double), pointer :: a(:,:)
    call tm_config_init(cfg, 1_c_int64_t * mib, 1_c_int64_t * mib)
    if (tm_region_create(cfg, r) /= TM_OK) stop 'no-stat: tm_region_create failed'
    call tm_region_array(r, a, [1024, 1024])
  end subroutine no_stat_case

  ! --- layout mode ---------------------------------------------------

  subroutine show(kind, name, value)
    character(len=*), intent(in) :: kind, name
    integer(c_int64_t), intent(in) :: value
    write (output_unit, '(a, 1x, a, 1x, i0)') kind, name, value
  end subroutine show

  function offset(base, field) result(nbytes)
    type(c_ptr), intent(in) :: base, field
    integer(c_int64_t) :: nbytes
    nbytes = transfer(field, 0_c_intptr_t) - transfer(base, 0_c_intptr_t)
  end function offset

  subroutine print_layout()
    type(tm_config), target :: c
    type(tm_stats), target :: s
    type(tm_team_stats), target :: t
    type(c_ptr) :: b
    call show('sizeof', 'tm_config', c_sizeof(c))
    b = c_loc(c)
    call show('offset', 'tm_config.struct_size', offset(b, c_loc(c%struct_size)))
    call show('offset', 'tm_config.reserved0', offset(b, c_loc(c%reserved0)))
    call show('offset', 'tm_config.virt_bytes', offset(b, c_loc(c%virt_bytes)))
    call show('offset', 'tm_config.near_bytes', offset(b, c_loc(c%near_bytes)))
    call show('offset', 'tm_config.page_size_bytes', offset(b, c_loc(c%page_size_bytes)))
    call show('offset', 'tm_config.far_kind', offset(b, c_loc(c%far_kind)))
    call show('offset', 'tm_config.reserved1', offset(b, c_loc(c%reserved1)))
    call show('offset', 'tm_config.far_path', offset(b, c_loc(c%far_path)))
    call show('offset', 'tm_config.far_direct', offset(b, c_loc(c%far_direct)))
    call show('offset', 'tm_config.policy', offset(b, c_loc(c%policy)))
    call show('offset', 'tm_config.fault_path', offset(b, c_loc(c%fault_path)))
    call show('offset', 'tm_config.dirty_tracking', offset(b, c_loc(c%dirty_tracking)))
    call show('offset', 'tm_config.evict_batch_pages', offset(b, c_loc(c%evict_batch_pages)))
    call show('offset', 'tm_config.handler_threads', offset(b, c_loc(c%handler_threads)))
    call show('offset', 'tm_config.movers', offset(b, c_loc(c%movers)))
    call show('offset', 'tm_config.prefetch_off', offset(b, c_loc(c%prefetch_off)))
    call show('offset', 'tm_config.prefetch_max_pages', offset(b, c_loc(c%prefetch_max_pages)))
    call show('offset', 'tm_config.install', offset(b, c_loc(c%install)))
    call show('offset', 'tm_config.mover_cpus', offset(b, c_loc(c%mover_cpus)))
    call show('offset', 'tm_config.mover_cpu_count', offset(b, c_loc(c%mover_cpu_count)))
    call show('offset', 'tm_config.fault_around_off', offset(b, c_loc(c%fault_around_off)))

    call show('sizeof', 'tm_stats', c_sizeof(s))
    b = c_loc(s)
    call show('offset', 'tm_stats.struct_size', offset(b, c_loc(s%struct_size)))
    call show('offset', 'tm_stats.reserved0', offset(b, c_loc(s%reserved0)))
    call show('offset', 'tm_stats.faults_zero_fill', offset(b, c_loc(s%faults_zero_fill)))
    call show('offset', 'tm_stats.faults_far_fill', offset(b, c_loc(s%faults_far_fill)))
    call show('offset', 'tm_stats.faults_write_protect', offset(b, c_loc(s%faults_write_protect)))
    call show('offset', 'tm_stats.evictions', offset(b, c_loc(s%evictions)))
    call show('offset', 'tm_stats.evict_calls', offset(b, c_loc(s%evict_calls)))
    call show('offset', 'tm_stats.write_backs', offset(b, c_loc(s%write_backs)))
    call show('offset', 'tm_stats.bytes_in', offset(b, c_loc(s%bytes_in)))
    call show('offset', 'tm_stats.bytes_out', offset(b, c_loc(s%bytes_out)))
    call show('offset', 'tm_stats.io_errors', offset(b, c_loc(s%io_errors)))
    call show('offset', 'tm_stats.poisoned_pages', offset(b, c_loc(s%poisoned_pages)))
    call show('offset', 'tm_stats.resident_bytes', offset(b, c_loc(s%resident_bytes)))
    call show('offset', 'tm_stats.fault_ns_total', offset(b, c_loc(s%fault_ns_total)))
    call show('offset', 'tm_stats.fault_p50_ns', offset(b, c_loc(s%fault_p50_ns)))
    call show('offset', 'tm_stats.fault_p90_ns', offset(b, c_loc(s%fault_p90_ns)))
    call show('offset', 'tm_stats.fault_p99_ns', offset(b, c_loc(s%fault_p99_ns)))
    call show('offset', 'tm_stats.time_lock_list_ns', offset(b, c_loc(s%time_lock_list_ns)))
    call show('offset', 'tm_stats.time_pte_ns', offset(b, c_loc(s%time_pte_ns)))
    call show('offset', 'tm_stats.time_tlb_ns', offset(b, c_loc(s%time_tlb_ns)))
    call show('offset', 'tm_stats.time_transfer_ns', offset(b, c_loc(s%time_transfer_ns)))
    call show('offset', 'tm_stats.time_misc_ns', offset(b, c_loc(s%time_misc_ns)))
    call show('offset', 'tm_stats.threads', offset(b, c_loc(s%threads)))
    call show('offset', 'tm_stats.tlb_shootdowns_machine', offset(b, c_loc(s%tlb_shootdowns_machine)))
    call show('offset', 'tm_stats.prefetch_issued', offset(b, c_loc(s%prefetch_issued)))
    call show('offset', 'tm_stats.prefetch_used', offset(b, c_loc(s%prefetch_used)))
    call show('offset', 'tm_stats.prefetch_wasted', offset(b, c_loc(s%prefetch_wasted)))
    call show('offset', 'tm_stats.mover_fills', offset(b, c_loc(s%mover_fills)))
    call show('offset', 'tm_stats.mover_evictions', offset(b, c_loc(s%mover_evictions)))
    call show('offset', 'tm_stats.inline_evictions', offset(b, c_loc(s%inline_evictions)))

    call show('sizeof', 'tm_team_stats', c_sizeof(t))
    b = c_loc(t)
    call show('offset', 'tm_team_stats.missing_faults', offset(b, c_loc(t%missing_faults)))
    call show('offset', 'tm_team_stats.minor_faults', offset(b, c_loc(t%minor_faults)))
    call show('offset', 'tm_team_stats.evictions', offset(b, c_loc(t%evictions)))
    call show('offset', 'tm_team_stats.evict_calls', offset(b, c_loc(t%evict_calls)))
    call show('offset', 'tm_team_stats.bytes_in', offset(b, c_loc(t%bytes_in)))
    call show('offset', 'tm_team_stats.bytes_out', offset(b, c_loc(t%bytes_out)))
    call show('offset', 'tm_team_stats.victims_unmapped', offset(b, c_loc(t%victims_unmapped)))
    call show('offset', 'tm_team_stats.victims_self', offset(b, c_loc(t%victims_self)))
    call show('offset', 'tm_team_stats.victims_other', offset(b, c_loc(t%victims_other)))
    call show('offset', 'tm_team_stats.victims_many', offset(b, c_loc(t%victims_many)))

    call show('const', 'TIERMEM_VERSION_MAJOR', int(TIERMEM_VERSION_MAJOR, c_int64_t))
    call show('const', 'TIERMEM_VERSION_MINOR', int(TIERMEM_VERSION_MINOR, c_int64_t))
    call show('const', 'TIERMEM_VERSION_PATCH', int(TIERMEM_VERSION_PATCH, c_int64_t))
    call show('const', 'TIERMEM_VERSION', int(TIERMEM_VERSION, c_int64_t))
    call show('const', 'TM_OK', int(TM_OK, c_int64_t))
    call show('const', 'TM_EINVAL', int(TM_EINVAL, c_int64_t))
    call show('const', 'TM_ENOMEM', int(TM_ENOMEM, c_int64_t))
    call show('const', 'TM_EUNSUPPORTED', int(TM_EUNSUPPORTED, c_int64_t))
    call show('const', 'TM_EIO', int(TM_EIO, c_int64_t))
    call show('const', 'TM_ENOSPC', int(TM_ENOSPC, c_int64_t))
    call show('const', 'TM_EHUGEPAGES', int(TM_EHUGEPAGES, c_int64_t))
    call show('const', 'TM_EPERM', int(TM_EPERM, c_int64_t))
    call show('const', 'TM_EINTERNAL', int(TM_EINTERNAL, c_int64_t))
    call show('const', 'TM_EWORKER', int(TM_EWORKER, c_int64_t))
    call show('const', 'TM_EFORKED', int(TM_EFORKED, c_int64_t))
    call show('const', 'TM_FAR_MEMORY', int(TM_FAR_MEMORY, c_int64_t))
    call show('const', 'TM_FAR_FILE', int(TM_FAR_FILE, c_int64_t))
    call show('const', 'TM_POLICY_FIFO', int(TM_POLICY_FIFO, c_int64_t))
    call show('const', 'TM_POLICY_CLOCK', int(TM_POLICY_CLOCK, c_int64_t))
    call show('const', 'TM_POLICY_SCAN', int(TM_POLICY_SCAN, c_int64_t))
    call show('const', 'TM_POLICY_AUTO', int(TM_POLICY_AUTO, c_int64_t))
    call show('const', 'TM_PAGE_THP', TM_PAGE_THP)
    call show('const', 'TM_INSTALL_COPY', int(TM_INSTALL_COPY, c_int64_t))
    call show('const', 'TM_INSTALL_MOVE', int(TM_INSTALL_MOVE, c_int64_t))
    call show('const', 'TM_INSTALL_AUTO', int(TM_INSTALL_AUTO, c_int64_t))
    call show('const', 'TM_MOVERS_AUTO', int(TM_MOVERS_AUTO, c_int64_t))
    call show('const', 'TM_ADVICE_NORMAL', int(TM_ADVICE_NORMAL, c_int64_t))
    call show('const', 'TM_ADVICE_SEQUENTIAL', int(TM_ADVICE_SEQUENTIAL, c_int64_t))
    call show('const', 'TM_ADVICE_RANDOM', int(TM_ADVICE_RANDOM, c_int64_t))
    call show('const', 'TM_ADVICE_WILLNEED', int(TM_ADVICE_WILLNEED, c_int64_t))
    call show('const', 'TM_ADVICE_DONTNEED', int(TM_ADVICE_DONTNEED, c_int64_t))
    call show('const', 'TM_FAULT_IN_CONTEXT', int(TM_FAULT_IN_CONTEXT, c_int64_t))
    call show('const', 'TM_FAULT_HANDLER_THREAD', int(TM_FAULT_HANDLER_THREAD, c_int64_t))
    call show('const', 'TM_DIRTY_WP_FAULT', int(TM_DIRTY_WP_FAULT, c_int64_t))
    call show('const', 'TM_DIRTY_WP_ASYNC', int(TM_DIRTY_WP_ASYNC, c_int64_t))
    call show('const', 'TM_SEGMENT_2M', int(TM_SEGMENT_2M, c_int64_t))
    call show('const', 'TM_SEGMENT_NO_FALLBACK', int(TM_SEGMENT_NO_FALLBACK, c_int64_t))
    call show('const', 'TM_TEAM_SHARER_AWARE', int(TM_TEAM_SHARER_AWARE, c_int64_t))
    call show('const', 'TM_TEAM_PIN', int(TM_TEAM_PIN, c_int64_t))
    call show('const', 'TM_TEAM_NO_FAULT_AROUND', int(TM_TEAM_NO_FAULT_AROUND, c_int64_t))
    call show('const', 'TM_TEAM_DIRTY_TRACKING', int(TM_TEAM_DIRTY_TRACKING, c_int64_t))
    call show('const', 'TM_TEAM_PROCESSES', int(TM_TEAM_PROCESSES, c_int64_t))
    call show('const', 'TM_TEAM_THREADS', int(TM_TEAM_THREADS, c_int64_t))
  end subroutine print_layout
end program test_module
