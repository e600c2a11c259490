package main

import (
	"strings"
	"testing"
)

// TestProxyBadFlags: the proxy's bad flags and configuration exit 2 naming the problem,
// before it connects anywhere.
func TestProxyBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"proxy"}, "need --metadata-url or --broker-service-url"},
		{[]string{"proxy", "--broker-service-url", "http://b:8080"}, "--broker-service-url: broker service URL"},
		{[]string{"proxy", "--broker-service-url", "pulsar://b"}, "missing port"},
		{[]string{"proxy", "--broker-service-url", "pulsar://b:6650", "--listen", ""}, "need --listen or --listen-tls"},
		{[]string{"proxy", "--broker-service-url", "pulsar://b:6650", "--max-concurrent-lookup-requests", "0"}, "must be at least 1"},
		{[]string{"proxy", "--broker-service-url", "pulsar://b:6650", "--max-concurrent-inbound-connections", "-1"}, "must not be negative"},
		{[]string{"proxy", "--broker-service-url", "pulsar://b:6650", "--authorization-enabled"}, "the brokers authorize it"},
		{[]string{"proxy", "--broker-service-url", "pulsar://b:6650", "--broker-client-auth-plugin", "kerberos"}, "unknown plugin"},
		{[]string{"proxy", "--broker-service-url", "pulsar://b:6650", "--broker-client-auth-plugin", "tls",
			"--broker-client-auth-params", "tlsCertFile:/c,tlsKeyFile:/k"}, "needs TLS to the brokers"},
		{[]string{"proxy", "--broker-service-url", "pulsar://b:6650", "--authentication-providers", "kerberos"}, "unknown provider"},
		{[]string{"proxy", "--broker-service-url", "pulsar://b:6650", "--log-level", "loud"}, "--log-level"},
	} {
		var code int
		stderr := captureStderr(t, func() { code = run(tc.args) })
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 with %q", tc.args, code, firstLine(stderr), tc.want)
		}
	}
	p := writeConf(t, "brokerServiceURL=pulsar://b:6650\nservicePort=none\n")
	var code int
	stderr := captureStderr(t, func() { code = run([]string{"proxy", "--config", p}) })
	if code != 2 || !strings.Contains(stderr, "key servicePort: want a port number") {
		t.Errorf("bad servicePort: exit %d, %q", code, firstLine(stderr))
	}
}

// TestProxyConfig: proxy.conf's keys reach the proxy's flags; the proxy's credentials are
// masked.
func TestProxyConfig(t *testing.T) {
	p := writeConf(t, "metadataStoreUrl=etcd:http://10.0.0.5:2379\nbrokerServiceURL=pulsar://b1:6650,b2:6650\n"+
		"brokerWebServiceURL=http://b1:8080\nbindAddress=0.0.0.0\nservicePort=6651\nwebServicePort=8081\n"+
		"brokerClientAuthenticationPlugin=token\nbrokerClientAuthenticationParameters=token:secret\n"+
		"maxConcurrentLookupRequests=100\nforwardAuthorizationCredentials=true\nauthenticationEnabled=true\n")
	var code int
	stdout := captureStdout(t, func() { code = run([]string{"proxy", "--config", p, "--print-config"}) })
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"metadata-url=etcd://10.0.0.5:2379\n", "brokerServiceURL=pulsar://b1:6650,b2:6650\n",
		"brokerWebServiceURL=http://b1:8080\n", "listen=0.0.0.0:6651\n", "http=0.0.0.0:8081\n",
		"brokerClientAuthenticationPlugin=token\n", "maxConcurrentLookupRequests=100\n",
		"forwardAuthorizationCredentials=true\n", "authenticationEnabled=true\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q in\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "secret") {
		t.Errorf("the proxy's credentials printed:\n%s", stdout)
	}
}
