package websocket

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/pulsarclient"
)

// kind is what a WebSocket path serves.
type kind int

const (
	kindProducer kind = iota
	kindConsumer
	kindReader
	kindPingPong
)

var kindNames = [...]string{kindProducer: "producer", kindConsumer: "consumer", kindReader: "reader", kindPingPong: "pingpong"}

func (k kind) String() string { return kindNames[k] }

// route is a parsed WebSocket path.
type route struct {
	kind         kind
	topic        string // persistent://tenant/ns/topic (v1: persistent://prop/cluster/ns/topic)
	subscription string // consumers only
}

// errNotFound marks a path that is not one of the WebSocket API's.
var errNotFound = errors.New("not a WebSocket API path")

// badParam is a refused path or query parameter: 400 "Invalid query params: ...", as Pulsar.
type badParam struct{ msg string }

func (e badParam) Error() string { return e.msg }

func badf(format string, args ...any) error { return badParam{fmt.Sprintf(format, args...)} }

// parseRoute parses the escaped path of a request, as Pulsar's handlers split it:
//
//	/ws/v2/{producer|reader}/{persistent|non-persistent}/{tenant}/{ns}/{topic...}
//	/ws/v2/consumer/{persistent|non-persistent}/{tenant}/{ns}/{topic...}/{subscription}
//	/ws/{producer|consumer|reader}/{domain}/{property}/{cluster}/{ns}/{topic...}[/{subscription}] (v1)
//	/ws/v2/pingpong, /ws/pingpong
//
// A topic name may contain slashes (its segments are joined) and %-escapes.
func parseRoute(escapedPath string) (route, error) {
	parts := strings.Split(escapedPath, "/")
	if len(parts) < 3 || parts[0] != "" || parts[1] != "ws" {
		return route{}, errNotFound
	}
	rest := parts[2:]
	v2 := rest[0] == "v2"
	if v2 {
		rest = rest[1:]
	} else if strings.HasPrefix(rest[0], "v") && len(rest[0]) > 1 {
		return route{}, errNotFound // v3 (multi-topic consumers) and later: not served
	}
	if len(rest) == 1 && rest[0] == "pingpong" {
		return route{kind: kindPingPong}, nil
	}
	if len(rest) == 0 {
		return route{}, errNotFound
	}
	var r route
	switch rest[0] {
	case "producer":
		r.kind = kindProducer
	case "consumer":
		r.kind = kindConsumer
	case "reader":
		r.kind = kindReader
	default:
		return route{}, errNotFound
	}
	rest = rest[1:]
	nsParts := 2 // tenant, namespace
	if !v2 {
		nsParts = 3 // property, cluster, namespace
	}
	need := 1 + nsParts + 1 // domain, namespace, topic
	if r.kind == kindConsumer {
		need++
	}
	if len(rest) < need {
		return route{}, badf("Invalid topic name format")
	}
	domain := rest[0]
	if domain != "persistent" && domain != "non-persistent" {
		return route{}, badf("Invalid topic domain %q: want persistent or non-persistent", domain)
	}
	if r.kind == kindConsumer {
		sub, err := url.PathUnescape(rest[len(rest)-1])
		if err != nil || sub == "" {
			return route{}, badf("Empty subscription name")
		}
		r.subscription = sub
		rest = rest[:len(rest)-1]
	}
	ns := rest[1 : 1+nsParts]
	var topic []string
	for _, p := range rest[1+nsParts:] {
		if p != "" {
			topic = append(topic, p)
		}
	}
	name, err := url.PathUnescape(strings.Join(topic, "/"))
	if err != nil || name == "" {
		return route{}, badf("Invalid topic name format")
	}
	for _, p := range ns {
		if p == "" {
			return route{}, badf("Invalid topic name format")
		}
	}
	r.topic = domain + "://" + strings.Join(ns, "/") + "/" + name
	return r, nil
}

// query reads Pulsar's query parameters (the first value of each).
type query struct {
	v   url.Values
	err error // the first bad one
}

func (q *query) has(k string) bool { return q.v.Has(k) }

func (q *query) str(k string) string { return q.v.Get(k) }

func (q *query) int(k string, def int) int {
	if !q.v.Has(k) {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(q.v.Get(k)))
	if err != nil && q.err == nil {
		q.err = badf("%s: %q is not an integer", k, q.v.Get(k))
	}
	return n
}

func (q *query) bool(k string) bool {
	// Java's Boolean.parseBoolean: "true" (any case) is true, anything else false.
	return strings.EqualFold(strings.TrimSpace(q.v.Get(k)), "true")
}

func (q *query) millis(k string, def time.Duration) time.Duration {
	if !q.v.Has(k) {
		return def
	}
	return time.Duration(q.int(k, 0)) * time.Millisecond
}

// oneOf checks an enum parameter (Java's Enum.valueOf: exact names).
func (q *query) oneOf(k string, names ...string) string {
	v := q.v.Get(k)
	if !q.v.Has(k) {
		return ""
	}
	for _, n := range names {
		if v == n {
			return v
		}
	}
	if q.err == nil {
		q.err = badf("Invalid %s %s", k, v)
	}
	return ""
}

// producerParams are a producer socket's settings.
type producerParams struct {
	opts        pulsarclient.ProducerOptions
	sendTimeout time.Duration // 0: none
}

// parseProducer reads the producer's query parameters (Pulsar's ProducerHandler): batching
// is off unless batchingEnabled=true. The client has no compression, custom sequence ids or
// Murmur3 key hashing: compressionType, initialSequenceId and hashingScheme are checked and
// otherwise ignored (payloads reach consumers the same). Encryption is refused.
func parseProducer(v url.Values) (producerParams, error) {
	q := &query{v: v}
	var p producerParams
	p.opts.Name = q.str("producerName")
	p.opts.DisableBatching = !q.bool("batchingEnabled")
	p.opts.BatchingMaxMessages = q.int("batchingMaxMessages", 0)
	p.opts.MaxPendingMessages = q.int("maxPendingMessages", 0)
	p.opts.BatchingMaxDelay = q.millis("batchingMaxPublishDelay", 10*time.Millisecond)
	p.sendTimeout = q.millis("sendTimeoutMillis", 30*time.Second)
	q.int("initialSequenceId", 0)
	q.oneOf("hashingScheme", "JavaStringHash", "Murmur3_32Hash")
	q.oneOf("messageRoutingMode", "SinglePartition", "RoundRobinPartition", "CustomPartition")
	q.oneOf("compressionType", "NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY")
	if q.has("encryptionKeys") && q.err == nil {
		q.err = badf("encryptionKeys: end-to-end encryption is not supported")
	}
	if p.opts.BatchingMaxMessages < 0 || p.opts.MaxPendingMessages < 0 || p.sendTimeout < 0 {
		if q.err == nil {
			q.err = badf("batchingMaxMessages, maxPendingMessages and sendTimeoutMillis must not be negative")
		}
	}
	return p, q.err
}

// maxReceiverQueue caps receiverQueueSize, as Pulsar's handlers do.
const maxReceiverQueue = 1000

// consumerParams are a consumer or reader socket's settings.
type consumerParams struct {
	opts pulsarclient.ConsumerOptions
	// pullMode: messages go to the socket only against permits ({"type":"permit"}).
	pullMode bool
	// maxPending is how many messages may be on the socket unacknowledged (push mode).
	maxPending int
}

// parseConsumer reads a consumer's query parameters (Pulsar's ConsumerHandler).
// ackTimeoutMillis, priorityLevel and cryptoFailureAction are checked and ignored (the
// client has neither ack timeouts, priorities nor encryption); a dead-letter policy
// (maxRedeliverCount, deadLetterTopic) is refused.
func parseConsumer(r route, v url.Values) (consumerParams, error) {
	q := &query{v: v}
	var p consumerParams
	p.opts.Topic, p.opts.Subscription = r.topic, r.subscription
	switch q.oneOf("subscriptionType", "Exclusive", "Shared", "Failover", "Key_Shared") {
	case "Shared":
		p.opts.Type = pulsarclient.Shared
	case "Failover":
		p.opts.Type = pulsarclient.Failover
	case "Key_Shared":
		p.opts.Type = pulsarclient.KeyShared
	}
	p.opts.NonDurable = q.oneOf("subscriptionMode", "Durable", "NonDurable") == "NonDurable"
	if q.oneOf("subscriptionInitialPosition", "Latest", "Earliest") == "Earliest" {
		p.opts.InitialPosition = pulsarclient.Earliest
	}
	p.opts.ReceiverQueueSize = receiverQueue(q)
	p.opts.Name = q.str("consumerName")
	p.opts.NackRedeliveryDelay = q.millis("negativeAckRedeliveryDelay", time.Minute)
	q.int("ackTimeoutMillis", 0)
	q.int("priorityLevel", 0)
	q.oneOf("cryptoFailureAction", "FAIL", "DISCARD", "CONSUME")
	if (q.has("maxRedeliverCount") || q.has("deadLetterTopic")) && q.err == nil {
		q.err = badf("maxRedeliverCount, deadLetterTopic: dead-letter topics are not supported")
	}
	p.pullMode = q.bool("pullMode")
	p.maxPending = p.opts.ReceiverQueueSize
	return p, q.err
}

func receiverQueue(q *query) int {
	n := q.int("receiverQueueSize", maxReceiverQueue)
	if n <= 0 {
		n = 1 // Pulsar: a queue of 0 delivers one message at a time
	}
	return min(n, maxReceiverQueue)
}

// parseReader reads a reader's query parameters (Pulsar's ReaderHandler): messageId is
// "earliest", "latest" (the default) or a base64 message id, after which reading starts (a
// Java reader's startMessageId is exclusive, and the WebSocket API does not make it
// inclusive). name is the reader's subscription name.
func parseReader(r route, v url.Values, name string) (consumerParams, error) {
	q := &query{v: v}
	var p consumerParams
	p.opts.Topic, p.opts.NonDurable = r.topic, true
	p.opts.Subscription = name
	p.opts.Name = q.str("readerName")
	p.opts.ReceiverQueueSize = receiverQueue(q)
	q.oneOf("cryptoFailureAction", "FAIL", "DISCARD", "CONSUME")
	switch id := q.str("messageId"); strings.TrimSpace(id) {
	case "", "latest":
		p.opts.InitialPosition = pulsarclient.Latest
	case "earliest":
		p.opts.InitialPosition = pulsarclient.Earliest
	default:
		mid, err := decodeMessageID(id)
		if err != nil {
			if q.err == nil {
				q.err = badf("messageId: %v", err)
			}
			break
		}
		p.opts.StartMessageID = &mid
	}
	p.maxPending = p.opts.ReceiverQueueSize
	return p, q.err
}
