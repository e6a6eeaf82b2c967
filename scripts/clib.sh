# shellcheck shell=bash disable=SC2034 # its variables are for the scripts that source it
# Sourced by ctest.sh, ftest.sh and ctest-sanitize.sh (after set -euo
# pipefail) as `source scripts/clib.sh NAME`: goes to the checkout's root
# and sets root, target (CARGO_TARGET_DIR made absolute; ./target if unset),
# lib (its release/ directory, where cargo builds the C library) and out
# ($target/NAME, made). Defines build_lib, report and failed (0).

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
root=$(pwd)

target=${CARGO_TARGET_DIR:-target}
case $target in
/*) ;;
*) target=$root/$target ;;
esac
lib=$target/release
out=$target/$1
mkdir -p "$out"

# build_lib PACKAGE...: cargo build --release of those packages into $target.
build_lib() {
  local pkg args=()
  for pkg in "$@"; do args+=(-p "$pkg"); done
  echo "== cargo build --release ${args[*]} (target dir $target)"
  CARGO_TARGET_DIR=$target cargo build --release "${args[@]}"
}

failed=0
report() { # report NAME STATUS
  if [[ $2 -eq 0 ]]; then
    echo "PASS $1"
  else
    echo "FAIL $1 (exit status $2)"
    failed=1
  fi
}
