#!/usr/bin/env bash
# A/B of two magnetar binaries on the data path, in one run: for each repetition, each binary
# (in alternating order: A B, then B A, …) gets a fresh standalone (fsync before ack) on the
# same disk and runs the p99 publish latency at 5k msg/s (`magnetar perf e2e --rate 5000`,
# first: a heavy phase before it would measure the stalls that follow one) and SBS-1's
# async 1p (500 in flight, 1 KiB), then its backlog consumption (300k messages produced, then
# received and acknowledged by one consumer). One CSV line per run:
#   binary,workload,rep,msgs_per_s,p50_ms,p99_ms,p999_ms
#
#   scripts/bench-ab.sh A_BIN B_BIN [REPS] > ab.csv       (REPS default 3)
#
# Environment: MAGNETAR_BENCH_DIR (default: a temp dir) is where the standalones keep their
# data; BENCH_DURATION (default 8s) is each run after a 2 s warm-up; BENCH_WARM (default
# 10s) is an unreported run at 5k msg/s on each fresh standalone before the measured ones. With PULSAR_PERF set to
# pulsar-client-go's own perf tool (built in an empty module: `go mod init perfbuild && go get
# github.com/apache/pulsar-client-go@v0.19.0 && go build -o pulsar-perf-go
# github.com/apache/pulsar-client-go/perf`), each standalone also gets its async publish (workload
# pcg-async-1p: the median of its 10 s windows after the first, PULSAR_PERF_SECONDS long,
# default 32).
set -euo pipefail
cd "$(dirname "$0")/.."
a=$1 b=$2 reps=${3:-3}
dur=${BENCH_DURATION:-8s}
base=${MAGNETAR_BENCH_DIR:-$(mktemp -d)}
etcd=127.0.0.1:22379 bk=127.0.0.1:23181 brk=127.0.0.1:26650 web=127.0.0.1:28080
spid=""
trap '[ -n "$spid" ] && kill $spid 2>/dev/null; wait 2>/dev/null; [ -n "${MAGNETAR_BENCH_DIR:-}" ] || rm -rf "$base"' EXIT
# BENCH_WORKLOADS (default: all) lists the workloads to run: rate-5000 async-1p consume pcg
# pcg-rate (pulsar-client-go perf at 5k msg/s, with PULSAR_PERF).
want() { [ -z "${BENCH_WORKLOADS:-}" ] || [[ " $BENCH_WORKLOADS " == *" $1 "* ]]; }
field() { python3 -c 'import json,sys; r=json.load(sys.stdin); l=r.get("publishLatencyMs") or {}; print("%.0f,%.3f,%.3f,%.3f" % (r["msgPerSec"], l.get("p50",0), l.get("p99",0), l.get("p99.9",0)))'; }
run() { # run LABEL BIN REP
  local label=$1 bin=$2 r=$3 dir="$base/$1-$3"
  rm -rf "$dir" && mkdir -p "$dir"
  "$bin" standalone --data-dir "$dir/data" --etcd-listen $etcd --bookie-listen $bk --broker-listen $brk \
    --http $web --log-level warn >"$dir/standalone.log" 2>&1 &
  spid=$!
  for _ in $(seq 300); do (exec 3<>/dev/tcp/${brk%:*}/${brk#*:}) 2>/dev/null && break; sleep 0.1; done
  # A fresh standalone prepares its journal files and caches first: warm it, unreported.
  want rate-5000 && "$bin" perf e2e "ab-$r-0" --url pulsar://$brk --producers 1 --rate 5000 --size 1024 --duration "${BENCH_WARM:-10s}" --warmup 0s -o json >/dev/null 2>&1 || true
  want rate-5000 && echo "$label,rate-5000,$r,$("$bin" perf e2e "ab-$r-2" --url pulsar://$brk --producers 1 --rate 5000 --size 1024 --duration "$dur" --warmup 2s -o json 2>/dev/null | field)"
  want async-1p && echo "$label,async-1p,$r,$("$bin" perf produce "ab-$r-1" --url pulsar://$brk --producers 1 --max-pending 500 --size 1024 --duration "$dur" --warmup 2s -o json 2>/dev/null | field)"
  want consume && "$bin" perf produce "ab-$r-4" --url pulsar://$brk --size 1024 --messages 300000 --duration 0 --warmup 0 --max-pending 500 -o json >/dev/null 2>&1
  want consume && echo "$label,consume-300k-backlog,$r,$("$bin" perf consume "ab-$r-4" --url pulsar://$brk --messages 300000 --duration 120s -o json 2>/dev/null | field)"
  if [ -n "${PULSAR_PERF:-}" ] && want pcg; then
    local out; out=$(timeout -s INT "${PULSAR_PERF_SECONDS:-32}" "$PULSAR_PERF" produce -u pulsar://$brk --metrics -1 -r 0 -s 1024 \
      "persistent://public/default/ab-$r-3" 2>&1 | grep 'Publish rate' | tail -n +2 || true)
    echo "$label,pcg-async-1p,$r,$(python3 -c '
import re,sys
v=[(float(m.group(1)),float(m.group(2)),float(m.group(3))) for m in (re.search(r"Publish rate: ([0-9.]+) msg/s.*50%\s+([0-9.]+).*99%\s+([0-9.]+) -",l) for l in sys.stdin) if m]
v.sort(); r=v[len(v)//2] if v else (0,0,0)
print("%.0f,%.3f,%.3f," % r)' <<<"$out")"
  fi
  if [ -n "${PULSAR_PERF:-}" ] && want pcg-rate; then
    # pulsar-client-go's perf at 5k msg/s: the median window's rate and p50, the worst
    # window's p99 (the tail goal is per window).
    local out; out=$(timeout -s INT "${PULSAR_PERF_SECONDS:-32}" "$PULSAR_PERF" produce -u pulsar://$brk --metrics -1 -r 5000 -s 1024 \
      "persistent://public/default/ab-$r-5" 2>&1 | grep 'Publish rate' | tail -n +2 || true)
    echo "$label,pcg-rate-5000,$r,$(python3 -c '
import re,sys
v=[(float(m.group(1)),float(m.group(2)),float(m.group(3))) for m in (re.search(r"Publish rate: ([0-9.]+) msg/s.*50%\s+([0-9.]+).*99%\s+([0-9.]+) -",l) for l in sys.stdin) if m]
v.sort(); r=v[len(v)//2] if v else (0,0,0)
print("%.0f,%.3f,%.3f," % (r[0], r[1], max((x[2] for x in v), default=0)))' <<<"$out")"
  fi
  kill $spid; wait $spid 2>/dev/null || true; spid=""
  rm -rf "$dir"
}
echo "binary,workload,rep,msgs_per_s,p50_ms,p99_ms,p999_ms"
for r in $(seq "$reps"); do
  if [ $((r % 2)) = 1 ]; then run A "$a" "$r"; run B "$b" "$r"; else run B "$b" "$r"; run A "$a" "$r"; fi
done
