package websocket

import (
	"errors"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/pulsarclient"
)

// TestParseRoute: the v2 and v1 paths, topics with slashes and escapes, and refusals.
func TestParseRoute(t *testing.T) {
	for path, want := range map[string]route{
		"/ws/v2/producer/persistent/t/ns/topic":          {kind: kindProducer, topic: "persistent://t/ns/topic"},
		"/ws/v2/consumer/persistent/t/ns/topic/sub":      {kind: kindConsumer, topic: "persistent://t/ns/topic", subscription: "sub"},
		"/ws/v2/reader/non-persistent/t/ns/a/b":          {kind: kindReader, topic: "non-persistent://t/ns/a/b"},
		"/ws/v2/consumer/persistent/t/ns/a%2Fb/my%20sub": {kind: kindConsumer, topic: "persistent://t/ns/a/b", subscription: "my sub"},
		"/ws/producer/persistent/p/cl/ns/topic":          {kind: kindProducer, topic: "persistent://p/cl/ns/topic"},
		"/ws/consumer/persistent/p/cl/ns/topic/s":        {kind: kindConsumer, topic: "persistent://p/cl/ns/topic", subscription: "s"},
		"/ws/v2/pingpong":                                {kind: kindPingPong},
		"/ws/pingpong":                                   {kind: kindPingPong},
	} {
		got, err := parseRoute(path)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v, want %+v", path, got, err, want)
		}
	}
	for path, notFound := range map[string]bool{
		"/admin/v2/clusters":                        true,
		"/ws/v3/consumer/persistent/t/ns/topic/sub": true,
		"/ws/v2/publisher/persistent/t/ns/topic":    true,
		"/ws/v2/producer/persistent/t/ns":           false,
		"/ws/v2/consumer/persistent/t/ns/topic":     false,
		"/ws/v2/producer/durable/t/ns/topic":        false,
		"/ws/v2/producer/persistent/t//topic":       false,
	} {
		_, err := parseRoute(path)
		var bp badParam
		if err == nil || errors.Is(err, errNotFound) != notFound || (!notFound && !errors.As(err, &bp)) {
			t.Errorf("%s: %v (want not found: %v)", path, err, notFound)
		}
	}
}

// TestMessageID: ids round-trip through Pulsar's encoding; the special fields are left out
// when unset, and bad ids are refused.
func TestMessageID(t *testing.T) {
	for _, id := range []pulsarclient.MessageID{
		{LedgerID: 7, EntryID: 9, Partition: -1, BatchIndex: -1},
		{LedgerID: 1 << 40, EntryID: 0, Partition: 3, BatchIndex: 17},
	} {
		got, err := decodeMessageID(encodeMessageID(id))
		if err != nil || got != id {
			t.Errorf("%v: round trip %v %v", id, got, err)
		}
	}
	// ledger 7 entry 9 as Pulsar's Java client serializes a non-batch, non-partitioned id.
	if s := encodeMessageID(pulsarclient.MessageID{LedgerID: 7, EntryID: 9, Partition: -1, BatchIndex: -1}); s != "CAcQCQ==" {
		t.Errorf("encoding %q, want CAcQCQ==", s)
	}
	for _, bad := range []string{"%%%", "", "CAc=" /* no entry id */, "/////w=="} {
		if _, err := decodeMessageID(bad); !errors.Is(err, errBadMessageID) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// TestTimes: Pulsar's date format with milliseconds and offset, both ways.
func TestTimes(t *testing.T) {
	tm := time.Date(2021, 10, 29, 16, 1, 38, 967e6, time.FixedZone("", -7*3600))
	if s := formatTime(tm); s != "2021-10-29T16:01:38.967-07:00" {
		t.Errorf("format: %s", s)
	}
	got, err := parseTime("2021-10-29T16:01:38.967-07:00")
	if err != nil || !got.Equal(tm) {
		t.Errorf("parse: %v %v", got, err)
	}
	if _, err := parseTime("yesterday"); err == nil {
		t.Error("parsed a bad time")
	}
}
