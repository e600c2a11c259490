package main

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/adminclient"
)

// policyFlag is one flag of a set-… policy command: the JSON field it fills ("": the body
// is the value itself) and how its text is read.
type policyFlag struct {
	name, short, field, usage string
	kind                      flagKind
	def                       string
}

type flagKind uint8

const (
	kindInt     flagKind = iota // a number
	kindSize                    // bytes with an optional k/m/g/t suffix (-1: unlimited)
	kindSizeMB                  // as kindSize, sent in MB
	kindMinutes                 // a duration with an s/m/h/d/w suffix, sent in minutes (-1: infinite)
	kindSeconds                 // as kindMinutes, sent in seconds
	kindString
	kindBool
	kindFloat
	kindProps // key=value,… sent as an object
)

// policyCmd describes the set-/get-/remove- commands of one policy (pulsar-admin's names).
type policyCmd struct {
	name      string // set-<name>, get-<name>, remove-<name>
	nsPath    string // REST path element at namespace level ("": not there)
	topicPath string // at topic level
	flags     []policyFlag
	// getName overrides the get command's name (get-backlog-quotas).
	getName string
}

var (
	limitFlag = func(name, short string) []policyFlag {
		return []policyFlag{{name: name, short: short, def: "0", usage: "the limit (0: unlimited)"}}
	}
	rateFlags = []policyFlag{
		{name: "msg-dispatch-rate", field: "dispatchThrottlingRateInMsg", def: "-1", usage: "messages per period (-1: unlimited)"},
		{name: "byte-dispatch-rate", field: "dispatchThrottlingRateInByte", def: "-1", usage: "bytes per period (-1: unlimited)"},
		{name: "dispatch-rate-period", field: "ratePeriodInSecond", def: "1", usage: "period in seconds"},
		{name: "relative-to-publish-rate", field: "relativeToPublishRate", kind: kindBool, def: "false", usage: "relative to the publish rate"},
	}
)

var policyCmds = []policyCmd{
	{name: "retention", nsPath: "retention", topicPath: "retention", flags: []policyFlag{
		{name: "time", field: "retentionTimeInMinutes", kind: kindMinutes, def: "0", usage: "retention time (e.g. 3h, 2d; -1: infinite)"},
		{name: "size", field: "retentionSizeInMB", kind: kindSizeMB, def: "0", usage: "retention size (e.g. 10M, 5G; -1: infinite)"}}},
	{name: "backlog-quota", getName: "get-backlog-quotas", nsPath: "backlogQuota", topicPath: "backlogQuota", flags: []policyFlag{
		{name: "limitSize", short: "l", field: "limitSize", kind: kindSize, def: "-1", usage: "size limit (destination_storage, e.g. 10M)"},
		{name: "limitTime", field: "limitTime", kind: kindSeconds, def: "-1", usage: "age limit (message_age, e.g. 1h)"},
		{name: "policy", short: "p", field: "policy", kind: kindString, def: "producer_request_hold",
			usage: "producer_request_hold, producer_exception or consumer_backlog_eviction"}}},
	{name: "message-ttl", nsPath: "messageTTL", topicPath: "messageTTL", flags: []policyFlag{
		{name: "messageTTL", short: "t", kind: kindSeconds, def: "0", usage: "message TTL (e.g. 1h; 0: none)"}}},
	{name: "publish-rate", nsPath: "publishRate", topicPath: "publishRate", flags: []policyFlag{
		{name: "msg-publish-rate", short: "m", field: "publishThrottlingRateInMsg", def: "-1", usage: "messages per second (-1: unlimited)"},
		{name: "byte-publish-rate", short: "b", field: "publishThrottlingRateInByte", kind: kindSize, def: "-1", usage: "bytes per second (-1: unlimited)"}}},
	{name: "dispatch-rate", nsPath: "dispatchRate", topicPath: "dispatchRate", flags: rateFlags},
	{name: "subscription-dispatch-rate", nsPath: "subscriptionDispatchRate", topicPath: "subscriptionDispatchRate", flags: rateFlags},
	{name: "replicator-dispatch-rate", nsPath: "replicatorDispatchRate", topicPath: "replicatorDispatchRate", flags: rateFlags},
	{name: "subscribe-rate", nsPath: "subscribeRate", topicPath: "subscribeRate", flags: []policyFlag{
		{name: "subscribe-rate", field: "subscribeThrottlingRatePerConsumer", def: "-1", usage: "subscribes per consumer per period (-1: unlimited)"},
		{name: "subscribe-rate-period", field: "ratePeriodInSecond", def: "30", usage: "period in seconds"}}},
	{name: "max-producers-per-topic", nsPath: "maxProducersPerTopic", flags: limitFlag("max-producers-per-topic", "p")},
	{name: "max-producers", topicPath: "maxProducers", flags: limitFlag("max-producers", "p")},
	{name: "max-consumers-per-topic", nsPath: "maxConsumersPerTopic", flags: limitFlag("max-consumers-per-topic", "c")},
	{name: "max-consumers", topicPath: "maxConsumers", flags: limitFlag("max-consumers", "c")},
	{name: "max-consumers-per-subscription", nsPath: "maxConsumersPerSubscription", topicPath: "maxConsumersPerSubscription", flags: limitFlag("max-consumers-per-subscription", "c")},
	{name: "max-subscriptions-per-topic", nsPath: "maxSubscriptionsPerTopic", topicPath: "maxSubscriptionsPerTopic", flags: limitFlag("max-subscriptions-per-topic", "m")},
	{name: "max-unacked-messages-per-consumer", nsPath: "maxUnackedMessagesPerConsumer", topicPath: "maxUnackedMessagesOnConsumer", flags: limitFlag("maxNum", "m")},
	{name: "max-unacked-messages-per-subscription", nsPath: "maxUnackedMessagesPerSubscription", topicPath: "maxUnackedMessagesOnSubscription", flags: limitFlag("maxNum", "m")},
	{name: "max-message-size", topicPath: "maxMessageSize", flags: limitFlag("max-message-size", "m")},
	{name: "max-topics-per-namespace", nsPath: "maxTopicsPerNamespace", flags: limitFlag("max-topics-per-namespace", "t")},
	{name: "inactive-topic-policies", nsPath: "inactiveTopicPolicies", topicPath: "inactiveTopicPolicies", flags: []policyFlag{
		{name: "enable-delete-while-inactive", short: "e", field: "deleteWhileInactive", kind: kindBool, def: "false", usage: "delete inactive topics"},
		{name: "max-inactive-duration", short: "t", field: "maxInactiveDurationSeconds", kind: kindSeconds, def: "60s", usage: "inactive for this long (e.g. 10m)"},
		{name: "delete-mode", short: "m", field: "inactiveTopicDeleteMode", kind: kindString, def: "delete_when_no_subscriptions",
			usage: "delete_when_no_subscriptions or delete_when_subscriptions_caught_up"}}},
	{name: "subscription-expiration-time", nsPath: "subscriptionExpirationTime", topicPath: "subscriptionExpirationTime", flags: []policyFlag{
		{name: "time", short: "t", kind: kindInt, def: "0", usage: "minutes"}}},
	{name: "auto-topic-creation", nsPath: "autoTopicCreation", flags: []policyFlag{
		{name: "enable", short: "e", field: "allowAutoTopicCreation", kind: kindBool, def: "false", usage: "allow auto topic creation"},
		{name: "type", short: "t", field: "topicType", kind: kindString, def: "non-partitioned", usage: "partitioned or non-partitioned"},
		{name: "num-partitions", short: "n", field: "defaultNumPartitions", def: "1", usage: "partitions of a partitioned topic"}}},
	{name: "auto-subscription-creation", nsPath: "autoSubscriptionCreation", topicPath: "autoSubscriptionCreation", flags: []policyFlag{
		{name: "enable", short: "e", field: "allowAutoSubscriptionCreation", kind: kindBool, def: "false", usage: "allow auto subscription creation"}}},
	{name: "deduplication", nsPath: "deduplication", topicPath: "deduplicationEnabled", flags: []policyFlag{
		{name: "enable", short: "e", kind: kindBool, def: "false", usage: "enable deduplication"}}},
	{name: "deduplication-snapshot-interval", nsPath: "deduplicationSnapshotInterval", topicPath: "deduplicationSnapshotInterval", flags: []policyFlag{
		{name: "interval", short: "i", def: "0", usage: "seconds"}}},
	{name: "delayed-delivery", nsPath: "delayedDelivery", topicPath: "delayedDelivery", flags: []policyFlag{
		{name: "enable", short: "e", field: "active", kind: kindBool, def: "false", usage: "enable delayed delivery"},
		{name: "time", short: "t", field: "tickTime", def: "1000", usage: "tick time in ms"},
		{name: "maxDelay", field: "maxDeliveryDelayInMillis", def: "0", usage: "max delivery delay in ms (0: none)"}}},
	{name: "persistence", nsPath: "persistence", topicPath: "persistence", flags: []policyFlag{
		{name: "bookkeeper-ensemble", short: "e", field: "bookkeeperEnsemble", def: "1", usage: "ensemble of new ledgers"},
		{name: "bookkeeper-write-quorum", short: "w", field: "bookkeeperWriteQuorum", def: "1", usage: "write quorum"},
		{name: "bookkeeper-ack-quorum", short: "a", field: "bookkeeperAckQuorum", def: "1", usage: "ack quorum"},
		{name: "ml-mark-delete-max-rate", short: "r", field: "managedLedgerMaxMarkDeleteRate", kind: kindFloat, def: "0", usage: "mark-delete rate"}}},
	{name: "properties", nsPath: "properties", topicPath: "properties", flags: []policyFlag{
		{name: "properties", short: "p", kind: kindProps, usage: "key=value,…"}}},
}

// policyCommands returns the set-/get-/remove- policy commands of namespaces (topic false)
// or topics, and expire-messages for topics.
func policyCommands(a *adminClient, topic bool) []*cobra.Command {
	var out []*cobra.Command
	target := func(arg string) (adminclient.PolicyTarget, error) {
		if topic {
			_, err := checkTopic(arg)
			return adminclient.PolicyTarget{Topic: arg}, err
		}
		return adminclient.PolicyTarget{Namespace: arg}, checkNamespace(arg)
	}
	argName := "TENANT/NAMESPACE"
	if topic {
		argName = "TOPIC"
	}
	for _, pc := range policyCmds {
		path := pc.nsPath
		if topic {
			path = pc.topicPath
		}
		if path == "" {
			continue
		}
		var quotaType string
		var applied bool
		// quotaQuery is the backlog quota's type parameter.
		quotaQuery := func() url.Values {
			if pc.nsPath != "backlogQuota" {
				return nil
			}
			return url.Values{"backlogQuotaType": {quotaType}}
		}
		vals := make([]string, len(pc.flags))
		set := leaf("set-"+pc.name+" "+argName, "Set the "+pc.name+" policy", 1, func(cmd *cobra.Command, args []string) error {
			t, err := target(args[0])
			if err != nil {
				return err
			}
			body, err := policyBody(pc.flags, vals)
			if err != nil {
				return usageError{err}
			}
			if err := a.c.SetPolicy(cmd.Context(), t, path, quotaQuery(), body); err != nil {
				return err
			}
			return a.done(cmd, "set "+pc.name+" of "+args[0])
		})
		for i, f := range pc.flags {
			set.Flags().StringVarP(&vals[i], f.name, f.short, f.def, f.usage)
		}
		getName := "get-" + pc.name
		if pc.getName != "" {
			getName = pc.getName
		}
		get := leaf(getName+" "+argName, "Show the "+pc.name+" policy", 1, func(cmd *cobra.Command, args []string) error {
			t, err := target(args[0])
			if err != nil {
				return err
			}
			gp := path
			if gp == "backlogQuota" {
				gp = "backlogQuotaMap"
			}
			var v any
			if err := a.c.GetPolicy(cmd.Context(), t, gp, applied, &v); err != nil {
				return err
			}
			return a.show(cmd, v)
		})
		if topic {
			get.Flags().BoolVar(&applied, "applied", false, "the policy in force (topic, namespace or broker)")
		}
		remove := leaf("remove-"+pc.name+" "+argName, "Remove the "+pc.name+" policy", 1, func(cmd *cobra.Command, args []string) error {
			t, err := target(args[0])
			if err != nil {
				return err
			}
			if err := a.c.RemovePolicy(cmd.Context(), t, path, quotaQuery()); err != nil {
				return err
			}
			return a.done(cmd, "removed "+pc.name+" of "+args[0])
		})
		if pc.nsPath == "backlogQuota" {
			for _, c := range []*cobra.Command{set, remove} {
				c.Flags().StringVarP(&quotaType, "type", "t", "destination_storage", "destination_storage or message_age")
			}
		}
		out = append(out, set, get, remove)
	}
	if topic {
		var sub string
		var secs string
		expire := leaf("expire-messages TOPIC", "Expire a subscription's messages older than --expireTime", 1, func(cmd *cobra.Command, args []string) error {
			return expireMessages(cmd, a, args[0], sub, secs, sub == "")
		})
		expire.Flags().StringVarP(&sub, "subscription", "s", "", "subscription (required)")
		expireAll := leaf("expire-messages-all-subscriptions TOPIC", "Expire every subscription's messages older than --expireTime", 1,
			func(cmd *cobra.Command, args []string) error {
				return expireMessages(cmd, a, args[0], "", secs, false)
			})
		for _, c := range []*cobra.Command{expire, expireAll} {
			c.Flags().StringVarP(&secs, "expireTime", "t", "0", "age (e.g. 10m)")
		}
		out = append(out, expire, expireAll)
	}
	return out
}

// expireMessages expires the messages of subscription sub ("": of all subscriptions).
func expireMessages(cmd *cobra.Command, a *adminClient, topic, sub, age string, noSub bool) error {
	if noSub {
		return usageError{fmt.Errorf("-s/--subscription is required")}
	}
	if _, err := checkTopic(topic); err != nil {
		return err
	}
	secs, err := parseFlag(policyFlag{name: "expireTime", kind: kindSeconds}, age)
	if err != nil {
		return usageError{err}
	}
	d := time.Duration(secs.(int64)) * time.Second
	if sub == "" {
		err = a.c.ExpireMessagesAllSubscriptions(cmd.Context(), topic, d)
	} else {
		err = a.c.ExpireMessages(cmd.Context(), topic, sub, d)
	}
	if err != nil {
		return err
	}
	return a.done(cmd, "expired messages of "+topic)
}

// policyBody builds a set- command's JSON body from its flags' values.
func policyBody(flags []policyFlag, vals []string) (any, error) {
	obj := map[string]any{}
	for i, f := range flags {
		v, err := parseFlag(f, vals[i])
		if err != nil {
			return nil, err
		}
		if f.field == "" {
			return v, nil
		}
		obj[f.field] = v
	}
	return obj, nil
}

// parseFlag reads one flag's text by its kind.
func parseFlag(f policyFlag, s string) (any, error) {
	bad := func() error { return fmt.Errorf("--%s: invalid value %q", f.name, s) }
	switch f.kind {
	case kindString:
		return s, nil
	case kindBool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, bad()
		}
		return b, nil
	case kindFloat:
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, bad()
		}
		return v, nil
	case kindProps:
		m := map[string]string{}
		for _, kv := range strings.Split(s, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, bad()
			}
			m[k] = v
		}
		return m, nil
	case kindSize, kindSizeMB:
		n, err := parseSize(s)
		if err != nil {
			return nil, bad()
		}
		if f.kind == kindSizeMB && n > 0 {
			n = max(n>>20, 1)
		}
		return n, nil
	case kindMinutes, kindSeconds:
		if s == "-1" {
			return int64(-1), nil
		}
		d, err := parseAge(s)
		if err != nil {
			return nil, bad()
		}
		if f.kind == kindMinutes {
			return int64(d / time.Minute), nil
		}
		return int64(d / time.Second), nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return nil, bad()
	}
	return v, nil
}

// parseSize reads bytes with an optional k, m, g or t suffix (powers of 1024).
func parseSize(s string) (int64, error) {
	mult := int64(1)
	if n := len(s); n > 0 {
		switch strings.ToLower(s[n-1:]) {
		case "k":
			mult = 1 << 10
		case "m":
			mult = 1 << 20
		case "g":
			mult = 1 << 30
		case "t":
			mult = 1 << 40
		}
		if mult > 1 {
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if v < 0 {
		return v, nil
	}
	return v * mult, nil
}

// parseAge reads a duration with an s, m, h, d or w suffix (no suffix: seconds).
func parseAge(s string) (time.Duration, error) {
	unit := time.Second
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 's':
			s = s[:n-1]
		case 'm':
			unit, s = time.Minute, s[:n-1]
		case 'h':
			unit, s = time.Hour, s[:n-1]
		case 'd':
			unit, s = 24*time.Hour, s[:n-1]
		case 'w':
			unit, s = 7*24*time.Hour, s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("invalid age %q", s)
	}
	return time.Duration(v) * unit, nil
}
