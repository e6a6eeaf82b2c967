#!/usr/bin/env bash
# Real programs, unmodified, under `tiermem run` at a near budget well below
# their footprint (issue 13): a C++ program (containers), a Fortran program
# (a COMMON block and allocatable arrays), an OpenMP program, an
# allocation-heavy C program and a Python/numpy script. Each checks its own results; the report must show
# evictions (the budget really bound them). A missing compiler or
# interpreter skips that program with a message.
set -uo pipefail
cd "$(dirname "$0")/../.."
T=${TIERMEM:-target/release/tiermem}
out=target/programs
mkdir -p "$out"
status=0
check() { # NAME NEAR COMMAND...
  local name=$1 near=$2
  shift 2
  if ! timeout -k 10 300 "$T" run --near "$near" --quiet --report "$out/$name.json" -- "$@" >"$out/$name.out" 2>&1; then
    echo "FAIL $name: $(tail -3 "$out/$name.out")"
    status=1
    return
  fi
  if ! grep -q '"evictions": *[1-9]' "$out/$name.json"; then
    echo "FAIL $name: no evictions at --near $near (the budget did not bind)"
    status=1
    return
  fi
  echo "PASS $name (near $near): $(grep -v '^tiermem' "$out/$name.out" | tail -1)"
}
if command -v g++ >/dev/null; then
  g++ -O2 -std=c++17 tests/programs/containers.cpp -o "$out/containers" && check containers 24M "$out/containers"
else echo "skipped: containers (no g++)"; fi
if command -v gfortran >/dev/null; then
  gfortran -O2 tests/programs/common.f90 -o "$out/fortran" && check fortran 16M "$out/fortran"
  # The COMMON block lives in .bss: it must have been taken over and tiered.
  tr -d ' \n' <"$out/fortran.json" | grep '"section":"\.bss"[^}]*"how":"tiered"' >/dev/null ||
    { echo "FAIL fortran: the COMMON block (.bss) was not tiered"; status=1; }
else echo "skipped: fortran (no gfortran; apt-get install gfortran)"; fi
if command -v gcc >/dev/null; then
  gcc -O2 -fopenmp tests/programs/omp.c -o "$out/openmp" && OMP_NUM_THREADS=2 check openmp 32M "$out/openmp"
  # Millions of small objects beside a large array allocated and freed every
  # round (the heap's kept freed blocks, the C library's small ones).
  gcc -O2 tests/programs/small_objects.c -o "$out/small_objects" && check small_objects 6M "$out/small_objects"
fi
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  check numpy 32M /usr/bin/python3 tests/programs/numpy_check.py
else echo "skipped: numpy (no /usr/bin/python3 with numpy; apt-get install python3-numpy)"; fi
exit $status
