package scalablehost

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// The segment operations: on this broker only (*api.NotOwnerError if another serves the
// segment). The controller's leader calls them, here or through the admin API.

// SegmentCreate creates segment's topic if missing and a durable subscription at the earliest
// for each of subs it lacks.
func (h *Host) SegmentCreate(ctx context.Context, segment string, subs []string) error {
	if _, err := parseSegment(segment); err != nil {
		return err
	}
	if err := h.env.Segments.CreateTopic(ctx, segment); err != nil && !errors.Is(err, api.ErrAlreadyExists) {
		return err
	}
	for _, sub := range subs {
		if err := h.env.Segments.CreateSubscription(ctx, segment, sub, api.Earliest); err != nil && !errors.Is(err, api.ErrAlreadyExists) {
			return err
		}
	}
	return nil
}

// SegmentSeal terminates segment's managed ledger (idempotent): its producers get
// TopicTerminated.
func (h *Host) SegmentSeal(ctx context.Context, segment string) error {
	if _, err := parseSegment(segment); err != nil {
		return err
	}
	return h.env.Segments.Terminate(ctx, segment)
}

// SegmentDelete deletes segment's topic and data (a missing one is not an error) and
// forgets its marks.
func (h *Host) SegmentDelete(ctx context.Context, segment string) error {
	if _, err := parseSegment(segment); err != nil {
		return err
	}
	err := h.env.Segments.DeleteTopic(ctx, segment)
	if errors.Is(err, api.ErrTopicNotFound) {
		err = nil
	}
	if err == nil {
		h.marks.forget(segment)
	}
	return err
}

// SegmentDrained reports whether segment is terminated and sub has acknowledged all of it.
func (h *Host) SegmentDrained(ctx context.Context, segment, sub string) (bool, error) {
	if _, err := parseSegment(segment); err != nil {
		return false, err
	}
	st, err := h.env.Segments.TopicStats(ctx, segment)
	if err != nil {
		return false, err
	}
	ss, ok := st.Subscriptions[sub]
	return st.Terminated && ok && ss.MsgBacklog == 0, nil
}

// SegmentFence raises sub's fence on segment to version and detaches sub's consumers that
// hold an older assignment; it refuses a term older than one seen for the segment.
func (h *Host) SegmentFence(ctx context.Context, segment, sub string, term, version uint64) error {
	if _, err := parseSegment(segment); err != nil {
		return err
	}
	t, err := h.env.Segments.Topic(ctx, segment) // *NotOwnerError if another broker serves it
	if err != nil {
		return err
	}
	if err := h.marks.observe(segment, term); err != nil {
		return err
	}
	h.marks.raise(segment, sub, version)
	err = t.Disconnect(ctx, sub, func(c *topic.Consumer) bool { return attachVersion(c.Metadata) < version })
	if errors.Is(err, api.ErrSubscriptionNotFound) {
		return nil
	}
	return err
}

// SegmentReset moves sub's cursor on segment to to for the controller of term (refused if
// older than one seen for the segment); the subscription's consumers reconnect.
func (h *Host) SegmentReset(ctx context.Context, segment, sub string, term uint64, to api.MessageID) error {
	if _, err := parseSegment(segment); err != nil {
		return err
	}
	if _, err := h.env.Segments.Topic(ctx, segment); err != nil { // *NotOwnerError if another broker serves it
		return err
	}
	if err := h.marks.observe(segment, term); err != nil {
		return err
	}
	return h.env.Segments.ResetCursor(ctx, segment, sub, to)
}

// CheckAttach refuses a consumer of sub on topic name (a segment) whose assignment version
// (md: the consumer's metadata) is below the segment's fence; nil for any other topic. The
// protocol server calls it once the consumer is attached, so a fence raised concurrently
// either sees the consumer (and detaches it) or is seen here.
func (h *Host) CheckAttach(name, sub string, md map[string]string) error {
	if !strings.HasPrefix(name, "segment://") {
		return nil
	}
	if f, v := h.marks.fence(name, sub), attachVersion(md); v < f {
		return fmt.Errorf("%w: segment %s is fenced for subscription %s at assignment %d (consumer holds %d)",
			topic.ErrConsumerBusy, name, sub, f, v)
	}
	return nil
}

func parseSegment(segment string) (topicname.Name, error) {
	n, err := topicname.Parse(segment)
	if err == nil && !n.IsSegment() {
		err = fmt.Errorf("%w: %s is not a segment:// name", api.ErrInvalidName, segment)
	}
	return n, err
}

// segmentMarks are, per segment topic this broker served a controller's effect for, the
// highest controller term seen (a Fence or Reset of an older term is refused: a deposed
// leader's seek cannot land after a newer leader's) and, per subscription, the fence: the
// lowest assignment version a stream consumer must hold to attach (scalable/doc.go, owner
// obligations 3–4). They live in memory on the broker serving the segment: a segment that
// moves to another broker loses them (the controller has withdrawn the fenced segments
// from every assignment by then, so only a consumer that has not polled its new
// assignment yet could attach in that window).
type segmentMarks struct {
	mu struct {
		sync.Mutex
		term  map[string]uint64            // segment → highest term seen
		fence map[string]map[string]uint64 // segment → sub → fence version
	}
}

// errStaleTerm refuses a segment effect of a controller term older than one already seen.
var errStaleTerm = fmt.Errorf("%w: a newer controller term has acted on the segment", api.ErrNotAllowed)

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

// raise sets sub's fence on segment to at least version. observe comes first.
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
