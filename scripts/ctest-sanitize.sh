#!/usr/bin/env bash
# The C example and the C API tests again, compiled with AddressSanitizer
# and UndefinedBehaviorSanitizer (gcc -fsanitize=address,undefined) and run
# against the release libtiermem.so that scripts/ctest.sh built. One
# PASS/FAIL/SKIP line per program; exits non-zero if any failed.
#
# What works and what cannot:
# - ASan's own SIGSEGV/SIGBUS handlers are installed first (at start-up);
#   tiermem's fault router, installed when the first region is made, chains
#   to them for every fault it does not serve, so a real bug still gets
#   ASan's report. No ASAN_OPTIONS are needed (handle_segv=0 etc. are not).
# - Region memory is mapped by tiermem (mmap, never malloc), so ASan's
#   shadow treats it as plain addressable memory; userfaultfd faults in
#   ASan's interceptors (memcpy, read) are served like any other.
# - Skipped: the unmodified program under libtiermem_preload.so / tiermem
#   run (both the preload library and ASan's runtime must come first in the
#   library list and replace malloc: the combination cannot work), and the
#   static-library builds (the same code as the shared ones).
#
#   scripts/ctest-sanitize.sh          # after scripts/ctest.sh
set -euo pipefail
# shellcheck source=scripts/clib.sh
source "$(dirname "${BASH_SOURCE[0]}")/clib.sh" ctest-sanitize
cc=${CC:-gcc}

if [[ ! -f $lib/libtiermem.so ]]; then
  echo "== building libtiermem.so"
  CARGO_TARGET_DIR=$target cargo build --release -p tiermem-capi
fi
# Probe: can this compiler link a sanitized program at all?
if ! echo 'int main(void){return 0;}' | "$cc" -x c -fsanitize=address,undefined - -o "$out/probe" 2>/dev/null; then
  echo "SKIP sanitizers: $cc cannot link -fsanitize=address,undefined (install libasan and libubsan)"
  exit 0
fi

flags=(-std=c11 -Wall -Wextra -Werror -pedantic -O1 -g -fno-omit-frame-pointer
  -fsanitize=address,undefined -fno-sanitize-recover=all -I"$root/include")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for prog in examples/c/example.c tests/c/test_capi.c tests/c/test_signals.c tests/c/test_signal_threads.c tests/c/test_promises.c; do
  name=$(basename "$prog" .c)-asan
  echo "== $name"
  if ! "$cc" "${flags[@]}" "$prog" -L"$lib" -ltiermem -o "$out/$name"; then
    echo "FAIL $name (compile)"
    failed=1
    continue
  fi
  status=0
  LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout -k 10 300 "$out/$name" \
    >"$out/$name.log" 2>&1 || status=$?
  # A sanitizer report fails the program even if its exit status did not.
  if grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$out/$name.log"; then
    status=${status/#0/1}
  fi
  if [[ $status -eq 0 ]]; then
    echo "PASS $name"
  else
    tail -30 "$out/$name.log"
    echo "FAIL $name (exit status $status; log $out/$name.log)"
    failed=1
  fi
done
echo "SKIP test_transparent-asan: the preload library (LD_PRELOAD, tiermem run) and ASan's runtime" \
  "both need to come first and both replace malloc; they cannot be combined"

if [[ $failed -ne 0 ]]; then
  echo "ctest-sanitize: FAILED"
  exit 1
fi
echo "ctest-sanitize: all passed"
