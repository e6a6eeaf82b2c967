// Paper 5's SVM workloads (bucket sort, Malstone-A, BFS with a black list)
// and a histogram under locks, written against ArgoDSM's API, for the side-by-side comparison with
// tiermem's SVM over MPI (docs/svm.md). The computations, inputs and
// checksums are those of crates/tiermem-workloads/src/svm.rs, so both
// systems' results are checked against the same one-rank checksum; the BFS
// reads the Graph500 graph that `tiermem bench svm --export-graph` wrote.
//
// Not ArgoDSM code: it uses ArgoDSM through its public API (argo.hpp:
// init, conew_array, codelete_array, barrier, node_id, number_of_nodes, its
// global lock argo::globallock::global_tas_lock) and reads its statistics
// (backend/mpi/swdsm.h). Built against the external
// tree by path with benches/argodsm/build.sh.
//
//   mpirun -np N svm_argo [--workloads bucket,malstone,bfs,locks] [--reps R]
//          [--threads T] [--graph FILE] [--records FILE] [--keys K] [--records-n N] ...
//
// --threads T: T worker threads in each process (ArgoDSM node), worker
// w = node * T + t of N * T. ArgoDSM's documentation runs one ArgoDSM node
// per machine with the program's threads inside it (docs/index.md: "one
// ArgoDSM node per hardware node"); the threads of a node share its page
// cache and synchronise locally, and the lock workload then takes
// ArgoDSM's cohort lock, its lock for threaded nodes. Records carry the
// worker count as "ranks".
//
// Output: one JSON line per run (rank 0) to --records, in the format of
// tiermem's `bench svm --mpi` (system "argodsm").
#include <mpi.h>
#include <sched.h>
#include <time.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "argo.hpp"
#include "backend/mpi/swdsm.h"
#include "synchronization/cohort_lock.hpp"
#include "synchronization/global_tas_lock.hpp"

namespace {

uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

struct Range {
    size_t lo, hi;
};

Range share(size_t n, size_t r, size_t p) { return {n * r / p, n * (r + 1) / p}; }

const size_t PAGE = 4096;
size_t pages(size_t bytes) { return (bytes + PAGE - 1) / PAGE * PAGE; }

struct Params {
    size_t keys = 4 << 20, bucket_keys = 256, records = 8 << 20, sites = 1 << 16;
    size_t roots = 4, black_list = 16384;
    size_t lock_items = 1 << 20, lock_task = 4096, lock_stripes = 16;
    std::string graph;
};

struct Run {
    std::vector<std::pair<std::string, double>> phases;
    uint64_t sum = 0;  // this rank's part of the checksum
    uint64_t errors = 0;
    double lock_s = 0;  // this rank's time in lock() and unlock()
    uint64_t locks = 0;
};

double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t allreduce_sum(uint64_t v) {
    uint64_t out = 0;
    MPI_Allreduce(&v, &out, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    return out;
}

// What the threads of one process (ArgoDSM node) share.
struct Node {
    size_t threads = 1;
    pthread_barrier_t local;
    void *slots[4] = {};
    std::atomic<uint64_t> acc{0};
    uint64_t result = 0;
};

// One worker: thread t of this node; id of count over the whole job.
struct Worker {
    Node &node;
    size_t t, id, count;
    void local_barrier() { pthread_barrier_wait(&node.local); }
    // Every worker of every node.
    void barrier() { argo::barrier(node.threads); }
    bool first() const { return id == 0; }
    // A collective allocation: thread 0 of each node allocates, the
    // node's threads share it.
    template <class X>
    X *alloc(size_t n, int slot) {
        if (t == 0) node.slots[slot] = argo::conew_array<X>(n);
        local_barrier();
        return static_cast<X *>(node.slots[slot]);
    }
    template <class X>
    void free(X *p) {
        local_barrier();
        if (t == 0) argo::codelete_array(p);
    }
    // The sum of v over every worker (one MPI call per node).
    uint64_t sum_all(uint64_t v) {
        node.acc += v;
        local_barrier();
        if (t == 0) {
            node.result = allreduce_sum(node.acc.load());
            node.acc = 0;
        }
        local_barrier();
        return node.result;
    }
};

// Worker 0's clock for phases between barriers.
struct Phases {
    Run &run;
    Worker &w;
    double t;
    Phases(Run &r, Worker &wk) : run(r), w(wk) {
        w.barrier();
        t = now();
    }
    void lap(const char *name) {
        w.barrier();
        double n = now();
        run.phases.emplace_back(name, n - t);
        t = n;
    }
};

void insertion_sort(uint32_t *a, size_t n) {
    for (size_t i = 1; i < n; i++) {
        uint32_t v = a[i];
        size_t j = i;
        while (j > 0 && a[j - 1] > v) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
    }
}

Run bucket(const Params &prm, Worker &w) {
    Run run;
    size_t me = w.id, np = w.count;
    size_t n = prm.keys;
    size_t nb = 1;
    while (nb < std::max<size_t>(n / prm.bucket_keys, 1)) nb <<= 1;
    unsigned shift = 32 - __builtin_ctzll(nb);
    uint32_t *keys = w.alloc<uint32_t>(pages(n * 4) / 4, 0);
    uint32_t *buck = w.alloc<uint32_t>(pages(n * 4) / 4, 1);
    uint32_t *counts = w.alloc<uint32_t>(pages(np * nb * 4) / 4, 2);
    auto bucket_of = [&](uint32_t k) -> size_t { return shift == 32 ? 0 : k >> shift; };
    Phases ph(run, w);
    Range r = share(n, me, np);
    for (size_t i = r.lo; i < r.hi; i++) keys[i] = (uint32_t)mix(i ^ 0x5eed);
    ph.lap("generate");
    std::vector<uint32_t> hist(nb, 0);
    for (size_t i = r.lo; i < r.hi; i++) hist[bucket_of(keys[i])]++;
    for (size_t b = 0; b < nb; b++) counts[me * nb + b] = hist[b];
    w.barrier();
    std::vector<size_t> start(nb + 1, 0), mine(nb, 0);
    for (size_t b = 0; b < nb; b++) {
        size_t s = start[b];
        for (size_t q = 0; q < np; q++) {
            if (q == me) mine[b] = s;
            s += counts[q * nb + b];
        }
        start[b + 1] = s;
    }
    for (size_t i = r.lo; i < r.hi; i++) {
        uint32_t v = keys[i];
        size_t b = bucket_of(v);
        buck[mine[b]++] = v;
    }
    ph.lap("bucket");
    Range br = share(nb, me, np);
    for (size_t b = br.lo; b < br.hi; b++) insertion_sort(buck + start[b], start[b + 1] - start[b]);
    ph.lap("sort");
    size_t lo = start[br.lo], hi = start[br.hi];
    uint32_t prev = lo > 0 ? buck[lo - 1] : 0;
    for (size_t i = lo; i < hi; i++) {
        uint32_t v = buck[i];
        if (v < prev) run.errors++;
        prev = v;
        run.sum += mix(v) * (uint64_t)(i + 1);
    }
    ph.lap("merge");
    w.free(counts);
    w.free(buck);
    w.free(keys);
    return run;
}

Run malstone(const Params &prm, Worker &w) {
    Run run;
    size_t me = w.id, np = w.count;
    size_t n = prm.records, s = prm.sites;
    size_t tab_words = pages(2 * s * 4) / 4;
    uint64_t *log = w.alloc<uint64_t>(pages(n * 8) / 8, 0);
    uint32_t *tabs = w.alloc<uint32_t>(tab_words * np, 1);
    uint32_t *res = w.alloc<uint32_t>(pages(2 * s * 4) / 4, 2);
    uint32_t *tab = tabs + me * tab_words;
    // ArgoDSM leaves arrays of trivial types as they are (memory a
    // previous workload freed): the counts start from zero.
    std::fill(tab, tab + tab_words, 0);
    Phases ph(run, w);
    Range r = share(n, me, np);
    for (size_t i = r.lo; i < r.hi; i++) {
        uint64_t h = mix(i ^ 0x3a1);
        uint64_t site = (h % s) * ((h >> 20) % s) / s;
        uint64_t visitor = (h >> 32) & 0x7fffffff;
        uint64_t bad = mix(visitor) % 8 == 0;
        log[i] = site | visitor << 32 | bad << 63;
    }
    ph.lap("generate");
    for (size_t i = r.lo; i < r.hi; i++) {
        uint64_t v = log[i];
        size_t site = v & 0xffffffff;
        tab[2 * site]++;
        if (v >> 63) tab[2 * site + 1]++;
    }
    ph.lap("count");
    Range sr = share(s, me, np);
    for (size_t site = sr.lo; site < sr.hi; site++) {
        uint32_t visits = 0, bad = 0;
        for (size_t q = 0; q < np; q++) {
            visits += tabs[q * tab_words + 2 * site];
            bad += tabs[q * tab_words + 2 * site + 1];
        }
        res[2 * site] = visits;
        res[2 * site + 1] = bad;
        double ratio = visits == 0 ? 0.0 : (double)bad / (double)visits;
        uint64_t bits;
        std::memcpy(&bits, &ratio, 8);
        run.sum += mix(site ^ (uint64_t)visits << 32 ^ bits);
    }
    ph.lap("reduce");
    if (w.first()) {
        uint64_t total = 0;
        for (size_t i = 0; i < s; i++) total += res[2 * i];
        if (total != n) run.errors++;
    }
    w.barrier();
    w.free(res);
    w.free(tabs);
    w.free(log);
    return run;
}

const uint32_t INF = UINT32_MAX;

Run bfs(const Params &prm, Worker &w) {
    Run run;
    size_t me = w.id, np = w.count;
    FILE *f = std::fopen(prm.graph.c_str(), "rb");
    uint64_t hdr[2] = {0, 0};
    if (!f || std::fread(hdr, 8, 2, f) != 2) {
        std::fprintf(stderr, "svm_argo: cannot read the graph %s (tiermem bench svm --export-graph)\n",
                     prm.graph.c_str());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t nv = hdr[0], used = hdr[1], ne = 16 * nv;
    uint32_t *off = w.alloc<uint32_t>(pages((nv + 1) * 4) / 4, 0);
    uint32_t *adj = w.alloc<uint32_t>(pages(2 * ne * 4) / 4, 1);
    uint32_t *level = w.alloc<uint32_t>(pages(nv * 4) / 4, 2);
    uint64_t *black = w.alloc<uint64_t>(pages(prm.black_list * 8) / 8, 3);
    if (w.first()) {
        std::vector<uint32_t> o(nv + 1), a(used);
        if (std::fread(o.data(), 4, nv + 1, f) != nv + 1 || std::fread(a.data(), 4, used, f) != used) {
            std::fprintf(stderr, "svm_argo: short graph file\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        std::copy(o.begin(), o.end(), off);
        std::copy(a.begin(), a.end(), adj);
        std::vector<uint64_t> bl(prm.black_list);
        for (size_t i = 0; i < bl.size(); i++) bl[i] = mix(i ^ 0xb1ac) % nv;
        std::sort(bl.begin(), bl.end());
        std::copy(bl.begin(), bl.end(), black);
    }
    std::fclose(f);
    w.barrier();
    auto blacklisted = [&](uint32_t v) {
        size_t lo = 0, hi = prm.black_list;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            uint64_t x = black[mid];
            if (x == v) return true;
            if (x < v) lo = mid + 1; else hi = mid;
        }
        return false;
    };
    std::vector<size_t> roots;
    for (uint64_t i = 0; roots.size() < prm.roots; i++) {
        size_t v = mix(i ^ 0x200f) % nv;
        if (off[v + 1] > off[v]) roots.push_back(v);
    }
    Range r = share(nv, me, np);
    Phases ph(run, w);
    uint64_t linking_all = 0;
    for (size_t root : roots) {
        for (size_t v = r.lo; v < r.hi; v++) level[v] = v == root ? 0 : INF;
        uint64_t found_total = 1, found_here = 0, linking = 0;
        uint32_t depth = 0;
        w.barrier();
        for (;;) {
            uint64_t found = 0;
            for (size_t v = r.lo; v < r.hi; v++) {
                if (level[v] != INF) continue;
                bool hit = false;
                for (uint32_t e = off[v]; e < off[v + 1] && !hit; e++) hit = level[adj[e]] == depth;
                if (hit) {
                    level[v] = depth + 1;
                    found++;
                    bool bl = false;
                    for (uint32_t e = off[v]; e < off[v + 1] && !bl; e++) bl = blacklisted(adj[e]);
                    if (bl) linking++;
                }
            }
            found_here += found;
            w.barrier();
            uint64_t total = w.sum_all(found_here) + 1;
            if (total == found_total) break;
            found_total = total;
            depth++;
        }
        for (size_t v = r.lo; v < r.hi; v++) {
            uint32_t l = level[v];
            if (l == INF) {
                for (uint32_t e = off[v]; e < off[v + 1]; e++)
                    if (level[adj[e]] != INF) { run.errors++; break; }
                continue;
            }
            bool parent = l == 0;
            for (uint32_t e = off[v]; e < off[v + 1]; e++) {
                uint32_t u = level[adj[e]];
                if (l > 0 && u == l - 1) parent = true;
                if ((u > l ? u - l : l - u) > 1) run.errors++;
            }
            if (!parent) run.errors++;
            run.sum += mix(v ^ (uint64_t)l << 32);
        }
        linking_all += linking;
        w.barrier();
    }
    ph.lap("bfs");
    uint64_t link = w.sum_all(linking_all);
    if (w.first()) run.sum += mix(link);
    w.free(black);
    w.free(level);
    w.free(adj);
    w.free(off);
    return run;
}

// The histogram under locks of crates/tiermem-workloads/src/svm.rs
// (`locks`): tasks from a shared counter under lock 0, each task's counts
// added into the shared bins page by page, page s under lock 1 + s.
// With one thread per process, ArgoDSM's locks are global_tas_lock objects
// (a test-and-set on a word of the global memory, with ArgoDSM's acquire
// and release, as its documentation's lock example uses); with threads,
// its cohort_lock (a node-local lock in front of a global one: the lock is
// handed between the node's threads without a release and acquire).
Run locks(const Params &prm, Worker &w) {
    using tas = argo::globallock::global_tas_lock;
    using cohort = argo::globallock::cohort_lock;
    Run run;
    size_t me = w.id, np = w.count;
    const size_t BINS = PAGE / 8;
    size_t stripes = std::min<size_t>(std::max<size_t>(prm.lock_stripes, 1), 64);
    size_t nbins = stripes * BINS, task = std::max<size_t>(prm.lock_task, 1);
    size_t tasks = (prm.lock_items + task - 1) / task;
    uint64_t *queue = w.alloc<uint64_t>(PAGE / 8, 0);
    uint64_t *bins = w.alloc<uint64_t>(nbins, 1);
    bool threaded = w.node.threads > 1;
    // The locks: made by thread 0 of each node (their constructors are
    // collective), shared by the node's threads.
    std::vector<tas *> *tas_locks = nullptr;
    std::vector<cohort *> *cohort_locks = nullptr;
    tas::internal_field_type *fields = nullptr;
    if (w.t == 0) {
        if (threaded) {
            cohort_locks = new std::vector<cohort *>;
            for (size_t i = 0; i <= stripes; i++) cohort_locks->push_back(new cohort());
            w.node.slots[3] = cohort_locks;
        } else {
            fields = argo::conew_array<tas::internal_field_type>(PAGE / sizeof(tas::internal_field_type));
            tas_locks = new std::vector<tas *>;
            for (size_t i = 0; i <= stripes; i++) tas_locks->push_back(new tas(&fields[i]));
        }
    }
    if (w.first()) {
        queue[0] = 0;
        std::fill(bins, bins + nbins, 0);
    }
    w.local_barrier();
    if (threaded) cohort_locks = static_cast<std::vector<cohort *> *>(w.node.slots[3]);
    Phases ph(run, w);
    std::vector<uint64_t> local(nbins);
    // global_tas_lock::lock() retries with sched_yield alone; with ranks
    // sharing CPUs the spinning holder-to-be starves the holder's own
    // one-sided operations (under osc/ucx a run never finished). The wait
    // here is tiermem's (team::Backoff): 200 spins, then yields up to 2000
    // tries, then 20 us sleeps, over the lock's public try_lock(). The
    // cohort lock has no try_lock: its own lock() waits.
    auto take = [&](size_t i) {
        double t = now();
        if (threaded) {
            (*cohort_locks)[i]->lock();
        } else {
            for (unsigned tries = 0; !(*tas_locks)[i]->try_lock(); tries++) {
                if (tries < 200) __builtin_ia32_pause();
                else if (tries < 2000) sched_yield();
                else {
                    struct timespec ts = {0, 20000};
                    nanosleep(&ts, nullptr);
                }
            }
        }
        run.lock_s += now() - t;
        run.locks++;
    };
    auto give = [&](size_t i) {
        double t = now();
        if (threaded) (*cohort_locks)[i]->unlock();
        else (*tas_locks)[i]->unlock();
        run.lock_s += now() - t;
    };
    for (;;) {
        take(0);
        uint64_t t = queue[0];
        if (t < tasks) queue[0] = t + 1;
        give(0);
        if (t >= tasks) break;
        std::fill(local.begin(), local.end(), 0);
        size_t end = std::min((t + 1) * task, prm.lock_items);
        for (size_t i = t * task; i < end; i++) local[mix(i ^ 0x10c5) % nbins]++;
        for (size_t k = 0; k < stripes; k++) {
            size_t s = (k + me) % stripes;
            take(1 + s);
            for (size_t b = s * BINS; b < (s + 1) * BINS; b++)
                if (local[b]) bins[b] += local[b];
            give(1 + s);
        }
    }
    ph.lap("update");
    Range r = share(nbins, me, np);
    for (size_t i = r.lo; i < r.hi; i++) run.sum += mix(i ^ bins[i] << 32);
    ph.lap("reduce");
    if (w.first()) {
        uint64_t total = 0;
        for (size_t i = 0; i < nbins; i++) total += bins[i];
        if (total != prm.lock_items || queue[0] != tasks) run.errors++;
    }
    w.barrier();
    w.local_barrier();
    if (w.t == 0) {
        if (threaded) {
            for (cohort *l : *cohort_locks) delete l;
            delete cohort_locks;
        } else {
            for (tas *l : *tas_locks) delete l;
            delete tas_locks;
            argo::codelete_array(fields);
        }
    }
    w.free(bins);
    w.free(queue);
    return run;
}

int nodes_of_job() {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int nr;
    MPI_Comm_rank(node, &nr);
    int lead = nr == 0, leaders = 0;
    MPI_Allreduce(&lead, &leaders, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm_free(&node);
    return leaders;
}

}  // namespace

int main(int argc, char **argv) {
    Params prm;
    std::string workloads = "bucket,malstone,bfs,locks", records, mode = "argo";
    size_t reps = 1, mem = 512ul << 20, threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string k = argv[i], v = argv[i + 1];
        if (k == "--workloads") workloads = v;
        else if (k == "--reps") reps = std::stoul(v);
        else if (k == "--threads") threads = std::max<size_t>(std::stoul(v), 1);
        else if (k == "--graph") prm.graph = v;
        else if (k == "--records") records = v;
        else if (k == "--mode") mode = v;
        else if (k == "--memory") mem = std::stoul(v) << 20;
        else if (k == "--keys") prm.keys = std::stoul(v);
        else if (k == "--bucket-keys") prm.bucket_keys = std::stoul(v);
        else if (k == "--records-n") prm.records = std::stoul(v);
        else if (k == "--sites") prm.sites = std::stoul(v);
        else if (k == "--roots") prm.roots = std::stoul(v);
        else if (k == "--black-list") prm.black_list = std::stoul(v);
        else if (k == "--lock-items") prm.lock_items = std::stoul(v);
        else if (k == "--lock-task") prm.lock_task = std::stoul(v);
        else if (k == "--lock-stripes") prm.lock_stripes = std::stoul(v);
        else {
            std::fprintf(stderr, "svm_argo: unknown option %s\n", k.c_str());
            return 2;
        }
    }
    argo::init(mem, mem);
    int nodes = nodes_of_job();
    size_t me = argo::node_id(), np = argo::number_of_nodes();
    Node node;
    node.threads = threads;
    pthread_barrier_init(&node.local, nullptr, (unsigned)threads);
    std::vector<std::string> names;
    for (size_t a = 0, b; a <= workloads.size(); a = b + 1) {
        b = workloads.find(',', a);
        if (b == std::string::npos) b = workloads.size();
        if (b > a) names.push_back(workloads.substr(a, b - a));
    }
    int rc = 0;
    for (size_t rep = 0; rep < reps; rep++) {
        for (const std::string &w : names) {
            argo::barrier();
            argo_reset_stats();
            if (w != "bucket" && w != "malstone" && w != "bfs" && w != "locks") {
                if (me == 0) std::fprintf(stderr, "svm_argo: unknown workload %s\n", w.c_str());
                rc = 2;
                break;
            }
            // The node's threads run the workload; thread 0's run has the
            // phases (worker 0's clock on node 0), the sums add up.
            std::vector<Run> runs(threads);
            std::vector<std::thread> team;
            for (size_t t = 0; t < threads; t++) {
                team.emplace_back([&, t] {
                    Worker wk{node, t, me * threads + t, np * threads};
                    if (w == "bucket") runs[t] = bucket(prm, wk);
                    else if (w == "malstone") runs[t] = malstone(prm, wk);
                    else if (w == "bfs") runs[t] = bfs(prm, wk);
                    else runs[t] = locks(prm, wk);
                });
            }
            for (std::thread &th : team) th.join();
            Run run = runs[0];
            for (size_t t = 1; t < threads; t++) {
                run.sum += runs[t].sum;
                run.errors += runs[t].errors;
                run.lock_s += runs[t].lock_s;
                run.locks += runs[t].locks;
            }
            uint64_t sum = allreduce_sum(run.sum), errors = allreduce_sum(run.errors);
            // Counters of all ranks (ArgoDSM keeps them per process).
            // lock_ms: time in the locks' lock() and unlock() (with ArgoDSM's
            // acquire and release); sync_lock_ms: its internal sync_lock.
            double mine[9] = {(double)stats.read_misses.load(), (double)stats.write_misses.load(),
                              stats.load_time, stats.store_time, stats.barriertime, stats.selfinvtime,
                              stats.sync_lock_time, run.lock_s, (double)run.locks};
            double all[9];
            MPI_Allreduce(mine, all, 9, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            if (me != 0) continue;
            double secs = 0;
            for (auto &p : run.phases) secs += p.second;
            std::fprintf(stderr, "[argodsm %s %s %zu workers (%zu x %zu threads) %d nodes] %.3f s, %.0f read misses, %.0f write misses%s\n",
                         w.c_str(), mode.c_str(), np * threads, np, threads, nodes, secs, all[0], all[1], errors ? "  INVALID" : "");
            if (records.empty()) continue;
            FILE *out = std::fopen(records.c_str(), "a");
            if (!out) {
                std::perror(records.c_str());
                rc = 1;
                continue;
            }
            std::fprintf(out, "{\"system\":\"argodsm\",\"workload\":\"%s\",\"mode\":\"%s\",\"ranks\":%zu,\"nodes\":%d,"
                              "\"rep\":%zu,\"seconds\":%.9f,\"phases\":[",
                         w.c_str(), mode.c_str(), np * threads, nodes, rep, secs);
            for (size_t k = 0; k < run.phases.size(); k++)
                std::fprintf(out, "%s[\"%s\",%.9f]", k ? "," : "", run.phases[k].first.c_str(), run.phases[k].second);
            std::fprintf(out, "],\"checksum\":%" PRIu64 ",\"valid\":%s,\"breakdown\":{\"read_misses\":%.0f,"
                              "\"write_misses\":%.0f,\"fetch_pages\":%.0f,\"load_ms\":%.3f,\"store_ms\":%.3f,"
                              "\"barrier_ms\":%.3f,\"selfinv_ms\":%.3f,\"sync_lock_ms\":%.3f,\"lock_ms\":%.3f,"
                              "\"locks\":%.0f}}\n",
                         sum, errors ? "false" : "true", all[0], all[1], all[0], all[2] * 1e3, all[3] * 1e3,
                         all[4] * 1e3, all[5] * 1e3, all[6] * 1e3, all[7] * 1e3, all[8]);
            std::fclose(out);
        }
    }
    argo::finalize();
    return rc;
}
