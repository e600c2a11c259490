package scalablehost

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// The records the host owns (metadata.PrefixScalableTopics): each topic's layout record,
// which package scalable writes (CreateTopic, the controllers' commits) and the host reads,
// lists and deletes here, and its controller record (the leader's id, an ephemeral
// election key). Nothing else in the broker reads them.

// layoutKeyTopic returns the topic of a layout record's key.
func layoutKeyTopic(key string) (layout.Topic, bool) {
	rest, ok := strings.CutPrefix(key, metadata.PrefixScalableTopics)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 4 || parts[3] != "layout" {
		return layout.Topic{}, false
	}
	return layout.Topic{Tenant: parts[0], Namespace: parts[1], Name: parts[2]}, true
}

// parseTopic parses scalable topic name topic://tenant/ns/name.
func parseTopic(name string) (layout.Topic, error) {
	t, err := layout.ParseTopic(name)
	if err != nil {
		return t, fmt.Errorf("%w: %v", api.ErrInvalidName, err)
	}
	return t, topicname.CheckNamespace(t.Tenant, t.Namespace)
}

// layoutExists reports whether topic t has a layout record (false on a read error too).
func (h *Host) layoutExists(ctx context.Context, t layout.Topic) bool {
	_, err := h.env.Store.Get(ctx, metadata.ScalableLayoutKey(t.Tenant, t.Namespace, t.Name))
	return err == nil
}

// readLayout returns scalable topic name's stored layout and its version
// (api.ErrTopicNotFound wrapped if it has none).
func (h *Host) readLayout(ctx context.Context, name string) (layout.Topic, layout.Layout, metadata.Version, error) {
	t, err := parseTopic(name)
	if err != nil {
		return t, layout.Layout{}, 0, err
	}
	kv, err := h.env.Store.Get(ctx, metadata.ScalableLayoutKey(t.Tenant, t.Namespace, t.Name))
	if errors.Is(err, metadata.ErrNotFound) {
		return t, layout.Layout{}, 0, fmt.Errorf("%w: scalable topic %s", api.ErrTopicNotFound, t)
	}
	if err != nil {
		return t, layout.Layout{}, 0, err
	}
	l, err := layout.Unmarshal(kv.Value)
	return t, l, kv.Version, err
}

// deleteLayout deletes topic t's layout record if it is still at version ver.
func (h *Host) deleteLayout(ctx context.Context, t layout.Topic, ver metadata.Version) error {
	err := h.env.Store.Delete(ctx, metadata.ScalableLayoutKey(t.Tenant, t.Namespace, t.Name), ver)
	if errors.Is(err, metadata.ErrBadVersion) {
		return fmt.Errorf("%w: scalable topic %s changed meanwhile: retry", api.ErrServiceNotReady, t)
	}
	return err
}

// listTopics returns the scalable topics of namespace tenant/ns (topic:// names, in order).
func (h *Host) listTopics(ctx context.Context, tenant, ns string) ([]string, error) {
	kvs, _, err := h.env.Store.List(ctx, metadata.PrefixScalableTopics+tenant+"/"+ns+"/")
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, kv := range kvs {
		if t, ok := layoutKeyTopic(kv.Key); ok {
			out = append(out, t.String())
		}
	}
	slices.Sort(out)
	return out, nil
}

// leaderOf returns the id of the broker leading topic t's controller (metadata.ErrNotFound
// wrapped while none does).
func (h *Host) leaderOf(ctx context.Context, t layout.Topic) (string, error) {
	kv, err := h.env.Store.Get(ctx, metadata.ScalableControllerKey(t.Tenant, t.Namespace, t.Name))
	if err != nil {
		return "", err
	}
	return string(kv.Value), nil
}
