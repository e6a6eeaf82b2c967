"""The corpus's results (target/corpus/corpus.json, from tests/corpus/run.sh)
as the Markdown table in docs/transparent.md: one row per program, both
fault paths side by side.

    python3 tests/corpus/table.py [target/corpus/corpus.json]
"""

import json
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "target/corpus/corpus.json"
runs = json.load(open(path))["runs"]
rows = {}
order = []
for r in runs:
    name = r["program"]
    if name not in rows:
        rows[name] = {"what": r["what"], "category": r["category"]}
        order.append(name)
    row = rows[name]
    if r["peak_mib"] is not None:
        row["peak"] = r["peak_mib"]
        row["near"] = r["near"]
        row["plain"] = r["plain_s"]
    row[r["fault_path"]] = r


def cell(r):
    if r is None:
        return "", "", "not run"
    res = r["result"]
    if res == "FAIL":
        why = r["reason"]
        if "timed out" in why:
            res = "**FAIL** (timeout)"
        elif "killed by SIGKILL" in why:
            res = "**FAIL** (SIGKILL: OOM)"
        elif "output differs" in why:
            res = "**FAIL** (wrong output)"
        elif "(signal " in why:
            sig = int(why.split("(signal ")[1].split(")")[0])
            names = {6: "SIGABRT", 7: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV", 31: "SIGSYS"}
            res = "**FAIL** (%s)" % names.get(sig, "signal %d" % sig)
        elif why.startswith("exit"):
            res = "**FAIL** (%s)" % why.split(":")[0]
        else:
            res = "**FAIL**"
    ev = "" if r["evictions"] is None else "{:,}".format(r["evictions"])
    secs = "" if r["tiered_s"] is None else "%.2f" % r["tiered_s"]
    return ev, secs, res


print(
    "| program | category | what | peak MiB | near | plain s "
    "| in-context: evictions | s | result | handler-thread: evictions | s | result |"
)
print("|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|")
for name in order:
    row = rows[name]
    ic = cell(row.get("in-context"))
    ht = cell(row.get("handler-thread"))
    plain = "" if row.get("plain") is None else "%.2f" % row["plain"]
    print(
        "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |"
        % (name, row["category"], row["what"].replace("|", "\\|"), row.get("peak", ""), row.get("near", ""), plain, *ic, *ht)
    )
