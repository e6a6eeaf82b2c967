! tiermem from Fortran: a heat (Jacobi) stencil on two 32 MiB grids that
! live in one 64 MiB region over a 16 MiB near-memory budget: every sweep
! moves the grids through near memory.
!
! The start is a harmonic field h = i**2 - j**2 (a fixed point of the
! stencil) plus a unit of heat at one point. After k sweeps the heat is
! spread over the lattice walks of length k, so the result is known
! exactly: it still sums to 1, and at the source it is C(k, k/2)**2 / 4**k.
!
! Build (see scripts/ftest.sh):
!   cargo build --release -p tiermem-capi
!   gfortran -c include/tiermem.f90
!   gfortran examples/fortran/example.f90 tiermem.o -Ltarget/release -ltiermem \
!     -Wl,-rpath,$PWD/target/release -o example && ./example
program example
  use tiermem
  use, intrinsic :: iso_fortran_env, only: output_unit, error_unit
  implicit none
  integer, parameter :: n1 = 1024, n2 = 4096, sweeps = 10
  integer, parameter :: si = n1 / 2, sj = n2 / 2 ! the heat source
  integer(c_size_t), parameter :: grid_bytes = 8_c_size_t * n1 * n2
  type(tm_config) :: cfg
  type(tm_stats) :: st
  type(c_ptr) :: r
  real(c_double), pointer :: u(:,:), v(:,:), w(:,:)
  real(c_double) :: heat, peak
  integer :: i, j, k, rc

  call tm_config_init(cfg, 2 * grid_bytes, 16_c_int64_t * 1024 * 1024)
  cfg%policy = TM_POLICY_SCAN ! sweeps over more data than the budget
  rc = tm_region_create(cfg, r)
  if (rc /= TM_OK) then
    write (error_unit, '(a)') tm_strerror(rc) // ': ' // tm_last_error()
    error stop
  end if
  call tm_region_array(r, u, [n1, n2])
  call tm_region_array(r, v, [n1, n2], offset=grid_bytes)

  do j = 1, n2
    do i = 1, n1
      u(i, j) = h(i, j)
    end do
  end do
  u(si, sj) = u(si, sj) + 1
  v(:, 1) = u(:, 1) ! the boundary stays as it is
  v(:, n2) = u(:, n2)
  v(1, :) = u(1, :)
  v(n1, :) = u(n1, :)

  do k = 1, sweeps
    do j = 2, n2 - 1
      do i = 2, n1 - 1
        v(i, j) = 0.25_c_double * (u(i - 1, j) + u(i + 1, j) + u(i, j - 1) + u(i, j + 1))
      end do
    end do
    w => u
    u => v
    v => w
  end do

  heat = 0
  do j = 1, n2
    do i = 1, n1
      heat = heat + (u(i, j) - h(i, j)) ! exact: dyadic fractions far above the rounding
    end do
  end do
  peak = u(si, sj) - h(si, sj)
  rc = tm_region_stats(r, st)
  write (output_unit, '(a, i0, a, f0.1, a)') 'heat: ', sweeps, ' sweeps over ', 2 * grid_bytes / 1048576.0, &
    ' MiB with a 16 MiB budget'
  write (output_unit, '(a, es22.15, a, es22.15, a)') 'heat: total ', heat, ', at the source ', peak, &
    ' (expected 1 and 6.0562133789062500E-02)'
  write (output_unit, '(a, i0, a, i0, a, i0, a)') 'heat: ', st%faults_far_fill, ' far fills, ', st%evictions, &
    ' evictions, ', st%bytes_out / 1048576, ' MiB written back'
  rc = tm_region_destroy(r)
  nullify (u, v, w)

  if (heat /= 1 .or. peak /= 63504.0_c_double / 4.0_c_double**10 .or. st%evictions == 0) then
    write (error_unit, '(a)') 'heat: WRONG'
    error stop
  end if

contains

  ! The harmonic field: its four neighbours average to it exactly.
  pure function h(i, j)
    integer, intent(in) :: i, j
    real(c_double) :: h
    h = real(i, c_double)**2 - real(j, c_double)**2
  end function h
end program example
