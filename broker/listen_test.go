package broker_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/admin"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/itest"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"github.com/magnetar-io/magnetar/pulsarclient"
)

func TestParseAdvertisedListeners(t *testing.T) {
	ls, err := broker.ParseAdvertisedListeners(" internal:pulsar://10.0.0.1:6650, internal:pulsar+ssl://10.0.0.1:6651," +
		"external:pulsar+ssl://broker.example.com:6651,external:https://broker.example.com:8443")
	if err != nil {
		t.Fatal(err)
	}
	want := []broker.Listener{
		{Name: "internal", URLs: api.ListenerURLs{ServiceURL: "pulsar://10.0.0.1:6650", ServiceURLTLS: "pulsar+ssl://10.0.0.1:6651"}},
		{Name: "external", URLs: api.ListenerURLs{ServiceURLTLS: "pulsar+ssl://broker.example.com:6651", HTTPURLTLS: "https://broker.example.com:8443"}},
	}
	if len(ls) != len(want) || ls[0] != want[0] || ls[1] != want[1] {
		t.Fatalf("parsed %+v, want %+v", ls, want)
	}
	for in, reason := range map[string]string{
		"internal:pulsar://a:1,internal:pulsar://b:2": "redundant pulsar",
		"internal:pulsar://a:1,external:pulsar://a:1": "same host:port",
		"internal:kafka://a:1":                        "unknown scheme",
		"pulsar://a:1":                                "unknown scheme",
		"internal:pulsar://a":                         "want name:",
		"web:http://a:80":                             "no pulsar:// or pulsar+ssl://",
	} {
		if _, err := broker.ParseAdvertisedListeners(in); !errors.Is(err, api.ErrInvalidArgument) || !strings.Contains(err.Error(), reason) {
			t.Errorf("%q: err %v, want ErrInvalidArgument naming %q", in, err, reason)
		}
	}
}

// TestAdvertisedAddress: a broker bound to a wildcard address never advertises it: its
// record, and so every lookup, names the advertised address, or the host's name if none.
func TestAdvertisedAddress(t *testing.T) {
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	for _, tc := range []struct {
		name, advertised, wantHost string
	}{
		{"configured", "localhost", "localhost"},
		{"default", "", broker.DefaultAdvertisedHost()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := startServiceWith(t, store, topictest.NewStore(), "", func(c *broker.Config) {
				c.Listen, c.ID, c.AdvertisedAddress = "0.0.0.0:0", "adv-"+tc.name, tc.advertised
				c.HTTPURL, c.HTTPURLTLS = "http://0.0.0.0:8080", "https://[::]:8443"
			})
			_, port, _ := net.SplitHostPort(svc.Addr().String())
			in := svc.Info()
			if want := "pulsar://" + net.JoinHostPort(tc.wantHost, port); in.ServiceURL != want {
				t.Errorf("ServiceURL %q, want %q", in.ServiceURL, want)
			}
			if want := "http://" + net.JoinHostPort(tc.wantHost, "8080"); in.HTTPURL != want {
				t.Errorf("HTTPURL %q, want %q", in.HTTPURL, want)
			}
			if want := "https://" + net.JoinHostPort(tc.wantHost, "8443"); in.HTTPURLTLS != want {
				t.Errorf("HTTPURLTLS %q, want %q", in.HTTPURLTLS, want)
			}
		})
	}
}

// TestAdvertisedListeners: a lookup answers the listener the client names, the internal
// one if it names none, and fails for a listener the broker does not have.
func TestAdvertisedListeners(t *testing.T) {
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	addr := itest.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	ls, err := broker.ParseAdvertisedListeners("internal:pulsar://127.0.0.1:" + port + ",external:pulsar://localhost:" + port)
	if err != nil {
		t.Fatal(err)
	}
	svc := startServiceWith(t, store, topictest.NewStore(), "", func(c *broker.Config) {
		c.Listen, c.ID, c.AdvertisedListeners, c.InternalListenerName = addr, "listeners", ls, "internal"
	})
	if in := svc.Info(); in.ServiceURL != "pulsar://127.0.0.1:"+port || in.Listeners["external"].ServiceURL != "pulsar://localhost:"+port {
		t.Fatalf("broker record %+v: want the internal listener's URL and both listeners", in)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for listener, want := range map[string]string{"": "127.0.0.1:" + port, "internal": "127.0.0.1:" + port, "external": "localhost:" + port} {
		cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + addr, ListenerName: listener})
		if err != nil {
			t.Fatal(err)
		}
		got, err := cl.Lookup(ctx, "persistent://public/default/listeners")
		cl.Close()
		if err != nil || got != want {
			t.Errorf("listener %q: lookup %q, %v; want %q", listener, got, err, want)
		}
	}
	cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + addr, ListenerName: "nope"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got, err := cl.Lookup(ctx, "persistent://public/default/listeners"); err == nil || !strings.Contains(err.Error(), "nope listener") {
		t.Errorf("listener nope: lookup %q, %v; want refused", got, err)
	}
	// HTTP lookups name the listener by the listenerName parameter or Pulsar's header.
	hs := httptest.NewServer(admin.Handler(svc, admin.Options{}))
	defer hs.Close()
	const path = "/lookup/v2/topic/persistent/public/default/listeners"
	for _, c := range []struct{ query, header, want string }{
		{"", "", `"brokerUrl":"pulsar://127.0.0.1:` + port + `"`},
		{"?listenerName=external", "", `"brokerUrl":"pulsar://localhost:` + port + `"`},
		{"", "external", `"brokerUrl":"pulsar://localhost:` + port + `"`},
		{"?listenerName=nope", "", `nope listener`},
	} {
		req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+path+c.query, nil)
		if c.header != "" {
			req.Header.Set("X-Pulsar-ListenerName", c.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), c.want) {
			t.Errorf("HTTP lookup %s (header %q): %d %s, want %s", c.query, c.header, resp.StatusCode, b, c.want)
		}
	}
	// The configuration refuses what Pulsar refuses.
	_, err = broker.Start(ctx, broker.Config{Store: store, Listen: "127.0.0.1:0", AdvertisedListeners: ls, AdvertisedAddress: "x"})
	if !errors.Is(err, api.ErrInvalidArgument) {
		t.Errorf("listeners with an advertised address: %v, want ErrInvalidArgument", err)
	}
	_, err = broker.Start(ctx, broker.Config{Store: store, Listen: "127.0.0.1:0", AdvertisedListeners: ls, InternalListenerName: "other"})
	if !errors.Is(err, api.ErrInvalidArgument) {
		t.Errorf("unknown internal listener: %v, want ErrInvalidArgument", err)
	}
}
