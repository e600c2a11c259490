package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// fakeService is an in-memory Service with the broker's documented error semantics, for
// testing the REST layer alone.
type fakeService struct {
	mu          sync.Mutex
	tenants     map[string]broker.TenantInfo
	namespaces  map[string]broker.NamespacePolicies
	topics      map[string]*fakeTopic // full name (partitions included)
	partitioned map[string]int
	calls       []string // "Method topic sub arg" of the mutating topic calls
}

type fakeTopic struct {
	subs       map[string]int // subscription → connected consumers
	terminated bool
	producers  int
}

func newFakeService() *fakeService {
	f := &fakeService{tenants: map[string]broker.TenantInfo{}, namespaces: map[string]broker.NamespacePolicies{},
		topics: map[string]*fakeTopic{}, partitioned: map[string]int{}}
	f.tenants["public"] = broker.TenantInfo{AdminRoles: []string{}, AllowedClusters: []string{"standalone"}}
	f.namespaces["public/default"] = broker.NamespacePolicies{}
	return f
}

func (f *fakeService) record(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeService) Info() broker.BrokerInfo {
	return broker.BrokerInfo{ID: "b1", ServiceURL: "pulsar://127.0.0.1:6650", HTTPURL: "http://127.0.0.1:8080", Cluster: "standalone"}
}

func (f *fakeService) Tenants(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for t := range f.tenants {
		out = append(out, t)
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeService) Tenant(_ context.Context, name string) (broker.TenantInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ti, ok := f.tenants[name]
	if !ok {
		return ti, broker.ErrTenantNotFound
	}
	return ti, nil
}

func (f *fakeService) CreateTenant(_ context.Context, name string, info broker.TenantInfo) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.tenants[name]; ok {
		return broker.ErrAlreadyExists
	}
	f.tenants[name] = info
	return nil
}

func (f *fakeService) UpdateTenant(_ context.Context, name string, info broker.TenantInfo) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.tenants[name]; !ok {
		return broker.ErrTenantNotFound
	}
	f.tenants[name] = info
	return nil
}

func (f *fakeService) DeleteTenant(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.tenants[name]; !ok {
		return broker.ErrTenantNotFound
	}
	for ns := range f.namespaces {
		if strings.HasPrefix(ns, name+"/") {
			return broker.ErrNotEmpty
		}
	}
	delete(f.tenants, name)
	return nil
}

func (f *fakeService) Namespaces(_ context.Context, tenant string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.tenants[tenant]; !ok {
		return nil, broker.ErrTenantNotFound
	}
	var out []string
	for ns := range f.namespaces {
		if strings.HasPrefix(ns, tenant+"/") {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeService) nsLocked(ns string) error {
	t, _, _ := strings.Cut(ns, "/")
	if _, ok := f.tenants[t]; !ok {
		return broker.ErrTenantNotFound
	}
	if _, ok := f.namespaces[ns]; !ok {
		return broker.ErrNamespaceNotFound
	}
	return nil
}

func (f *fakeService) Namespace(_ context.Context, ns string) (broker.NamespacePolicies, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.nsLocked(ns); err != nil {
		return broker.NamespacePolicies{}, err
	}
	return f.namespaces[ns], nil
}

func (f *fakeService) CreateNamespace(_ context.Context, ns string, p broker.NamespacePolicies) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, _, _ := strings.Cut(ns, "/")
	if _, ok := f.tenants[t]; !ok {
		return broker.ErrTenantNotFound
	}
	if _, ok := f.namespaces[ns]; ok {
		return broker.ErrAlreadyExists
	}
	f.namespaces[ns] = p
	return nil
}

func (f *fakeService) SetNamespacePolicies(_ context.Context, ns string, p broker.NamespacePolicies) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.nsLocked(ns); err != nil {
		return err
	}
	f.namespaces[ns] = p
	return nil
}

func (f *fakeService) DeleteNamespace(_ context.Context, ns string, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.nsLocked(ns); err != nil {
		return err
	}
	for t := range f.topics {
		if strings.HasPrefix(t, "persistent://"+ns+"/") {
			if !force {
				return broker.ErrNotEmpty
			}
			delete(f.topics, t)
		}
	}
	delete(f.namespaces, ns)
	return nil
}

func (f *fakeService) Topics(_ context.Context, ns string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.nsLocked(ns); err != nil {
		return nil, err
	}
	var out []string
	for t := range f.topics {
		if strings.HasPrefix(t, "persistent://"+ns+"/") {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeService) PartitionedTopics(_ context.Context, ns string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.nsLocked(ns); err != nil {
		return nil, err
	}
	var out []string
	for t := range f.partitioned {
		if strings.HasPrefix(t, "persistent://"+ns+"/") {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeService) CreateTopic(_ context.Context, topic string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := topicname.MustParse(topic)
	if err := f.nsLocked(n.NamespaceName()); err != nil {
		return err
	}
	if _, ok := f.topics[topic]; ok {
		return broker.ErrAlreadyExists
	}
	if _, ok := f.partitioned[topic]; ok {
		return broker.ErrAlreadyExists
	}
	f.topics[topic] = &fakeTopic{subs: map[string]int{}}
	return nil
}

func (f *fakeService) topicLocked(topic string) (*fakeTopic, error) {
	t, ok := f.topics[topic]
	if !ok {
		return nil, broker.ErrTopicNotFound
	}
	return t, nil
}

func (f *fakeService) DeleteTopic(_ context.Context, topic string, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.topicLocked(topic)
	if err != nil {
		return err
	}
	if t.producers > 0 && !force {
		return broker.ErrNotEmpty
	}
	delete(f.topics, topic)
	return nil
}

func (f *fakeService) CreatePartitionedTopic(_ context.Context, topic string, n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.partitioned[topic]; ok {
		return broker.ErrAlreadyExists
	}
	if _, ok := f.topics[topic]; ok {
		return broker.ErrAlreadyExists
	}
	f.partitioned[topic] = n
	for i := range n {
		f.topics[fmt.Sprintf("%s-partition-%d", topic, i)] = &fakeTopic{subs: map[string]int{}}
	}
	return nil
}

func (f *fakeService) UpdatePartitionedTopic(_ context.Context, topic string, n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	old, ok := f.partitioned[topic]
	if !ok {
		return broker.ErrTopicNotFound
	}
	if n <= old {
		return fmt.Errorf("%w: %d partitions, not more than %d", broker.ErrInvalidArgument, n, old)
	}
	for i := old; i < n; i++ {
		f.topics[fmt.Sprintf("%s-partition-%d", topic, i)] = &fakeTopic{subs: map[string]int{}}
	}
	f.partitioned[topic] = n
	return nil
}

func (f *fakeService) DeletePartitionedTopic(_ context.Context, topic string, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.partitioned[topic]
	if !ok {
		return broker.ErrTopicNotFound
	}
	for i := range n {
		delete(f.topics, fmt.Sprintf("%s-partition-%d", topic, i))
	}
	delete(f.partitioned, topic)
	return nil
}

func (f *fakeService) PartitionedTopicMetadata(_ context.Context, topic string) (broker.PartitionedTopicMetadata, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return broker.PartitionedTopicMetadata{Partitions: f.partitioned[topic]}, nil
}

func (f *fakeService) Lookup(_ context.Context, topic string) (broker.LookupResult, error) {
	return broker.LookupResult{BrokerInfo: f.Info(), Self: true}, nil
}

func (f *fakeService) TopicStats(_ context.Context, topic string) (broker.TopicStats, error) {
	if strings.Contains(topic, "elsewhere") {
		return broker.TopicStats{}, &broker.NotOwnerError{Topic: topic,
			Owner: broker.BrokerInfo{ID: "b2", HTTPURL: "http://other:8080"}}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.topicLocked(topic)
	if err != nil {
		return broker.TopicStats{}, err
	}
	s := broker.TopicStats{MsgInCounter: 10, BytesInCounter: 1000, Publishers: []broker.PublisherStats{},
		Subscriptions: map[string]broker.SubscriptionStats{}, Replication: map[string]any{}, Terminated: t.terminated}
	for name, c := range t.subs {
		s.Subscriptions[name] = broker.SubscriptionStats{Type: "Exclusive", MsgBacklog: 5,
			Consumers: make([]broker.ConsumerStats, c)}
	}
	return s, nil
}

func (f *fakeService) InternalStats(_ context.Context, topic string) (broker.InternalStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.topicLocked(topic); err != nil {
		return broker.InternalStats{}, err
	}
	return broker.InternalStats{NumberOfEntries: 3, LastConfirmedEntry: "1:2", State: "LedgerOpened",
		Ledgers: []broker.LedgerStats{{LedgerID: 1, Entries: 3}}, Cursors: map[string]broker.CursorStats{}}, nil
}

func (f *fakeService) LastMessageID(_ context.Context, topic string) (broker.MessageID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.topicLocked(topic); err != nil {
		return broker.MessageID{}, err
	}
	return broker.MessageID{LedgerID: 1, EntryID: 2, Partition: -1, BatchIndex: -1}, nil
}

func (f *fakeService) Unload(_ context.Context, topic string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Unload %s", topic)
	return nil
}

func (f *fakeService) Terminate(_ context.Context, topic string) (broker.MessageID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.topicLocked(topic)
	if err != nil {
		return broker.MessageID{}, err
	}
	t.terminated = true
	return broker.MessageID{LedgerID: 1, EntryID: 2, Partition: -1, BatchIndex: -1}, nil
}

func (f *fakeService) Subscriptions(_ context.Context, topic string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.topicLocked(topic)
	if err != nil {
		return nil, err
	}
	var out []string
	for s := range t.subs {
		out = append(out, s)
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeService) CreateSubscription(_ context.Context, topic, sub string, at broker.MessageID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.topicLocked(topic)
	if err != nil {
		return err
	}
	if _, ok := t.subs[sub]; ok {
		return broker.ErrAlreadyExists
	}
	t.subs[sub] = 0
	f.record("CreateSubscription %s %s %v", topic, sub, at)
	return nil
}

func (f *fakeService) subLocked(topic, sub string) (*fakeTopic, error) {
	t, err := f.topicLocked(topic)
	if err != nil {
		return nil, err
	}
	if _, ok := t.subs[sub]; !ok {
		return nil, broker.ErrSubscriptionNotFound
	}
	return t, nil
}

func (f *fakeService) DeleteSubscription(_ context.Context, topic, sub string, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.subLocked(topic, sub)
	if err != nil {
		return err
	}
	if t.subs[sub] > 0 && !force {
		return broker.ErrNotEmpty
	}
	delete(t.subs, sub)
	return nil
}

func (f *fakeService) ResetCursor(_ context.Context, topic, sub string, to broker.MessageID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.subLocked(topic, sub); err != nil {
		return err
	}
	f.record("ResetCursor %s %s %v", topic, sub, to)
	return nil
}

func (f *fakeService) ResetCursorToTime(_ context.Context, topic, sub string, at time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.subLocked(topic, sub); err != nil {
		return err
	}
	f.record("ResetCursorToTime %s %s %d", topic, sub, at.UnixMilli())
	return nil
}

func (f *fakeService) SkipMessages(_ context.Context, topic, sub string, n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.subLocked(topic, sub); err != nil {
		return err
	}
	f.record("Skip %s %s %d", topic, sub, n)
	return nil
}

func (f *fakeService) ClearBacklog(_ context.Context, topic, sub string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.subLocked(topic, sub); err != nil {
		return err
	}
	f.record("ClearBacklog %s %s", topic, sub)
	return nil
}

var _ Service = (*fakeService)(nil)
