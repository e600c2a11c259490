package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeConf(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "x.conf")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigPrint: a broker.conf sets the flags the command line did not; --print-config
// shows the effective values under Pulsar's keys and lists the keys it ignored once.
func TestConfigPrint(t *testing.T) {
	p := writeConf(t, "# broker.conf\nmetadataStoreUrl=etcd:http://10.0.0.5:2379,http://10.0.0.6:2379\n"+
		"bindAddress=127.0.0.2\nbrokerServicePort=7650\nwebServicePort=\nclusterName=prod\n"+
		"managedLedgerDefaultEnsembleSize=3\nmanagedLedgerDefaultWriteQuorum=3\nmanagedLedgerDefaultAckQuorum=2\n"+
		"brokerDeduplicationEnabled=false\nallowAutoTopicCreation=true\nnumIOThreads=8\n"+
		"metadataStoreSessionTimeoutMillis=30000\nhaProxyProtocolEnabled=false\n")
	var code int
	var stdout string
	stderr := captureStderr(t, func() {
		stdout = captureStdout(t, func() {
			code = run([]string{"broker", "--config", p, "--ack-quorum", "3", "--print-config"})
		})
	})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"metadata-url=etcd://10.0.0.5:2379,10.0.0.6:2379\n", "listen=127.0.0.2:7650\n",
		"http=\n", "clusterName=prod\n", "managedLedgerDefaultEnsembleSize=3\n", "managedLedgerDefaultAckQuorum=3\n",
		"disable-deduplication=true\n", "disable-auto-topic-creation=false\n", "session-ttl=30s\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q in\n%s", want, stdout)
		}
	}
	for _, bad := range []string{"config=", "print-config="} {
		if strings.Contains(stdout, bad) {
			t.Errorf("%q printed", bad)
		}
	}
}

// TestConfigIgnoredOnce: the keys Magnetar has no setting for are logged once, in one line.
func TestConfigIgnoredOnce(t *testing.T) {
	p := writeConf(t, "numIOThreads=8\nhaProxyProtocolEnabled=false\nnumIOThreads=4\nbrokerServicePort=bad\n")
	var code int
	stderr := captureStderr(t, func() { code = run([]string{"broker", "--config", p}) })
	if code != 2 || !strings.Contains(stderr, "x.conf:4: key brokerServicePort: want a port number") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	p = writeConf(t, "numIOThreads=8\nhaProxyProtocolEnabled=false\nnumIOThreads=4\nmaxMessageSize=10\n")
	stderr = captureStderr(t, func() { code = run([]string{"broker", "--config", p}) })
	if code != 2 || strings.Count(stderr, "ignoring keys") != 1 ||
		!strings.Contains(stderr, "keys=haProxyProtocolEnabled,numIOThreads") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stderr, "--max-message-size must be at least 1024, got 10 [--max-message-size from key maxMessageSize (") {
		t.Errorf("validation error does not name the key: %q", firstLine(stderr))
	}
}

// TestConfigBad: bad configuration exits 2 naming the key (or the file).
func TestConfigBad(t *testing.T) {
	for _, tc := range []struct {
		args []string
		conf string
		want string
	}{
		{[]string{"broker"}, "managedLedgerDefaultEnsembleSize=three\n", "x.conf:1: key managedLedgerDefaultEnsembleSize:"},
		{[]string{"broker"}, "metadataStoreUrl=zk:localhost:2181\n", "key metadataStoreUrl: want etcd:http://host:port"},
		{[]string{"broker"}, "a=\\uXYZW\n", "x.conf: line 1: malformed"},
		{[]string{"broker"}, "managedLedgerDefaultEnsembleSize=1\nmanagedLedgerDefaultWriteQuorum=2\n", "from key managedLedgerDefaultEnsembleSize"},
		{[]string{"standalone"}, "managedLedgerDefaultEnsembleSize=2\n", "key managedLedgerDefaultEnsembleSize: want 1: standalone runs one bookie"},
		{[]string{"bookie"}, "ledgerDirectories=/a,/b\n", "key ledgerDirectories: one directory only"},
		{[]string{"bookie"}, "diskUsageThreshold=x\n", "key diskUsageThreshold:"},
		{[]string{"bookie"}, "httpServerEnabled=perhaps\n", "key httpServerEnabled: want true or false"},
	} {
		p := writeConf(t, tc.conf)
		var code int
		stderr := captureStderr(t, func() { code = run(append(tc.args, "--config", p)) })
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v %q: exit %d, stderr %q; want exit 2 with %q", tc.args, tc.conf, code, firstLine(stderr), tc.want)
		}
	}
	var code int
	stderr := captureStderr(t, func() { code = run([]string{"broker", "--config", "/nonexistent.conf"}) })
	if code != 2 || !strings.Contains(stderr, "--config: open /nonexistent.conf") {
		t.Errorf("missing file: exit %d, %q", code, firstLine(stderr))
	}
}

// TestConfigBookie: bookkeeper.conf keys reach the bookie's flags.
func TestConfigBookie(t *testing.T) {
	p := writeConf(t, "metadataServiceUri=metadata-store:etcd:http://127.0.0.1:2379\nbookiePort=3999\n"+
		"advertisedAddress=bk1.example\nledgerDirectories=/data/bk\ngcWaitTime=900000\njournalMaxGroupWaitMSec=2\n"+
		"httpServerEnabled=false\nhttpServerPort=8000\nautoRecoveryDaemonEnabled=false\nzkTimeout=5000\n"+
		"tlsCertificatePath=/etc/bk/cert.pem\ntlsKeyStore=/etc/bk/key.pem\ntlsTrustStore=/etc/bk/ca.pem\ntlsClientAuthentication=true\n")
	var code int
	stdout := captureStdout(t, func() { code = run([]string{"bookie", "--config", p, "--print-config"}) })
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"metadata-url=etcd://127.0.0.1:2379\n", "listen=0.0.0.0:3999\n", "advertise=bk1.example:3999\n",
		"data-dir=/data/bk\n", "gc-interval=15m0s\n", "journal-group-wait=2ms\n", "http=\n", "autoRecoveryDaemonEnabled=false\n",
		"session-ttl=5s\n", "tlsCertificatePath=/etc/bk/cert.pem\n", "tlsKeyStore=/etc/bk/key.pem\n", "tlsClientAuthentication=true\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q in\n%s", want, stdout)
		}
	}
}
