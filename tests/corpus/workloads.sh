# shellcheck shell=bash disable=SC2034
# The corpus's workloads, sourced by tests/corpus/run.sh (see its header for
# the keys and the functions each one defines). $IN is the inputs directory,
# `input KIND SIZE SEED` a generated input (tests/corpus/gen.c), $HERE
# tests/corpus, $W its work/ scripts, $PY Debian's python3, `tm CMD...` the
# command under test (plain, or under tiermem run).
W=$HERE/work

# --- compressors --------------------------------------------------------------
reg xz cat=compressor pct=50 needs="xz:xz-utils" desc="xz -6 -T1, 1 MB text"
inputs_xz() { input text 1000000 11 >/dev/null; }
run_xz() { tm xz -6 -T1 -c "$(input text 1000000 11)" >out.xz; }

reg xz-mt cat=compressor pct=50 needs="xz:xz-utils" desc="xz -6 -T2 (threads), 1 MiB blocks, 3 MB"
inputs_xz-mt() { input text 3000000 12 >/dev/null; }
run_xz-mt() { tm xz -6 -T2 --block-size=1MiB -c "$(input text 3000000 12)" >out.xz; }

reg zstd cat=compressor ci=1 pct=50 needs="zstd:zstd" desc="zstd -19 --long=24 -T1, 1 MB"
inputs_zstd() { input mixed 1000000 13 >/dev/null; }
run_zstd() { tm zstd -q -19 --long=24 -T1 -c "$(input mixed 1000000 13)" >out.zst; }

reg zstd-mt cat=compressor pct=40 needs="zstd:zstd" desc="zstd -5 -T2 -B1MiB (2 workers), 8 MB"
inputs_zstd-mt() { input mixed 8000000 14 >/dev/null; }
run_zstd-mt() { tm zstd -q -5 -T2 -B1MiB -c "$(input mixed 8000000 14)" >out.zst; }

reg bzip2 cat=compressor ci=1 pct=50 needs="bzip2:bzip2" desc="bzip2 -9, 2 MB text"
inputs_bzip2() { input text 2000000 15 >/dev/null; }
run_bzip2() { tm bzip2 -9 -c "$(input text 2000000 15)" >out.bz2; }

reg gzip cat=compressor ci=1 pct=25 flags="--threshold 512K" needs="gzip:gzip" \
  desc="gzip -9, 8 MB; its 796 KiB .bss tiered (--threshold 512K)"
inputs_gzip() { input text 8000000 16 >/dev/null; }
run_gzip() { tm gzip -9 -c "$(input text 8000000 16)" >out.gz; }

reg lz4 cat=compressor ci=1 pct=40 needs="lz4:lz4" desc="lz4 -9 -B7 (4 MiB blocks), 24 MB"
inputs_lz4() { input mixed 24000000 17 >/dev/null; }
run_lz4() { tm lz4 -q -9 -B7 -c "$(input mixed 24000000 17)" >out.lz4; }

reg brotli cat=compressor pct=40 needs="brotli:brotli" desc="brotli -q 9 -w 24, 2 MB"
inputs_brotli() { input mixed 2000000 18 >/dev/null; }
run_brotli() { tm brotli -q 9 -w 24 -c "$(input mixed 2000000 18)" >out.br; }

reg pigz cat=compressor ci=1 pct=40 needs="pigz:pigz" desc="pigz -p 2 -b 2048 (threads), 16 MB"
inputs_pigz() { input mixed 16000000 19 >/dev/null; }
run_pigz() { tm pigz -p 2 -b 2048 -c "$(input mixed 16000000 19)" >out.gz; }

reg pbzip2 cat=compressor ci=1 pct=40 flags="--threshold 256K" needs="pbzip2:pbzip2" \
  desc="pbzip2 -p2 (threads), 4 MB; 900 KB blocks (--threshold 256K)"
inputs_pbzip2() { input text 4000000 20 >/dev/null; }
run_pbzip2() { tm pbzip2 -p2 -9 -c "$(input text 4000000 20)" >out.bz2; }

reg plzip cat=compressor pct=40 needs="plzip:plzip" desc="plzip -n2 -3 (threads), 2 MB"
inputs_plzip() { input text 2000000 21 >/dev/null; }
run_plzip() { tm plzip -n2 -3 -c "$(input text 2000000 21)" >out.lz; }

reg 7z cat=compressor pct=40 needs="7za:p7zip-full" desc="7za LZMA2 -mx=5 -mmt=2 (threads), 2 MB"
inputs_7z() { input text 2000000 22 >/dev/null; }
run_7z() { tm 7za a -txz -mx=5 -mmt=2 -si -so dummy <"$(input text 2000000 22)" >out.xz; }

# --- database ---------------------------------------------------------------
# Its page cache is made of page-sized allocations: tiered at --threshold 4K.
reg sqlite3 cat=database ci=1 pct=40 flags="--threshold 4K" needs="sqlite3:sqlite3" \
  desc="sqlite3: import 250k rows, index, group, sort, join; 200 MB page cache (--threshold 4K)"
inputs_sqlite3() { input csv 250000 31 >/dev/null; }
run_sqlite3() {
  tm sqlite3 db <<EOF
PRAGMA cache_size = -200000;
PRAGMA temp_store = memory;
CREATE TABLE t(id INTEGER, key TEXT, grp INTEGER, val INTEGER);
.mode csv
.import $(input csv 250000 31) t
.mode list
CREATE INDEX tk ON t(key);
SELECT grp, count(*), sum(val), max(key) FROM t GROUP BY grp ORDER BY sum(val) DESC LIMIT 20;
SELECT key, count(*) c FROM t GROUP BY key ORDER BY c DESC, key LIMIT 20;
SELECT sum(length(key) * id % 1000) FROM (SELECT * FROM t ORDER BY val % 9973, key, id);
SELECT count(*) FROM t a JOIN t b ON a.key = b.key AND a.id < b.id WHERE a.grp = 7;
EOF
}
digest_sqlite3() { sha256sum; } # the database file's layout may vary; the answers may not

# --- interpreters and numerical Python ----------------------------------------
reg numpy cat=python ci=1 pct=40 needs="py:numpy:python3-numpy" \
  desc="numpy: sort/argsort 4M, FFT, matmul (OpenBLAS threads), solve"
run_numpy() { tm "$PY" "$W/numpy_work.py" 4000000; }

reg scipy cat=python pct=40 needs="py:scipy:python3-scipy" \
  desc="scipy: SuperLU spsolve, ARPACK eigsh (Fortran), dctn, gaussian_filter"
run_scipy() { tm "$PY" "$W/scipy_work.py" 300; }

reg pandas cat=python pct=40 needs="py:pandas:python3-pandas" desc="pandas: read_csv 200k rows, groupby, merge, sort, to_csv"
inputs_pandas() { input csv 200000 32 >/dev/null; }
run_pandas() { tm "$PY" "$W/pandas_work.py" "$(input csv 200000 32)"; }

reg python cat=python ci=1 pct=40 needs="py:sys:python3" desc="pure Python: dicts, lists, strings over 8 MB text"
inputs_python() { input text 8000000 33 >/dev/null; }
run_python() { tm "$PY" "$W/pure.py" "$(input text 8000000 33)"; }

reg python-mp cat=multi-process ci=1 pct=40 needs="py:numpy:python3-numpy" \
  desc="multiprocessing fork Pool(2) over a 64 MB numpy array"
run_python-mp() { tm "$PY" "$W/mp.py" 8000000; }

reg python-fork cat=multi-process ci=1 pct=40 needs="py:sys:python3" \
  desc="os.fork chain, depth 3, each generation rewrites 48 MiB"
run_python-fork() { tm "$PY" "$W/forkchain.py" 48; }

reg python-sockets cat=threaded-io ci=1 pct=25 needs="py:sys:python3" \
  desc="threads: TCP both ways, 3 rounds of socketpair full duplex, 32 MiB, 8 MiB recv_into/sendall"
run_python-sockets() { tm "$PY" "$W/sockets.py" 32 8; }

reg python-threads cat=threaded-io ci=1 pct=40 needs="py:sys:python3" \
  desc="ThreadPool(2): zlib, lzma, sha256 on 4 MiB slices of 16 MB"
inputs_python-threads() { input mixed 16000000 34 >/dev/null; }
run_python-threads() { tm "$PY" "$W/threads.py" "$(input mixed 16000000 34)"; }

reg python-pipes cat=multi-process ci=1 pct=40 needs="py:sys:python3" \
  desc="subprocess: 16 MB through pipes to sort, cat, gzip (fork+exec)"
inputs_python-pipes() { input text 16000000 35 >/dev/null; }
run_python-pipes() { tm "$PY" "$W/subproc.py" "$(input text 16000000 35)"; }

reg python-mlock cat=python pct=40 needs="py:sys:python3 memcg:" \
  desc="mlockall(MCL_CURRENT|MCL_FUTURE), then 64 MiB of work, in a 1 GiB memory cgroup"
run_python-mlock() { in_memcg 1G tm "$PY" "$W/mlock.py" 64; }

reg perl cat=interpreter ci=1 pct=25 needs="perl:perl" desc="perl: hash of words, numeric sort, s///g over 6 MB"
inputs_perl() { input text 6000000 36 >/dev/null; }
run_perl() { tm perl "$W/words.pl" "$(input text 6000000 36)"; }

reg gawk cat=interpreter ci=1 pct=40 needs="gawk:gawk" desc="gawk: 8 MB text in one string, gsub, toupper, word counts, sorted traversal"
inputs_gawk() { input text 8000000 37 >/dev/null; }
run_gawk() { tm gawk -f "$W/words.awk" "$(input text 8000000 37)"; }

reg lua cat=interpreter ci=1 pct=40 needs="lua5.4:lua5.4" desc="lua5.4: 1M-element table sorted, concat, word counts"
inputs_lua() { input text 4000000 38 >/dev/null; }
run_lua() { tm lua5.4 "$W/work.lua" 1000000 "$(input text 4000000 38)"; }

reg ruby cat=interpreter pct=40 needs="ruby:ruby" desc="ruby: word counts, 1M-element sort, join, tr over 6 MB"
inputs_ruby() { input text 6000000 39 >/dev/null; }
run_ruby() { tm ruby "$W/work.rb" "$(input text 6000000 39)"; }

reg node cat=interpreter ci=1 pct=25 needs="node:nodejs" desc="node: Float64Array(4M) sort, JSON round trip, Buffer ops"
inputs_node() { input text 8000000 40 >/dev/null; }
run_node() { tm node "$W/work.js" 4000000 "$(input text 8000000 40)"; }

# libuv's io_uring (Node 20 sets up its rings at start; UV_USE_IO_URING=1
# sends file I/O through them): the kernel fills the Buffers with no system
# call tiermem sees, so tiermem refuses io_uring and libuv falls back to its
# thread pool (before: EFAULT in-context, and on the handler-thread path
# direct reads through io_uring read back corrupt pages; tests/c/test_uring.c).
reg node-uring cat=threaded-io ci=1 pct=25 needs="node:nodejs" \
  desc="node: fs.promises reads and writes through libuv's io_uring, 24 MB in 1 MiB pieces"
inputs_node-uring() { input text 24000000 48 >/dev/null; }
run_node-uring() { UV_USE_IO_URING=1 tm node "$W/uring.js" "$(input text 24000000 48)"; }

reg tcl cat=interpreter pct=25 needs="tclsh:tcl" desc="tclsh: dict of words, 750k-element lsort, join, string ops"
inputs_tcl() { input text 3000000 41 >/dev/null; }
run_tcl() { tm tclsh "$W/work.tcl" "$(input text 3000000 41)"; }

# --- compilers and builds -------------------------------------------------------
reg gcc cat=compiler ci=1 pct=40 flags="--follow-exec" needs="gcc:gcc py:sys:python3" \
  desc="gcc -O2 on a generated 80-function C file (cc1 tiered, --follow-exec)"
inputs_gcc() { [ -s "$IN/gcc.c" ] || "$PY" "$W/gencode.py" c 80 >"$IN/gcc.c"; }
run_gcc() { tm gcc -O2 -c "$IN/gcc.c" -o gcc.o; }

reg g++ cat=compiler pct=40 flags="--follow-exec" needs="g++:g++ py:sys:python3" \
  desc="g++ -O2 -std=c++17 on 15 generated template classes (--follow-exec)"
inputs_g++() { [ -s "$IN/gxx.cpp" ] || "$PY" "$W/gencode.py" cxx 15 >"$IN/gxx.cpp"; }
run_g++() { tm g++ -O2 -std=c++17 -c "$IN/gxx.cpp" -o gxx.o; }

reg make cat=multi-process pct=25 flags="--follow-exec" needs="make:make gcc:gcc py:sys:python3" \
  desc="make -j2: 6 generated C files of 40 functions, link, run (every process tiered)"
prep_make() { "$PY" "$W/gencode.py" make src 6 40; }
run_make() { tm make -s -j2 -C src && ./src/prog; }

reg gfortran cat=fortran ci=1 pct=40 needs="gfortran:gfortran" \
  desc="Fortran (gfortran -fopenmp, 2 threads): Jacobi on 1400^2 allocatables + 16 MiB COMMON"
inputs_gfortran() { gfortran -O2 -fopenmp "$W/stencil.f90" -o "$IN/stencil"; }
run_gfortran() { OMP_NUM_THREADS=2 tm "$IN/stencil" 1400 12; }

reg f951 cat=compiler pct=40 flags="--follow-exec" needs="gfortran:gfortran py:sys:python3" \
  desc="gfortran -O2 on a generated module of 80 subroutines (f951 tiered, --follow-exec)"
inputs_f951() { [ -s "$IN/gen.f90" ] || "$PY" "$W/gencode.py" f 80 >"$IN/gen.f90"; }
run_f951() { tm gfortran -O2 -c "$IN/gen.f90" -o gen.o; }

# --- text and files ---------------------------------------------------------------
reg sort cat=text ci=1 pct=40 needs="sort:coreutils" desc="sort -S 200M --parallel=2 (threads), 12 MB"
inputs_sort() { input text 12000000 51 >/dev/null; }
run_sort() { tm sort -S 200M --parallel=2 "$(input text 12000000 51)" | sha256sum; }

# Another allocator under the program (LD_PRELOAD here, as for a program
# linked with it): every such program died before main (the preload took
# malloc_usable_size from it and the blocks from the C library).
JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
TCMALLOC=/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4
reg sort-jemalloc cat=text ci=1 pct=40 needs="sort:coreutils lib:$JEMALLOC:libjemalloc2" \
  desc="sort -S 200M --parallel=2 with jemalloc preloaded, 12 MB"
inputs_sort-jemalloc() { inputs_sort; }
run_sort-jemalloc() { LD_PRELOAD=$JEMALLOC run_sort; }
reg sort-tcmalloc cat=text ci=1 pct=40 needs="sort:coreutils lib:$TCMALLOC:libgoogle-perftools4" \
  desc="sort -S 200M --parallel=2 with tcmalloc preloaded, 12 MB"
inputs_sort-tcmalloc() { inputs_sort; }
run_sort-tcmalloc() { LD_PRELOAD=$TCMALLOC run_sort; }

reg sort-merge cat=text pct=40 needs="sort:coreutils gzip:gzip" \
  desc="sort -S 8M, temp files compressed by gzip children, 20 MB"
inputs_sort-merge() { input text 20000000 52 >/dev/null; }
run_sort-merge() { tm sort -S 8M -T . --compress-program=gzip -k2,2 -k1,1 "$(input text 20000000 52)" | sha256sum; }

reg shuf cat=text pct=40 needs="shuf:coreutils" desc="shuf of 20 MB, fixed random source"
inputs_shuf() { input text 20000000 53 >/dev/null && input rand 1000000 54 >/dev/null; }
run_shuf() { tm shuf --random-source="$(input rand 1000000 54)" "$(input text 20000000 53)" | sha256sum; }

reg diff cat=text ci=1 pct=40 needs="diff:diffutils" desc="diff of two 12 MB files with scattered changes"
inputs_diff() {
  [ -s "$IN/diff.b" ] && return
  awk 'NR % 997 == 0 { print "changed " NR; next } NR % 1777 == 0 { next } { print }' \
    "$(input text 12000000 55)" >"$IN/diff.b"
}
run_diff() { tm diff "$(input text 12000000 55)" "$IN/diff.b" >out.diff || [ $? = 1 ]; }

reg dd cat=io ci=1 pct=40 needs="dd:coreutils" desc="dd bs=16M iflag=fullblock: 96 MB through one 16 MiB buffer"
inputs_dd() { input rand 96000000 56 >/dev/null; }
run_dd() { tm dd if="$(input rand 96000000 56)" of=out bs=16M iflag=fullblock status=none; }

reg pipeline cat=multi-process ci=1 pct=40 flags="--follow-exec" needs="bash:bash sort:coreutils" \
  desc="bash pipeline sort | uniq -c | sort -rn | head, every process tiered"
inputs_pipeline() { input text 16000000 57 >/dev/null; }
run_pipeline() {
  tm bash -c "tr ' ' '\n' <'$(input text 16000000 57)' | sort -S 64M | uniq -c | sort -S 32M -k1,1nr -k2 | head -200"
}

# --- version control, images, I/O -------------------------------------------------
reg git cat=vcs pct=30 flags="--follow-exec --threshold 128K" needs="git:git py:sys:python3" \
  desc="git fast-import 30 commits of 250 KB files, repack -adf --threads=2, fsck (--follow-exec, --threshold 128K)"
inputs_git() { [ -s "$IN/git.stream" ] || "$PY" "$W/gitstream.py" 30 8 40000 >"$IN/git.stream"; }
prep_git() { git init -q -b main repo; }
run_git() {
  export GIT_CONFIG_NOSYSTEM=1 HOME=$PWD
  tm git -C repo fast-import --quiet <"$IN/git.stream"
  tm git -C repo repack -adf -q --window=50 --depth=50 --threads=2
  tm git -C repo fsck --full --no-progress
  git -C repo log --format='%H %T' main
  git -C repo cat-file --batch-all-objects --batch-check
}
digest_git() { sha256sum; }

# Not in issue 30: with fault-around on (the default) this thrashes, >60 s
# against 3 s plain; TIERMEM_FAULT_AROUND=off completes in ~7 s.
# In CI since fault-around's clusters shrink at a third unused (they took 25x
# the plain time, >60 s, filling the budget the column passes needed).
# /usr/bin/convert, not any convert on the PATH: a stand-in elsewhere (a
# sandbox's image helper) kept ImageMagick from being installed. On the
# handler-thread path some runs thrash (2026-11-29: 370-430 M evictions in
# the 60 s allowed, where the others take 4-8 s with 1.1-3.1 M; 1 of 17
# runs with 964b355's binary, 6 of 29 with 4526199's, in bursts).
reg imagemagick cat=image ci=1 pct=40 to=60 needs="/usr/bin/convert:imagemagick" \
  known_ic="about 1 run in 8 thrashes (over 60 s against 3 s): fault-around's 16-page clusters tip the column passes' working set over the budget (every run with TIERMEM_STRIDE=off; none with TIERMEM_FAULT_AROUND=off); issue 32" \
  known_ht="about 1 run in 8 thrashes, as in-context (issue 32)" \
  desc="ImageMagick convert (OpenMP, 2 threads): 1500x1000 resize, blur, sharpen"
inputs_imagemagick() { input rand 1500000 61 >/dev/null; }
run_imagemagick() {
  MAGICK_THREAD_LIMIT=2 OMP_NUM_THREADS=2 tm /usr/bin/convert -size 1500x1000 -depth 8 \
    "gray:$(input rand 1500000 61)" -resize 150% -blur 0x2 -sharpen 0x1 -depth 8 gray:out.gray
}

# fio checks what it wrote itself (crc32c of every block, read back into its
# buffers); the files hold times in their verify headers, so the digest is
# fio's error counts and the files' sizes.
reg fio-threads cat=threaded-io ci=1 pct=25 needs="fio:fio" \
  desc="fio --thread numjobs=2 psync write+verify, 8 MiB blocks, 2x64 MB"
run_fio-threads() {
  # shellcheck disable=SC2016 # $jobnum is fio's
  tm fio --name=w --thread --numjobs=2 --ioengine=psync --rw=write --bs=8M --size=64M \
    --verify=crc32c --do_verify=1 --filename_format='data.$jobnum' --output=fio.out
}
digest_fio() { stat -c '%n %s' data*; grep -h 'err=' fio.out | sed 's/^[^:]*: (groupid=[0-9]*, jobs=[0-9]*): //; s/:.*//'; }
digest_fio-threads() { digest_fio; }

reg fio-aio cat=threaded-io ci=1 pct=25 needs="fio:fio" \
  desc="fio --thread ioengine=posixaio (glibc aio), iodepth 4, 4 MiB blocks, 64 MB"
run_fio-aio() {
  tm fio --name=a --thread --ioengine=posixaio --iodepth=4 --rw=write --bs=4M --size=64M \
    --verify=crc32c --do_verify=1 --filename=data --output=fio.out
}
digest_fio-aio() { digest_fio; }

# Linux AIO with O_DIRECT: the device fills fio's buffers after io_submit
# returns (tiermem pins them until io_getevents reaps them; before, the
# handler-thread path verified corrupt blocks and in-context failed EFAULT).
reg fio-libaio cat=threaded-io ci=1 pct=10 needs="fio:fio" \
  desc="fio --thread ioengine=libaio direct=1 (Linux AIO), iodepth 8, 1 MiB blocks, 64 MB random"
run_fio-libaio() {
  tm fio --name=l --thread --ioengine=libaio --direct=1 --iodepth=8 --rw=randwrite --bs=1M --size=64M \
    --verify=crc32c --do_verify=1 --verify_fatal=1 --filename=data --output=fio.out
}
digest_fio-libaio() { digest_fio; }

# A memory cgroup to contain a run that may take all the memory (v1 or v2).
have_memcg() { [ "$(id -u)" = 0 ] && { [ -w /sys/fs/cgroup/memory ] || [ -w /sys/fs/cgroup/cgroup.procs ]; }; }
in_memcg() { # LIMIT CMD...: CMD in a fresh memory cgroup of LIMIT, no swap
  local lim=$1 cg
  shift
  if [ -d /sys/fs/cgroup/memory ]; then
    cg=/sys/fs/cgroup/memory/tiermem-corpus.$$
    mkdir -p "$cg" && echo "$lim" >"$cg/memory.limit_in_bytes" || return 1
    echo "$lim" >"$cg/memory.memsw.limit_in_bytes" 2>/dev/null
  else
    cg=/sys/fs/cgroup/tiermem-corpus.$$
    mkdir -p "$cg" && echo "$lim" >"$cg/memory.max" && echo 0 >"$cg/memory.swap.max" || return 1
  fi
  local rc=0
  (echo "$BASHPID" >"$cg/cgroup.procs" && "$@") || rc=$?
  rmdir "$cg" 2>/dev/null
  return $rc
}
