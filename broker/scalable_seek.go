package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/scalable"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// Seeks of a scalable topic's subscription (the controller's Seek: un-drain the segment,
// withdraw its descendants from the assignments, fence them, then reset the cursor), and the
// marks the brokers serving segments keep for them (scalable/doc.go, owner obligations 3–4).

// segmentMarks are, per segment topic this broker served a controller's effect for, the
// highest controller term seen (a Fence or Reset of an older term is refused: a deposed
// leader's seek cannot land after a newer leader's) and, per subscription, the fence: the
// lowest assignment version a stream consumer must hold to attach. They live in memory on
// the broker serving the segment: a segment that moves to another broker loses them (the
// controller has withdrawn the fenced segments from every assignment by then, so only a
// consumer that has not polled its new assignment yet could attach in that window).
type segmentMarks struct {
	mu struct {
		sync.Mutex
		term  map[string]uint64            // segment → highest term seen
		fence map[string]map[string]uint64 // segment → sub → fence version
	}
}

// errStaleTerm refuses a segment effect of a controller term older than one already seen.
var errStaleTerm = fmt.Errorf("%w: a newer controller term has acted on the segment", ErrNotAllowed)

// observe records term for segment, refusing one older than the highest seen.
func (m *segmentMarks) observe(segment string, term uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.term == nil {
		m.mu.term, m.mu.fence = map[string]uint64{}, map[string]map[string]uint64{}
	}
	if term < m.mu.term[segment] {
		return fmt.Errorf("%w (term %d < %d)", errStaleTerm, term, m.mu.term[segment])
	}
	m.mu.term[segment] = term
	return nil
}

// raise sets sub's fence on segment to at least version.
func (m *segmentMarks) raise(segment, sub string, version uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.mu.fence[segment]
	if f == nil {
		f = map[string]uint64{}
		m.mu.fence[segment] = f
	}
	f[sub] = max(f[sub], version)
}

// fence returns sub's fence on segment (0: none).
func (m *segmentMarks) fence(segment, sub string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.fence[segment][sub]
}

// forget drops segment's marks (its topic is deleted).
func (m *segmentMarks) forget(segment string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.mu.term, segment)
	delete(m.mu.fence, segment)
}

// attachVersion is the assignment version a consumer's metadata names (0: none).
func attachVersion(md map[string]string) uint64 {
	v, _ := strconv.ParseUint(md[layout.AssignmentMetadataKey], 10, 64)
	return v
}

// checkAttach refuses a consumer of sub on topic name (a segment) whose assignment version
// is below the segment's fence. conn.subscribe calls it once the consumer is attached, so a
// fence raised concurrently either sees the consumer (and detaches it) or is seen here.
func (s *Service) checkAttach(name, sub string, md map[string]string) error {
	if !strings.HasPrefix(name, "segment://") {
		return nil
	}
	if f, v := s.scal.marks.fence(name, sub), attachVersion(md); v < f {
		return fmt.Errorf("%w: segment %s is fenced for subscription %s at assignment %d (consumer holds %d)",
			topic.ErrConsumerBusy, name, sub, f, v)
	}
	return nil
}

// SegmentFence raises sub's fence on segment to version and detaches sub's consumers that
// hold an older assignment; it refuses a term older than one seen for the segment.
func (s *Service) SegmentFence(ctx context.Context, segment, sub string, term, version uint64) error {
	if _, err := parseSegment(segment); err != nil {
		return err
	}
	t, err := s.adminTopic(ctx, segment) // *NotOwnerError if another broker serves it
	if err != nil {
		return err
	}
	if err := s.scal.marks.observe(segment, term); err != nil {
		return err
	}
	s.scal.marks.raise(segment, sub, version)
	err = t.Disconnect(ctx, sub, func(c *topic.Consumer) bool { return attachVersion(c.Metadata) < version })
	if errors.Is(err, topic.ErrSubscriptionNotFound) {
		return nil
	}
	return err
}

// SegmentReset moves sub's cursor on segment to to for the controller of term (refused if
// older than one seen for the segment); the subscription's consumers reconnect.
func (s *Service) SegmentReset(ctx context.Context, segment, sub string, term uint64, to MessageID) error {
	if _, err := parseSegment(segment); err != nil {
		return err
	}
	t, err := s.adminTopic(ctx, segment)
	if err != nil {
		return err
	}
	if err := s.scal.marks.observe(segment, term); err != nil {
		return err
	}
	return t.ResetCursor(ctx, sub, toTopicID(to))
}

// SeekScalableSubscription rewinds subscription sub of scalable topic name on segment seg to
// to (Earliest: its first message) through the controller: the segment is no longer
// drained for sub, its descendants leave the stream consumers' assignments and are fenced,
// then the cursor is reset; the descendants come back once the segment is drained again.
// It returns once the cursor is reset.
func (s *Service) SeekScalableSubscription(ctx context.Context, name, sub string, seg uint64, to MessageID) error {
	if sub == "" {
		return fmt.Errorf("%w: empty subscription name", ErrInvalidArgument)
	}
	sct, err := s.leader(ctx, name)
	if err != nil {
		return err
	}
	pos := mledger.Position{LedgerID: to.LedgerID, EntryID: to.EntryID}
	if to.LedgerID < 0 {
		pos = mledger.Earliest
	}
	err = sct.ctl.Seek(ctx, sub, layout.SegmentID(seg), pos)
	switch {
	case errors.Is(err, scalable.ErrSeekInProgress):
		return fmt.Errorf("%w: %v", ErrNotAllowed, err)
	case errors.Is(err, scalable.ErrSegmentGone):
		return fmt.Errorf("%w: %v", ErrTopicNotFound, err)
	}
	return controllerErr(err)
}
