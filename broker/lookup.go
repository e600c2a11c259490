package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
)

// Ownership: the broker serving a topic holds metadata.OwnershipKey(topic), an ephemeral key
// bound to its metadata session, whose value is its BrokerInfo. A broker restarting with
// the same id takes over the keys of its previous incarnation at once (their session is
// dead or dying); another broker's key is respected until its session expires.

func ownershipKey(n topicname.Name) string {
	return metadata.OwnershipKey(n.Tenant, n.Namespace, n.Domain, n.Local)
}

// ownerOf returns the broker that owns n, nil if none.
func (s *Service) ownerOf(ctx context.Context, n topicname.Name) (*BrokerInfo, error) {
	kv, err := s.store.Get(ctx, ownershipKey(n))
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var o BrokerInfo
	if err := json.Unmarshal(kv.Value, &o); err != nil {
		return nil, fmt.Errorf("ownership record of %s: %w", n, err)
	}
	return &o, nil
}

// acquire makes this broker the owner of n, or returns *NotOwnerError.
func (s *Service) acquire(ctx context.Context, n topicname.Name) error {
	key := ownershipKey(n)
	b, _ := json.Marshal(s.info)
	for attempt := 0; attempt < 5; attempt++ {
		sess := s.session()
		_, err := sess.Put(ctx, key, b, metadata.NotExists)
		if err == nil {
			return nil
		}
		if !errors.Is(err, metadata.ErrBadVersion) {
			return fmt.Errorf("%w: acquire %s: %v", ErrServiceNotReady, n, err)
		}
		kv, err := s.store.Get(ctx, key)
		if errors.Is(err, metadata.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		var o BrokerInfo
		if err := json.Unmarshal(kv.Value, &o); err != nil || o.ID == s.info.ID {
			if kv.Lease == sess.ID() {
				return nil
			}
			// Our previous incarnation's (or a corrupt) record: take it over.
			if err := s.store.Delete(ctx, key, kv.Version); err != nil && !errors.Is(err, metadata.ErrBadVersion) {
				return err
			}
			continue
		}
		return &NotOwnerError{Topic: n.String(), Owner: o}
	}
	return fmt.Errorf("%w: ownership of %s keeps changing", ErrServiceNotReady, n)
}

// release gives up the ownership of n if this broker holds it.
func (s *Service) release(n topicname.Name) {
	sess := s.session()
	s.goBackground(10*time.Second, func(ctx context.Context) {
		key := ownershipKey(n)
		kv, err := s.store.Get(ctx, key)
		if err != nil || kv.Lease != sess.ID() {
			return
		}
		if err := s.store.Delete(ctx, key, kv.Version); err != nil && !errors.Is(err, metadata.ErrBadVersion) &&
			!errors.Is(err, metadata.ErrClosed) {
			s.log.Debug("release ownership", "topic", n.String(), "err", err)
		}
	})
}

func (s *Service) lookup(ctx context.Context, topic string) (LookupResult, error) {
	n, err := topicname.Parse(topic)
	if err != nil {
		return LookupResult{}, err
	}
	if err := s.res.checkNamespace(ctx, n.Tenant, n.Namespace); err != nil {
		return LookupResult{}, err
	}
	o, err := s.ownerOf(ctx, n)
	if err != nil {
		return LookupResult{}, err
	}
	if o != nil && o.ID != s.info.ID {
		return LookupResult{BrokerInfo: *o}, nil
	}
	if o == nil {
		var no *NotOwnerError
		if err := s.acquire(ctx, n); errors.As(err, &no) {
			return LookupResult{BrokerInfo: no.Owner}, nil
		} else if err != nil {
			return LookupResult{}, err
		}
	}
	return LookupResult{BrokerInfo: s.info, Self: true}, nil
}
