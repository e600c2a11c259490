// Package topicname parses and formats Pulsar topic and namespace names, as clients send
// them and as the broker stores them. It is a pure leaf package, safe for concurrent use.
//
// Accepted forms (Pulsar's v2 names):
//
//	my-topic                          → persistent://public/default/my-topic
//	tenant/ns/my-topic                → persistent://tenant/ns/my-topic
//	persistent://tenant/ns/my-topic
//	persistent://tenant/ns/my-topic-partition-3   (partition 3 of my-topic)
//	non-persistent://tenant/ns/my-topic            (a non-persistent topic, package broker/nonpersistent)
//	segment://tenant/ns/my-topic/0000-7fff-1       (segment 1 of scalable topic topic://tenant/ns/my-topic)
//
// A segment is a persistent topic (its own managed ledger); its Local is
// "<scalable topic>/<descriptor>", the one local name with a '/'. Scalable topics themselves
// (topic://) are not topics a client produces to: package scalable/layout parses them.
//
// Rejected, by Parse and by every check below, so that the admin API, the binary protocol
// (a producer or consumer that would auto-create the topic: InvalidTopicName) and the
// records agree:
//
//   - empty parts, v1 names with a cluster (persistent://t/cluster/ns/topic), a '/' in the
//     local name, and other domains;
//   - tenants and namespaces (and clusters, CheckTenant) outside Pulsar's NamedEntity
//     characters [-=:.\w], or "." or "..", or longer than MaxPartLen bytes;
//   - local names (the topic's own name) that are "." or "..", that are not UTF-8, that
//     hold a control character (U+0000–U+001F, U+007F: NUL, CR, LF, ...), or whose base
//     (without a "-partition-N" suffix) is longer than MaxLocalLen bytes.
//
// Pulsar checks the same characters for tenants and namespaces (NamedEntity.checkName) and
// none for local names unless strictTopicNameEnabled; it has no length limit (the question
// is apache/pulsar#12023), but its metadata store refuses "." and "..", and a name of
// 100,000 bytes is stored in every record and log line about the topic: the limits here
// are Magnetar's own, generous for any name a person or a program derives.
package topicname

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Defaults for short names.
const (
	DefaultTenant    = "public"
	DefaultNamespace = "default"
	// Persistent is the domain of topics stored in managed ledgers.
	Persistent = "persistent"
	// NonPersistent is the domain of topics whose messages are never stored.
	NonPersistent = "non-persistent"
	// Segment is the domain of a scalable topic's segments (persistent, package scalable).
	Segment = "segment"

	partitionSuffix = "-partition-"
)

// Length limits, in bytes.
const (
	// MaxPartLen bounds a tenant, namespace or cluster name.
	MaxPartLen = 255
	// MaxLocalLen bounds a topic's local name without its "-partition-N" suffix (the
	// partitions of a topic at the limit stay valid), and a scalable topic's name.
	MaxLocalLen = 1024
)

// ErrInvalid is wrapped by every parse error.
var ErrInvalid = errors.New("topicname: invalid name")

// namePart is Pulsar's NamedEntity pattern (tenants, namespaces, clusters), without the
// empty name.
var namePart = regexp.MustCompile(`^[-=:.\w]+$`)

// Name is a parsed, fully qualified topic name. The zero value is invalid.
type Name struct {
	Domain    string // Persistent or NonPersistent
	Tenant    string
	Namespace string
	// Local is the topic's own name, including a "-partition-N" suffix if it has one.
	Local string
	// Partition is N for "<base>-partition-N", -1 otherwise.
	Partition int
}

// Parse normalises a topic name in any accepted form.
func Parse(s string) (Name, error) {
	if s == "" {
		return Name{}, fmt.Errorf("%w: empty topic name", ErrInvalid)
	}
	domain := Persistent
	rest := s
	if i := strings.Index(s, "://"); i >= 0 {
		domain, rest = s[:i], s[i+3:]
	} else if !strings.Contains(s, "/") {
		rest = DefaultTenant + "/" + DefaultNamespace + "/" + s
	}
	switch domain {
	case Persistent, NonPersistent:
	case Segment:
		return parseSegment(s, rest)
	default:
		return Name{}, fmt.Errorf("%w: %s: unknown domain %s", ErrInvalid, quote(s), quote(domain))
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		if len(parts) == 4 {
			return Name{}, fmt.Errorf("%w: %s: v1 names with a cluster are not supported", ErrInvalid, quote(s))
		}
		return Name{}, fmt.Errorf("%w: %s: want tenant/namespace/topic", ErrInvalid, quote(s))
	}
	n := Name{Domain: domain, Tenant: parts[0], Namespace: parts[1], Local: parts[2], Partition: -1}
	if err := CheckNamespace(n.Tenant, n.Namespace); err != nil {
		return Name{}, err
	}
	if n.Local == "" {
		return Name{}, fmt.Errorf("%w: %s: empty local name", ErrInvalid, quote(s))
	}
	if i := strings.LastIndex(n.Local, partitionSuffix); i > 0 {
		if p, err := strconv.Atoi(n.Local[i+len(partitionSuffix):]); err == nil && p >= 0 &&
			strconv.Itoa(p) == n.Local[i+len(partitionSuffix):] {
			n.Partition = p
		}
	}
	if err := CheckLocal(n.Base().Local); err != nil {
		return Name{}, err
	}
	return n, nil
}

// CheckLocal validates a topic's local name (of a partitioned topic: its base name; of a
// scalable topic: its name): not empty, not "." or "..", UTF-8 without control characters,
// at most MaxLocalLen bytes.
func CheckLocal(local string) error {
	switch {
	case local == "":
		return fmt.Errorf("%w: empty local name", ErrInvalid)
	case local == "." || local == "..":
		return fmt.Errorf("%w: topic %q: not a name", ErrInvalid, local)
	case len(local) > MaxLocalLen:
		return fmt.Errorf("%w: topic %s: %d bytes, longer than %d", ErrInvalid, quote(local), len(local), MaxLocalLen)
	case !utf8.ValidString(local):
		return fmt.Errorf("%w: topic %s: not UTF-8", ErrInvalid, quote(local))
	case strings.IndexFunc(local, isControl) >= 0:
		return fmt.Errorf("%w: topic %s: control character", ErrInvalid, quote(local))
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// checkPart validates a tenant, namespace or cluster name (what names it).
func checkPart(what, s string) error {
	switch {
	case len(s) > MaxPartLen:
		return fmt.Errorf("%w: %s %s: %d bytes, longer than %d", ErrInvalid, what, quote(s), len(s), MaxPartLen)
	case !namePart.MatchString(s):
		return fmt.Errorf("%w: %s %s: only a-z A-Z 0-9 and _ - = : . are allowed in it", ErrInvalid, what, quote(s))
	case s == "." || s == "..":
		return fmt.Errorf("%w: %s %q: not a name", ErrInvalid, what, s)
	}
	return nil
}

// quote is s quoted for an error message, cut to its first 64 bytes: a refused name can be
// very long.
func quote(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
}

// parseSegment parses the tenant/ns/topic/<hexStart>-<hexEnd>-<id> rest of a segment:// name.
func parseSegment(s, rest string) (Name, error) {
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || parts[2] == "" || !segmentDescriptor.MatchString(parts[3]) {
		return Name{}, fmt.Errorf("%w: %s: want segment://tenant/namespace/topic/<hexStart>-<hexEnd>-<id>", ErrInvalid, quote(s))
	}
	if err := CheckNamespace(parts[0], parts[1]); err != nil {
		return Name{}, err
	}
	if err := CheckLocal(parts[2]); err != nil {
		return Name{}, err
	}
	return Name{Domain: Segment, Tenant: parts[0], Namespace: parts[1], Local: parts[2] + "/" + parts[3], Partition: -1}, nil
}

var segmentDescriptor = regexp.MustCompile(`^[0-9a-f]{4}-[0-9a-f]{4}-[0-9]+$`)

// MustParse is Parse for names known to be valid (tests, constants); it panics otherwise.
func MustParse(s string) Name {
	n, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return n
}

// CheckNamespace validates a tenant and namespace name.
func CheckNamespace(tenant, ns string) error {
	if err := CheckTenant(tenant); err != nil {
		return err
	}
	return checkPart("namespace", ns)
}

// CheckTenant validates a tenant name (and a cluster name: the same rules).
func CheckTenant(tenant string) error { return checkPart("tenant", tenant) }

// ParseNamespace parses "tenant/ns".
func ParseNamespace(s string) (tenant, ns string, err error) {
	t, n, ok := strings.Cut(s, "/")
	if !ok || strings.Contains(n, "/") {
		return "", "", fmt.Errorf("%w: namespace %s: want tenant/namespace", ErrInvalid, quote(s))
	}
	if err := CheckNamespace(t, n); err != nil {
		return "", "", err
	}
	return t, n, nil
}

// String returns the fully qualified name, e.g. "persistent://public/default/t".
func (n Name) String() string {
	return n.Domain + "://" + n.Tenant + "/" + n.Namespace + "/" + n.Local
}

// NamespaceName returns "tenant/ns".
func (n Name) NamespaceName() string { return n.Tenant + "/" + n.Namespace }

// IsPersistent reports whether n is stored in a managed ledger: the persistent domain or a
// scalable topic's segment.
func (n Name) IsPersistent() bool { return n.Domain == Persistent || n.Domain == Segment }

// IsSegment reports whether n is a scalable topic's segment.
func (n Name) IsSegment() bool { return n.Domain == Segment }

// IsPartition reports whether n is one partition of a partitioned topic.
func (n Name) IsPartition() bool { return n.Partition >= 0 }

// Base returns the partitioned topic n is a partition of (n itself if it is not one).
func (n Name) Base() Name {
	if n.Partition < 0 {
		return n
	}
	b := n
	b.Local = n.Local[:strings.LastIndex(n.Local, partitionSuffix)]
	b.Partition = -1
	return b
}

// PartitionName returns partition i of n (n must not be a partition itself).
func (n Name) PartitionName(i int) Name {
	p := n.Base()
	p.Local = p.Local + partitionSuffix + strconv.Itoa(i)
	p.Partition = i
	return p
}

// ManagedLedgerName is the name of the topic's managed ledger: "tenant/ns/persistent/<local,
// path-escaped>", as Pulsar names them.
func (n Name) ManagedLedgerName() string {
	return n.Tenant + "/" + n.Namespace + "/" + n.Domain + "/" + url.PathEscape(n.Local)
}

// FromManagedLedgerName reverses ManagedLedgerName.
func FromManagedLedgerName(ml string) (Name, error) {
	parts := strings.Split(ml, "/")
	if len(parts) != 4 {
		return Name{}, fmt.Errorf("%w: managed ledger name %q", ErrInvalid, ml)
	}
	local, err := url.PathUnescape(parts[3])
	if err != nil {
		return Name{}, fmt.Errorf("%w: managed ledger name %q: %v", ErrInvalid, ml, err)
	}
	return Parse(parts[2] + "://" + parts[0] + "/" + parts[1] + "/" + local)
}
