#!/usr/bin/env python3
"""Summarise the CSV of scripts/bench-sbs1.sh: medians and min–max per system and workload,
and the ratios Magnetar ÷ JetStream d1 and d0 (medians of the same run)."""
import csv
import statistics
import sys
from collections import defaultdict

rows = list(csv.DictReader(open(sys.argv[1] if len(sys.argv) > 1 else "/dev/stdin")))
vals = defaultdict(lambda: defaultdict(list))
for r in rows:
    for k, v in r.items():
        if k in ("system", "workload", "rep") or v in (None, ""):
            continue
        vals[(r["system"], r["workload"])][k].append(float(v))


def med(key, col):
    v = vals.get(key, {}).get(col)
    return statistics.median(v) if v else None


def fmt(key, col, digits=0):
    v = vals.get(key, {}).get(col)
    if not v:
        return "–"
    f = "%%.%df" % digits
    return (f + " (" + f + "–" + f + ")") % (statistics.median(v), min(v), max(v))


workloads = []
for r in rows:
    if r["workload"] not in workloads and r["system"] != "disk":
        workloads.append(r["workload"])
print("| workload | Magnetar msg/s | JetStream d1 msg/s | JetStream d0 msg/s | ÷ d1 | ÷ d0 | msgs/fsync |")
print("|---|---|---|---|---|---|---|")
for w in workloads:
    m, d1, d0 = ("magnetar", w), ("jetstream-d1", w), ("jetstream-d0", w)
    r1 = "%.1f×" % (med(m, "msgs_per_s") / med(d1, "msgs_per_s")) if med(m, "msgs_per_s") and med(d1, "msgs_per_s") else "–"
    r0 = "%.2f×" % (med(m, "msgs_per_s") / med(d0, "msgs_per_s")) if med(m, "msgs_per_s") and med(d0, "msgs_per_s") else "–"
    print("| %s | %s | %s | %s | %s | %s | %s |" % (w, fmt(m, "msgs_per_s"), fmt(d1, "msgs_per_s"), fmt(d0, "msgs_per_s"),
                                                  r1, r0, fmt(m, "msgs_per_fsync", 1)))
print()
print("| Magnetar workload | publish p50 ms | p99 ms | p99.9 ms | end-to-end p50 ms | p99 ms | p99.9 ms |")
print("|---|---|---|---|---|---|---|")
for w in workloads:
    m = ("magnetar", w)
    if not vals.get(m, {}).get("p50_ms") or med(m, "p50_ms") == 0:
        continue
    print("| %s | %s | %s | %s | %s | %s | %s |" % (w, fmt(m, "p50_ms", 2), fmt(m, "p99_ms", 2), fmt(m, "p999_ms", 2),
                                                  fmt(m, "e2e_p50_ms", 2), fmt(m, "e2e_p99_ms", 2), fmt(m, "e2e_p999_ms", 2)))
print()
disk1k = [float(r["msgs_per_s"]) for r in rows if r["system"] == "disk" and r["workload"] == "1KiB-fsync-each"]
disk1m = [float(r["msgs_per_s"]) for r in rows if r["system"] == "disk" and r["workload"] == "1MiB-fsync-each-MBps"]
if disk1k and disk1m:
    print("perf disk (same directory, before and after): 1 KiB + fdatasync each %s/s; 1 MiB + fdatasync %s MB/s" % (
        " / ".join("%.0f" % x for x in disk1k), " / ".join("%.0f" % x for x in disk1m)))
    sync = med(("magnetar", "sync-1p"), "msgs_per_s")
    if sync:
        print("sync-publish ratio (1 in flight ÷ single-thread 1 KiB fsync/s): %.2f (%.2f–%.2f)" % (
            sync / statistics.median(disk1k), sync / max(disk1k), sync / min(disk1k)))
    best = max(med(("magnetar", w), "msgs_per_s") or 0 for w in ("async-1p", "async-4p"))
    print("physical ratio (best async publish MB/s ÷ 1 MiB fdatasync MB/s): %.2f" % (best * 1024 / 1e6 / statistics.median(disk1m)))
