"""Checks the per-rank reports of one `mpirun ... tiermem run --report
DIR/r-%r.json` (tests/mpi/run.sh): NP distinct reports, one per rank; each
rank's budget the node share divided among its node's ranks (EXPECT:
`share:P` of physical memory, `node:BYTES`, or `abs:BYTES` per process);
each rank's near high-water within its budget; the budgets of one node
adding up to the node's share (within rounding)."""
import json, sys, glob, collections

d, np, expect, mem = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
files = sorted(glob.glob(d + "/r-*.json"))
assert len(files) == np, f"{len(files)} reports for {np} ranks: {files}"
reports = [json.load(open(f)) for f in files]
ranks = sorted(r["rank"]["rank"] for r in reports)
assert ranks == list(range(np)), ranks
kind, val = expect.split(":")
for f, r in zip(files, reports):
    rk, c = r["rank"], r["cost"]
    assert f.endswith(f"r-{rk['rank']}.json"), (f, rk)
    assert rk["size"] == np, rk
    local = rk["local_size"]
    b = c["budget_bytes"]
    if kind == "share":
        want = int(mem * float(val) / 100) // local
    elif kind == "node":
        want = int(val) // local
    else:
        want = int(val)
    assert abs(b - want) <= 1, f"{f}: budget {b}, expected {want} ({expect}, {local} local ranks)"
    assert c["near_high_water_bytes"] <= b, f"{f}: near high-water {c['near_high_water_bytes']} over budget {b}"
# The local ranks of each node together hold the node's share (nodes
# counted from the local sizes: every node runs the same number here).
locals_ = collections.Counter(r["rank"]["local_size"] for r in reports)
for local, count in locals_.items():
    nodes = count // local
    total = sum(r["cost"]["budget_bytes"] for r in reports if r["rank"]["local_size"] == local)
    if kind != "abs":
        node_total = int(mem * float(val) / 100) if kind == "share" else int(val)
        assert abs(total - nodes * node_total) <= nodes * local, (total, nodes, node_total)
print(f"ok: {np} reports, budgets {[r['cost']['budget_bytes'] for r in reports]}, "
      f"local sizes {[r['rank']['local_size'] for r in reports]}")
