// Package dynconfig keeps Pulsar's dynamic broker configuration: broker settings changed at
// runtime through the admin API (…/brokers/configuration), stored in the metadata store at
// metadata.DynamicConfigKey as Pulsar keeps its dynamic-config node (one JSON object of
// name → value, both strings) and applied by every broker that follows the key. Which keys
// are dynamic, which values they take and what applying them does are the caller's
// (Config.Check, Config.Apply; the broker's are package broker/policy's).
//
// # Usage
//
//	d, err := dynconfig.Start(ctx, dynconfig.Config{Store: store, Check: policy.CheckDynamic,
//		Apply: func(values map[string]string) { … }})
//	defer d.Close()
//	err = d.Set(ctx, "maxProducersPerTopic", "5") // every broker's Apply hears it
//
// Caller obligations:
//  1. Close the Manager before the store.
//  2. Apply must not block for long: it runs on the Manager's goroutine, in order.
//
// # Goroutines
//
// Start runs one goroutine: it follows the key (metadata.Follower) and calls Apply with the
// key's whole content at the start and after every change (a deleted or unreadable record
// is an empty configuration), until Close, which waits for it.
package dynconfig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"

	"github.com/magnetar-io/magnetar/metadata"
)

// Config configures a Manager.
type Config struct {
	// Store is the metadata store. Required.
	Store metadata.Store
	// Check checks a change: name a dynamic key that takes value (a delete checks the name
	// with an empty value through IsDynamic instead). Required.
	Check func(name, value string) error
	// IsDynamic reports whether name is a dynamic key (deletes). Required.
	IsDynamic func(name string) bool
	// Apply applies the stored configuration (nil: nothing is applied).
	Apply func(values map[string]string)
	// Logger hears records that do not read. Default slog.Default().
	Logger *slog.Logger
}

// ErrNotDynamic is returned by Delete for a name that is not a dynamic key.
var ErrNotDynamic = errors.New("dynconfig: not a dynamic configuration")

// Manager reads, changes and follows the dynamic configuration. Safe for concurrent use.
type Manager struct {
	cfg    Config
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start follows the stored configuration, calling cfg.Apply with it on a goroutine of its
// own (the first call once the key is first read), until Close.
func Start(ctx context.Context, cfg Config) (*Manager, error) {
	if cfg.Store == nil || cfg.Check == nil || cfg.IsDynamic == nil {
		return nil, errors.New("dynconfig: Config.Store, Check and IsDynamic are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Manager{cfg: cfg}
	f := metadata.Follower{Store: cfg.Store, Prefix: metadata.DynamicConfigKey, Log: cfg.Logger}
	kvs, rev, err := f.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("dynconfig: read %s: %w", metadata.DynamicConfigKey, err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.apply(kvs)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		var cur []metadata.KV
		if kv, ok := m.own(kvs); ok {
			cur = []metadata.KV{kv}
		}
		f.Resume(runCtx, rev, func(u metadata.Update) {
			switch u.Kind {
			case metadata.Listed:
				cur = u.KVs
			case metadata.Changed:
				for _, ev := range u.Events {
					if ev.KV.Key != metadata.DynamicConfigKey {
						continue
					}
					cur = nil
					if ev.Type == metadata.EventPut {
						cur = []metadata.KV{ev.KV}
					}
				}
			default:
				return
			}
			m.apply(cur)
		})
	}()
	return m, nil
}

// own picks the configuration's own key from a listing of its prefix.
func (m *Manager) own(kvs []metadata.KV) (metadata.KV, bool) {
	for _, kv := range kvs {
		if kv.Key == metadata.DynamicConfigKey {
			return kv, true
		}
	}
	return metadata.KV{}, false
}

func (m *Manager) apply(kvs []metadata.KV) {
	if m.cfg.Apply == nil {
		return
	}
	values := map[string]string{}
	if kv, ok := m.own(kvs); ok && len(kv.Value) > 0 {
		if err := json.Unmarshal(kv.Value, &values); err != nil {
			m.cfg.Logger.Warn("dynconfig: unreadable dynamic configuration record", "key", kv.Key, "err", err)
			values = map[string]string{}
		}
	}
	m.cfg.Apply(values)
}

// Close stops following the configuration and waits for the goroutine. Idempotent.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

// Values returns the stored configuration (Pulsar's …/configuration/values): name → value
// of every key changed at runtime (none: an empty map).
func (m *Manager) Values(ctx context.Context) (map[string]string, error) {
	values, _, err := m.read(ctx)
	return values, err
}

func (m *Manager) read(ctx context.Context) (map[string]string, metadata.Version, error) {
	kv, err := m.cfg.Store.Get(ctx, metadata.DynamicConfigKey)
	if errors.Is(err, metadata.ErrNotFound) {
		return map[string]string{}, metadata.NotExists, nil
	}
	if err != nil {
		return nil, 0, err
	}
	values := map[string]string{}
	if len(kv.Value) > 0 {
		if err := json.Unmarshal(kv.Value, &values); err != nil {
			return nil, 0, fmt.Errorf("dynconfig: %s record: %w", metadata.DynamicConfigKey, err)
		}
	}
	return values, kv.Version, nil
}

// Set stores name = value once cfg.Check accepts it (its error otherwise; nothing is
// written), with a compare-and-swap of the record. Every broker applies it.
func (m *Manager) Set(ctx context.Context, name, value string) error {
	if err := m.cfg.Check(name, value); err != nil {
		return err
	}
	return m.update(ctx, func(values map[string]string) { values[name] = value })
}

// Delete removes name's value (the broker's own setting applies again); ErrNotDynamic for
// a name that is not a dynamic key.
func (m *Manager) Delete(ctx context.Context, name string) error {
	if !m.cfg.IsDynamic(name) {
		return fmt.Errorf("%w: %q", ErrNotDynamic, name)
	}
	return m.update(ctx, func(values map[string]string) { delete(values, name) })
}

// update changes the record with a compare-and-swap, retried while others change it.
func (m *Manager) update(ctx context.Context, change func(map[string]string)) error {
	for {
		values, version, err := m.read(ctx)
		if err != nil {
			return err
		}
		old := maps.Clone(values)
		change(values)
		if maps.Equal(old, values) {
			return nil
		}
		b, err := json.Marshal(values)
		if err != nil {
			return err
		}
		_, err = m.cfg.Store.Put(ctx, metadata.DynamicConfigKey, b, version)
		if !errors.Is(err, metadata.ErrBadVersion) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
