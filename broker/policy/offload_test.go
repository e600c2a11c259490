package policy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/mledger"
)

// TestOffloadPolicyResolution: field by field, the topic's offloadPolicies, the namespace's
// single values, the namespace's offloadPolicies, then the broker's policy.
func TestOffloadPolicyResolution(t *testing.T) {
	broker := mledger.OffloadPolicy{ThresholdBytes: 1 << 30, ThresholdAge: -1, DeletionLag: time.Hour, ReadPriority: mledger.ReadTieredStorageFirst}
	pr := testResolver()
	pr.ManagedLedger.Offload = &broker
	cases := []struct {
		name   string
		tr, nr Record
		want   mledger.OffloadPolicy
	}{
		{"broker", Record{}, Record{}, broker},
		{"namespace object", Record{}, rec(t, KeyNSOffloadPolicies, map[string]any{"managedLedgerOffloadThresholdInBytes": 100, "managedLedgerOffloadedReadPriority": "bookkeeper-first"}),
			mledger.OffloadPolicy{ThresholdBytes: 100, ThresholdAge: -1, DeletionLag: time.Hour, ReadPriority: mledger.ReadBookkeeperFirst}},
		{"namespace single values win over its object", Record{},
			rec(t, KeyNSOffloadPolicies, map[string]any{"managedLedgerOffloadThresholdInBytes": 100}, KeyNSOffloadThreshold, 5,
				KeyNSOffloadThresholdSecs, 60, KeyNSOffloadDeletionLagMs, 0),
			mledger.OffloadPolicy{ThresholdBytes: 5, ThresholdAge: time.Minute, DeletionLag: 0, ReadPriority: mledger.ReadTieredStorageFirst}},
		{"topic wins per field", rec(t, KeyTopicOffloadPolicies, map[string]any{"managedLedgerOffloadDeletionLagInMillis": 1500}),
			rec(t, KeyNSOffloadThreshold, 5),
			mledger.OffloadPolicy{ThresholdBytes: 5, ThresholdAge: -1, DeletionLag: 1500 * time.Millisecond, ReadPriority: mledger.ReadTieredStorageFirst}},
		{"-1 turns off", rec(t, KeyTopicOffloadPolicies, map[string]any{"managedLedgerOffloadThresholdInBytes": -1, "managedLedgerOffloadDeletionLagInMillis": -1}),
			Record{}, mledger.OffloadPolicy{ThresholdBytes: -1, ThresholdAge: -1, DeletionLag: -1, ReadPriority: mledger.ReadTieredStorageFirst}},
		{"Go client's auto-trigger name", Record{}, rec(t, KeyNSOffloadPolicies, map[string]any{"managedLedgerOffloadAutoTriggerSizeThresholdBytes": 7}),
			mledger.OffloadPolicy{ThresholdBytes: 7, ThresholdAge: -1, DeletionLag: time.Hour, ReadPriority: mledger.ReadTieredStorageFirst}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := pr.OffloadPolicy(c.tr, c.nr); got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
			if got := pr.Resolve(c.tr, c.nr, mustName(t)).Offload; got != c.want {
				t.Fatalf("Resolve: got %+v, want %+v", got, c.want)
			}
		})
	}
	// Without a broker policy: mledger's default.
	if got := testResolver().OffloadPolicy(Record{}, Record{}); got != mledger.DefaultOffloadPolicy() {
		t.Fatalf("no broker policy: %+v", got)
	}
}

// TestOffloadPolicyChecks: what the REST paths accept and refuse (400).
func TestOffloadPolicyChecks(t *testing.T) {
	cases := []struct {
		path  string
		topic bool
		body  string
		ok    bool
	}{
		{"offloadThreshold", false, "-1", true},
		{"offloadThreshold", false, "0", true},
		{"offloadThreshold", false, "1048576", true},
		{"offloadThreshold", false, "-2", false},
		{"offloadThresholdInSeconds", false, "0", true},
		{"offloadThresholdInSeconds", false, "60", true},
		{"offloadThresholdInSeconds", false, "-60", false},
		{"offloadDeletionLagMs", false, "-1", true},
		{"offloadDeletionLagMs", false, "0", true},
		{"offloadDeletionLagMs", false, "1000", true},
		{"offloadDeletionLagMs", false, "-5", false},
		{"offloadPolicies", false, `{"managedLedgerOffloadDriver":"aws-s3","managedLedgerOffloadThresholdInBytes":10}`, true},
		{"offloadPolicies", true, `{"managedLedgerOffloadedReadPriority":"tiered-storage-first"}`, true},
		{"offloadPolicies", true, `{"managedLedgerOffloadedReadPriority":"sideways"}`, false},
		{"offloadPolicies", true, `{"managedLedgerOffloadThresholdInSeconds":-3}`, false},
		{"offloadPolicies", false, `null`, false},
		{"offloadPolicies", false, `{`, false},
	}
	for _, c := range cases {
		_, v, _, err := CheckChange(c.path, c.topic, "", []byte(c.body), false, "c1")
		if (err == nil) != c.ok {
			t.Errorf("%s %s: err %v, want ok=%v", c.path, c.body, err, c.ok)
		}
		if err != nil && !errors.Is(err, api.ErrInvalidArgument) {
			t.Errorf("%s %s: %v is not ErrInvalidArgument", c.path, c.body, err)
		}
		if c.ok && c.path == "offloadPolicies" {
			// Stored as sent: the driver fields survive.
			r := Record{}
			p := For(c.path)
			if err := r.Set(p, p.NSKey, "", v); err != nil {
				t.Fatal(err)
			}
			var back map[string]any
			if err := json.Unmarshal(r[p.NSKey], &back); err != nil || len(back) == 0 {
				t.Errorf("stored %s: %v", r[p.NSKey], err)
			}
		}
	}
	_, _, _, err := CheckChange("offloadThresholdInSeconds", false, "", []byte("-60"), false, "c1")
	if err == nil || !strings.Contains(err.Error(), "Invalid value for offloadThresholdInSecond") {
		t.Fatalf("reason: %v", err)
	}
	// Unset thresholds read -1, as Pulsar's Policies defaults them; the others null.
	if string(NullJSON(For("offloadThreshold"))) != "-1" || string(NullJSON(For("offloadThresholdInSeconds"))) != "-1" ||
		string(NullJSON(For("offloadDeletionLagMs"))) != "null" || string(NullJSON(For("offloadPolicies"))) != "null" {
		t.Fatal("unset values")
	}
	// The applied topic value is the merged policy.
	pr := testResolver()
	b := pr.Pick(Record{}, rec(t, KeyNSOffloadThreshold, 9), For("offloadPolicies"))
	var op OffloadPolicies
	if err := json.Unmarshal(b, &op); err != nil || op.ThresholdInBytes == nil || *op.ThresholdInBytes != 9 || *op.DeletionLagInMs != 4*3600*1000 {
		t.Fatalf("applied %s: %v", b, err)
	}
}

func mustName(t *testing.T) topicname.Name {
	t.Helper()
	n, err := topicname.Parse("persistent://t/ns/x")
	if err != nil {
		t.Fatal(err)
	}
	return n
}
