package metadata

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/magnetar-io/magnetar/internal/backoff"
)

// DefaultDialTimeout bounds Open's first round trip when Config.DialTimeout is zero.
const DefaultDialTimeout = 5 * time.Second

// watchBackoff is the watch restart delay after a transient failure (lost leader, broken
// stream): 50 ms doubling to 2 s, from the start again after progress. It is a retry delay,
// not synchronisation: the watch resumes from the first undelivered revision either way.
var watchBackoff = backoff.Policy{Base: 50 * time.Millisecond, Max: 2 * time.Second}

// Config configures Open.
type Config struct {
	// Endpoints are the etcd client addresses, "host:port" (see ParseURL). Required.
	Endpoints []string
	// Namespace is prepended to every key, lease and watch (etcd's namespace package), so
	// several clusters or tests share one etcd. "" means no prefix. A trailing "/" is dropped:
	// keys already start with "/".
	Namespace string
	// DialTimeout bounds the connectivity check in Open (DefaultDialTimeout if zero).
	DialTimeout time.Duration
	// Logger receives the store's own logs and the etcd client's warnings. nil: discard.
	Logger *slog.Logger
}

// EtcdStore is the Store on etcd (go.etcd.io/etcd/client/v3). It is safe for concurrent use.
// Its background goroutines are one per open Session (lease keep-alive drain) and one per
// running Watch; Close stops and waits for all of them.
type EtcdStore struct {
	// Immutable after Open.
	cli *clientv3.Client // cli.KV, cli.Watcher and cli.Lease are namespaced
	ns  string
	log *slog.Logger

	done chan struct{} // closed by Close before the client is closed

	// wg counts session and watch goroutines. Add is only called under mu with closed false,
	// so Close's Wait never races an Add.
	wg sync.WaitGroup

	mu struct {
		sync.Mutex
		// closed is set by Close before it closes the client. Under mu, a goroutine is
		// registered in wg or an etcd watch is started only while closed is false.
		closed bool
	}

	closeOnce sync.Once
	closeErr  error
}

var _ Store = (*EtcdStore)(nil)

// Open connects to etcd and checks that it answers within cfg.DialTimeout (or before ctx
// ends). The caller must Close the store.
func Open(ctx context.Context, cfg Config) (*EtcdStore, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("metadata: open: no etcd endpoints")
	}
	dial := cfg.DialTimeout
	if dial <= 0 {
		dial = DefaultDialTimeout
	}
	log := cfg.Logger
	zl := zap.NewNop()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	} else {
		// The client's Info logs are per-connection chatter; keep its warnings and errors.
		zl = newZapLogger(log.With("component", "etcd-client"), zapcore.WarnLevel)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            slices.Clone(cfg.Endpoints),
		DialTimeout:          dial,
		DialKeepAliveTime:    10 * time.Second, // > the server's 5 s minimum ping interval
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zl,
	})
	if err != nil {
		return nil, fmt.Errorf("metadata: open etcd client %v: %w", cfg.Endpoints, err)
	}
	return openClient(ctx, cli, cfg, log, dial)
}

// openClient makes a store of an etcd client (Open's, or an in-process one), checking that
// it answers within dial.
func openClient(ctx context.Context, cli *clientv3.Client, cfg Config, log *slog.Logger, dial time.Duration) (*EtcdStore, error) {
	ns := strings.TrimRight(cfg.Namespace, "/")
	if ns != "" {
		cli.KV = namespace.NewKV(cli.KV, ns)
		cli.Watcher = namespace.NewWatcher(cli.Watcher, ns)
		cli.Lease = namespace.NewLease(cli.Lease, ns)
	}
	// clientv3.New does not dial; one real request proves the cluster is reachable.
	pctx, cancel := context.WithTimeout(ctx, dial)
	_, err := cli.Get(pctx, KeyClusterInstance, clientv3.WithCountOnly())
	cancel()
	if err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("metadata: connect to etcd %v: %w", cfg.Endpoints, err)
	}
	s := &EtcdStore{cli: cli, ns: ns, log: log, done: make(chan struct{})}
	log.Debug("metadata store open", "endpoints", cfg.Endpoints, "namespace", ns)
	return s, nil
}

// Namespace returns the key prefix the store adds ("" for none).
func (s *EtcdStore) Namespace() string { return s.ns }

// Close stops every session keep-alive and watch of this store, closes the etcd client and
// waits for the store's goroutines. Sessions still open are abandoned, not revoked: their
// ephemeral keys vanish when the lease expires (at most the session ttl later), exactly as if
// the process had died. Close is idempotent.
func (s *EtcdStore) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.mu.closed = true
		s.mu.Unlock()
		close(s.done)
		if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			s.closeErr = fmt.Errorf("metadata: close etcd client: %w", err)
		}
		s.wg.Wait()
	})
	return s.closeErr
}

// isClosed reports whether Close has started.
func (s *EtcdStore) isClosed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// goStart registers one background goroutine; false if the store is closed.
func (s *EtcdStore) goStart() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// wrap maps an etcd client error to the package sentinels and adds the operation context.
func (s *EtcdStore) wrap(op, key string, err error) error {
	switch {
	case s.isClosed():
		// The client's own error (context canceled, connection closing) says nothing more.
		return fmt.Errorf("metadata: %s %q: %w", op, key, ErrClosed)
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("metadata: %s %q: %w (%v)", op, key, ErrCompacted, err)
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("metadata: %s %q: %w (%v)", op, key, ErrSessionExpired, err)
	}
	return fmt.Errorf("metadata: %s %q: %w", op, key, err)
}

// checkOpen returns ErrClosed (wrapped) once the store is closed.
func (s *EtcdStore) checkOpen(op, key string) error {
	if s.isClosed() {
		return fmt.Errorf("metadata: %s %q: %w", op, key, ErrClosed)
	}
	return nil
}

func kvFrom(kv *mvccpb.KeyValue) KV {
	return KV{
		Key:     string(kv.Key),
		Value:   kv.Value,
		Version: Version(kv.ModRevision),
		Created: kv.CreateRevision,
		Lease:   kv.Lease,
	}
}

func kvsFrom(kvs []*mvccpb.KeyValue) []KV {
	out := make([]KV, len(kvs))
	for i, kv := range kvs {
		out[i] = kvFrom(kv)
	}
	return out
}

// Get returns the key or ErrNotFound.
func (s *EtcdStore) Get(ctx context.Context, key string) (KV, error) {
	if err := s.checkOpen("get", key); err != nil {
		return KV{}, err
	}
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return KV{}, s.wrap("get", key, err)
	}
	if len(resp.Kvs) == 0 {
		return KV{}, fmt.Errorf("metadata: get %q: %w", key, ErrNotFound)
	}
	return kvFrom(resp.Kvs[0]), nil
}

// Put writes value guarded by expected. See Store.Put.
func (s *EtcdStore) Put(ctx context.Context, key string, value []byte, expected Version) (Version, error) {
	return s.put(ctx, key, value, expected, clientv3.NoLease)
}

// put is Put with an optional lease (ephemeral key).
func (s *EtcdStore) put(ctx context.Context, key string, value []byte, expected Version, lease clientv3.LeaseID) (Version, error) {
	if err := s.checkOpen("put", key); err != nil {
		return 0, err
	}
	var opts []clientv3.OpOption
	if lease != clientv3.NoLease {
		opts = append(opts, clientv3.WithLease(lease))
	}
	var cmp clientv3.Cmp
	switch {
	case expected == AnyVersion:
		resp, err := s.cli.Put(ctx, key, string(value), opts...)
		if err != nil {
			return 0, s.wrap("put", key, err)
		}
		return Version(resp.Header.Revision), nil
	case expected == NotExists:
		cmp = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	case expected > 0:
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", int64(expected))
	default:
		return 0, fmt.Errorf("metadata: put %q: invalid expected version %d", key, expected)
	}
	resp, err := s.cli.Txn(ctx).If(cmp).
		Then(clientv3.OpPut(key, string(value), opts...)).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return 0, s.wrap("put", key, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("metadata: put %q expecting version %d, have %d: %w",
			key, expected, currentVersion(resp), ErrBadVersion)
	}
	return Version(resp.Header.Revision), nil
}

// Commit applies ops in one etcd transaction. See Store.Commit.
func (s *EtcdStore) Commit(ctx context.Context, ops []Op) ([]Version, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	if err := s.checkOpen("commit", ops[0].Key); err != nil {
		return nil, err
	}
	var cmps []clientv3.Cmp
	thens := make([]clientv3.Op, 0, len(ops))
	for _, o := range ops {
		switch {
		case o.Expected == AnyVersion:
		case o.Expected == AnyVersion && o.Check:
			return nil, fmt.Errorf("metadata: commit: check of %q without a version", o.Key)
		case o.Expected == NotExists && o.Delete:
			return nil, fmt.Errorf("metadata: commit: delete %q expecting no key: %w", o.Key, ErrBadVersion)
		case o.Expected == NotExists:
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(o.Key), "=", 0))
		case o.Expected > 0:
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(o.Key), "=", int64(o.Expected)))
		default:
			return nil, fmt.Errorf("metadata: commit %q: invalid expected version %d", o.Key, o.Expected)
		}
		switch {
		case o.Check:
		case o.Delete:
			thens = append(thens, clientv3.OpDelete(o.Key))
		default:
			thens = append(thens, clientv3.OpPut(o.Key, string(o.Value)))
		}
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(thens...).Commit()
	if err != nil {
		return nil, s.wrap("commit", ops[0].Key, err)
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("metadata: commit of %d writes (first %q): a version did not match: %w", len(ops), ops[0].Key, ErrBadVersion)
	}
	vs := make([]Version, len(ops))
	for i, o := range ops {
		if !o.Delete && !o.Check {
			vs[i] = Version(resp.Header.Revision)
		}
	}
	return vs, nil
}

// currentVersion extracts the key's version from the Else branch of a failed guarded txn.
func currentVersion(resp *clientv3.TxnResponse) Version {
	if len(resp.Responses) == 0 {
		return 0
	}
	r := resp.Responses[0].GetResponseRange()
	if r == nil || len(r.Kvs) == 0 {
		return 0
	}
	return Version(r.Kvs[0].ModRevision)
}

// Delete removes the key guarded by expected. See Store.Delete. Delete with NotExists can
// never succeed (a missing key has nothing to delete, an existing one has the wrong version),
// so it returns ErrBadVersion.
func (s *EtcdStore) Delete(ctx context.Context, key string, expected Version) error {
	if err := s.checkOpen("delete", key); err != nil {
		return err
	}
	switch {
	case expected == AnyVersion:
		if _, err := s.cli.Delete(ctx, key); err != nil {
			return s.wrap("delete", key, err)
		}
		return nil
	case expected == NotExists:
		return fmt.Errorf("metadata: delete %q expecting no key: %w", key, ErrBadVersion)
	case expected < 0:
		return fmt.Errorf("metadata: delete %q: invalid expected version %d", key, expected)
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", int64(expected))).
		Then(clientv3.OpDelete(key)).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return s.wrap("delete", key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("metadata: delete %q expecting version %d, have %d: %w",
			key, expected, currentVersion(resp), ErrBadVersion)
	}
	return nil
}

// List returns every key under prefix in key order and the revision it read at. It reads
// everything in one response: keep prefixes to metadata-sized sets.
func (s *EtcdStore) List(ctx context.Context, prefix string) ([]KV, int64, error) {
	if err := s.checkOpen("list", prefix); err != nil {
		return nil, 0, err
	}
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, s.wrap("list", prefix, err)
	}
	return kvsFrom(resp.Kvs), resp.Header.Revision, nil
}

// Range returns up to limit keys in [start, end) in key order (limit <= 0: all). end == ""
// means no upper bound (to the end of the namespace).
func (s *EtcdStore) Range(ctx context.Context, start, end string, limit int) ([]KV, error) {
	if err := s.checkOpen("range", start); err != nil {
		return nil, err
	}
	opts := []clientv3.OpOption{clientv3.WithFromKey()}
	if end != "" {
		opts = []clientv3.OpOption{clientv3.WithRange(end)}
	}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(limit)))
	}
	resp, err := s.cli.Get(ctx, start, opts...)
	if err != nil {
		return nil, s.wrap("range", start, err)
	}
	return kvsFrom(resp.Kvs), nil
}

// Compact discards the store history before rev (etcd compaction, physical). It is
// cluster-wide, not limited to the namespace: a Watch anywhere asked to resume before rev then
// fails with ErrCompacted. Meant for admin tools and tests.
func (s *EtcdStore) Compact(ctx context.Context, rev int64) error {
	if err := s.checkOpen("compact", ""); err != nil {
		return err
	}
	if _, err := s.cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return s.wrap("compact", strconv.FormatInt(rev, 10), err)
	}
	return nil
}

// NextID returns the next value of the named counter (first value 1) by a compare-and-swap
// loop on CounterKey(counter), whose value is the last id handed out in decimal.
func (s *EtcdStore) NextID(ctx context.Context, counter string) (int64, error) {
	key := CounterKey(counter)
	if err := s.checkOpen("next id", key); err != nil {
		return 0, err
	}
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return 0, s.wrap("next id", key, err)
	}
	kvs := resp.Kvs
	for {
		var last int64
		cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if len(kvs) > 0 {
			last, err = strconv.ParseInt(string(kvs[0].Value), 10, 64)
			if err != nil || last < 0 {
				return 0, fmt.Errorf("metadata: next id %q: corrupt counter value %q", key, kvs[0].Value)
			}
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision)
		}
		if last == math.MaxInt64 {
			return 0, fmt.Errorf("metadata: next id %q: counter exhausted", key)
		}
		next := last + 1
		tresp, err := s.cli.Txn(ctx).If(cmp).
			Then(clientv3.OpPut(key, strconv.FormatInt(next, 10))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return 0, s.wrap("next id", key, err)
		}
		if tresp.Succeeded {
			return next, nil
		}
		// Lost the race: retry from the value the Else branch read.
		kvs = nil
		if r := tresp.Responses[0].GetResponseRange(); r != nil {
			kvs = r.Kvs
		}
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("metadata: next id %q: %w", key, err)
		}
	}
}

// Watch streams every change under prefix from revision fromRev (<= 0: from now). See
// Store.Watch. WatchBatch.Rev is the revision of the batch's last event. Transient failures
// (lost leader, broken stream) are retried from the first undelivered revision, so the
// stream has no gaps; it ends on ctx end (Err: the context error), store Close (ErrClosed)
// or compaction of the revision it needs (ErrCompacted).
func (s *EtcdStore) Watch(ctx context.Context, prefix string, fromRev int64) *Watch {
	ch := make(chan WatchBatch)
	var mu sync.Mutex
	var werr error
	w := &Watch{C: ch, Err: func() error {
		mu.Lock()
		defer mu.Unlock()
		return werr
	}}
	if !s.goStart() {
		werr = fmt.Errorf("metadata: watch %q: %w", prefix, ErrClosed)
		close(ch)
		return w
	}
	go func() {
		err := s.runWatch(ctx, prefix, max(fromRev, 0), ch)
		mu.Lock()
		werr = err
		mu.Unlock()
		close(ch)
		s.wg.Done()
	}()
	return w
}

// runWatch owns one watch: it (re)starts the etcd watch from next, the first revision not yet
// delivered (0 until the created notification tells the current revision), and returns why
// the watch ended.
func (s *EtcdStore) runWatch(ctx context.Context, prefix string, next int64, out chan<- WatchBatch) error {
	retry := backoff.Retry{Policy: watchBackoff}
	for {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify()}
		if next > 0 {
			opts = append(opts, clientv3.WithRev(next))
		}
		delivered := next
		wch, ok := s.startWatch(wctx, prefix, opts)
		if !ok {
			cancel()
			return fmt.Errorf("metadata: watch %q: %w", prefix, ErrClosed)
		}
		err := s.consumeWatch(ctx, prefix, wch, &next, out)
		cancel()
		switch {
		case s.isClosed():
			return fmt.Errorf("metadata: watch %q: %w", prefix, ErrClosed)
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrCompacted):
			return err
		}
		if next != delivered {
			retry.Reset() // made progress since the last failure
		}
		d := retry.Next()
		s.log.Warn("metadata watch interrupted, resuming", "prefix", prefix, "from_rev", next, "err", err, "retry_in", d)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-s.done:
			t.Stop()
			return fmt.Errorf("metadata: watch %q: %w", prefix, ErrClosed)
		}
	}
}

// startWatch starts an etcd watch unless the store is closed. Holding mu orders it before
// Close closes the client: the namespace watcher's WaitGroup must not see an Add racing the
// Wait in its Close.
func (s *EtcdStore) startWatch(ctx context.Context, prefix string, opts []clientv3.OpOption) (clientv3.WatchChan, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, false
	}
	return s.cli.Watch(ctx, prefix, opts...), true
}

// consumeWatch forwards one etcd watch channel to out and advances *next past every delivered
// event. It returns when the etcd channel ends or delivery is abandoned.
func (s *EtcdStore) consumeWatch(ctx context.Context, prefix string, wch clientv3.WatchChan, next *int64, out chan<- WatchBatch) error {
	for resp := range wch {
		if resp.CompactRevision != 0 {
			return fmt.Errorf("metadata: watch %q from revision %d: compacted up to %d: %w",
				prefix, *next, resp.CompactRevision, ErrCompacted)
		}
		if err := resp.Err(); err != nil {
			return err
		}
		if resp.Created {
			if *next == 0 {
				*next = resp.Header.Revision + 1
			}
			continue
		}
		if len(resp.Events) == 0 {
			continue // progress notification
		}
		b := WatchBatch{Events: make([]Event, 0, len(resp.Events))}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				b.Events = append(b.Events, Event{Type: EventDelete, KV: KV{
					Key: string(ev.Kv.Key), Version: Version(ev.Kv.ModRevision),
				}})
			} else {
				b.Events = append(b.Events, Event{Type: EventPut, KV: kvFrom(ev.Kv)})
			}
		}
		b.Rev = resp.Events[len(resp.Events)-1].Kv.ModRevision
		select {
		case out <- b:
			*next = b.Rev + 1
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return ErrClosed
		}
	}
	return errors.New("watch channel closed")
}

// NewSession grants a lease of ttl (rounded up to whole seconds, at least 1 s; etcd may raise
// it to its minimum) and keeps it alive from a background goroutine until Close, store Close
// or expiry. ctx bounds only the grant, not the session's life.
func (s *EtcdStore) NewSession(ctx context.Context, ttl time.Duration) (Session, error) {
	if err := s.checkOpen("new session", ""); err != nil {
		return nil, err
	}
	secs := max(int64(math.Ceil(ttl.Seconds())), 1)
	asked := time.Now()
	grant, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return nil, s.wrap("grant lease", "", err)
	}
	kctx, cancel := context.WithCancel(context.Background())
	kac, err := s.cli.KeepAlive(kctx, grant.ID)
	if err != nil {
		cancel()
		s.revoke(grant.ID, secs)
		return nil, s.wrap("keep alive lease", strconv.FormatInt(int64(grant.ID), 16), err)
	}
	ss := &etcdSession{s: s, id: grant.ID, ttl: secs, cancel: cancel, done: make(chan struct{})}
	ss.renewed.Store(asked.UnixNano())
	if !s.goStart() {
		cancel()
		return nil, fmt.Errorf("metadata: new session: %w", ErrClosed)
	}
	go func() {
		// Drain the keep-alive responses; the channel closes when the lease expires or is
		// revoked, the session is closed (cancel) or the client is closed.
		for range kac {
			ss.renewed.Store(time.Now().UnixNano())
		}
		close(ss.done)
		s.wg.Done()
	}()
	s.log.Debug("metadata session started", "lease", fmt.Sprintf("%x", int64(grant.ID)), "ttl_s", secs)
	return ss, nil
}

// maxRevokeWait bounds a lease revocation: a reachable etcd answers in milliseconds, and an
// unreachable one would only hold a stopping process for the whole ttl, after which the
// lease expires on its own anyway (as after a crash).
const maxRevokeWait = 2 * time.Second

// revoke revokes a lease, bounded by maxRevokeWait and its ttl.
func (s *EtcdStore) revoke(id clientv3.LeaseID, ttlSecs int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), min(time.Duration(ttlSecs)*time.Second, maxRevokeWait))
	defer cancel()
	_, err := s.cli.Revoke(ctx, id)
	return err
}

// etcdSession is a lease kept alive by one goroutine (see NewSession). Safe for concurrent
// use.
type etcdSession struct {
	s      *EtcdStore
	id     clientv3.LeaseID
	ttl    int64              // seconds
	cancel context.CancelFunc // stops the keep-alive
	done   chan struct{}      // closed when the keep-alive goroutine exits
	// renewed is when etcd last confirmed the lease (Unix ns; the grant's request time at
	// first).
	renewed atomic.Int64

	closeOnce sync.Once
	closeErr  error
}

func (ss *etcdSession) ID() int64 { return int64(ss.id) }

func (ss *etcdSession) Done() <-chan struct{} { return ss.done }

// Renewed returns when etcd last confirmed the lease (see Renewer).
func (ss *etcdSession) Renewed() time.Time { return time.Unix(0, ss.renewed.Load()) }

func (ss *etcdSession) Put(ctx context.Context, key string, value []byte, expected Version) (Version, error) {
	select {
	case <-ss.done:
		if err := ss.s.checkOpen("session put", key); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("metadata: session put %q: %w", key, ErrSessionExpired)
	default:
	}
	return ss.s.put(ctx, key, value, expected, ss.id)
}

// Close stops the keep-alive and revokes the lease, deleting the session's keys. After the
// store is closed, or once the lease has expired, it only stops the keep-alive. If etcd does
// not answer within maxRevokeWait, Close returns the error and the lease expires on its own.
func (ss *etcdSession) Close() error {
	ss.closeOnce.Do(func() {
		select {
		case <-ss.done:
			ss.cancel()
			return // the lease expired (its keys went with it) or the client closed
		default:
		}
		ss.cancel()
		<-ss.done
		if ss.s.isClosed() {
			return
		}
		err := ss.s.revoke(ss.id, ss.ttl)
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			ss.closeErr = ss.s.wrap("revoke lease", strconv.FormatInt(int64(ss.id), 16), err)
		}
	})
	return ss.closeErr
}

// ParseURL parses a metadata service URL "etcd://host:port[,host:port...]" into client
// endpoints ("host:port"). IPv6 hosts are bracketed: etcd://[::1]:2379.
func ParseURL(u string) ([]string, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("metadata: bad etcd URL %q: %s (want etcd://host:port[,host:port...])", u, fmt.Sprintf(format, args...))
	}
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return nil, bad("missing scheme")
	}
	if !strings.EqualFold(scheme, "etcd") {
		return nil, bad("scheme %q is not etcd", scheme)
	}
	rest = strings.TrimSuffix(rest, "/")
	if rest == "" {
		return nil, bad("no hosts")
	}
	if strings.ContainsAny(rest, "/?#@") {
		return nil, bad("paths, queries and user info are not supported")
	}
	var eps []string
	for hp := range strings.SplitSeq(rest, ",") {
		host, port, err := net.SplitHostPort(hp)
		if err != nil {
			return nil, bad("host %q: %v", hp, err)
		}
		if host == "" {
			return nil, bad("host %q: empty host name", hp)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, bad("host %q: port %q is not in 1..65535", hp, port)
		}
		ep := net.JoinHostPort(host, port)
		if slices.Contains(eps, ep) {
			return nil, bad("duplicate host %q", hp)
		}
		eps = append(eps, ep)
	}
	return eps, nil
}

// newZapLogger bridges etcd's zap logging to slog, dropping entries below min.
func newZapLogger(l *slog.Logger, min zapcore.Level) *zap.Logger {
	return zap.New(&slogCore{h: l.Handler(), min: min})
}

// slogCore is a zapcore.Core writing to a slog.Handler.
type slogCore struct {
	h   slog.Handler
	min zapcore.Level
}

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return l >= c.min && c.h.Enabled(context.Background(), slogLevel(l))
}

func (c *slogCore) With(fs []zapcore.Field) zapcore.Core {
	return &slogCore{h: c.h.WithAttrs(zapAttrs(fs)), min: c.min}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	r := slog.NewRecord(e.Time, slogLevel(e.Level), e.Message, 0)
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	r.AddAttrs(zapAttrs(fs)...)
	return c.h.Handle(context.Background(), r)
}

func (c *slogCore) Sync() error { return nil }

// zapAttrs converts zap fields to slog attributes in key order.
func zapAttrs(fs []zapcore.Field) []slog.Attr {
	if len(fs) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fs {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	attrs := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	return attrs
}
