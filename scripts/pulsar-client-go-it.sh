#!/usr/bin/env bash
# Runs pulsar-client-go's own integration tests against `magnetar standalone`, as the client's
# CI runs them against Pulsar's (its scripts/run-ci.sh and pulsar-test-service-start.sh):
#
#   1. fetches github.com/apache/pulsar-client-go at $PCG_VERSION (default v0.19.0, the
#      version interop/go.mod uses) with `go mod download` and copies it to a work directory;
#   2. starts `magnetar standalone --config` with the suite's integration-tests/conf/
#      standalone.conf, rewritten only where it names /pulsar/certs/ and /pulsar/tokens/, plus
#      --basic-auth-conf naming the suite's .htpasswd (the suite's image passes that file as
#      the JVM property pulsar.auth.basic.conf, not in standalone.conf);
#   3. does the suite's setup with `magnetar admin` (its pulsar-admin calls: tenant public's
#      admin role anonymous, produce+consume on public/default for anonymous, tenant private,
#      namespace private/auth with produce+consume for token-principal), as the superuser of
#      the suite's client.conf (TLS client certificate, CN admin);
#   4. runs `go test -race -timeout 20m ./...` in the module (the run-ci.sh command; packages
#      one at a time, -p 1, as they share one broker and its fixed ports) and prints every
#      top-level test's result, the failed tests' output, and counts.
#
#   scripts/pulsar-client-go-it.sh [-run REGEXP] [PACKAGE...]   (default ./...)
#
# Tests that cannot run against a given standalone (SKIPPED) and known failures that crash
# their package (KNOWN_CRASHES) are left out with -skip; FLAKY tests run alone after the rest,
# each with a short timeout. The suite needs 6650, 6651, 8080 and
# 8443 on localhost (its tests name them); the script refuses to start if one is taken. Exit 0
# when every test that failed is in KNOWN_FAILURES and every listed test ran; 1 otherwise. Environment: MAGNETAR (binary; default: build bin/magnetar), PCG_VERSION,
# PCG_WORK (work directory, default a new temporary one; kept when the run fails),
# PCG_RACE=0 (no race detector), PCG_TIMEOUT (go test -timeout, default 20m),
# PCG_ETCD_PORT / PCG_BOOKIE_PORT (standalone's embedded etcd and bookie, default 16379/16181).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
version=${PCG_VERSION:-v0.19.0}
module=github.com/apache/pulsar-client-go

# SKIPPED: top-level tests the script does not run, "package Test reason" a line (package
# relative to the module: pulsar, pulsaradmin/pkg/admin, ...): only tests that cannot run
# against a standalone given to them.
SKIPPED=$(cat <<'END'
pulsar TestConsumerKeepReconnectingAndThenCallClose starts its own apachepulsar/pulsar container (testcontainers: a Docker daemon and Pulsar's image)
pulsar TestProducerKeepReconnectingAndThenCallClose starts its own apachepulsar/pulsar container (testcontainers)
pulsar TestSendAsyncCouldTimeoutWhileReconnecting starts its own apachepulsar/pulsar container (testcontainers)
pulsar TestReconnectConsumer starts its own apachepulsar/pulsar container (testcontainers)
pulsar TestReconnectedBrokerSendPermits starts its own apachepulsar/pulsar container (testcontainers)
END
)

# KNOWN_FAILURES: top-level tests expected to fail against Magnetar, in the same form (docs/
# COMPAT.md has the causes). A failure not listed fails the run; a listed test that passes is
# reported, not failed.
KNOWN_FAILURES=$(cat <<'END'
pulsaradmin/pkg/admin TestTopicStatsTimestamps stats lack topicCreationTimeStamp (the managed ledger keeps no creation time)
pulsaradmin/pkg/admin TestPartitionedTopicStatsTimestamps stats lack topicCreationTimeStamp
END
)

# FLAKY: tests that fail now and then, for a reason of the test itself or of its timing on a
# loaded machine (docs/COMPAT.md has each one's), in the same form with a timeout after the
# name: each runs alone after the rest of its package, with that timeout (a hang costs it,
# not the package's 20 minutes). A failure is reported, not failed.
FLAKY=$(cat <<'END'
pulsar TestConsumerBatchCumulativeAck 3m races the client's batching timer: when the timer closes a batch right after message 100, c2's cumulative ack of it acks its whole entry and sub-2 resumes at 101 (Pulsar's broker does the same), and the test waits for a 200th message forever
pulsar TestNegativeAckPrecisionBitCnt 3m timing: redelivery within 150 ms of the nack delay; 22 and 44 ms late in two of four runs on a loaded 2-core machine
pulsar TestBatchDelayMessage 3m order: the consumer may get a message before its producer's SEND_RECEIPT (Pulsar's broker sends the receipt before it wakes the cursors); failed in two of four runs
END
)

# KNOWN_CRASHES: known failures whose failure panics the test binary, so that the rest of
# their package would not run; they are skipped until fixed, in the same form.
KNOWN_CRASHES=$(cat <<'END'
END
)

run_re=""
if [ "${1:-}" = "-run" ]; then
	run_re=$2
	shift 2
fi
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)

for p in 6650 6651 8080 8443 "${PCG_ETCD_PORT:=16379}" "${PCG_BOOKIE_PORT:=16181}"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		echo "port $p on localhost is in use; the suite needs 6650, 6651, 8080 and 8443" >&2
		exit 1
	fi
done

work=${PCG_WORK:-$(mktemp -d /tmp/pcgit.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
echo "work directory: $work"

if [ -n "${MAGNETAR:-}" ]; then
	bin=$MAGNETAR
else
	echo "building bin/magnetar"
	(cd "$root" && CGO_ENABLED=1 GOFLAGS="${GOFLAGS:-} -buildvcs=false -tags=pebblegozstd" \
		go build -o bin/magnetar ./cmd/magnetar)
	bin=$root/bin/magnetar
fi

# The module's source, writable (the module cache is read-only). Run outside any module so
# go.mod files are not touched.
dir=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$module@$version" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$dir/integration-tests" ] || { echo "no integration-tests in $dir" >&2; exit 1; }
src=$work/pulsar-client-go
rm -rf "$src"
cp -R "$dir" "$src"
chmod -R u+w "$src"
it=$src/integration-tests

# The suite's files with only the certificate and token paths rewritten.
rewrite() { sed -e "s#/pulsar/certs/#$it/certs/#g" -e "s#/pulsar/tokens/#$it/tokens/#g" "$1"; }
rewrite "$it/conf/standalone.conf" >"$work/standalone.conf"
rewrite "$it/conf/client.conf" >"$work/client.conf"
echo "standalone.conf: lines changed from the suite's:"
diff "$it/conf/standalone.conf" "$work/standalone.conf" | grep '^>' || true

rm -rf "$work/data"
"$bin" standalone --config "$work/standalone.conf" --basic-auth-conf "$it/conf/.htpasswd" \
	--data-dir "$work/data" --etcd-listen "127.0.0.1:$PCG_ETCD_PORT" \
	--bookie-listen "127.0.0.1:$PCG_BOOKIE_PORT" >"$work/standalone.log" 2>&1 &
pid=$!
stop() {
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
trap stop EXIT

echo "waiting for the standalone (log: $work/standalone.log)"
deadline=$((SECONDS + 120))
admin() { "$bin" admin --config "$work/client.conf" "$@"; }
until admin tenants list >/dev/null 2>&1; do
	if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
		echo "the standalone did not come up:" >&2
		tail -50 "$work/standalone.log" >&2
		exit 1
	fi
	sleep 1
done

admin tenants update public -r anonymous
admin namespaces grant-permission public/default --actions produce,consume --role anonymous
admin tenants create private
admin namespaces create private/auth
admin namespaces grant-permission private/auth --actions produce,consume --role token-principal

# The summariser: reads `go test -json` on stdin, writes the readable log, prints each
# top-level test's result as it ends, then the failed tests' output and the counts. Its
# arguments: the module path, the log to write, the SKIPPED and KNOWN_FAILURES lists, and the
# `go test -list` output (JSON) naming every test the run should have met.
cat >"$work/summarise.go" <<'EOF'
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
)

// unexpectedTests are the tests of failed that known does not list.
func unexpectedTests(failed []string, known map[string]string) []string {
	var out []string
	for _, k := range failed {
		if _, ok := known[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

type event struct {
	Action, Package, Test, Output string
	Elapsed                       float64
}

var testName = regexp.MustCompile(`^Test\w*$`)

func main() {
	module, logPath := os.Args[1], os.Args[2]
	short := func(p string) string {
		if s := strings.TrimPrefix(strings.TrimPrefix(p, module), "/"); s != "" {
			return s
		}
		return "."
	}
	reasons := func(list string) map[string]string {
		m := map[string]string{}
		for _, l := range strings.Split(list, "\n") {
			if f := strings.Fields(l); len(f) >= 2 {
				m[f[0]+" "+f[1]] = strings.Join(f[2:], " ")
			}
		}
		return m
	}
	skipped, known, crashes := reasons(os.Args[3]), reasons(os.Args[4]), reasons(os.Args[5])
	flaky := reasons(os.Args[7]) // the timeout, then the reason
	for k, why := range flaky {
		known[k] = why
	}
	var listed []string // every top-level test the packages have, from go test -list
	if b, err := os.ReadFile(os.Args[6]); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			var e event
			if json.Unmarshal([]byte(l), &e) == nil && e.Action == "output" && testName.MatchString(strings.TrimSpace(e.Output)) {
				listed = append(listed, short(e.Package)+" "+strings.TrimSpace(e.Output))
			}
		}
	}
	logf, err := os.Create(logPath)
	if err != nil {
		panic(err)
	}
	defer logf.Close()
	out := map[string]*strings.Builder{} // "package Test" -> its output, subtests included
	result := map[string]string{}        // "package Test" -> pass, fail or skip
	started := map[string]bool{}
	var order []string
	pkgFailed := map[string]bool{}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Action == "" {
			fmt.Fprintln(logf, sc.Text()) // build errors come as plain text
			fmt.Println(sc.Text())
			continue
		}
		key := short(e.Package) + " " + e.Test
		top := short(e.Package) + " " + strings.SplitN(e.Test, "/", 2)[0]
		switch e.Action {
		case "output":
			logf.WriteString(e.Output)
			if e.Test != "" {
				if out[top] == nil {
					out[top] = &strings.Builder{}
				}
				out[top].WriteString(e.Output)
			}
		case "run":
			if e.Test != "" && key == top && !started[key] {
				started[key] = true
				order = append(order, key)
			}
		case "pass", "fail", "skip":
			if e.Test == "" {
				pkgFailed[short(e.Package)] = e.Action == "fail"
				fmt.Printf("%-4s package %s (%.0fs)\n", strings.ToUpper(e.Action), short(e.Package), e.Elapsed)
			} else if key == top {
				result[key] = e.Action
				fmt.Printf("%-4s %s (%.1fs)\n", strings.ToUpper(e.Action), key, e.Elapsed)
			}
		}
	}
	var notRun []string
	for _, k := range listed {
		_, skip := skipped[k]
		_, crash := crashes[k]
		if !started[k] && !skip && !crash {
			notRun = append(notRun, k)
		}
	}
	counts := map[string]int{}
	var failed, unexpected, fixed []string
	for _, k := range order {
		r, ok := result[k]
		if !ok {
			r = "fail"
			fmt.Printf("FAIL %s (no result: the test binary crashed or timed out)\n", k)
		}
		counts[r]++
		_, isKnown := known[k]
		switch {
		case r == "fail":
			failed = append(failed, k)
			if !isKnown {
				unexpected = append(unexpected, k)
			}
		case r == "pass" && isKnown && flaky[k] == "":
			fixed = append(fixed, k)
		}
	}
	for p, f := range pkgFailed {
		any := false
		for _, k := range failed {
			any = any || strings.HasPrefix(k, p+" ")
		}
		if f && !any {
			unexpected = append(unexpected, p+" (the package failed outside any test)")
		}
	}
	for _, k := range failed {
		if _, isKnown := known[k]; isKnown {
			continue
		}
		fmt.Printf("\n===== output of %s =====\n", k)
		if b := out[k]; b != nil {
			lines := strings.Split(b.String(), "\n")
			if len(lines) > 200 {
				lines = append([]string{"... (the first lines are in the log)"}, lines[len(lines)-200:]...)
			}
			fmt.Println(strings.Join(lines, "\n"))
		}
	}
	fmt.Printf("\n%d top-level tests run: %d passed, %d failed (%d known), %d skipped by the suite; not run: %d skipped here, %d known failures that crash, %d stopped by a crash or timeout\n",
		len(order), counts["pass"], counts["fail"], len(failed)-len(unexpectedTests(failed, known)), counts["skip"], len(skipped), len(crashes), len(notRun))
	for _, k := range order {
		if result[k] == "skip" {
			fmt.Printf("skipped by the suite: %s\n", k)
		}
	}
	keys := func(m map[string]string) []string {
		var s []string
		for k := range m {
			s = append(s, k)
		}
		sort.Strings(s)
		return s
	}
	for _, k := range keys(skipped) {
		fmt.Printf("skipped here: %s: %s\n", k, skipped[k])
	}
	for _, k := range failed {
		if why, isFlaky := flaky[k]; isFlaky {
			fmt.Printf("flaky, failed this run: %s: timeout %s\n", k, why)
		} else if why, isKnown := known[k]; isKnown {
			fmt.Printf("known failure: %s: %s\n", k, why)
		}
	}
	for _, k := range keys(crashes) {
		fmt.Printf("known failure, not run (it crashes its package): %s: %s\n", k, crashes[k])
	}
	for _, k := range fixed {
		fmt.Printf("listed as a known failure but passed: %s\n", k)
	}
	for _, k := range notRun {
		fmt.Printf("NOT RUN: %s\n", k)
	}
	sort.Strings(unexpected)
	for _, k := range unexpected {
		fmt.Printf("UNEXPECTED FAILURE: %s\n", k)
	}
	if len(unexpected) > 0 || len(notRun) > 0 {
		os.Exit(1)
	}
}
EOF

race=-race
[ "${PCG_RACE:-1}" = "1" ] || race=
skip_re="^($(printf '%s\n%s\n%s\n' "$SKIPPED" "$KNOWN_CRASHES" "$FLAKY" | awk 'NF {print $2}' | paste -sd '|'))\$"
args=(-p 1 $race "-timeout=${PCG_TIMEOUT:-20m}" -skip "$skip_re")
echo "listing the tests"
(cd "$src" && CGO_ENABLED=1 GOFLAGS=-buildvcs=false go test -json $race -list "${run_re:-^Test}" "${pkgs[@]}") >"$work/list.json"
[ -z "$run_re" ] || args+=(-run "$run_re")
echo "go test ${args[*]} ${pkgs[*]} (in $src)"
start=$SECONDS
rc=0
# flaky_runs runs each FLAKY test of the packages asked for (and matching -run) alone.
flaky_runs() {
	local pkg name to rest p
	while read -r pkg name to rest; do
		[ -n "$pkg" ] || continue
		for p in "${pkgs[@]}"; do
			p=${p#./}
			p=${p%/}
			if [ "$p" = "..." ] || [ "$p" = "$pkg" ]; then
				if [ -z "$run_re" ] || grep -Eq "$run_re" <<<"$name"; then
					echo "go test -run ^$name\$ -timeout=$to ./$pkg (flaky, alone)" >&2
					(cd "$src" && CGO_ENABLED=1 GOFLAGS=-buildvcs=false go test -json $race "-timeout=$to" -run "^$name\$" "./$pkg" 2>&1) || true
				fi
				break
			fi
		done
	done <<<"$FLAKY"
}
# The tests' exit status is the summariser's to decide (known failures fail go test too).
{
	(cd "$src" && CGO_ENABLED=1 GOFLAGS=-buildvcs=false go test -json "${args[@]}" "${pkgs[@]}" 2>&1) || true
	flaky_runs
} |
	(cd "$work" && GOFLAGS= go run ./summarise.go "$module" "$work/test.log" "$SKIPPED" "$KNOWN_FAILURES" "$KNOWN_CRASHES" "$work/list.json" "$FLAKY") || rc=$?
echo "suite time: $((SECONDS - start))s; log: $work/test.log; standalone log: $work/standalone.log"
if [ $rc -eq 0 ] && [ -z "${PCG_WORK:-}" ]; then
	stop
	trap - EXIT
	rm -rf "$work"
fi
exit $rc
