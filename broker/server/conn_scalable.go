package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// The scalable-topic commands (BaseCommand types 70..78, proto/pulsar/doc.go), served only
// to a client whose CONNECT set FeatureFlags.supports_scalable_topics (conn.scalableOK):
//
//   - SCALABLE_TOPIC_LOOKUP opens a DAG watch session, served by any broker from the
//     metadata store: the layout record and the controller's election key are watched, and
//     SCALABLE_TOPIC_UPDATE carries the DAG (segments, the brokers serving them, the
//     controller's URL) at once and again at every change. SCALABLE_TOPIC_CLOSE or the
//     connection's end stops it.
//   - SCALABLE_TOPIC_SUBSCRIBE registers a stream consumer with the topic's controller
//     leader — here, or forwarded to the leader's admin API as the HTTP path does — and is
//     answered with its assignment; SCALABLE_TOPIC_ASSIGNMENT_UPDATE pushes every newer one.
//     The session's long polls keep the consumer alive at the controller; when the
//     connection ends they stop and the consumer's grace period starts. A leader change
//     re-registers it with the new leader. A consumer unregistered (admin DELETE) ends its
//     session.
//   - WATCH_SCALABLE_TOPICS answers a snapshot of the namespace's scalable topics, then
//     diffs; WATCH_SCALABLE_TOPICS_CLOSE or the connection's end stops it.
//
// Each session is one goroutine owning its state (what it last sent), sending through
// conn.Send; its context ends with the connection or its close command. A client without
// the flag gets CommandError{NotAllowedError} for any of them (it knows ERROR; it would
// close the connection on an unknown type) and is never sent one. Errors for a client with
// the flag travel in the command's own response type, as upstream answers them.

// errScalableFlag answers a scalable-topic command from a client that did not advertise them.
var errScalableFlag = fmt.Errorf("%w: scalable-topic commands need FeatureFlags.supports_scalable_topics in CONNECT", api.ErrNotAllowed)

// scalableSessions are one connection's scalable-topic sessions by id (a leaf lock).
type scalableSessions struct {
	mu        sync.Mutex // guards the maps
	dags      map[uint64]context.CancelFunc
	consumers map[uint64]context.CancelFunc
	watches   map[uint64]context.CancelFunc
}

// start records a session under id in m (false: the id is in use) and returns its context.
func (ss *scalableSessions) start(c *conn, m *map[uint64]context.CancelFunc, id uint64) (context.Context, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if *m == nil {
		*m = map[uint64]context.CancelFunc{}
	}
	if _, ok := (*m)[id]; ok {
		return nil, false
	}
	ctx, cancel := context.WithCancel(c.s.ctx)
	(*m)[id] = cancel
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, true
}

// stop cancels session id of m (false: none).
func (ss *scalableSessions) stop(m map[uint64]context.CancelFunc, id uint64) bool {
	ss.mu.Lock()
	cancel, ok := m[id]
	delete(m, id)
	ss.mu.Unlock()
	if ok {
		cancel()
	}
	return ok
}

// ended forgets session id of m once its goroutine returns.
func (ss *scalableSessions) ended(m map[uint64]context.CancelFunc, id uint64) {
	ss.mu.Lock()
	cancel := m[id]
	delete(m, id)
	ss.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// handleScalable serves one scalable-topic command on the reader goroutine.
func (c *conn) handleScalable(cmd *pb.BaseCommand) {
	t := cmd.GetType()
	if !c.scalableOK {
		var id uint64
		switch t {
		case pb.BaseCommand_SCALABLE_TOPIC_LOOKUP:
			id = cmd.GetScalableTopicLookup().GetSessionId()
		case pb.BaseCommand_SCALABLE_TOPIC_CLOSE:
			id = cmd.GetScalableTopicClose().GetSessionId()
		case pb.BaseCommand_SCALABLE_TOPIC_SUBSCRIBE:
			id = cmd.GetScalableTopicSubscribe().GetRequestId()
		case pb.BaseCommand_WATCH_SCALABLE_TOPICS:
			id = cmd.GetWatchScalableTopics().GetWatchId()
		case pb.BaseCommand_WATCH_SCALABLE_TOPICS_CLOSE:
			id = cmd.GetWatchScalableTopicsClose().GetWatchId()
		}
		c.log.Debug("scalable-topic command from a client without the feature flag", "type", t)
		c.sendError(id, fmt.Errorf("%w (got %v)", errScalableFlag, t))
		return
	}
	switch t {
	case pb.BaseCommand_SCALABLE_TOPIC_LOOKUP:
		c.startDAGSession(cmd.GetScalableTopicLookup())
	case pb.BaseCommand_SCALABLE_TOPIC_CLOSE:
		c.scal.stop(c.scal.dags, cmd.GetScalableTopicClose().GetSessionId())
	case pb.BaseCommand_SCALABLE_TOPIC_SUBSCRIBE:
		c.startStreamSession(cmd.GetScalableTopicSubscribe())
	case pb.BaseCommand_WATCH_SCALABLE_TOPICS:
		c.startNamespaceWatch(cmd.GetWatchScalableTopics())
	case pb.BaseCommand_WATCH_SCALABLE_TOPICS_CLOSE:
		c.scal.stop(c.scal.watches, cmd.GetWatchScalableTopicsClose().GetWatchId())
	default:
		// Broker-to-client types (updates, responses) sent by a client.
		c.log.Debug("ignoring a broker-to-client scalable-topic command", "type", t)
	}
}

// ---- DAG watch ----

func (c *conn) dagError(id uint64, err error) {
	msg := err.Error()
	c.Send(pulsar.Wrap(&pb.CommandScalableTopicUpdate{SessionId: &id, Error: serverError(err).Enum(), Message: &msg}))
}

func (c *conn) startDAGSession(cmd *pb.CommandScalableTopicLookup) {
	id := cmd.GetSessionId()
	t, err := scalableTopic(cmd.GetTopic())
	if err != nil {
		c.dagError(id, err)
		return
	}
	ctx, ok := c.scal.start(c, &c.scal.dags, id)
	if !ok {
		c.dagError(id, fmt.Errorf("%w: DAG watch session %d is already open", api.ErrNotAllowed, id))
		return
	}
	go func() {
		defer c.scal.ended(c.scal.dags, id)
		c.dagSession(ctx, id, t)
	}()
}

// dagSession sends topic t's DAG, then again at every change of its layout record or
// controller, until ctx ends. A deleted (or missing) topic ends it with TopicNotFound.
func (c *conn) dagSession(ctx context.Context, id uint64, t layout.Topic) {
	if err := c.authorizeName(ctx, "persistent://"+t.Tenant+"/"+t.Namespace+"/"+t.Name, auth.ActionLookup); err != nil {
		c.dagError(id, err)
		return
	}
	resolved := t.String()
	var last []byte // the DAG last sent, marshalled
	send := func() bool {
		dag, err := c.b.ScalableDAG(ctx, t)
		if err != nil {
			if ctx.Err() == nil {
				c.dagError(id, err)
			}
			return false
		}
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(dag)
		if !bytes.Equal(b, last) {
			last = b
			c.Send(pulsar.Wrap(&pb.CommandScalableTopicUpdate{SessionId: &id, Dag: dag, ResolvedTopicName: &resolved}))
		}
		return true
	}
	for range c.b.WatchScalableTopic(ctx, t) {
		if !send() {
			return
		}
	}
}

// ---- stream consumers ----

func (c *conn) startStreamSession(cmd *pb.CommandScalableTopicSubscribe) {
	rid, cid := cmd.GetRequestId(), cmd.GetConsumerId()
	fail := func(err error) {
		msg := err.Error()
		c.Send(pulsar.Wrap(&pb.CommandScalableTopicSubscribeResponse{RequestId: &rid, Error: serverError(err).Enum(), Message: &msg}))
	}
	t, err := scalableTopic(cmd.GetTopic())
	switch {
	case err != nil:
		fail(err)
		return
	case cmd.GetSubscription() == "" || cmd.GetConsumerName() == "":
		fail(fmt.Errorf("%w: a stream consumer needs a subscription and a consumer name", api.ErrInvalidArgument))
		return
	case cmd.GetConsumerType() != pb.ScalableConsumerType_STREAM:
		fail(fmt.Errorf("%w: consumer type %v is not supported", api.ErrNotAllowed, cmd.GetConsumerType()))
		return
	}
	ctx, ok := c.scal.start(c, &c.scal.consumers, cid)
	if !ok {
		fail(fmt.Errorf("%w: stream consumer %d is already subscribed on this connection", api.ErrNotAllowed, cid))
		return
	}
	go func() {
		defer c.scal.ended(c.scal.consumers, cid)
		c.streamSession(ctx, rid, cid, t, cmd.GetSubscription(), cmd.GetConsumerName(), fail)
	}()
}

// streamWait is how long one assignment poll of a stream session waits at the leader.
const streamWait = 5 * time.Second

// streamSession registers the consumer, answers its first assignment, then pushes every
// newer one until ctx ends.
func (c *conn) streamSession(ctx context.Context, rid, cid uint64, t layout.Topic, sub, consumer string, fail func(error)) {
	name := t.String()
	if err := c.authorizeName(ctx, "persistent://"+t.Tenant+"/"+t.Namespace+"/"+t.Name, auth.ActionConsume); err != nil {
		fail(err)
		return
	}
	session := uint64(time.Now().UnixNano())>>1 ^ cid
	leader, err := c.b.RegisterStream(ctx, name, sub, consumer, session)
	if err != nil {
		fail(err)
		return
	}
	defer func() {
		c.b.StreamEnded(leader, name, sub, consumer, session) // the connection or the session ended
	}()
	a, err := c.b.StreamAssignment(ctx, leader, name, sub, consumer, 0, streamWait)
	if err != nil && ctx.Err() == nil {
		fail(err)
		return
	}
	pa, err := c.b.AssignmentProto(ctx, t, a)
	if err != nil {
		fail(err)
		return
	}
	c.Send(pulsar.Wrap(&pb.CommandScalableTopicSubscribeResponse{RequestId: &rid, Assignment: pa}))
	version := a.Version
	delay := 10 * time.Millisecond
	for ctx.Err() == nil {
		a, err := c.b.StreamAssignment(ctx, leader, name, sub, consumer, version, streamWait)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// Unregistered at the same leader: the consumer closed. Otherwise the leader may
			// have moved: register with the current one.
			next, lerr := c.b.StreamLeader(ctx, name)
			if errors.Is(err, api.ErrSubscriptionNotFound) && lerr == nil && next == leader {
				c.log.Debug("stream consumer unregistered", "topic", name, "sub", sub, "consumer", consumer)
				return
			}
			if !backoff.Sleep(ctx, delay) {
				return
			}
			delay = min(2*delay, time.Second)
			if l, err := c.b.RegisterStream(ctx, name, sub, consumer, session); err == nil {
				leader, version = l, 0
			}
			continue
		}
		delay = 10 * time.Millisecond
		if a.Version <= version {
			continue
		}
		version = a.Version
		pa, err := c.b.AssignmentProto(ctx, t, a)
		if err != nil {
			continue
		}
		c.Send(pulsar.Wrap(&pb.CommandScalableTopicAssignmentUpdate{ConsumerId: &cid, Assignment: pa}))
	}
}

// ---- namespace watch ----

func (c *conn) watchError(id uint64, err error) {
	msg := err.Error()
	c.Send(pulsar.Wrap(&pb.CommandWatchScalableTopicsUpdate{WatchId: &id, Error: serverError(err).Enum(), Message: &msg}))
}

func (c *conn) startNamespaceWatch(cmd *pb.CommandWatchScalableTopics) {
	id := cmd.GetWatchId()
	tenant, ns, err := topicname.ParseNamespace(cmd.GetNamespace())
	switch {
	case err != nil:
		c.watchError(id, err)
		return
	case len(cmd.GetPropertyFilters()) > 0:
		c.watchError(id, fmt.Errorf("%w: scalable topics have no properties to filter on", api.ErrNotAllowed))
		return
	}
	ctx, ok := c.scal.start(c, &c.scal.watches, id)
	if !ok {
		c.watchError(id, fmt.Errorf("%w: namespace watch %d is already open", api.ErrNotAllowed, id))
		return
	}
	go func() {
		defer c.scal.ended(c.scal.watches, id)
		c.namespaceWatch(ctx, id, tenant, ns)
	}()
}

// namespaceWatch sends the namespace's scalable topics, then a diff at every change.
func (c *conn) namespaceWatch(ctx context.Context, id uint64, tenant, ns string) {
	if err := c.authorizeNamespace(ctx, tenant, ns); err != nil {
		c.watchError(id, err)
		return
	}
	if err := c.b.CheckNamespace(ctx, tenant, ns); err != nil {
		c.watchError(id, err)
		return
	}
	var have map[string]bool // nil until the snapshot is sent
	for topics := range c.b.WatchScalableTopics(ctx, tenant, ns) {
		now := make(map[string]bool, len(topics))
		for _, t := range topics {
			now[t] = true
		}
		if have == nil {
			snap := slices.Sorted(maps.Keys(now))
			c.Send(pulsar.Wrap(&pb.CommandWatchScalableTopicsUpdate{WatchId: &id,
				Event: &pb.CommandWatchScalableTopicsUpdate_Snapshot{Snapshot: &pb.ScalableTopicsSnapshot{Topics: snap}}}))
		} else {
			c.sendTopicsDiff(id, have, now)
		}
		have = now
	}
}

// scalableTopic parses a scalable topic's name (topic://tenant/ns/name).
func scalableTopic(name string) (layout.Topic, error) {
	t, err := layout.ParseTopic(name)
	if err != nil {
		return t, fmt.Errorf("%w: %v", api.ErrInvalidName, err)
	}
	return t, topicname.CheckNamespace(t.Tenant, t.Namespace)
}

// sendTopicsDiff sends what changed from have to next, if anything did.
func (c *conn) sendTopicsDiff(id uint64, have, next map[string]bool) {
	var diff pb.ScalableTopicsDiff
	for t := range next {
		if !have[t] {
			diff.Added = append(diff.Added, t)
		}
	}
	for t := range have {
		if !next[t] {
			diff.Removed = append(diff.Removed, t)
		}
	}
	if len(diff.Added)+len(diff.Removed) == 0 {
		return
	}
	slices.Sort(diff.Added)
	slices.Sort(diff.Removed)
	c.Send(pulsar.Wrap(&pb.CommandWatchScalableTopicsUpdate{WatchId: &id,
		Event: &pb.CommandWatchScalableTopicsUpdate_Diff{Diff: &diff}}))
}
