#!/usr/bin/env bash
# Starts and stops two `magnetar standalone` clusters on one host, east and west, each with
# its own embedded etcd, bookie, broker, ports and data directory, and replicates a
# namespace (geo/ns) between them: each holds the other's cluster record, tenant geo is
# allowed on both, and geo/ns lists both as its replication clusters (separate
# configuration stores: the operator creates the same tenant and namespace in each).
#
#   scripts/geo-standalone.sh start [DIR]    start both (DIR default ./geo-standalone) and set
#                                            up the replication; safe to run again on DIR
#   scripts/geo-standalone.sh stop [DIR]     SIGTERM both
#   scripts/geo-standalone.sh status [DIR]   which standalones run
#
# Ports: east has Pulsar's standalone ports (pulsar 6650, admin/metrics HTTP 8080, etcd
# 2379, bookie 3181), west the same plus 10 (6660, 8090, 2389, 3191). With PORT_BASE set:
# east etcd, bookie, pulsar, HTTP on PORT_BASE+0..3, west on PORT_BASE+10..13. Environment:
# MAGNETAR (the binary; default bin/magnetar, built if missing), EAST and WEST (the cluster
# names), NAMESPACE (default geo/ns; its tenant is created too). Data and logs are under
# DIR/east and DIR/west; start again on the same DIR to restart the clusters.
set -euo pipefail

cmd=${1:-}
dir=${2:-./geo-standalone}
root=$(cd "$(dirname "$0")/.." && pwd)
east=${EAST:-east}
west=${WEST:-west}
ns=${NAMESPACE:-geo/ns}
tenant=${ns%%/*}

# ports SITE: "etcd bookie pulsar http" of east (0) or west (1).
ports() {
	if [ -n "${PORT_BASE:-}" ]; then
		local b=$((PORT_BASE + 10 * $1))
		echo "$b $((b + 1)) $((b + 2)) $((b + 3))"
	else
		local o=$((10 * $1))
		echo "$((2379 + o)) $((3181 + o)) $((6650 + o)) $((8080 + o))"
	fi
}

usage() {
	sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
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

# alive PID: the process exists and is not a zombie.
alive() {
	local st
	st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
	[[ $st != Z* ]]
}

running() {
	local f=$dir/$1/standalone.pid
	[ -f "$f" ] && alive "$(cat "$f")"
}

# launch NAME SITE: starts the standalone of cluster NAME with SITE's ports, in the
# background, log in DIR/NAME/standalone.log.
launch() {
	local name=$1 etcd bookie pulsar http
	read -r etcd bookie pulsar http <<<"$(ports "$2")"
	mkdir -p "$dir/$name"
	if running "$name"; then
		echo "$name already running (pid $(cat "$dir/$name/standalone.pid"))"
		return
	fi
	setsid "$bin" standalone --cluster "$name" --data-dir "$dir/$name/data" \
		--etcd-listen "127.0.0.1:$etcd" --bookie-listen "127.0.0.1:$bookie" \
		--broker-listen "127.0.0.1:$pulsar" --http "127.0.0.1:$http" \
		>>"$dir/$name/standalone.log" 2>&1 </dev/null &
	echo $! >"$dir/$name/standalone.pid"
}

# wait_up NAME SITE: waits until the standalone's admin API lists public/default.
wait_up() {
	local name=$1 http deadline=$((SECONDS + 90))
	http=$(ports "$2" | cut -d' ' -f4)
	until "$bin" admin --url "http://127.0.0.1:$http" namespaces list public 2>/dev/null | grep -q '^public/default$'; do
		if ((SECONDS >= deadline)); then
			echo "$name not up after 90 s; see $dir/$name/standalone.log" >&2
			exit 1
		fi
		if ! running "$name"; then
			echo "$name exited; see $dir/$name/standalone.log:" >&2
			tail -5 "$dir/$name/standalone.log" >&2
			exit 1
		fi
		sleep 0.2
	done
}

# setup SITE OTHER OTHER_SITE: on SITE's cluster, OTHER's record, the tenant and the
# replicated namespace (create, or update what exists).
setup() {
	local here other=$2 h o
	here=$(ports "$1")
	o=$(ports "$3")
	h="http://127.0.0.1:$(echo "$here" | cut -d' ' -f4)"
	local ourl="http://127.0.0.1:$(echo "$o" | cut -d' ' -f4)" obroker="pulsar://127.0.0.1:$(echo "$o" | cut -d' ' -f3)"
	local adm=("$bin" admin --admin-url "$h")
	"${adm[@]}" clusters create "$other" --url "$ourl" --broker-url "$obroker" 2>/dev/null ||
		"${adm[@]}" clusters update "$other" --url "$ourl" --broker-url "$obroker"
	"${adm[@]}" tenants create "$tenant" --allowed-clusters "$east,$west" 2>/dev/null ||
		"${adm[@]}" tenants update "$tenant" --allowed-clusters "$east,$west"
	"${adm[@]}" namespaces create "$ns" 2>/dev/null || "${adm[@]}" namespaces get "$ns" >/dev/null
	"${adm[@]}" namespaces set-clusters "$ns" --clusters "$east,$west"
}

start() {
	bin=$(magnetar_bin)
	launch "$east" 0
	launch "$west" 1
	wait_up "$east" 0
	wait_up "$west" 1
	setup 0 "$west" 1
	setup 1 "$east" 0
	local e w
	read -r _ _ e _ <<<"$(ports 0)"
	read -r _ _ w _ <<<"$(ports 1)"
	echo "geo-replication up in $dir: namespace $ns replicated between $east and $west"
	echo "  $east: pulsar://127.0.0.1:$e  admin http://127.0.0.1:$(ports 0 | cut -d' ' -f4)"
	echo "  $west: pulsar://127.0.0.1:$w  admin http://127.0.0.1:$(ports 1 | cut -d' ' -f4)"
	echo "  try:   $bin client consume -u pulsar://127.0.0.1:$w -s s -p Earliest persistent://$ns/t &"
	echo "         $bin client produce -u pulsar://127.0.0.1:$e -m hello persistent://$ns/t"
}

stop_one() {
	local name=$1 f=$dir/$1/standalone.pid
	[ -f "$f" ] || return 0
	local pid
	pid=$(cat "$f")
	if alive "$pid"; then
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
		echo "$name stopped"
	fi
	rm -f "$f"
}

stop() {
	stop_one "$east" &
	stop_one "$west" &
	wait
}

status() {
	local n
	for n in "$east" "$west"; do
		if running "$n"; then
			echo "$n running (pid $(cat "$dir/$n/standalone.pid"))"
		elif [ -f "$dir/$n/standalone.pid" ]; then
			echo "$n exited (see $dir/$n/standalone.log)"
		fi
	done
}

case "$cmd" in
start) start ;;
stop) stop ;;
status) status ;;
*) usage ;;
esac
