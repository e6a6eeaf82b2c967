! A Fortran program for the corpus (built with gfortran -O2 -fopenmp): a
! Jacobi sweep over allocatable arrays with OpenMP, a COMMON block in .bss
! updated every step, and a checksum printed at the end.
program stencil
  implicit none
  integer, parameter :: nb = 2 * 1024 * 1024
  double precision :: hist(nb)
  common /blk/ hist
  double precision, allocatable :: a(:, :), b(:, :)
  integer :: n, steps, i, j, s
  character(len=32) :: arg
  call get_command_argument(1, arg)
  read (arg, *) n
  call get_command_argument(2, arg)
  read (arg, *) steps
  allocate (a(n, n), b(n, n))
  !$omp parallel do private(i)
  do j = 1, n
    do i = 1, n
      a(i, j) = mod(i * 7 + j * 13, 101) / 100.0d0
    end do
  end do
  b = a
  hist = 0
  do s = 1, steps
    !$omp parallel do private(i)
    do j = 2, n - 1
      do i = 2, n - 1
        b(i, j) = 0.25d0 * (a(i - 1, j) + a(i + 1, j) + a(i, j - 1) + a(i, j + 1))
      end do
    end do
    a = b
    do i = 1, nb, 97
      hist(i) = hist(i) + a(mod(i, n) + 1, mod(i / n, n) + 1)
    end do
  end do
  print '(a, es24.15)', 'sum ', sum(a)
  print '(a, es24.15)', 'hist', sum(hist)
end program stencil
