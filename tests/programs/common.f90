! Fortran: a COMMON block (static .bss taken over in place) and allocatable
! arrays (heap), both larger than the near budget, checked.
program tiered
  implicit none
  integer, parameter :: n = 4000000
  double precision :: grid(n)
  common /fields/ grid
  double precision, allocatable :: a(:), b(:)
  integer :: i
  double precision :: s
  allocate(a(n), b(n))
  do i = 1, n
    grid(i) = dble(i)
    a(i) = 2.0d0 * dble(i)
  end do
  do i = 1, n
    b(i) = a(i) + grid(i)
  end do
  s = sum(b)
  if (abs(s - 3.0d0 * dble(n) * dble(n + 1) / 2.0d0) > 1.0d-6 * s) then
    print *, 'WRONG', s
    stop 1
  end if
  print *, 'fortran: ok'
end program tiered
