package scalablehost

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/scalable"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// The scalable-topic API of the admin layer (admin/scalable.go). Calls that need the
// topic's controller leader answer *api.NotOwnerError naming it on another broker.

// CreateScalableTopic creates scalable topic name (topic://tenant/ns/name) with n initial
// segments.
func (h *Host) CreateScalableTopic(ctx context.Context, name string, n int) error {
	t, err := parseTopic(name)
	if err != nil {
		return err
	}
	if n < 1 || n > layout.MaxHash {
		return fmt.Errorf("%w: %d initial segments", api.ErrInvalidArgument, n)
	}
	if err := h.env.Broker.CheckNamespace(ctx, t.Tenant, t.Namespace); err != nil {
		return err
	}
	if h.layoutExists(ctx, t) {
		return fmt.Errorf("%w: scalable topic %s", api.ErrAlreadyExists, t)
	}
	err = scalable.CreateTopic(ctx, h.env.Store, &segmentEffects{h: h}, t, n, nil, time.Now())
	if errors.Is(err, metadata.ErrBadVersion) {
		return fmt.Errorf("%w: scalable topic %s", api.ErrAlreadyExists, t)
	}
	return err
}

// DeleteScalableTopic deletes scalable topic name: its layout record (which stops its
// controllers), then every segment's topic.
func (h *Host) DeleteScalableTopic(ctx context.Context, name string) error {
	t, l, ver, err := h.readLayout(ctx, name)
	if err != nil {
		return err
	}
	if err := h.deleteLayout(ctx, t, ver); err != nil {
		return err
	}
	fx := &segmentEffects{h: h}
	var errs []error
	for _, seg := range append(slices.Clone(l.Segments), l.Deleting...) {
		errs = append(errs, fx.Delete(ctx, t, seg))
	}
	if l.Pending != nil {
		for _, seg := range l.Pending.Children {
			errs = append(errs, fx.Delete(ctx, t, seg))
		}
	}
	return errors.Join(errs...)
}

// ScalableTopics lists namespace ns's scalable topics (topic:// names, in order).
func (h *Host) ScalableTopics(ctx context.Context, ns string) ([]string, error) {
	tenant, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return nil, err
	}
	if err := h.env.Broker.CheckNamespace(ctx, tenant, n); err != nil {
		return nil, err
	}
	return h.listTopics(ctx, tenant, n)
}

// ScalableLayout returns scalable topic name's stored layout.
func (h *Host) ScalableLayout(ctx context.Context, name string) (layout.Layout, error) {
	_, l, _, err := h.readLayout(ctx, name)
	return l, err
}

// leader returns the controller of topic name if this broker leads it, else a
// *api.NotOwnerError naming the leader (api.ErrServiceNotReady while none leads).
func (h *Host) leader(ctx context.Context, name string) (*scalableTopic, error) {
	t, _, _, err := h.readLayout(ctx, name)
	if err != nil {
		return nil, err
	}
	sct := h.topic(t)
	if sct != nil && sct.ctl.Leading() {
		return sct, nil
	}
	id, err := h.leaderOf(ctx, t)
	if err == nil && id != h.env.Broker.ID() {
		if bi, err := h.env.Broker.LiveBroker(ctx, id); err == nil {
			return nil, &api.NotOwnerError{Topic: t.String(), Owner: bi}
		}
	}
	return nil, fmt.Errorf("%w: no controller leads %s yet", api.ErrServiceNotReady, t)
}

// controllerErr maps the controller's errors to the API's sentinels.
func controllerErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, scalable.ErrNotLeading), errors.Is(err, scalable.ErrStopped):
		return fmt.Errorf("%w: %v", api.ErrServiceNotReady, err)
	case errors.Is(err, scalable.ErrUnknownSubscription), errors.Is(err, layout.ErrNotFound):
		return fmt.Errorf("%w: %v", api.ErrTopicNotFound, err)
	case errors.Is(err, layout.ErrNotActive), errors.Is(err, layout.ErrNotAdjacent), errors.Is(err, layout.ErrBadSplit):
		return fmt.Errorf("%w: %v", api.ErrInvalidArgument, err)
	}
	return err
}

// SplitScalableSegment splits active segment seg of topic name at hash at (0: the
// midpoint) and returns once the new layout is committed.
func (h *Host) SplitScalableSegment(ctx context.Context, name string, seg uint64, at uint16) error {
	sct, err := h.leader(ctx, name)
	if err != nil {
		return err
	}
	return controllerErr(sct.ctl.Split(ctx, layout.SegmentID(seg), at))
}

// MergeScalableSegments merges adjacent active segments a and b of topic name.
func (h *Host) MergeScalableSegments(ctx context.Context, name string, a, b uint64) error {
	sct, err := h.leader(ctx, name)
	if err != nil {
		return err
	}
	return controllerErr(sct.ctl.Merge(ctx, layout.SegmentID(a), layout.SegmentID(b)))
}

// CreateScalableSubscription adds subscription sub to topic name (a cursor at the earliest
// of every segment); an existing one is api.ErrAlreadyExists.
func (h *Host) CreateScalableSubscription(ctx context.Context, name, sub string) error {
	if sub == "" {
		return fmt.Errorf("%w: empty subscription name", api.ErrInvalidArgument)
	}
	if _, l, _, err := h.readLayout(ctx, name); err != nil {
		return err
	} else if slices.Contains(l.Subscriptions, sub) {
		return fmt.Errorf("%w: subscription %s", api.ErrAlreadyExists, sub)
	}
	sct, err := h.leader(ctx, name)
	if err != nil {
		return err
	}
	return controllerErr(sct.ctl.Subscribe(ctx, sub))
}

// RegisterStreamConsumer registers stream consumer consumer of sub on topic name, for
// client session session (a new session of a registered consumer is its reconnect).
func (h *Host) RegisterStreamConsumer(ctx context.Context, name, sub, consumer string, session uint64) error {
	sct, err := h.leader(ctx, name)
	if err != nil {
		return err
	}
	k := [2]string{sub, consumer}
	sct.mu.Lock()
	sct.polled[k], sct.session[k] = time.Now(), session
	sct.mu.Unlock()
	return controllerErr(sct.ctl.Register(ctx, sub, consumer, session))
}

// UnregisterStreamConsumer removes stream consumer consumer of sub on topic name.
func (h *Host) UnregisterStreamConsumer(ctx context.Context, name, sub, consumer string) error {
	sct, err := h.leader(ctx, name)
	if err != nil {
		return err
	}
	k := [2]string{sub, consumer}
	sct.mu.Lock()
	delete(sct.polled, k)
	delete(sct.assign, k)
	sct.mu.Unlock()
	return controllerErr(sct.ctl.Unregister(ctx, sub, consumer))
}

// StreamAssignment returns the newest assignment of stream consumer consumer of sub, waiting
// (until ctx ends) for one newer than version after; on timeout it returns the current one.
// A consumer that stops asking is reported disconnected after a while.
func (h *Host) StreamAssignment(ctx context.Context, name, sub, consumer string, after uint64) (scalable.Assignment, error) {
	sct, err := h.leader(ctx, name)
	if err != nil {
		return scalable.Assignment{}, err
	}
	k := [2]string{sub, consumer}
	for {
		sct.mu.Lock()
		if _, ok := sct.polled[k]; !ok {
			sct.mu.Unlock()
			return scalable.Assignment{}, fmt.Errorf("%w: stream consumer %s of %s is not registered here", api.ErrSubscriptionNotFound, consumer, sub)
		}
		sct.polled[k] = time.Now()
		a, ok := sct.assign[k]
		ch := sct.changed
		sct.mu.Unlock()
		if ok && a.Version > after {
			return a, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if !ok {
				return scalable.Assignment{Sub: sub, Consumer: consumer}, nil
			}
			return a, nil
		case <-h.life.Done():
			return scalable.Assignment{}, api.ErrServiceNotReady
		}
		if !sct.ctl.Leading() {
			return scalable.Assignment{}, fmt.Errorf("%w: leadership of %s lost", api.ErrServiceNotReady, name)
		}
	}
}

// ScalableTopicStats returns the statistics of topic name's segments (from their owners)
// and their sums.
func (h *Host) ScalableTopicStats(ctx context.Context, name string) (api.ScalableStats, error) {
	t, l, _, err := h.readLayout(ctx, name)
	if err != nil {
		return api.ScalableStats{}, err
	}
	out := api.ScalableStats{Topic: t.String(), Epoch: l.Epoch, Backlog: map[string]int64{}, Segments: map[string]api.TopicStats{}}
	for _, sub := range l.Subscriptions {
		out.Backlog[sub] = 0
	}
	for _, seg := range l.Segments {
		if seg.State == layout.StateActive {
			out.Active++
		} else {
			out.Sealed++
		}
		segName := t.SegmentName(seg)
		var ts api.TopicStats
		if err := h.segmentStats(ctx, segName, &ts); err != nil {
			return api.ScalableStats{}, fmt.Errorf("segment %s: %w", segName, err)
		}
		out.Segments[segName] = ts
		out.MsgIn += ts.MsgInCounter
		out.MsgOut += ts.MsgOutCounter
		out.RateIn += ts.MsgRateIn
		out.RateOut += ts.MsgRateOut
		for sub, ss := range ts.Subscriptions {
			if _, ok := out.Backlog[sub]; ok {
				out.Backlog[sub] += ss.MsgBacklog
			}
		}
	}
	return out, nil
}

// SeekScalableSubscription rewinds subscription sub of scalable topic name on segment seg to
// to (api.Earliest: its first message) through the controller: the segment is no longer
// drained for sub, its descendants leave the stream consumers' assignments and are fenced,
// then the cursor is reset; the descendants come back once the segment is drained again.
// It returns once the cursor is reset.
func (h *Host) SeekScalableSubscription(ctx context.Context, name, sub string, seg uint64, to api.MessageID) error {
	if sub == "" {
		return fmt.Errorf("%w: empty subscription name", api.ErrInvalidArgument)
	}
	sct, err := h.leader(ctx, name)
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
		return fmt.Errorf("%w: %v", api.ErrNotAllowed, err)
	case errors.Is(err, scalable.ErrSegmentGone):
		return fmt.Errorf("%w: %v", api.ErrTopicNotFound, err)
	}
	return controllerErr(err)
}
