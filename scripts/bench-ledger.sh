#!/usr/bin/env bash
# Issue #3's measurements, side by side in one run: `magnetar perf ledger` (1 KiB entries) against
# `magnetar perf disk` with the group size the bookie's journal actually used in that run, for
# E/WQ/AQ = 1/1/1 on one bookie and 3/2/2 on three bookies sharing the disk, with the rate at
# which the disk was written during the ledger run (every copy: journal, entry logs, index;
# a ledger writes each entry twice per copy, so 1/1/1 cannot pass 0.5 of the reference and
# 3/2/2 not 0.25 once the disk is the limit); then add latency on
# 3/2/2 at fixed rates (default: half of the measured 3/2/2 maximum, and 5k/s), each beside
# the disk's floor at that rate (`perf disk --rate R --journals 3 --copies 2`: three journals
# on this disk syncing each entry's two copies with nothing else to do).
#
#   scripts/bench-ledger.sh [REPS]        (REPS default 3; prints one line per run)
#
# Environment: MAGNETAR_BIN (default ./bin/magnetar, built if missing), BENCH_DIR (default: a
# temp dir on the disk to measure), BENCH_DURATION (default 8s), RATES (default "half 5000").
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
dur=${BENCH_DURATION:-8s}
bin=${MAGNETAR_BIN:-./bin/magnetar}
[ -x "$bin" ] || GOFLAGS="${GOFLAGS:-} -buildvcs=false -tags=pebblegozstd" go build -o "$bin" ./cmd/magnetar
bin=$(realpath "$bin")
root=${BENCH_DIR:-$(mktemp -d)}
etcd=127.0.0.1:24791 url=etcd://127.0.0.1:24791
pids=()
stop() { [ ${#pids[@]} -gt 0 ] && kill -9 "${pids[@]}" 2>/dev/null; wait 2>/dev/null || true; pids=(); }
trap 'stop; [ -n "${BENCH_DIR:-}" ] || rm -rf "$root"' EXIT

cluster() { # cluster N: fresh etcd and N bookies (metrics on 127.0.0.1:1800i)
  stop
  rm -rf "$root/c" && mkdir -p "$root/c"
  "$bin" etcd --data-dir "$root/c/e" --listen $etcd --peer-listen 127.0.0.1:24801 >"$root/c/etcd.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q "etcd listening" "$root/c/etcd.log" && break; sleep 0.1; done
  for i in $(seq "$1"); do
    "$bin" bookie --metadata-url $url --data-dir "$root/c/b$i" --listen 127.0.0.1:3191$i \
      --http 127.0.0.1:1800$i >"$root/c/b$i.log" 2>&1 &
    pids+=($!)
  done
  for i in $(seq "$1"); do
    for _ in $(seq 100); do grep -q "bookie started" "$root/c/b$i.log" && break; sleep 0.1; done
  done

}
group() { # mean journal records per fsync of bookie 1
  curl -s 127.0.0.1:18001/metrics | awk '/^magnetar_bookie_journal_group_records_sum/{s=$2}
    /^magnetar_bookie_journal_group_records_count/{c=$2} END{printf "%d\n", (c > 0 ? s / c : 1)}'
}
mbps() { grep -o '[0-9.]* MB/s' | head -1 | cut -d' ' -f1; }
# Bytes the disk holding $root has written so far (from /proc/diskstats; 0 if not found), so
# that the bytes written during a ledger run (journal, entry logs, index: every copy) can be
# set against the disk reference: their rate is what the disk was asked to do.
dev=$(basename "$(df --output=source "$root" | tail -1)")
written() { awk -v d="$dev" '$3 == d { printf "%.0f\n", $10 * 512 }' /proc/diskstats | head -1 | grep . || echo 0; }
ledger() { # ledger E WQ AQ [rate]
  local r=""; [ -n "${4:-}" ] && r="--rate $4"
  "$bin" perf ledger --metadata-url $url --ensemble "$1" --write-quorum "$2" --ack-quorum "$3" \
    --size 1024 --duration "$dur" $r | tail -1
}

max322=0
for rep in $(seq "$reps"); do
  for q in "1 1 1" "3 2 2"; do
    set -- $q
    cluster "$1"
    w0=$(written) t0=$(date +%s.%N)
    l=$(ledger "$1" "$2" "$3")
    w1=$(written) t1=$(date +%s.%N)
    g=$(group); [ "$g" -ge 1 ] || g=1
    d=$("$bin" perf disk --dir "$root/c" --size 1024 --group "$g" --duration 4s | tail -1)
    lm=$(mbps <<<"$l") dm=$(mbps <<<"$d")
    wm=$(echo "scale=1; ($w1 - $w0) / ($t1 - $t0) / 1000000" | bc)
    echo "ratio,$1/$2/$3,$rep,ledger ${lm} MB/s,disk ${dm} MB/s at group $g,ratio $(echo "scale=2; $lm / $dm" | bc),disk written during the ledger run ${wm} MB/s ($(echo "scale=2; $wm / $dm" | bc) of the reference)"
    if [ "$1" = 3 ]; then
      eps=$(grep -o '[0-9]* entries/s' <<<"$l" | head -1 | cut -d' ' -f1)
      [ "$eps" -gt "$max322" ] && max322=$eps
    fi
  done
done
for rate in ${RATES:-half 5000}; do
  [ "$rate" = half ] && rate=$((max322 / 2))
  for rep in $(seq "$reps"); do
    cluster 3
    echo "latency,3/2/2,$rep,rate $rate/s,$(ledger 3 2 2 "$rate" | sed 's/.*add latency //')"
    stop
    echo "latency,disk floor 3x2,$rep,rate $rate/s,$("$bin" perf disk --dir "$root" --rate "$rate" --journals 3 --copies 2 \
      --duration "$dur" | tail -1 | sed 's/.*add latency //')"
  done
done
