#!/usr/bin/env bash
# SBS-1 (the workload is defined at the top of docs/BENCHMARKS-RESULTS.md), side by side in
# one run: Magnetar standalone (fsync before every ack, the default) driven by `magnetar perf`,
# against NATS JetStream d1 (fsync always) and d0 (its default) driven by scripts/jetstream.sh
# (`jetstream.sh d1|d0 async|sync CLIENTS MSGS [SIZE]`, one CSV line workload,msgs_per_s,MiB_per_s;
# it installs nats-server v2.15.2 and the nats CLI v0.5.0 with `go install` and listens on
# 127.0.0.1:14222 only).
# Workloads alternate Magnetar, JetStream d1, JetStream d0 within each repetition. One CSV line per run:
#   system,workload,rep,msgs_per_s[,p50_ms,p99_ms,p999_ms,msgs_per_fsync[,e2e_p50_ms,e2e_p99_ms,e2e_p999_ms]]
# (latencies: publish acknowledgement and end-to-end delivery, from the scheduled send time)
# plus the physical references of `magnetar perf disk` on the same directory (lines "disk,…").
#
#   scripts/bench-sbs1.sh [REPS] > results.csv      (REPS default 3)
#
# Environment: MAGNETAR_BENCH_DIR (default: a temp dir) holds the standalone's data, on the
# disk being measured; STANDALONE_FLAGS are added to the standalone command line; BENCH_DURATION (default 8s) is each Magnetar run after a 2 s warm-up;
# JS_MSGS_D1/JS_MSGS_D0/JS_SYNC_MSGS_D1/JS_SYNC_MSGS_D0 size the JetStream runs (fixed message
# counts: nats bench has no duration) to last several seconds too.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
dur=${BENCH_DURATION:-8s}
size=1024
js=scripts/jetstream.sh
bin=${MAGNETAR_BIN:-./bin/magnetar}
[ -x "$bin" ] || GOFLAGS="${GOFLAGS:-} -buildvcs=false -tags=pebblegozstd" go build -o "$bin" ./cmd/magnetar
dir=${MAGNETAR_BENCH_DIR:-$(mktemp -d)}
mkdir -p "$dir"
etcd=127.0.0.1:12379 bk=127.0.0.1:13181 brk=127.0.0.1:16650 web=127.0.0.1:18080
url=pulsar://$brk

"$bin" standalone --data-dir "$dir/data" --etcd-listen $etcd --bookie-listen $bk --broker-listen $brk \
  --http $web --log-level warn ${STANDALONE_FLAGS:-} >"$dir/standalone.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null; wait $spid 2>/dev/null; [ -n "${MAGNETAR_BENCH_DIR:-}" ] || rm -rf "$dir"' EXIT
for _ in $(seq 300); do (exec 3<>/dev/tcp/${brk%:*}/${brk#*:}) 2>/dev/null && break; sleep 0.1; done

n=0
next_topic() { n=$((n + 1)); T="sbs1-$$-$n"; } # sets T (not in a subshell, so n counts)
# perf prints a JSON result; print msgs/s and the publish (or e2e) percentiles.
field() { python3 -c 'import json,sys; r=json.load(sys.stdin); l=r.get(sys.argv[1]) or {}; print("%.0f,%.3f,%.3f,%.3f" % (r["msgPerSec"], l.get("p50",0), l.get("p99",0), l.get("p99.9",0)))' "$1"; }
e2efield() { python3 -c 'import json,sys; l=json.load(sys.stdin).get("endToEndLatencyMs") or {}; print("%.3f,%.3f,%.3f" % (l.get("p50",0), l.get("p99",0), l.get("p99.9",0)))'; }
# metric NAME: a counter of the bookie's /metrics/bookie.
metric() { curl -s "http://$web/metrics/bookie" | awk -v n="$1" '$1 == n { print $2 }'; }
mag() { # mag WORKLOAD REP TOPIC perf-subcommand args...: also messages per journal fsync
  local w=$1 r=$2 t=$3; shift 3
  local f0; f0=$(metric magnetar_bookie_journal_fsync_seconds_count)
  local out; out=$("$bin" perf "$@" "$t" --url $url -o json 2>/dev/null)
  local f1; f1=$(metric magnetar_bookie_journal_fsync_seconds_count)
  local in; in=$("$bin" admin --url "http://$web" topics stats "$t" | python3 -c 'import json,sys; print(json.load(sys.stdin)["msgInCounter"])')
  local line; line="magnetar,$w,$r,$(field publishLatencyMs <<<"$out"),$(awk -v m="$in" -v a="$f0" -v b="$f1" 'BEGIN { d = b - a; printf "%.1f", (d > 0 ? m / d : 0) }')"
  [ "$1" = e2e ] && line="$line,$(e2efield <<<"$out")"
  echo "$line"
}
disk() { # disk REP: 1 KiB single-thread fsync rate and 1 MiB append MB/s (the physical references)
  local r=$1
  echo "disk,1KiB-fsync-each,$r,$("$bin" perf disk --dir "$dir" --size 1024 --group 1 --duration 3s | sed -nE 's/.*: ([0-9]+) entries\/s.*/\1/p' | tail -1)"
  echo "disk,1MiB-fsync-each-MBps,$r,$("$bin" perf disk --dir "$dir" --size 1048576 --group 1 --duration 3s | sed -nE 's/.* ([0-9.]+) MB\/s;.*/\1/p' | tail -1)"
}
jsrun() { # jsrun WORKLOAD REP d1|d0 async|sync CLIENTS MSGS
  local w=$1 r=$2; shift 2
  local line; line=$("$js" "$@" $size); echo "jetstream-$1,$w,$r,$(cut -d, -f2 <<<"$line")"
}
# JetStream backlog consumption: fill the stream (with d0's page-cache writes, so that d1 does
# not spend minutes filling), restart the server with the durability under test on the same
# store, then consume the backlog with explicit acks. Same server configuration as jetstream.sh.
jsconsume() { # jsconsume REP d1|d0 MSGS
  local r=$1 d=$2 msgs=$3 b=${MAGNETAR_BENCH_BIN:-$HOME/.cache/magnetar-bench/bin} port=14223
  local w; w=$(mktemp -d)
  local nc="$b/nats -s nats://127.0.0.1:$port --no-context" p
  jsserver() { # jsserver SYNC_LINE
    printf 'listen: 127.0.0.1:%s\njetstream {\n store_dir: "%s/data"\n max_file_store: 20GB\n max_memory_store: 1GB\n %s\n}\n' \
      $port "$w" "$1" >"$w/s.conf"
    "$b/nats-server" -c "$w/s.conf" >>"$w/s.log" 2>&1 &
    p=$!
    for _ in $(seq 50); do $nc server check connection >/dev/null 2>&1 && break; sleep 0.1; done
  }
  jsserver ""
  $nc stream add benchstream --subjects bench.js --storage file --replicas 1 --max-bytes 8GB --defaults >/dev/null
  $nc bench js pub async bench.js --size $size --msgs "$msgs" --batch 500 --no-progress >/dev/null 2>&1
  kill $p; wait $p 2>/dev/null || true
  local sl=""; [ "$d" = d1 ] && sl="sync_interval: always"
  jsserver "$sl"
  local out; out=$($nc bench js consume --msgs "$msgs" --size $size --acks explicit --no-progress 2>&1 | grep -E "stats:" | tail -1)
  kill $p; wait $p 2>/dev/null || true; rm -rf "$w"
  echo "jetstream-$d,consume-300k-backlog,$r,$(sed -E 's/.*stats: ([0-9,]+) msgs\/sec.*/\1/' <<<"$out" | tr -d ,)"
}

common=(--size $size --duration "$dur" --warmup 2s)
echo "system,workload,rep,msgs_per_s,p50_ms,p99_ms,p999_ms,msgs_per_fsync,e2e_p50_ms,e2e_p99_ms,e2e_p999_ms"
disk 0
for r in $(seq "$reps"); do
  next_topic; mag async-1p $r $T produce --producers 1 --max-pending 500 "${common[@]}"
  jsrun async-1p $r d1 async 1 "${JS_MSGS_D1:-12000}"
  jsrun async-1p $r d0 async 1 "${JS_MSGS_D0:-400000}"
done
for r in $(seq "$reps"); do
  next_topic; mag async-4p $r $T produce --producers 4 --max-pending 500 "${common[@]}"
  jsrun async-4p $r d1 async 4 "${JS_MSGS_D1:-12000}"
  jsrun async-4p $r d0 async 4 "${JS_MSGS_D0:-400000}"
done
for r in $(seq "$reps"); do
  next_topic; mag sync-1p $r $T produce --producers 1 --sync "${common[@]}"
  jsrun sync-1p $r d1 sync 1 "${JS_SYNC_MSGS_D1:-6000}"
  jsrun sync-1p $r d0 sync 1 "${JS_SYNC_MSGS_D0:-60000}"
done
for r in $(seq "$reps"); do
  for rate in 1000 5000 ${HALF_MAX_RATE:-30000}; do
    next_topic; mag e2e-rate-$rate $r $T e2e --producers 1 --rate $rate "${common[@]}"
  done
done
for r in $(seq "$reps"); do
  next_topic
  "$bin" perf produce $T --url $url --size $size --messages 300000 --duration 0 --warmup 0 --max-pending 500 -o json >/dev/null 2>&1
  echo "magnetar,consume-300k-backlog,$r,$("$bin" perf consume $T --url $url --messages 300000 --duration 120s -o json 2>/dev/null | field none)"
  jsconsume $r d1 300000
  jsconsume $r d0 300000
done
disk 1
