package policy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Dynamic configuration: the broker settings that Pulsar's admin API changes at runtime
// (POST /admin/v2/brokers/configuration/{name}/{value}), kept as strings in the metadata
// store by the broker and applied here over the Resolver's own settings (SetDynamic). The
// keys are the ones of Pulsar's dynamic broker configuration that are policy defaults here;
// the policies they change are resolved anew for every loaded topic by the caller.

var (
	// ErrNotDynamic marks a configuration key that cannot be changed at runtime (unknown,
	// or read only at start).
	ErrNotDynamic = errors.New("policy: not a dynamic configuration")
	// ErrInvalidDynamicValue marks a value a dynamic configuration key does not take.
	ErrInvalidDynamicValue = errors.New("policy: invalid dynamic configuration value")
)

// settings are the Resolver's settings that the dynamic configuration may change.
type settings struct {
	d                               Defaults
	disableAutoTopicCreation        bool
	disableAutoSubscriptionCreation bool
}

// dynamicKey is one dynamic configuration key: set applies a value (an error: the value is
// not taken), get formats the value in force.
type dynamicKey struct {
	set func(s *settings, v string) error
	get func(s settings) string
}

// javaBool reads a boolean as Pulsar's Boolean.valueOf does: "true" in any case is true,
// everything else false (Pulsar stores whatever it is given for a boolean key).
func javaBool(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }

func boolKey(field func(*settings) *bool, inverted bool) dynamicKey {
	return dynamicKey{
		set: func(s *settings, v string) error { *field(s) = javaBool(v) != inverted; return nil },
		get: func(s settings) string { return strconv.FormatBool(*field(&s) != inverted) },
	}
}

func intKey[T int | int64](field func(*settings) *T, least T) dynamicKey {
	return dynamicKey{
		set: func(s *settings, v string) error {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || T(n) < least || int64(T(n)) != n {
				return fmt.Errorf("%w: %q (an integer of at least %d)", ErrInvalidDynamicValue, v, least)
			}
			*field(s) = T(n)
			return nil
		},
		get: func(s settings) string { return strconv.FormatInt(int64(*field(&s)), 10) },
	}
}

func oneOfKey(field func(*settings) *string, allowed ...string) dynamicKey {
	return dynamicKey{
		set: func(s *settings, v string) error {
			if !slices.Contains(allowed, v) {
				return fmt.Errorf("%w: %q (one of %s)", ErrInvalidDynamicValue, v, strings.Join(allowed, ", "))
			}
			*field(s) = v
			return nil
		},
		get: func(s settings) string { return *field(&s) },
	}
}

// dynamicKeys are the dynamic configuration keys, by Pulsar's broker.conf name.
var dynamicKeys = map[string]dynamicKey{
	"allowAutoTopicCreation": boolKey(func(s *settings) *bool { return &s.disableAutoTopicCreation }, true),
	"allowAutoTopicCreationType": oneOfKey(func(s *settings) *string { return &s.d.AutoTopicCreationType },
		"non-partitioned", "partitioned"),
	"defaultNumPartitions":               intKey(func(s *settings) *int { return &s.d.DefaultNumPartitions }, 1),
	"allowAutoSubscriptionCreation":      boolKey(func(s *settings) *bool { return &s.disableAutoSubscriptionCreation }, true),
	"maxProducersPerTopic":               intKey(func(s *settings) *int { return &s.d.MaxProducersPerTopic }, 0),
	"maxConsumersPerTopic":               intKey(func(s *settings) *int { return &s.d.MaxConsumersPerTopic }, 0),
	"maxConsumersPerSubscription":        intKey(func(s *settings) *int { return &s.d.MaxConsumersPerSubscription }, 0),
	"maxSubscriptionsPerTopic":           intKey(func(s *settings) *int { return &s.d.MaxSubscriptionsPerTopic }, 0),
	"maxUnackedMessagesPerConsumer":      intKey(func(s *settings) *int { return &s.d.MaxUnackedMessagesPerConsumer }, 0),
	"maxUnackedMessagesPerSubscription":  intKey(func(s *settings) *int { return &s.d.MaxUnackedMessagesPerSubscription }, 0),
	"maxTopicsPerNamespace":              intKey(func(s *settings) *int { return &s.d.MaxTopicsPerNamespace }, 0),
	"maxPublishRatePerTopicInMessages":   intKey(func(s *settings) *int64 { return &s.d.MaxPublishRatePerTopicInMessages }, 0),
	"maxPublishRatePerTopicInBytes":      intKey(func(s *settings) *int64 { return &s.d.MaxPublishRatePerTopicInBytes }, 0),
	"subscriptionExpirationTimeMinutes":  intKey(func(s *settings) *int { return &s.d.SubscriptionExpirationTimeMinutes }, 0),
	"subscribeThrottlingRatePerConsumer": intKey(func(s *settings) *int { return &s.d.SubscribeThrottlingRatePerConsumer }, 0),
	"brokerDeleteInactiveTopicsEnabled":  boolKey(func(s *settings) *bool { return &s.d.DeleteInactiveTopics }, false),
	"brokerDeleteInactiveTopicsMode": oneOfKey(func(s *settings) *string { return &s.d.DeleteInactiveTopicsMode },
		"delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"),
	"brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": {
		set: func(s *settings, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 1 {
				return fmt.Errorf("%w: %q (seconds, at least 1)", ErrInvalidDynamicValue, v)
			}
			s.d.DeleteInactiveTopicsMaxInactive = time.Duration(n) * time.Second
			return nil
		},
		get: func(s settings) string { return strconv.Itoa(int(s.d.DeleteInactiveTopicsMaxInactive / time.Second)) },
	},
}

// DynamicNames lists the dynamic configuration keys, sorted (GET
// /admin/v2/brokers/configuration).
func DynamicNames() []string {
	var out []string
	for k := range dynamicKeys {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// CheckDynamic checks that name is a dynamic configuration key that takes value:
// ErrNotDynamic or ErrInvalidDynamicValue otherwise.
func CheckDynamic(name, value string) error {
	k, ok := dynamicKeys[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotDynamic, name)
	}
	var s settings
	return k.set(&s, value)
}

// IsDynamic reports whether name is a dynamic configuration key.
func IsDynamic(name string) bool {
	_, ok := dynamicKeys[name]
	return ok
}

// current returns the settings in force: the dynamic configuration's over the Resolver's.
func (pr *Resolver) current() settings {
	if s := pr.dyn.Load(); s != nil {
		return *s
	}
	return pr.base()
}

func (pr *Resolver) base() settings {
	return settings{d: pr.Defaults, disableAutoTopicCreation: pr.DisableAutoTopicCreation}
}

// SetDynamic replaces the dynamic configuration in force by values (name → value, as
// stored): each dynamic key's value over the Resolver's own setting; a key absent from
// values has the Resolver's. It returns the names it did not apply (not dynamic keys, or
// values they do not take), sorted. Safe for concurrent use with resolution: resolutions
// see the old or the new settings, never a mix.
func (pr *Resolver) SetDynamic(values map[string]string) (ignored []string) {
	s := pr.base()
	for name, v := range values {
		k, ok := dynamicKeys[name]
		if !ok || k.set(&s, v) != nil {
			ignored = append(ignored, name)
		}
	}
	pr.dyn.Store(&s)
	slices.Sort(ignored)
	return ignored
}

// DynamicValues returns the value in force of every dynamic configuration key (for GET
// /admin/v2/brokers/configuration/runtime).
func (pr *Resolver) DynamicValues() map[string]string {
	s := pr.current()
	out := make(map[string]string, len(dynamicKeys))
	for name, k := range dynamicKeys {
		out[name] = k.get(s)
	}
	return out
}
