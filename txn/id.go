package txn

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// ID is a transaction id as the Pulsar protocol carries it: Most is the index of the
// coordinator that owns the transaction (clients route by it), Least its sequence number
// there.
type ID struct {
	Most, Least uint64
}

// String formats the id as Pulsar does: "(most,least)".
func (id ID) String() string { return fmt.Sprintf("(%d,%d)", id.Most, id.Least) }

// Key is the id as a metadata key element: "<most>-<least>".
func (id ID) Key() string {
	return strconv.FormatUint(id.Most, 10) + "-" + strconv.FormatUint(id.Least, 10)
}

// ParseKey reverses Key.
func ParseKey(s string) (ID, error) {
	m, l, ok := strings.Cut(s, "-")
	if !ok {
		return ID{}, fmt.Errorf("txn: bad id key %q", s)
	}
	most, err1 := strconv.ParseUint(m, 10, 64)
	least, err2 := strconv.ParseUint(l, 10, 64)
	if err1 != nil || err2 != nil {
		return ID{}, fmt.Errorf("txn: bad id key %q", s)
	}
	return ID{most, least}, nil
}

// Status is a transaction's state in its header. The only transitions are the one
// compare-and-swap from Open to Committed or Aborted.
type Status uint8

// Statuses.
const (
	Open Status = iota + 1
	Committed
	Aborted
)

func (s Status) String() string {
	switch s {
	case Open:
		return "OPEN"
	case Committed:
		return "COMMITTED"
	case Aborted:
		return "ABORTED"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Ended reports whether s is terminal.
func (s Status) Ended() bool { return s == Committed || s == Aborted }

// MarshalJSON and UnmarshalJSON store the status by name.
func (s Status) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

func (s *Status) UnmarshalJSON(b []byte) error {
	var n string
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	for _, c := range []Status{Open, Committed, Aborted} {
		if c.String() == n {
			*s = c
			return nil
		}
	}
	return fmt.Errorf("txn: unknown status %q", n)
}

// SubRef names a subscription of a topic, as the client sent them.
type SubRef struct {
	Topic        string `json:"topic"`
	Subscription string `json:"subscription"`
}

// Header is a transaction's record in the metadata store (metadata.TxnHeaderKey). Its
// compare-and-swap from Open to a terminal status is the transaction's linearization point;
// participants (the topics written and the subscriptions acknowledged on) learn the outcome
// from it.
type Header struct {
	Status Status `json:"status"`
	// OpenedMs and TimeoutAtMs are Unix milliseconds; EndedMs is 0 while open.
	OpenedMs    int64 `json:"openedMs"`
	TimeoutAtMs int64 `json:"timeoutAtMs"`
	EndedMs     int64 `json:"endedMs,omitempty"`
	// TimedOut tells an abort by the coordinator's timeout sweep.
	TimedOut bool `json:"timedOut,omitempty"`
	// Partitions and Subscriptions are the participants, with the names the client sent.
	Partitions    []string `json:"partitions,omitempty"`
	Subscriptions []SubRef `json:"subscriptions,omitempty"`
	// Owner is the broker that served the coordinator when the transaction was opened.
	Owner string `json:"owner,omitempty"`
}

// HasPartition reports whether topic (compared by canon, which maps a client's name to
// the full one) is a participant.
func (h *Header) HasPartition(topic string, canon func(string) string) bool {
	for _, p := range h.Partitions {
		if canon(p) == topic {
			return true
		}
	}
	return false
}

// HasSubscription reports whether subscription sub of topic is a participant.
func (h *Header) HasSubscription(topic, sub string, canon func(string) string) bool {
	for _, s := range h.Subscriptions {
		if s.Subscription == sub && canon(s.Topic) == topic {
			return true
		}
	}
	return false
}

// Encode and DecodeHeader convert a header to and from its stored form.
func (h *Header) Encode() []byte {
	b, err := json.Marshal(h)
	if err != nil {
		panic(err) // a Header always marshals
	}
	return b
}

func DecodeHeader(b []byte) (Header, error) {
	var h Header
	if err := json.Unmarshal(b, &h); err != nil {
		return Header{}, fmt.Errorf("txn: decode header: %w", err)
	}
	return h, nil
}
