#!/usr/bin/env bash
# Tests the Fortran module (include/tiermem.f90) against tiermem's C library
# (crates/tiermem-capi, built in release mode): compiles the module
# warning-free as Fortran 2008, checks that it binds every function of
# include/tiermem.h and declares its structs and constants exactly as a C
# compiler sees them, then builds and runs the Fortran test, the example
# and the program of docs/fortran.md. One PASS/FAIL line per step; exits
# non-zero if any failed. Installs gfortran when missing (as root), else
# prints "skipped: no gfortran".
#
#   scripts/ftest.sh                              # target dir: ./target
#   CARGO_TARGET_DIR=/tmp/t scripts/ftest.sh      # any other target dir
#   FC=gfortran-13 CC=clang scripts/ftest.sh      # other compilers
set -euo pipefail

# shellcheck source=scripts/clib.sh
source "$(dirname "${BASH_SOURCE[0]}")/clib.sh" ftest

fc=${FC:-gfortran}
cc=${CC:-cc}
if ! command -v "$fc" >/dev/null 2>&1 && [ "$fc" = gfortran ] && [ "$(id -u)" = 0 ] &&
  command -v apt-get >/dev/null 2>&1; then
  echo "installing gfortran"
  DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q gfortran >/dev/null || true
fi
if ! command -v "$fc" >/dev/null 2>&1; then
  echo "skipped: no gfortran (the Fortran module is untested; apt-get install gfortran)"
  exit 0
fi

build_lib tiermem-capi

# The module as users compile it: standard Fortran 2008, no warning. The
# programs: the same, save exact real comparisons (the values are exact),
# with run-time checks (bounds, pointers) on.
fflags=(-std=f2008 -Wall -Wextra -Werror)
pflags=("${fflags[@]}" -Wno-compare-reals -fcheck=all -O2 -g -I"$out" -J"$out")
# shellcheck disable=SC2054 # the commas are part of -Wl,-rpath,DIR
link=("$out/tiermem.o" -L"$lib" -ltiermem -Wl,-rpath,"$lib")
# build_program SOURCE PROGRAM: a program using the module, built as above.
build_program() { "$fc" "${pflags[@]}" "$1" "${link[@]}" -o "$2"; }
# build_and_run SOURCE PROGRAM: builds it and runs it (a hang is a failure:
# 5 minutes); 1 if it does not build, else the program's exit status.
build_and_run() {
  build_program "$1" "$2" || return 1
  timeout -k 10 300 "$2"
}

echo "== $fc ${fflags[*]} -c include/tiermem.f90"
status=0
"$fc" "${fflags[@]}" -J"$out" -c include/tiermem.f90 -o "$out/tiermem.o" || status=$?
report "tiermem.f90 (compile)" "$status"
if [[ $status -ne 0 ]]; then
  echo "ftest: FAILED"
  exit 1
fi

# Every function of the header is bound, except those the module leaves
# out on purpose (its opening comment says which).
echo "== every C function bound"
status=0
grep -E 'tm_decl_export' include/tiermem.h | grep -oE '\btm_[a-z0-9_]+\(' | tr -d '(' |
  grep -vE '^tm_(svm|far|overshadow)_' | sort >"$out/c-functions"
grep -oE "bind\(C, name='tm_[a-z0-9_]+'" include/tiermem.f90 | grep -oE "tm_[a-z0-9_]+" | sort -u \
  >"$out/f-functions"
if [[ $(wc -l <"$out/c-functions") -lt 30 ]]; then
  echo "found only $(wc -l <"$out/c-functions") functions in include/tiermem.h"
  status=1
elif ! diff "$out/c-functions" "$out/f-functions"; then
  echo "(<: in include/tiermem.h, not bound in include/tiermem.f90; >: the other way round)"
  status=1
fi
report "every function of tiermem.h bound in tiermem.f90" "$status"

# Sizes, field offsets and constants as C sees them, generated from the
# header (every field of the three structs, every TM_*/TIERMEM_* number),
# against what the Fortran side declares (test_module layout).
echo "== struct layouts and constants against include/tiermem.h"
{
  echo '#include <stddef.h>'
  echo '#include <stdio.h>'
  echo '#include <tiermem.h>'
  echo 'int main(void) {'
  awk '/^struct tm_(config|stats|team_stats) \{/ { s = $2; printf "  printf(\"sizeof %s %%zu\\n\", sizeof(struct %s));\n", s, s; next }
    /^\};/ { s = "" }
    s && match($0, /^[ \t]*(const[ \t]+)?(u?int(8|16|32|64)_t|char)[ \t]*\*?[ \t]*[a-z_0-9]+;/) {
      l = substr($0, RSTART, RLENGTH); sub(/;$/, "", l); n = split(l, w, /[ \t*]+/)
      printf "  printf(\"offset %s.%s %%zu\\n\", offsetof(struct %s, %s));\n", s, w[n], s, w[n] }' include/tiermem.h
  grep -oE '^#define (TM|TIERMEM)_[A-Z0-9_]+ ' include/tiermem.h | awk '{ print $2 }' |
    grep -vE '^TM_(SVM|OVERSHADOW)_' |
    awk '{ printf "  printf(\"const %s %%lld\\n\", (long long)(%s));\n", $1, $1 }'
  echo '  return 0;'
  echo '}'
} >"$out/layout.c"
status=0
if "$cc" -std=c11 -Wall -Wextra -Werror -I"$root/include" "$out/layout.c" -o "$out/layout" &&
  build_program tests/fortran/test_module.f90 "$out/test_module"; then
  "$out/layout" | sort >"$out/layout-c.txt"
  "$out/test_module" layout | sort >"$out/layout-f.txt"
  if [[ $(grep -c '^offset' "$out/layout-c.txt") -lt 60 ]]; then
    echo "found only $(grep -c '^offset' "$out/layout-c.txt") struct fields in include/tiermem.h"
    status=1
  elif ! diff "$out/layout-c.txt" "$out/layout-f.txt"; then
    echo "(<: C, from include/tiermem.h; >: include/tiermem.f90)"
    status=1
  fi
else
  status=1
fi
report "tm_config, tm_stats, tm_team_stats and constants match tiermem.h" "$status"

# A 2 MiB pool page for the segment case (root), given back afterwards.
hp=/sys/kernel/mm/hugepages/hugepages-2048kB
hp_old=""
if [ "$(id -u)" = 0 ] && [ -w "$hp/nr_hugepages" ]; then
  hp_old=$(cat "$hp/nr_hugepages")
  echo $((hp_old + 1)) >"$hp/nr_hugepages" 2>/dev/null || true
fi
restore_pool() { [ -z "$hp_old" ] || echo "$hp_old" >"$hp/nr_hugepages" 2>/dev/null || true; }
trap restore_pool EXIT

# The global region small enough to evict; the far file in $out. A hang is
# a failure: 5 minutes each (they take seconds).
if [[ -x $out/test_module ]]; then
  echo "== test_module"
  status=0
  (cd "$out" && TIERMEM_FAR=1G TIERMEM_NEAR=4M timeout -k 10 300 ./test_module) || status=$?
  report "test_module" "$status"
  # Without stat=, a bad tm_region_array ends the program with a message.
  echo "== test_module no-stat"
  status=0
  timeout -k 10 60 "$out/test_module" no-stat 2>"$out/no-stat.err" && status=1
  if ! grep -q '^tm_region_array: 8388608 bytes from offset 0 do not fit in the region (1048576 bytes)' \
    "$out/no-stat.err"; then
    echo "no such message on stderr:"
    cat "$out/no-stat.err"
    status=1
  fi
  report "tm_region_array without stat: message and error stop" "$status"
fi
restore_pool

echo "== examples/fortran/example.f90"
status=0
build_and_run examples/fortran/example.f90 "$out/example" || status=$?
report "example" "$status"

# docs/fortran.md's program, exactly as printed: its first ```fortran block.
echo "== docs/fortran.md: the program"
status=0
awk '/^```fortran$/ { p = 1; next } p && /^```$/ { exit } p' docs/fortran.md >"$out/doc.f90"
if [[ ! -s $out/doc.f90 ]]; then
  echo "docs/fortran.md: no \`\`\`fortran block"
  status=1
else
  build_and_run "$out/doc.f90" "$out/doc" || status=$?
fi
report "docs/fortran.md program" "$status"

# README's Fortran build line, as printed (its paths are the source tree's),
# on that same program.
echo "== README.md: the Fortran build line"
status=0
line=$(awk '$0 == "### Fortran" { c = 1 } c && /^```sh$/ { p = 1; next } p && /^```$/ { exit } p' README.md)
if [[ -z $line || $line != *"prog.f90"* ]]; then
  echo "README.md: no Fortran build line under \"### Fortran\""
  status=1
else
  rm -rf "$out/readme" && mkdir -p "$out/readme" && cp "$out/doc.f90" "$out/readme/prog.f90"
  line=${line//\$PWD/$root}
  line=${line//include\//$root/include/}
  line=${line//-Ltarget\/release/-L$lib}
  line=${line//-rpath,$root\/target\/release/-rpath,$lib}
  if (cd "$out/readme" && FC=$fc bash -c "${line//gfortran/\$FC} -o prog"); then
    timeout -k 10 300 "$out/readme/prog" >/dev/null || status=$?
  else
    status=1
  fi
fi
report "README.md Fortran build line" "$status"

if [[ $failed -ne 0 ]]; then
  echo "ftest: FAILED"
  exit 1
fi
echo "ftest: all passed"
