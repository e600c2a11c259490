package scalable

import (
	"fmt"
	"slices"

	"github.com/magnetar-io/magnetar/scalable/layout"
)

// LoadSample is one active segment's load, as its broker reports it (upstream's
// SegmentLoadSample): rates in and out, and since when the sample has held (ChangedMs: the
// time of the last report that changed it by more than the reporting band), so that a
// segment counts as cold only once it stayed cold for the merge window.
type LoadSample struct {
	MsgRateIn, BytesRateIn, MsgRateOut, BytesRateOut float64
	ChangedMs                                        int64
}

// Policy is the auto-scale policy of a topic (upstream PIP-483's AutoScaleConfig, with the
// broker keys scalableTopic*). Split thresholds must be above the merge ones (hysteresis).
type Policy struct {
	Enabled bool
	// MinSegments and MaxSegments bound the active segments: no merge at or below the
	// minimum, no split at or above the maximum.
	MinSegments, MaxSegments int
	// MaxDAGDepth caps the merges in a segment's lineage (layout.MergeDepth): a pair is
	// merged only while both are below it (upstream's maxDagDepth).
	MaxDAGDepth int
	// SplitCooldownMs and MergeCooldownMs are the least time between two splits or two
	// merges of the topic (admin ones included); MergeWindowMs how long a segment must stay
	// cold before it may be merged.
	SplitCooldownMs, MergeCooldownMs, MergeWindowMs int64
	// Split thresholds (per segment, per second): a segment over any one is split.
	SplitMsgRateIn, SplitBytesRateIn, SplitMsgRateOut, SplitBytesRateOut float64
	// Merge thresholds: a segment under all of them is cold.
	MergeMsgRateIn, MergeBytesRateIn, MergeMsgRateOut, MergeBytesRateOut float64
	// SplitOnConsumers splits the busiest segment while a stream subscription has more
	// consumers than there are active segments.
	SplitOnConsumers bool
}

// DefaultPolicy returns the upstream defaults where upstream documents them (64 segments,
// 60 s split cooldown, 300 s merge cooldown and window, DAG depth 10) and conservative
// thresholds otherwise; auto-scaling is off by default.
func DefaultPolicy() Policy {
	return Policy{
		MinSegments: 1, MaxSegments: 64, MaxDAGDepth: 10,
		SplitCooldownMs: 60_000, MergeCooldownMs: 300_000, MergeWindowMs: 300_000,
		SplitMsgRateIn: 10_000, SplitBytesRateIn: 50 << 20, SplitMsgRateOut: 50_000, SplitBytesRateOut: 200 << 20,
		MergeMsgRateIn: 1_000, MergeBytesRateIn: 5 << 20, MergeMsgRateOut: 5_000, MergeBytesRateOut: 20 << 20,
		SplitOnConsumers: true,
	}
}

// Validate reports a policy the evaluator cannot use.
func (p Policy) Validate() error {
	switch {
	case p.MinSegments < 1 || p.MaxSegments < p.MinSegments:
		return fmt.Errorf("scalable: policy segments [%d, %d]", p.MinSegments, p.MaxSegments)
	case p.MaxDAGDepth < 0 || p.SplitCooldownMs < 0 || p.MergeCooldownMs < 0 || p.MergeWindowMs < 0:
		return fmt.Errorf("scalable: negative policy depth or duration")
	case p.SplitMsgRateIn <= p.MergeMsgRateIn || p.SplitBytesRateIn <= p.MergeBytesRateIn ||
		p.SplitMsgRateOut <= p.MergeMsgRateOut || p.SplitBytesRateOut <= p.MergeBytesRateOut:
		return fmt.Errorf("scalable: every split threshold must be above its merge threshold")
	case p.MergeMsgRateIn < 0 || p.MergeBytesRateIn < 0 || p.MergeMsgRateOut < 0 || p.MergeBytesRateOut < 0:
		return fmt.Errorf("scalable: negative merge threshold")
	}
	return nil
}

// DecisionKind tells a decision apart.
type DecisionKind uint8

// Decisions.
const (
	DecideNone DecisionKind = iota
	DecideSplit
	DecideMerge
)

// Decision is the policy's choice: split Segment, or merge Segment with Other.
type Decision struct {
	Kind           DecisionKind
	Segment, Other layout.SegmentID
	Reason         string
}

// Decide is the pure auto-scale evaluation (upstream's AutoScalePolicyEvaluator.decide):
// given the layout, the load samples of its active segments (a missing one counts as idle
// and never cold), the most stream consumers any subscription has, the time and the last
// split and merge times (0: none), it returns at most one action. Splits come first: on
// consumer count, then on the segment most over a threshold; a merge only if no split
// fires, of the coldest adjacent pair that has stayed cold for the merge window.
func Decide(l layout.Layout, load map[layout.SegmentID]LoadSample, consumers int, p Policy, nowMs, lastSplitMs, lastMergeMs int64) Decision {
	if !p.Enabled || l.Pending != nil {
		return Decision{}
	}
	active := l.Active()
	canSplit := len(active) < p.MaxSegments && (lastSplitMs == 0 || nowMs-lastSplitMs >= p.SplitCooldownMs)
	if canSplit {
		if p.SplitOnConsumers && consumers > len(active) {
			if s, ok := busiest(active, load); ok {
				return Decision{Kind: DecideSplit, Segment: s, Reason: "consumer-count"}
			}
		}
		var best Decision
		bestScore := 1.0
		for _, s := range active {
			ld := load[s.ID]
			for i, r := range []float64{ld.MsgRateIn / p.SplitMsgRateIn, ld.BytesRateIn / p.SplitBytesRateIn,
				ld.MsgRateOut / p.SplitMsgRateOut, ld.BytesRateOut / p.SplitBytesRateOut} {
				if r > bestScore && s.Range.Size() >= 2 {
					bestScore = r
					best = Decision{Kind: DecideSplit, Segment: s.ID, Reason: []string{"msgRateIn", "bytesRateIn", "msgRateOut", "bytesRateOut"}[i]}
				}
			}
		}
		if best.Kind != DecideNone {
			return best
		}
	}
	// A merge must not leave a stream consumer without a segment (that would flap with the
	// consumer-count split).
	if len(active) <= p.MinSegments || (p.SplitOnConsumers && len(active) <= consumers) ||
		(lastMergeMs != 0 && nowMs-lastMergeMs < p.MergeCooldownMs) {
		return Decision{}
	}
	cold := func(id layout.SegmentID) bool {
		ld, ok := load[id]
		return ok && nowMs-ld.ChangedMs >= p.MergeWindowMs && ld.MsgRateIn < p.MergeMsgRateIn &&
			ld.BytesRateIn < p.MergeBytesRateIn && ld.MsgRateOut < p.MergeMsgRateOut && ld.BytesRateOut < p.MergeBytesRateOut
	}
	var best Decision
	bestRate := 0.0
	for i := 1; i < len(active); i++ {
		a, b := active[i-1], active[i]
		if l.MergeDepth(a.ID) >= p.MaxDAGDepth || l.MergeDepth(b.ID) >= p.MaxDAGDepth || !cold(a.ID) || !cold(b.ID) {
			continue
		}
		if r := rate(load[a.ID]) + rate(load[b.ID]); best.Kind == DecideNone || r < bestRate {
			best, bestRate = Decision{Kind: DecideMerge, Segment: a.ID, Other: b.ID, Reason: "cold"}, r
		}
	}
	return best
}

func rate(l LoadSample) float64 { return l.MsgRateIn + l.BytesRateIn + l.MsgRateOut + l.BytesRateOut }

// busiest returns the splittable active segment with the highest inbound message rate
// (lowest id on ties).
func busiest(active []layout.Segment, load map[layout.SegmentID]LoadSample) (layout.SegmentID, bool) {
	cands := slices.DeleteFunc(slices.Clone(active), func(s layout.Segment) bool { return s.Range.Size() < 2 })
	if len(cands) == 0 {
		return 0, false
	}
	best := slices.MaxFunc(cands, func(a, b layout.Segment) int {
		ra, rb := load[a.ID].MsgRateIn, load[b.ID].MsgRateIn
		switch {
		case ra != rb:
			if ra < rb {
				return -1
			}
			return 1
		case a.ID > b.ID:
			return -1
		case a.ID < b.ID:
			return 1
		}
		return 0
	})
	return best.ID, true
}
