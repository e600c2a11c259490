#!/usr/bin/env bash
# Starts and stops a local Magnetar cluster on 127.0.0.1: 3 etcd members, 3 bookies (each
# with its embedded auto-recovery) and 3 brokers, every process in the background with its
# own ports, data directory, log and pid file under DIR.
#
#   scripts/local-cluster.sh start [DIR]    start (DIR default ./local-cluster); waits until
#                                           3 bookies are registered and 3 brokers serve
#   scripts/local-cluster.sh stop [DIR]     SIGTERM brokers, then bookies, then etcd; prints
#                                           how long each took (SIGKILL after 40 s)
#   scripts/local-cluster.sh status [DIR]   which processes run
#
# The etcd members are Debian's etcd-server (`etcd` on PATH), a real 3-member cluster; without
# it one `magnetar etcd` member (single-member only) serves instead, with a warning.
# Environment: MAGNETAR (the binary; default bin/magnetar, built if missing), PORT_BASE
# (default 20000): etcd clients PORT_BASE+0..2, etcd peers +10..12, bookies +100..102 (metrics
# +110..112), brokers +200..202 (admin/metrics HTTP +210..212). Data survives a stop: start
# again on the same DIR to restart the cluster; remove DIR to start afresh.
set -euo pipefail

cmd=${1:-}
dir=${2:-./local-cluster}
base=${PORT_BASE:-20000}
root=$(cd "$(dirname "$0")/.." && pwd)

usage() {
	sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
}

magnetar_bin() {
	if [ -n "${MAGNETAR:-}" ]; then
		echo "$MAGNETAR"
		return
	fi
	if [ ! -x "$root/bin/magnetar" ]; then
		echo "building $root/bin/magnetar" >&2
		(cd "$root" && CGO_ENABLED=${CGO_ENABLED:-1} GOFLAGS="${GOFLAGS:-} -buildvcs=false -tags=pebblegozstd" \
			go build -o bin/magnetar ./cmd/magnetar)
	fi
	echo "$root/bin/magnetar"
}

# spawn NAME CMD...: runs CMD in the background, output to logs/NAME.log, pid to pids/NAME.pid.
spawn() {
	local name=$1
	shift
	if running "$name"; then
		echo "$name already running (pid $(cat "$dir/pids/$name.pid"))" >&2
		return
	fi
	setsid "$@" >>"$dir/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$dir/pids/$name.pid"
}

running() {
	local f=$dir/pids/$1.pid
	[ -f "$f" ] && alive "$(cat "$f")"
}

# alive PID: the process exists and is not a zombie (exited, not yet reaped by init).
alive() {
	local st
	st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
	[[ $st != Z* ]]
}

# wait_tcp PORT SECONDS NAME
wait_tcp() {
	local port=$1 deadline=$((SECONDS + $2))
	until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
		if ((SECONDS >= deadline)); then
			echo "$3 not listening on 127.0.0.1:$port after $2 s; see $dir/logs/$3.log" >&2
			exit 1
		fi
		if ! running "$3"; then
			echo "$3 exited; see $dir/logs/$3.log:" >&2
			tail -5 "$dir/logs/$3.log" >&2
			exit 1
		fi
		sleep 0.1
	done
}

start() {
	local bin
	bin=$(magnetar_bin)
	mkdir -p "$dir/logs" "$dir/pids" "$dir/data"
	local eps="" i
	if command -v etcd >/dev/null; then
		local cluster=""
		for i in 0 1 2; do
			cluster+="${cluster:+,}etcd$i=http://127.0.0.1:$((base + 10 + i))"
		done
		for i in 0 1 2; do
			local c=$((base + i)) p=$((base + 10 + i))
			spawn "etcd$i" etcd --name "etcd$i" --data-dir "$dir/data/etcd$i" \
				--listen-client-urls "http://127.0.0.1:$c" --advertise-client-urls "http://127.0.0.1:$c" \
				--listen-peer-urls "http://127.0.0.1:$p" --initial-advertise-peer-urls "http://127.0.0.1:$p" \
				--initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token magnetar-local
			eps+="${eps:+,}127.0.0.1:$c"
		done
	else
		echo "warning: no etcd (Debian etcd-server) on PATH: one 'magnetar etcd' member instead of three" >&2
		spawn etcd0 "$bin" etcd --data-dir "$dir/data/etcd0" --listen "127.0.0.1:$base" --peer-listen "127.0.0.1:$((base + 10))"
		eps="127.0.0.1:$base"
	fi
	for i in 0 1 2; do
		[ -f "$dir/pids/etcd$i.pid" ] && wait_tcp $((base + i)) 60 "etcd$i"
	done
	local meta="etcd://$eps"
	for i in 0 1 2; do
		spawn "bookie$i" "$bin" bookie --metadata-url "$meta" --data-dir "$dir/data/bookie$i" \
			--listen "127.0.0.1:$((base + 100 + i))" --http "127.0.0.1:$((base + 110 + i))"
	done
	for i in 0 1 2; do
		wait_tcp $((base + 100 + i)) 60 "bookie$i"
	done
	local deadline=$((SECONDS + 60))
	until [ "$("$bin" bookie list --metadata-url "$meta" -o json 2>/dev/null | grep -c '"state": "writable"')" = 3 ]; do
		if ((SECONDS >= deadline)); then
			echo "3 writable bookies not registered after 60 s" >&2
			exit 1
		fi
		sleep 0.2
	done
	for i in 0 1 2; do
		spawn "broker$i" "$bin" broker --metadata-url "$meta" --listen "127.0.0.1:$((base + 200 + i))" \
			--http "127.0.0.1:$((base + 210 + i))"
	done
	for i in 0 1 2; do
		wait_tcp $((base + 200 + i)) 60 "broker$i"
	done
	local urls=""
	for i in 0 1 2; do
		urls+="${urls:+,}127.0.0.1:$((base + 200 + i))"
	done
	echo "local cluster up in $dir"
	echo "  metadata: $meta"
	echo "  pulsar:   pulsar://$urls"
	echo "  admin:    http://127.0.0.1:$((base + 210))/admin/v2 (and +1, +2)"
	echo "  logs:     $dir/logs/"
}

# stop_one NAME: SIGTERM, wait up to 40 s, then SIGKILL; prints the time taken.
stop_one() {
	local name=$1 f=$dir/pids/$1.pid
	[ -f "$f" ] || return 0
	local pid
	pid=$(cat "$f")
	if alive "$pid"; then
		local t0=$EPOCHREALTIME
		kill -TERM "$pid"
		local deadline=$((SECONDS + 40))
		while alive "$pid"; do
			if ((SECONDS >= deadline)); then
				echo "$name (pid $pid) did not stop within 40 s: SIGKILL" >&2
				kill -KILL "$pid" 2>/dev/null || true
				break
			fi
			sleep 0.05
		done
		local t1=$EPOCHREALTIME
		awk -v n="$name" -v a="$t0" -v b="$t1" 'BEGIN { printf "%s stopped in %.2f s\n", n, b - a }'
	fi
	rm -f "$f"
}

stop() {
	local i
	for i in 0 1 2; do stop_one "broker$i" & done
	wait
	for i in 0 1 2; do stop_one "bookie$i" & done
	wait
	for i in 0 1 2; do stop_one "etcd$i" & done
	wait
}

status() {
	local n
	for n in etcd0 etcd1 etcd2 bookie0 bookie1 bookie2 broker0 broker1 broker2; do
		if running "$n"; then
			echo "$n running (pid $(cat "$dir/pids/$n.pid"))"
		elif [ -f "$dir/pids/$n.pid" ]; then
			echo "$n exited (see $dir/logs/$n.log)"
		fi
	done
}

case "$cmd" in
start) start ;;
stop) stop ;;
status) status ;;
*) usage ;;
esac
