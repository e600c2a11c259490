package policy

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/magnetar-io/magnetar/mledger"
)

// Offload policies (tiered storage). Pulsar keeps them in two forms at namespace level: the
// whole OffloadPolicies object (offload_policies, also the topic level's offloadPolicies)
// and the older single values (offload_threshold, offload_threshold_in_seconds,
// offload_deletion_lag_ms), each with its own REST path. A topic's policy is resolved field
// by field: the topic's offloadPolicies, else the namespace's single value, else the
// namespace's offloadPolicies, else the broker's configuration (Resolver.ManagedLedger.Offload).
//
// The object-store fields of OffloadPolicies (driver, bucket, region, endpoint, …) are kept
// as sent and returned, but the broker offloads every topic through the one offloader of its
// own configuration: only the thresholds, the deletion lag and the read priority act per
// namespace or topic.

// Record keys of the offload policies (Pulsar's Policies and TopicPolicies fields).
const (
	KeyNSOffloadPolicies      = "offload_policies"
	KeyNSOffloadThreshold     = "offload_threshold"
	KeyNSOffloadThresholdSecs = "offload_threshold_in_seconds"
	KeyNSOffloadDeletionLagMs = "offload_deletion_lag_ms"
	KeyTopicOffloadPolicies   = "offloadPolicies"
)

// OffloadPolicies is the part of Pulsar's OffloadPolicies JSON that acts on a topic (nil:
// not set at that level). The other fields of a body are stored and returned unchanged.
type OffloadPolicies struct {
	ThresholdInBytes   *int64 `json:"managedLedgerOffloadThresholdInBytes,omitempty"`
	ThresholdInSeconds *int64 `json:"managedLedgerOffloadThresholdInSeconds,omitempty"`
	DeletionLagInMs    *int64 `json:"managedLedgerOffloadDeletionLagInMillis,omitempty"`
	ReadPriority       string `json:"managedLedgerOffloadedReadPriority,omitempty"`
	// AutoTriggerSizeThresholdBytes is the Go client's name of the byte threshold; it
	// stands for ThresholdInBytes when that is not set.
	AutoTriggerSizeThresholdBytes *int64 `json:"managedLedgerOffloadAutoTriggerSizeThresholdBytes,omitempty"`
}

// checkOffloadPolicies checks an OffloadPolicies body and returns it as sent (compacted),
// so that the fields this broker does not act on are kept.
func checkOffloadPolicies(b []byte) (any, error) {
	v, err := decodeAs[OffloadPolicies](b)
	if err != nil {
		return nil, err
	}
	op := v.(OffloadPolicies)
	for _, f := range []struct {
		name string
		v    *int64
	}{{"managedLedgerOffloadThresholdInBytes", op.ThresholdInBytes}, {"managedLedgerOffloadThresholdInSeconds", op.ThresholdInSeconds},
		{"managedLedgerOffloadDeletionLagInMillis", op.DeletionLagInMs}, {"managedLedgerOffloadAutoTriggerSizeThresholdBytes", op.AutoTriggerSizeThresholdBytes}} {
		if f.v != nil && *f.v < -1 {
			return nil, invalid("%s must be -1 (off) or more", f.name)
		}
	}
	if op.ReadPriority != "" {
		if _, err := mledger.ParseOffloadReadPriority(op.ReadPriority); err != nil {
			return nil, invalid("invalid managedLedgerOffloadedReadPriority %q: want tiered-storage-first or bookkeeper-first", op.ReadPriority)
		}
	}
	var out bytes.Buffer
	if err := json.Compact(&out, bytes.TrimSpace(b)); err != nil {
		return nil, invalid("invalid body: %v", err)
	}
	if bytes.Equal(out.Bytes(), []byte("null")) {
		return nil, invalid("a body is required")
	}
	return json.RawMessage(out.Bytes()), nil
}

// checkOffloadThreshold checks a namespace's offloadThreshold (bytes): -1 turns automatic
// offload by size off, 0 offloads every closed ledger; below -1 is refused.
var checkOffloadThreshold = checked(func(v *int64) error {
	if *v < -1 {
		return invalid("Invalid value for offloadThreshold: must be -1 (off) or more")
	}
	return nil
})

// checkOffloadThresholdInSeconds checks a namespace's offloadThresholdInSeconds, with
// Pulsar's reason for a negative value; -1 (Pulsar's value for "not set") is accepted and
// turns automatic offload by age off.
var checkOffloadThresholdInSeconds = checked(func(v *int64) error {
	if *v < -1 {
		return invalid("Invalid value for offloadThresholdInSecond")
	}
	return nil
})

// checkOffloadDeletionLag checks a namespace's offloadDeletionLagMs: -1 (or any negative
// value in a stored record) keeps the bookie copies, 0 deletes them as soon as the offload
// completes.
var checkOffloadDeletionLag = checked(func(v *int64) error {
	if *v < -1 {
		return invalid("Invalid value for offloadDeletionLagMs: must be -1 (never) or more")
	}
	return nil
})

// offloadDefault is the broker's default of an offload policy path (nil: none): -1 for the
// thresholds, as Pulsar's Policies has them.
func offloadDefault(nsPath string) any {
	switch nsPath {
	case "offloadThreshold", "offloadThresholdInSeconds":
		return int64(-1)
	}
	return nil
}

// OffloadPolicy resolves the offload policy of a topic from its record tr and its
// namespace's record nr: field by field, the topic's offloadPolicies, the namespace's
// single values, the namespace's offloadPolicies, then the broker's policy
// (ManagedLedger.Offload, else mledger.DefaultOffloadPolicy). A field that does not decode
// is skipped.
func (pr *Resolver) OffloadPolicy(tr, nr Record) mledger.OffloadPolicy {
	p := mledger.DefaultOffloadPolicy()
	if pr.ManagedLedger.Offload != nil {
		p = *pr.ManagedLedger.Offload
	}
	// Apply the levels from the broker's upwards: each one overrides what it sets.
	applyOffloadPolicies(&p, nr[KeyNSOffloadPolicies])
	var n int64
	if num(nr[KeyNSOffloadThreshold], &n) {
		p.ThresholdBytes = n
	}
	if num(nr[KeyNSOffloadThresholdSecs], &n) {
		p.ThresholdAge = secondsOrOff(n)
	}
	if num(nr[KeyNSOffloadDeletionLagMs], &n) {
		p.DeletionLag = millisOrOff(n)
	}
	applyOffloadPolicies(&p, tr[KeyTopicOffloadPolicies])
	return p
}

// applyOffloadPolicies overrides p with the fields an OffloadPolicies value sets.
func applyOffloadPolicies(p *mledger.OffloadPolicy, b json.RawMessage) {
	var op OffloadPolicies
	if len(b) == 0 || json.Unmarshal(b, &op) != nil {
		return
	}
	switch {
	case op.ThresholdInBytes != nil:
		p.ThresholdBytes = *op.ThresholdInBytes
	case op.AutoTriggerSizeThresholdBytes != nil:
		p.ThresholdBytes = *op.AutoTriggerSizeThresholdBytes
	}
	if op.ThresholdInSeconds != nil {
		p.ThresholdAge = secondsOrOff(*op.ThresholdInSeconds)
	}
	if op.DeletionLagInMs != nil {
		p.DeletionLag = millisOrOff(*op.DeletionLagInMs)
	}
	if rp, err := mledger.ParseOffloadReadPriority(op.ReadPriority); err == nil {
		p.ReadPriority = rp
	}
}

// num decodes a stored number (false: none, null or not a number).
func num(b json.RawMessage, v *int64) bool {
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return false
	}
	var f float64 // a record read back through NamespacePolicies.Other holds float64s
	if json.Unmarshal(b, &f) != nil {
		return false
	}
	*v = int64(f)
	return true
}

func secondsOrOff(n int64) time.Duration {
	if n < 0 {
		return -1
	}
	return time.Duration(n) * time.Second
}

func millisOrOff(n int64) time.Duration {
	if n < 0 {
		return -1
	}
	return time.Duration(n) * time.Millisecond
}

// OffloadPoliciesOf renders a resolved policy as Pulsar's OffloadPolicies JSON fields (for
// the broker-level default and the applied topic value).
func OffloadPoliciesOf(p mledger.OffloadPolicy) OffloadPolicies {
	ms := func(d time.Duration, unit time.Duration) *int64 {
		v := int64(-1)
		if d >= 0 {
			v = int64(d / unit)
		}
		return &v
	}
	bytesT := p.ThresholdBytes
	return OffloadPolicies{ThresholdInBytes: &bytesT, ThresholdInSeconds: ms(p.ThresholdAge, time.Second),
		DeletionLagInMs: ms(p.DeletionLag, time.Millisecond), ReadPriority: p.ReadPriority.String()}
}
