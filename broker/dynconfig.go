package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/dynconfig"
	"github.com/magnetar-io/magnetar/broker/policy"
)

// The dynamic configuration (package broker/dynconfig over the keys of package
// broker/policy): Pulsar's …/brokers/configuration. A change stored by any broker is applied
// by every broker to its policy defaults (policy.Resolver.SetDynamic), then to its loaded
// topics.

// startDynamicConfig follows the stored dynamic configuration; the topic registry exists
// already.
func (s *Service) startDynamicConfig(ctx context.Context) error {
	d, err := dynconfig.Start(ctx, dynconfig.Config{Store: s.store, Check: policy.CheckDynamic, IsDynamic: policy.IsDynamic,
		Logger: s.log, Apply: func(values map[string]string) {
			if ignored := s.pol.SetDynamic(values); len(ignored) > 0 {
				s.log.Warn("dynamic configuration: keys not applied (not dynamic here, or values they do not take)", "keys", ignored)
			}
			s.goBackground(time.Minute, s.ReapplyAll)
		}})
	if err != nil {
		return err
	}
	s.dyn = d
	s.closers = append(s.closers, d.Close)
	return nil
}

// DynamicConfigNames lists the configuration keys that can be changed at runtime.
func (s *Service) DynamicConfigNames() []string { return policy.DynamicNames() }

// DynamicConfig returns the stored dynamic configuration: name → value of every key
// changed at runtime.
func (s *Service) DynamicConfig(ctx context.Context) (map[string]string, error) {
	return s.dyn.Values(ctx)
}

// RuntimeConfig returns the value in force of every dynamic configuration key.
func (s *Service) RuntimeConfig(context.Context) (map[string]string, error) {
	return s.pol.DynamicValues(), nil
}

// SetDynamicConfig stores name = value for every broker of the cluster; ErrPreconditionFailed
// wrapping policy.ErrNotDynamic or policy.ErrInvalidDynamicValue if refused.
func (s *Service) SetDynamicConfig(ctx context.Context, name, value string) error {
	err := s.dyn.Set(ctx, name, value)
	if errors.Is(err, policy.ErrNotDynamic) || errors.Is(err, policy.ErrInvalidDynamicValue) {
		return fmt.Errorf("%w: %w", api.ErrPreconditionFailed, err)
	}
	return err
}

// DeleteDynamicConfig removes name's stored value: the broker's own setting applies again.
func (s *Service) DeleteDynamicConfig(ctx context.Context, name string) error {
	err := s.dyn.Delete(ctx, name)
	if errors.Is(err, dynconfig.ErrNotDynamic) {
		return fmt.Errorf("%w: %w: %w", api.ErrPreconditionFailed, policy.ErrNotDynamic, err)
	}
	return err
}
