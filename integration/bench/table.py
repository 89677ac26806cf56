#!/usr/bin/env python3
"""Render the benchmark tables of docs/benchmarks.md from one table.sh run.

Reads the summary.tsv files that ../shared/bench/sysbench-compare.sh wrote
(medians of same-round ratios to haproxy, the first target) and the lines
that conns printed, and prints Markdown. With --docs FILE it also replaces
what stands between FILE's table.sh markers with the --conditions line and
the tables.
"""
import argparse
import contextlib
import csv
import io
import os
import sys

BEGIN = "<!-- table.sh: begin -->"
END = "<!-- table.sh: end -->"

WORKLOADS = [
    ("oltp_point_select", "oltp_point_select"),
    ("oltp_read_only", "oltp_read_only"),
    ("oltp_write_only", "oltp_write_only"),
    ("connect", "connect (connect, auth, SELECT 1, quit)"),
    ("fenced_write", "fenced_write (protected tables; haproxy and direct: fence written by hand)"),
]


def num(s):
    return float(s) if s not in ("", None) else None


def f(x, spec):
    return "-" if x is None else format(x, spec)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("summaries", nargs="*", help="summary.tsv files")
    ap.add_argument("--conns", help="tab-separated lines printed by conns")
    ap.add_argument("--docs", help="a Markdown file whose table.sh markers get the tables")
    ap.add_argument("--conditions", default="", help="one line on the run's conditions, for --docs")
    a = ap.parse_args()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        tables(a)
    sys.stdout.write(out.getvalue())
    if a.docs:
        into_docs(a.docs, a.conditions, out.getvalue())


def into_docs(path, conditions, tables_md):
    """Replace the text between the markers of path (both kept)."""
    text = open(path).read()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        sys.exit(f"table.py: {path} has no '{BEGIN}' ... '{END}' markers")
    body = (conditions + "\n\n" if conditions else "") + tables_md.strip("\n") + "\n"
    text = text[: start + len(BEGIN)] + "\n" + body + text[end:]
    with open(path, "w") as fh:
        fh.write(text)
    print(f"(written into {path})", file=sys.stderr)


def tables(a):
    rows = {}
    for path in a.summaries:
        if not os.path.exists(path):
            print(f"(no {path}: that step failed before its summary)")
            continue
        with open(path) as fh:
            for r in csv.DictReader(fh, delimiter="\t"):
                rows[(r["test"], r["target"])] = r

    def cell(test, target):
        r = rows.get((test, target))
        if not r:
            return "-", "-", "-"
        tps, ratio, lo, hi, p99 = (num(r[k]) for k in ("tps_median", "tps_ratio", "tps_ratio_min", "tps_ratio_max", "p99_ratio"))
        bad = "" if r["runs_ok"] == r["runs"] else f" ({r['runs_ok']}/{r['runs']} runs ok)"
        return f(tps, ",.0f"), f"{f(ratio, '.3f')} [{f(lo, '.3f')}-{f(hi, '.3f')}]{bad}", f(p99, ".2f")

    if rows:
        workloads(rows, cell)
    if a.conns:
        conns(a.conns)


def workloads(rows, cell):
    print("| workload | haproxy tps | **fenceproxy** (default) tps / haproxy [min-max] | p99 / haproxy "
          "| GOMAXPROCS=1 tps / haproxy [min-max] | p99 / haproxy "
          "| GOMAXPROCS=all CPUs tps / haproxy [min-max] | p99 / haproxy | direct tps / haproxy |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for test, name in WORKLOADS:
        if not any(k[0] == test for k in rows):
            continue
        h, _, _ = cell(test, "haproxy")
        _, fr, fp = cell(test, "fenceproxy")
        _, or_, op = cell(test, "fenceproxy-1p")
        _, ar, ap = cell(test, "fenceproxy-allcpus")
        _, dr, _ = cell(test, "direct")
        print(f"| {name} | {h} | **{fr}** | **{fp}** | {or_} | {op} | {ar} | {ap} | {dr.split(' ')[0]} |")



def conns(path):
    lines = [l.rstrip("\n").split("\t") for l in open(path) if l.strip()]
    by = {l[0]: l for l in lines}

    def ratio(x, base):
        return f"{x / base:.3f}" if x is not None and base else "-"

    h = by.get("haproxy")
    h_idle, h_active, h_qps = (float(h[4]), float(h[6]), float(h[7])) if h else (None, None, None)
    direct = float(by["direct"][7]) if "direct" in by else None
    print()
    print("| target | connections | RSS idle, KiB per connection | / haproxy | RSS active, KiB per connection | / haproxy "
          "| queries/s, all active | **/ haproxy** | / direct | p50 ms | p99 ms | failed queries |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for l in lines:
        label, n, _, _, idle, _, active, qps, p50, p99, errs = l[:11]
        qps = float(qps)
        if label == "direct":
            # mariadbd keeps its threads and memory from earlier runs:
            # its RSS delta says nothing about a connection's cost.
            idle_s = active_s = idle_r = active_r = "-"
        else:
            idle, active = float(idle), float(active)
            idle_s, active_s = f"{idle:.1f}", f"{active:.1f}"
            idle_r, active_r = ratio(idle, h_idle), ratio(active, h_active)
        print(f"| {label} | {int(n):,} | {idle_s} | {idle_r} | {active_s} | {active_r} | {qps:,.0f} "
              f"| **{ratio(qps, h_qps)}** | {ratio(qps, direct)} | {p50} | {p99} | {errs} |")


if __name__ == "__main__":
    main()
