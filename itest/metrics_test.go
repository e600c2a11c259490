package itest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// promqlKeywords are PromQL's words that are not metric names: aggregation operators and
// their modifiers, binary operators, and the literals.
var promqlKeywords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
	"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"offset": true, "bool": true, "and": true, "or": true, "unless": true, "atan2": true, "inf": true, "nan": true,
}

var (
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promqlMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\[\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	grafanaVars    = regexp.MustCompile(`\$\{[^}]*\}|\$\w+`)
	// label_values(metric{…}, label) and label_values(label) are Grafana's queries of a
	// variable's values: only metric is a metric name (matchers are gone by then).
	labelValues2 = regexp.MustCompile(`label_values\(\s*(\w*)\s*,\s*\w+\s*\)`)
	labelValues1 = regexp.MustCompile(`label_values\(\s*\w*\s*\)`)
)

// metricNames returns the metric names a PromQL expression (with Grafana's variables)
// selects, sorted, without a PromQL parser (the module has none): string literals, label
// matchers, ranges and grouping clauses are dropped first; then every identifier that does
// not follow a digit or a dot, is not followed by "(" (a function or an aggregation) and is
// not a keyword is a metric name.
func metricNames(expr string) []string {
	e := promqlStrings.ReplaceAllString(expr, `""`)
	e = grafanaVars.ReplaceAllString(e, " 0 ")
	for prev := ""; prev != e; { // a subquery's range may hold a range
		prev = e
		e = promqlMatchers.ReplaceAllString(e, " ")
		e = promqlRanges.ReplaceAllString(e, " ")
	}
	e = labelValues2.ReplaceAllString(e, " $1 ")
	e = labelValues1.ReplaceAllString(e, " ")
	e = promqlGrouping.ReplaceAllString(e, " ")
	seen := map[string]bool{}
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	for i := 0; i < len(e); {
		if !isStart(e[i]) || i > 0 && (isPart(e[i-1]) || e[i-1] == '.') {
			i++
			continue
		}
		j := i
		for j < len(e) && isPart(e[j]) {
			j++
		}
		name := e[i:j]
		k := j
		for k < len(e) && (e[k] == ' ' || e[k] == '\t' || e[k] == '\n') {
			k++
		}
		if (k >= len(e) || e[k] != '(') && !promqlKeywords[strings.ToLower(name)] {
			seen[name] = true
		}
		i = j
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// TestMetricNamesOfPromQL: the extraction the dashboard test relies on.
func TestMetricNamesOfPromQL(t *testing.T) {
	for expr, want := range map[string]string{
		`sum(pulsar_rate_in{cluster=~"$cluster", namespace=~"$namespace"}) by (cluster, namespace)`:     "pulsar_rate_in",
		`sum by (le) (rate(magnetar_broker_publish_latency_seconds_bucket{job="b"}[$__rate_interval]))`: "magnetar_broker_publish_latency_seconds_bucket",
		`histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m])))`:                                    "x_bucket",
		`sum(pulsar_storage_write_latency_le_0_5{topic=~"$topic"}) / 60.0`:                              "pulsar_storage_write_latency_le_0_5",
		`a / on(instance) group_left(version) b offset 5m > bool 1e3`:                                   "a b",
		`bookkeeper_server_ADD_ENTRY{success="true", quantile="0.99"} * 1000`:                           "bookkeeper_server_ADD_ENTRY",
		`label_values(pulsar_topics_count{cluster=~"$cluster"}, namespace)`:                             "pulsar_topics_count",
		`label_values(cluster)`:                 "",
		`label_values({job=~"$job"}, instance)`: "",
		`{topic=~".+"}`:                         "",
		`max_over_time(rate(c_total{a="x{y}"}[1m])[10m:1m]) and topk(3, d) unless count(e) or up == 0`: "c_total d e up",
		`sum(rate(pulsar_in_messages_total{cluster=~"${cluster}"}[$__rate_interval])) by (topic)`:      "pulsar_in_messages_total",
	} {
		if got := strings.Join(metricNames(expr), " "); got != want {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// dashboardQueries returns the PromQL of a Grafana dashboard: every panel target's expr
// and every query variable's query.
func dashboardQueries(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	var walk func(v any, inTemplating bool)
	walk = func(v any, inTemplating bool) {
		switch v := v.(type) {
		case map[string]any:
			if e, ok := v["expr"].(string); ok {
				out = append(out, e)
			}
			if inTemplating && v["type"] == "query" { // a query variable: "query" is PromQL or {"query": …}
				switch q := v["query"].(type) {
				case string:
					out = append(out, q)
				case map[string]any:
					if s, ok := q["query"].(string); ok {
						out = append(out, s)
					}
				}
			}
			for k, c := range v {
				walk(c, inTemplating || k == "templating")
			}
		case []any:
			for _, c := range v {
				walk(c, inTemplating)
			}
		}
	}
	walk(d, false)
	return out
}

// scrapeNames returns the metric names an endpoint exports: every sample's name and the
// names of its histogram and summary families (which PromQL may select as such, e.g. a
// summary's quantiles).
func scrapeNames(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" && (f[3] == "histogram" || f[3] == "summary") {
			out[f[2]] += 0
		}
		if line == "" || line[0] == '#' {
			continue
		}
		name, _, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		out[name] += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sampleValue returns the value of the sample of name whose labels contain every one of
// labels (`k="v"`), and whether there is one.
func sampleValue(t *testing.T, url, name string, labels ...string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		return v, err == nil
	}
	return 0, false
}

// outOfScopeDashboard says why the standalone exports none of a community dashboard's
// metrics ("" if it must export them): the dashboards of other programs.
func outOfScopeDashboard(file string) string {
	switch {
	case file == "jvm.json" || file == "logs.json":
		return "the JVM's metrics: Magnetar is a Go program (go_* and process_* instead)"
	case strings.HasPrefix(file, "zookeeper"):
		return "ZooKeeper's metrics: Magnetar keeps its metadata in etcd"
	case file == "node.json":
		return "the host's metrics, which Prometheus' node_exporter exports"
	case file == "kop.json":
		return "Kafka-on-Pulsar, a protocol handler Magnetar does not have"
	case file == "functions.json":
		return "Pulsar Functions, which Magnetar does not have"
	case file == "pulsar_detector.json":
		return "pulsar-detector, an external end-to-end prober, exports these"
	case file == "transaction.json":
		return "Pulsar's transaction coordinator metrics: Magnetar's coordinator (off in this standalone) exports magnetar_txn_*"
	case file == "loadbalance.json":
		return "the internals of Pulsar's load managers: Magnetar's exports magnetar_loadbalance_*"
	case file == "proxy.json":
		return "proxy metrics: this standalone runs no proxy (magnetar proxy exports pulsar_proxy_{active,new,rejected}_connections and pulsar_proxy_binary_bytes)"
	}
	return ""
}

// outOfScopeName says why the standalone does not export a metric a Pulsar or BookKeeper
// dashboard queries ("" if it must).
func outOfScopeName(name string) string {
	switch {
	case name == "up":
		return "Prometheus records up itself, for every target"
	case strings.HasPrefix(name, "node_"):
		return "the host's metrics, which Prometheus' node_exporter exports"
	case strings.HasPrefix(name, "caffeine_cache_"):
		return "Caffeine, the Java cache library of Pulsar's metadata store"
	case strings.HasPrefix(name, "jetty_"):
		return "Jetty, Pulsar's Java web server"
	case strings.HasPrefix(name, "pulsar_entry_size_"):
		return "the entry size distribution, which Magnetar does not measure (package broker/pulsarmetrics)"
	case strings.HasPrefix(name, "pulsar_replication_"):
		return "exported per replicated topic (package broker/replhost); this standalone replicates nothing"
	case strings.HasPrefix(name, "bookie_journal_JOURNAL_") && strings.HasSuffix(name, "QUEUE_SIZE"):
		return "the journal's queue lengths are not measured (package bookie, bkmetrics.go)"
	case name == "pulsar_instance_publish_latency" || name == "pulsar_storage_read_latency_count":
		return "Pulsar's broker does not export it either (no such name in its metrics sources)"
	}
	return ""
}

// communityDashboards reads testdata/community-dashboard-metrics.txt: section → names.
func communityDashboards(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "community-dashboard-metrics.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		switch line := strings.TrimSpace(sc.Text()); {
		case line == "" || line[0] == '#':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
		case section == "":
			t.Fatalf("name %q before any section", line)
		default:
			out[section] = append(out[section], line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDashboardMetricsOnStandalone: a standalone under load (a producer, a consumer, and a
// subscription nobody reads, so it has a backlog) exports every metric the shipped Grafana
// dashboard (deploy/grafana/magnetar-pulsar.json) queries, and every metric the community
// dashboards for Pulsar query except those outOfScope* names with a reason.
func TestDashboardMetricsOnStandalone(t *testing.T) {
	s := startStandalone(t)
	const topic = "persistent://public/default/itest-dashboard"
	adm := func(args ...string) string {
		return mustTool(t, append([]string{"admin", "--url", s.httpURL}, args...)...)
	}
	adm("topics", "create", topic)
	adm("subscriptions", "create", topic, "-s", "idle", "-m", "earliest")
	// Both stay connected while the test scrapes (they are killed at cleanup).
	Start(t, "producer", "perf", "produce", "--url", s.pulsarURL, topic, "--rate", "100", "--size", "200",
		"--duration", "10m", "--warmup", "0")
	Start(t, "consumer", "perf", "consume", "--url", s.pulsarURL, topic, "--subscription", "live",
		"--duration", "10m", "--warmup", "0")

	broker, bookie := s.httpURL+"/metrics", s.httpURL+"/metrics/bookie"
	tl := `topic="` + topic + `"`
	var producers, consumers, backlog, rateIn float64
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		producers, _ = sampleValue(t, broker, "pulsar_producers_count", tl)
		consumers, _ = sampleValue(t, broker, "pulsar_consumers_count", tl)
		backlog, _ = sampleValue(t, broker, "pulsar_subscription_back_log", tl, `subscription="idle"`)
		rateIn, _ = sampleValue(t, broker, "pulsar_rate_in", tl)
		if producers >= 1 && consumers >= 1 && backlog > 0 && rateIn > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the load does not show in the Pulsar metrics: producers %v, consumers %v, idle backlog %v, rate in %v",
				producers, consumers, backlog, rateIn)
		case <-time.After(250 * time.Millisecond): // interval between scrapes
		}
	}
	if v, ok := sampleValue(t, broker, "pulsar_in_messages_total", tl); !ok || v < backlog {
		t.Errorf("pulsar_in_messages_total = %v (%v), want at least the idle backlog %v", v, ok, backlog)
	}
	if v, ok := sampleValue(t, broker, "pulsar_storage_size", tl); !ok || v <= 0 {
		t.Errorf("pulsar_storage_size = %v (%v), want > 0", v, ok)
	}
	if v, ok := sampleValue(t, broker, "pulsar_topics_count", `namespace="public/default"`); !ok || v < 1 {
		t.Errorf("pulsar_topics_count{namespace=public/default} = %v (%v)", v, ok)
	}

	exported := scrapeNames(t, broker)
	for n, v := range scrapeNames(t, bookie) {
		exported[n] += v
	}

	qs := dashboardQueries(t, filepath.Join("..", "deploy", "grafana", "magnetar-pulsar.json"))
	shipped := map[string]bool{}
	for _, q := range qs {
		for _, n := range metricNames(q) {
			shipped[n] = true
		}
	}
	if len(qs) < 20 || len(shipped) < 20 {
		t.Fatalf("the shipped dashboard has %d queries of %d metrics: not the dashboard this test checks", len(qs), len(shipped))
	}
	for _, n := range sortedSet(shipped) {
		if _, ok := exported[n]; !ok {
			t.Errorf("the shipped dashboard queries %s, which the standalone does not export", n)
		}
	}

	checked, skipped := 0, 0
	for section, names := range communityDashboards(t) {
		file := filepath.Base(strings.Fields(section)[1])
		for _, n := range names {
			_, ok := exported[n]
			why := outOfScopeName(n)
			switch {
			case why != "" && ok:
				t.Errorf("%s (%s) is exported now: drop it from outOfScopeName (%s)", n, section, why)
			case why != "" || outOfScopeDashboard(file) != "":
				skipped++
			case !ok:
				t.Errorf("%s, queried by %s, is not exported", n, section)
			default:
				checked++
			}
		}
	}
	if checked < 40 {
		t.Errorf("only %d community dashboard names checked (%d out of scope)", checked, skipped)
	}
	t.Logf("community dashboards: %d names exported, %d out of scope", checked, skipped)
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestNamespaceLevelMetricsOnStandalone: with exposeTopicLevelMetricsInPrometheus=false
// (here its flag) the standalone sums the pulsar_* topic metrics per namespace: no sample
// has a topic label, and the namespace's counters count the messages published.
func TestNamespaceLevelMetricsOnStandalone(t *testing.T) {
	etcd, bk, broker, web := FreeAddr(t), FreeAddr(t), FreeAddr(t), FreeAddr(t)
	Start(t, "standalone", "standalone", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--etcd-listen", etcd, "--bookie-listen", bk, "--broker-listen", broker, "--http", web,
		"--expose-topic-level-metrics-in-prometheus=false")
	WaitTCP(t, broker, 60*time.Second)
	WaitTCP(t, web, 60*time.Second)
	const topic = "persistent://public/default/itest-ns-metrics"
	mustTool(t, "produce", "--url", "pulsar://"+broker, topic, "-m", "a", "-m", "b", "-n", "3")

	url := "http://" + web + "/metrics"
	ns := `namespace="public/default"`
	if v, ok := sampleValue(t, url, "pulsar_in_messages_total", ns); !ok || v != 6 {
		t.Errorf("pulsar_in_messages_total{%s} = %v (%v), want 6", ns, v, ok)
	}
	if v, ok := sampleValue(t, url, "pulsar_msg_backlog", ns, `remote_cluster="local"`); !ok || v != 0 {
		t.Errorf("pulsar_msg_backlog{%s,remote_cluster=local} = %v (%v), want 0", ns, v, ok)
	}
	for _, n := range []string{"pulsar_rate_in", "pulsar_in_messages_total", "pulsar_storage_size", "pulsar_subscription_back_log"} {
		if _, ok := sampleValue(t, url, n, `topic="`); ok {
			t.Errorf("%s has a sample labelled with a topic", n)
		}
	}
}
