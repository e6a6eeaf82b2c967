#!/usr/bin/env bash
# The real-program corpus (issue 30): programs nobody here wrote, from
# Debian packages (compressors, a database, interpreters, compilers, sort,
# numerical Python, Fortran, C++, OpenMP, multi-process and multi-threaded
# I/O), each run plain and then under `tiermem run` at 25-50% of the plain
# run's peak footprint (max RSS), on both fault paths (in-context, and
# TIERMEM_FAULT_PATH=handler-thread). A run passes when it exits 0, its
# outputs (its stdout and the files it wrote, or what its digest_ function
# picks where a program writes times) are those of the plain run, and its
# reports show evictions > 0.
# Inputs are generated (tests/corpus/gen.c, the scripts in
# tests/corpus/work/), the same bytes on every machine.
#
#   tests/corpus/run.sh                 the CI subset (about 3 minutes on 2 CPUs)
#   tests/corpus/run.sh --all           the whole corpus (or TIERMEM_CORPUS=all)
#   tests/corpus/run.sh --only xz,sort  these workloads, CI or not
#   tests/corpus/run.sh --paths handler-thread   one fault path (none: plain runs only)
#   tests/corpus/run.sh --list          the workloads, their packages and marks
#   --no-install                        never apt-get (missing tools skip)
#   TIERMEM=path/to/tiermem             the binary (default target/release/tiermem)
#
# Missing programs are installed with apt-get when running as root (else,
# and when that fails, the workload prints "skipped: <why>"). Every command
# runs under `timeout -k 10`: a hang is a FAIL. A workload marked as a known
# failure on a path (known_ic/known_ht in tests/corpus/workloads.sh, with
# the issue item) is left out of the CI subset on that path and runs with
# --all or --only; it is reported as FAIL there all the same, and a known
# failure that passes says so. Results: a table on stdout, target/corpus/corpus.json, and each
# run's directory under target/corpus/<name>/<path>/ (stdout, stderr,
# reports, digest; the outputs too where a run failed). Exit status 1 when
# anything failed. tests/corpus/table.py prints the JSON as docs'
# Markdown table.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=$ROOT/tests/corpus
T=${TIERMEM:-$ROOT/target/release/tiermem}
case $T in /*) ;; *) T=$ROOT/$T ;; esac
OUT=$ROOT/target/corpus
PY=/usr/bin/python3
export LC_ALL=C

mode=ci
[ "${TIERMEM_CORPUS:-}" = all ] && mode=all
only="" list=0 install=1
paths=(in-context handler-thread)
while [ $# -gt 0 ]; do
  case $1 in
    --all) mode=all ;;
    --only) only=${2:?--only needs names}; mode=only; shift ;;
    --paths) IFS=, read -r -a paths <<<"${2:?--paths needs in-context,handler-thread}"; shift ;;
    --list) list=1 ;;
    --no-install) install=0 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "${paths[*]}" = none ] && paths=()
for p in "${paths[@]}"; do
  case $p in in-context | handler-thread) ;; *) echo "run.sh: unknown fault path $p" >&2; exit 2 ;; esac
done

# ---------------------------------------------------------------------------
# The registry. reg NAME key=value...:
#   cat=      category (table column)
#   ci=1      in the CI subset
#   pct=      near budget in percent of the plain run's max RSS (25-50)
#   flags=    more `tiermem run` options (--threshold, --follow-exec)
#   to=       timeout of each command, seconds (default 120)
#   needs=    what must be there: CMD:PACKAGE, py:MODULE:PACKAGE or lib:PATH:PACKAGE, blank-separated
#   desc=     what it runs (table column)
#   known_ic=, known_ht=  a known failure on the in-context / handler-thread path: why
# and functions: inputs_NAME (once, untimed, may use $IN), prep_NAME (in the
# run's work directory, untimed), run_NAME (timed; `tm CMD...` runs CMD
# plain or under tiermem run), and optionally norm_NAME (filters stdout)
# and digest_NAME (prints what must match; default: stdout and every file
# the run left in its work directory).
# ---------------------------------------------------------------------------
NAMES=()
declare -A CAT CI PCT FLAGS TO NEEDS DESC KNOWN_IC KNOWN_HT
reg() {
  local n=$1 kv k v
  shift
  NAMES+=("$n")
  CAT[$n]="" CI[$n]=0 PCT[$n]=40 FLAGS[$n]="" TO[$n]=120 NEEDS[$n]="" DESC[$n]="" KNOWN_IC[$n]="" KNOWN_HT[$n]=""
  for kv in "$@"; do
    k=${kv%%=*} v=${kv#*=}
    case $k in
      cat) CAT[$n]=$v ;; ci) CI[$n]=$v ;; pct) PCT[$n]=$v ;; flags) FLAGS[$n]=$v ;; to) TO[$n]=$v ;;
      needs) NEEDS[$n]=$v ;; desc) DESC[$n]=$v ;; known_ic) KNOWN_IC[$n]=$v ;; known_ht) KNOWN_HT[$n]=$v ;;
      *) echo "reg $n: unknown key $k" >&2; exit 2 ;;
    esac
  done
}
# shellcheck source=tests/corpus/workloads.sh
source "$HERE/workloads.sh"

if [ $list = 1 ]; then
  for n in "${NAMES[@]}"; do
    printf '%-16s %-12s ci=%s pct=%-3s %-40s needs: %s\n' "$n" "${CAT[$n]}" "${CI[$n]}" "${PCT[$n]}" \
      "${DESC[$n]}" "${NEEDS[$n]}"
    [ -n "${KNOWN_IC[$n]}" ] && printf '%18sknown in-context: %s\n' "" "${KNOWN_IC[$n]}"
    [ -n "${KNOWN_HT[$n]}" ] && printf '%18sknown handler-thread: %s\n' "" "${KNOWN_HT[$n]}"
  done
  exit 0
fi

selected=()
if [ $mode = only ]; then
  IFS=, read -r -a wanted <<<"$only"
  for w in "${wanted[@]}"; do
    [ -n "${CAT[$w]+x}" ] || { echo "run.sh: no workload $w (see --list)" >&2; exit 2; }
    selected+=("$w")
  done
else
  for n in "${NAMES[@]}"; do
    if [ $mode = all ] || [ "${CI[$n]}" = 1 ]; then selected+=("$n"); fi
  done
fi

# ---------------------------------------------------------------------------
# What is missing, and installing it.
# ---------------------------------------------------------------------------
have() { # NEED -> 0 when there
  local need=$1
  case $need in
    py:*) local m=${need#py:}; m=${m%%:*}; "$PY" -c "import $m" >/dev/null 2>&1 ;;
    memcg:*) have_memcg ;;
    lib:*) local l=${need#lib:}; [ -e "${l%%:*}" ] ;;
    *) command -v "${need%%:*}" >/dev/null 2>&1 ;;
  esac
}
missing() { # NAME -> prints the needs that are not there
  local need
  for need in ${NEEDS[$1]}; do have "$need" || echo "$need"; done
}
if [ $install = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  pkgs=()
  [ -x /usr/bin/time ] || pkgs+=(time) # GNU time: the plain runs' max RSS
  for n in "${selected[@]}"; do
    for need in $(missing "$n"); do [ -n "${need##*:}" ] && pkgs+=("${need##*:}"); done
  done
  if [ ${#pkgs[@]} -gt 0 ]; then
    mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
    echo "installing ${pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "${pkgs[@]}" >"$OUT.apt.log" 2>&1; then
      apt-get update -q >/dev/null 2>&1
      # One at a time, so that one that cannot be had skips only its workloads.
      for p in "${pkgs[@]}"; do
        apt-get install -y -q --no-install-recommends "$p" >>"$OUT.apt.log" 2>&1 || echo "could not install $p"
      done
    fi
  fi
fi

mkdir -p "$OUT/bin" "$OUT/inputs"
if ! [ -x "$OUT/bin/gen" ] || [ "$HERE/gen.c" -nt "$OUT/bin/gen" ]; then
  cc -O2 -o "$OUT/bin/gen" "$HERE/gen.c" || { echo "FAIL corpus: cannot build tests/corpus/gen.c"; exit 1; }
fi
[ -x "$T" ] || { echo "FAIL corpus: no $T (cargo build --release -p tiermem-cli -p tiermem-preload)"; exit 1; }
[ -x /usr/bin/time ] || { echo "FAIL corpus: no /usr/bin/time (apt-get install time)"; exit 1; }
IN=$OUT/inputs
# input KIND SIZE SEED: the path of a generated input (made once, kept).
input() {
  local f=$IN/$1-$2-$3
  if ! [ -s "$f" ]; then "$OUT/bin/gen" "$1" "$2" "$3" >"$f.tmp" && mv "$f.tmp" "$f"; fi
  echo "$f"
}

# ---------------------------------------------------------------------------
# Running one workload on one path.
# ---------------------------------------------------------------------------
# tm CMD...: CMD plain (max RSS appended to $RD/maxrss) or under tiermem run
# on $MODE at $NEAR, each report in $RD/report.*.
tm() {
  if [ "$MODE" = plain ]; then
    timeout -k 10 "$TMO" /usr/bin/time -q -a -o "$RD/maxrss" -f %M "$@"
  else
    local rep
    rep=$(mktemp -p "$RD" report.XXXXXX) || return 1
    # shellcheck disable=SC2086 # FLAGS are words
    TIERMEM_FAULT_PATH=$MODE timeout -k 10 "$TMO" "$T" run --near "$NEAR" $TFLAGS --quiet \
      --report "$rep" -- "$@"
  fi
}
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# run_mode NAME MODE: runs it in $OUT/NAME/MODE; sets R_RC, R_SECS.
run_mode() {
  local n=$1
  MODE=$2 RD=$OUT/$1/$2 TMO=${TO[$n]} TFLAGS=${FLAGS[$n]}
  rm -rf "$RD"
  mkdir -p "$RD/work"
  if declare -F "prep_$n" >/dev/null; then
    (cd "$RD/work" && "prep_$n") >"$RD/prep.log" 2>&1 || { R_RC=prep; return; }
  fi
  local t0 t1
  t0=$(now)
  (
    set -e -o pipefail
    cd "$RD/work"
    "run_$n"
  ) >"$RD/stdout" 2>"$RD/stderr" </dev/null
  R_RC=$?
  t1=$(now)
  R_SECS=$(secs "$t0" "$t1")
}

# digest NAME: what must be the same in every mode, from $RD.
digest() {
  local n=$1
  (
    cd "$RD/work" || exit 1
    if declare -F "digest_$n" >/dev/null; then
      "digest_$n" <"$RD/stdout"
    else
      if declare -F "norm_$n" >/dev/null; then
        echo "stdout $("norm_$n" <"$RD/stdout" | sha256sum | cut -c1-64)"
      else
        echo "stdout $(sha256sum <"$RD/stdout" | cut -c1-64)"
      fi
      find . -type f -print0 | sort -z | xargs -0 -r sha256sum
    fi
  )
}

evictions() { # in $RD's reports, all regions, all processes
  cat "$RD"/report.* 2>/dev/null | grep -o '"evictions": *[0-9]*' | grep -o '[0-9]*$' |
    awk '{ s += $1 } END { print s + 0 }'
}

why_failed() { # RC -> a line about a failed run
  local rc=$1 tail
  # The first line (often the program's own message) and the last two, with
  # bash's report of the signal cut down to its name.
  tail=$(sed -E 's/^.*run\.sh: line [0-9]+: +[0-9]+ ([A-Z][A-Za-z ]*[a-z]) +.*$/[\1]/' "$RD/stderr" |
    grep -v '^tiermem: *$' | awk 'NR == 1 { print; next } { l[NR] = $0 } END { for (i = NR - 1; i <= NR; i++) if (i > 1) print l[i] }' |
    tr '\n' ' ' | cut -c1-300)
  case $rc in
    124) echo "timed out after ${TMO}s (hang?); stderr: $tail" ;;
    137)
      if awk -v s="$R_SECS" -v t="$TMO" 'BEGIN { exit !(s < t) }'; then
        echo "killed by SIGKILL after ${R_SECS}s (out of memory?); stderr: $tail"
      else
        echo "timed out after ${TMO}s (hang?); stderr: $tail"
      fi
      ;;
    prep) echo "preparing the run failed: $(tail -2 "$RD/prep.log" | tr '\n' ' ')" ;;
    *)
      if [ "$rc" -gt 128 ] 2>/dev/null; then
        echo "exit $rc (signal $((rc - 128))): $tail"
      else
        echo "exit $rc: $tail"
      fi
      ;;
  esac
}

# name, category, desc, peak MiB, near, evictions, path, plain s, tiered s,
# result, reason: separated by US (0x1f), which no field holds.
US=$'\x1f'
ROWS=()
failed=0
row() { ROWS+=("$(IFS=$US; echo "$*")"); }

start_all=$(now)
echo "corpus: ${#selected[@]} workloads ($mode), paths ${paths[*]}, tiermem $T"
for n in "${selected[@]}"; do
  # The paths to run: in the CI subset, not those with a known failure.
  todo=()
  for path in "${paths[@]}"; do
    if [ "$path" = in-context ]; then known=${KNOWN_IC[$n]}; else known=${KNOWN_HT[$n]}; fi
    if [ -n "$known" ] && [ $mode = ci ]; then
      echo "skipped: $n on $path: known failure ($known); run with --all"
      row "$n" "${CAT[$n]}" "${DESC[$n]}" - - - "$path" - - skipped "known: $known"
    else
      todo+=("$path")
    fi
  done
  [ ${#todo[@]} -gt 0 ] || [ ${#paths[@]} = 0 ] || continue
  miss=$(missing "$n" | sed 's/^memcg:$/memcg:(a writable memory cgroup: root)/' | tr '\n' ' ')
  if [ -n "$miss" ]; then
    echo "skipped: $n: missing ${miss% } (as COMMAND:PACKAGE; run as root to install)"
    row "$n" "${CAT[$n]}" "${DESC[$n]}" - - - - - - skipped "missing ${miss% }"
    continue
  fi
  if declare -F "inputs_$n" >/dev/null && ! "inputs_$n" >"$OUT/$n.inputs.log" 2>&1; then
    echo "FAIL $n: generating its input failed: $(tail -2 "$OUT/$n.inputs.log")"
    row "$n" "${CAT[$n]}" "${DESC[$n]}" - - - - - - FAIL "input generation failed"
    failed=1
    continue
  fi
  run_mode "$n" plain
  plain_secs=$R_SECS
  if [ "$R_RC" != 0 ]; then
    reason="the plain run failed: $(why_failed "$R_RC")"
    echo "FAIL $n: $reason"
    row "$n" "${CAT[$n]}" "${DESC[$n]}" - - - plain "$plain_secs" - FAIL "$reason"
    failed=1
    continue
  fi
  want=$(digest "$n")
  echo "$want" >"$RD/digest"
  peak_kib=$(sort -n "$RD/maxrss" | tail -1)
  near_kib=$((peak_kib * PCT[$n] / 100))
  if [ $near_kib -ge 4096 ]; then NEAR=$((near_kib / 1024))M; else NEAR=$((near_kib > 64 ? near_kib : 64))K; fi
  peak_mib=$((peak_kib / 1024))
  if [ ${#paths[@]} = 0 ]; then
    echo "plain $n: peak ${peak_mib} MiB (near would be $NEAR), ${plain_secs}s"
    row "$n" "${CAT[$n]}" "${DESC[$n]}" "$peak_mib" "$NEAR" - plain "$plain_secs" - plain ""
  fi
  all_passed=1
  for path in "${todo[@]}"; do
    if [ "$path" = in-context ]; then known=${KNOWN_IC[$n]}; else known=${KNOWN_HT[$n]}; fi
    run_mode "$n" "$path"
    ev=$(evictions)
    reason=""
    if [ "$R_RC" != 0 ]; then
      reason=$(why_failed "$R_RC")
    else
      got=$(digest "$n")
      echo "$got" >"$RD/digest"
      if [ "$got" != "$want" ]; then
        reason="output differs from the plain run's: $(diff <(echo "$want") <(echo "$got") | grep '^[<>]' |
          head -4 | tr '\n' ' ' | cut -c1-300)"
      elif [ "$ev" = 0 ]; then
        reason="no evictions at --near $NEAR (the budget did not bind)"
      fi
    fi
    if [ -n "$reason" ]; then
      result=FAIL
      failed=1
      all_passed=0
      [ -n "$known" ] && reason="$reason [known: $known]"
      echo "FAIL $n on $path (near $NEAR, peak ${peak_mib} MiB): $reason"
    else
      result=PASS
      note=""
      [ -n "$known" ] && note=" (marked as a known failure, did not fail: $known)"
      echo "PASS $n on $path: near $NEAR of ${peak_mib} MiB, $ev evictions, ${plain_secs}s plain, ${R_SECS}s tiered$note"
      reason=${known:+passed despite mark: $known}
      rm -rf "$RD/work" # outputs are kept where a run failed
    fi
    row "$n" "${CAT[$n]}" "${DESC[$n]}" "$peak_mib" "$NEAR" "$ev" "$path" "$plain_secs" "$R_SECS" "$result" "$reason"
  done
  [ $all_passed = 0 ] || [ ${#todo[@]} = 0 ] || rm -rf "$OUT/$n/plain/work"
done
total=$(secs "$start_all" "$(now)")

# ---------------------------------------------------------------------------
# The table, and the same as JSON.
# ---------------------------------------------------------------------------
echo
printf '%-16s %-12s %8s %6s %10s %-14s %8s %8s  %s\n' program category "peak MiB" near evictions "fault path" "plain s" "tiered s" result
for r in "${ROWS[@]}"; do
  IFS=$US read -r n c d pk nr ev p ps ts res why <<<"$r"
  printf '%-16s %-12s %8s %6s %10s %-14s %8s %8s  %s\n' "$n" "$c" "$pk" "$nr" "$ev" "$p" "$ps" "$ts" "$res"
done
jstr() { # a JSON string
  local s=$1
  s=${s//\\/\\\\} s=${s//\"/\\\"} s=${s//$'\t'/ } s=${s//$'\r'/ } s=${s//$'\n'/ }
  printf '"%s"' "$(printf '%s' "$s" | tr -d '\000-\037')"
}
jnum() { case $1 in '' | - | *[!0-9.]*) printf null ;; *) printf '%s' "$1" ;; esac; }
{
  printf '{\n  "mode": %s,\n  "seconds": %s,\n  "tiermem": %s,\n  "runs": [\n' "$(jstr "$mode")" "$total" "$(jstr "$T")"
  first=1
  for r in "${ROWS[@]}"; do
    IFS=$US read -r n c d pk nr ev p ps ts res why <<<"$r"
    [ $first = 1 ] || printf ',\n'
    first=0
    printf '    {"program": %s, "category": %s, "what": %s, "peak_mib": %s, "near": %s, "evictions": %s, ' \
      "$(jstr "$n")" "$(jstr "$c")" "$(jstr "$d")" "$(jnum "$pk")" "$(jstr "$nr")" "$(jnum "$ev")"
    printf '"fault_path": %s, "plain_s": %s, "tiered_s": %s, "result": %s, "reason": %s}' \
      "$(jstr "$p")" "$(jnum "$ps")" "$(jnum "$ts")" "$(jstr "$res")" "$(jstr "$why")"
  done
  printf '\n  ]\n}\n'
} >"$OUT/corpus.json"
npass=$(printf '%s\n' "${ROWS[@]}" | awk -F"$US" '$10 == "PASS"' | wc -l)
nfail=$(printf '%s\n' "${ROWS[@]}" | awk -F"$US" '$10 == "FAIL"' | wc -l)
nskip=$(printf '%s\n' "${ROWS[@]}" | awk -F"$US" '$10 == "skipped"' | wc -l)
echo
echo "corpus ($mode): $npass passed, $nfail failed, $nskip skipped in ${total}s; $OUT/corpus.json"
exit $failed
