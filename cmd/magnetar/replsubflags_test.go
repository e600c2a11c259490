package main

import (
	"testing"
	"time"
)

// TestReplicatedSubscriptionsKeys: broker.conf's enableReplicatedSubscriptions and
// replicatedSubscriptionsSnapshot{FrequencyMillis,TimeoutSeconds,MaxCachedPerSubscription}
// (and their flags) reach the broker's configuration, with Pulsar's defaults (on, 1 s,
// 30 s, 10).
func TestReplicatedSubscriptionsKeys(t *testing.T) {
	type want struct {
		off           bool
		freq, timeout time.Duration
		cached        int
	}
	for conf, w := range map[string]want{
		"": {false, time.Second, 30 * time.Second, 10},
		"enableReplicatedSubscriptions=false\nreplicatedSubscriptionsSnapshotFrequencyMillis=250\n" +
			"replicatedSubscriptionsSnapshotTimeoutSeconds=60\nreplicatedSubscriptionsSnapshotMaxCachedPerSubscription=30\n": {
			true, 250 * time.Millisecond, time.Minute, 30},
		"replicated-subscriptions-snapshot-frequency=2s\n": {false, 2 * time.Second, 30 * time.Second, 10},
	} {
		bc := policyConfig(t, conf)
		got := want{bc.DisableReplicatedSubscriptions, bc.ReplicatedSubscriptionsSnapshotFrequency,
			bc.ReplicatedSubscriptionsSnapshotTimeout, bc.ReplicatedSubscriptionsSnapshotMaxCached}
		if got != w {
			t.Errorf("%q: %+v, want %+v", conf, got, w)
		}
	}
}
