package advertise

import (
	"errors"
	"testing"

	"github.com/magnetar-io/magnetar/broker/api"
)

// TestRecordNeverAdvertisesAWildcard: a listener bound to a wildcard address advertises the
// configured advertisedAddress, else the host's name; a specific bound address is kept;
// the HTTP URLs follow; an explicit advertise address wins.
func TestRecordNeverAdvertisesAWildcard(t *testing.T) {
	for _, tc := range []struct {
		name                string
		cfg                 Config
		plain, tls          string
		wantPlain, wantTLS  string
		wantHTTP, wantDefID string
	}{
		{"configured", Config{AdvertisedAddress: "localhost", HTTPURL: "http://0.0.0.0:8080"}, "0.0.0.0:6650", "[::]:6651",
			"pulsar://localhost:6650", "pulsar+ssl://localhost:6651", "http://localhost:8080", "localhost:6650"},
		{"default host", Config{HTTPURL: "http://[::]:8080"}, "[::]:6650", "",
			"pulsar://" + DefaultHost() + ":6650", "", "http://" + DefaultHost() + ":8080", DefaultHost() + ":6650"},
		{"specific address kept", Config{HTTPURL: "http://127.0.0.1:8080"}, "127.0.0.1:6650", "127.0.0.1:6651",
			"pulsar://127.0.0.1:6650", "pulsar+ssl://127.0.0.1:6651", "http://127.0.0.1:8080", "127.0.0.1:6650"},
		{"TLS only", Config{AdvertisedAddress: "b.example"}, "", "0.0.0.0:6651",
			"", "pulsar+ssl://b.example:6651", "", "b.example:6651"},
	} {
		in, id := tc.cfg.Record(tc.plain, "", tc.tls, "")
		if in.ServiceURL != tc.wantPlain || in.ServiceURLTLS != tc.wantTLS || in.HTTPURL != tc.wantHTTP || id != tc.wantDefID {
			t.Errorf("%s: %+v %q, want %s %s %s %s", tc.name, in, id, tc.wantPlain, tc.wantTLS, tc.wantHTTP, tc.wantDefID)
		}
	}
	in, _ := Config{Advertise: "adv:7000"}.Record("0.0.0.0:6650", "adv:7000", "", "")
	if in.ServiceURL != "pulsar://adv:7000" {
		t.Errorf("explicit advertise: %s", in.ServiceURL)
	}
}

// TestRecordNamedListeners: the record's URLs are the internal listener's (the first by
// default), and every listener is in it by name.
func TestRecordNamedListeners(t *testing.T) {
	ls, err := Parse("internal:pulsar://10.0.0.1:6650,external:pulsar+ssl://b.example.com:6651")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Listeners: ls}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	in, id := cfg.Record("0.0.0.0:6650", "", "", "")
	if in.ServiceURL != "pulsar://10.0.0.1:6650" || id != "10.0.0.1:6650" || len(in.Listeners) != 2 ||
		in.Listeners["external"].ServiceURLTLS != "pulsar+ssl://b.example.com:6651" {
		t.Errorf("record %+v id %q", in, id)
	}
	cfg.InternalListenerName = "external"
	if in, id := cfg.Record("0.0.0.0:6650", "", "", ""); in.ServiceURLTLS != "pulsar+ssl://b.example.com:6651" || id != "b.example.com:6651" {
		t.Errorf("internal=external: %+v %q", in, id)
	}
	for _, bad := range []Config{
		{Listeners: ls, AdvertisedAddress: "x"},
		{Listeners: ls, InternalListenerName: "nope"},
		{InternalListenerName: "internal"},
	} {
		if err := bad.Check(); !errors.Is(err, api.ErrInvalidArgument) {
			t.Errorf("Check(%+v) = %v, want ErrInvalidArgument", bad, err)
		}
	}
}
