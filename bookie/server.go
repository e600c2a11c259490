package bookie

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/magnetar-io/magnetar/bookie/journal"
	"github.com/magnetar-io/magnetar/bookie/storage"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// State is the bookie's service state as registered in metadata.
type State uint8

// States.
const (
	StateStarting State = iota // replaying the journal, not registered
	StateWritable              // registered under metadata.PrefixAvailable; accepts adds
	StateReadOnly              // registered under metadata.PrefixReadOnly; refuses adds
	StateStopped               // closed
)

func (s State) String() string {
	switch s {
	case StateStarting:
		return "starting"
	case StateWritable:
		return "writable"
	case StateReadOnly:
		return "read-only"
	case StateStopped:
		return "stopped"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// maxPendingPerConn bounds the requests a connection may have in flight; the reader stops
// reading from the socket while at the bound, so a fast client cannot exhaust memory.
const maxPendingPerConn = 8192

// Bookie is a storage node. Create it with Start; stop it with Close. Safe for concurrent use.
type Bookie struct {
	cfg     Config
	log     *slog.Logger
	id      string
	addr    string // advertised address
	cookie  Cookie
	jr      *journal.Journal
	st      *storage.Storage
	ledgers *ledgerTable
	m       *metrics
	ln      net.Listener
	reg     *registrar

	state atomic.Uint32 // State

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		conns  map[*conn]struct{}
		closed bool
	}
	closeOnce sync.Once
	closeErr  error
	done      chan struct{} // closed when Close is done

	failOnce sync.Once
	failErr  atomic.Pointer[error] // the disk failure that stopped the bookie (see fail)
}

// Start opens the data dir (checking the cookie), replays the journal, starts the protocol
// server and registers the bookie. It returns once the bookie serves requests.
func Start(ctx context.Context, cfg Config) (*Bookie, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("bookie: listen: %w", err)
	}
	if cfg.TLS != nil {
		ln = tls.NewListener(ln, cfg.TLS)
	}
	b := &Bookie{cfg: cfg, ledgers: newLedgerTable(), m: newMetrics(), ln: ln, done: make(chan struct{})}
	b.mu.conns = make(map[*conn]struct{})
	b.addr = cfg.Advertise
	if b.addr == "" {
		b.addr = ln.Addr().String()
	}
	b.id = cfg.ID
	if b.id == "" {
		b.id = b.addr
	}
	b.log = cfg.Logger.With("bookie", b.id)
	if err := b.open(ctx); err != nil {
		ln.Close()
		return nil, err
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.reg = newRegistrar(b)
	if err := b.reg.register(ctx); err != nil {
		b.cancel()
		ln.Close()
		b.jr.Close()
		b.st.Close()
		return nil, err
	}
	b.wg.Add(4)
	go b.acceptLoop()
	go b.reg.run()
	go b.checkpointLoop()
	go b.gcLoop()
	b.log.Info("bookie started", "listen", ln.Addr().String(), "advertise", b.addr, "dataDir", cfg.DataDir,
		"state", b.State().String())
	return b, nil
}

// open checks the cookie, opens storage and the journal, and replays it.
func (b *Bookie) open(ctx context.Context) error {
	ck, err := checkCookie(ctx, b.cfg.Store, b.cfg.DataDir, b.id)
	if err != nil {
		return err
	}
	b.cookie = ck
	st, err := storage.Open(dataPath(b.cfg.DataDir, "ledgers"), storage.Options{Logger: b.cfg.Logger, FS: b.cfg.storageFS})
	if err != nil {
		return fmt.Errorf("bookie: open storage: %w", err)
	}
	b.m.reg.MustRegister(newStorageCollector(func() (storage.Stats, bool) {
		s := st.Stats()
		return s, s.State != storage.StateClosed
	}))
	b.m.reg.MustRegister(bkCollector{m: b.m, st: st}) // BookKeeper's metric names (bkmetrics.go)
	jopts := b.cfg.Journal
	if jopts.Logger == nil {
		jopts.Logger = b.cfg.Logger
	}
	userRoll := jopts.OnRoll
	jopts.OnRoll = func(seq uint64, prepared bool) {
		b.m.journalRolls.WithLabelValues(strconv.FormatBool(prepared)).Inc()
		if userRoll != nil {
			userRoll(seq, prepared)
		}
	}
	userHook := jopts.OnGroupSynced
	jopts.OnGroupSynced = func(records, bytes int, fsync time.Duration) {
		b.m.groupRecords.Observe(float64(records))
		b.m.groupBytes.Observe(float64(bytes))
		b.m.fsyncLatency.Observe(fsync.Seconds())
		if userHook != nil {
			userHook(records, bytes, fsync)
		}
	}
	replayed := 0
	jr, err := journal.Open(dataPath(b.cfg.DataDir, "journal"), jopts, func(r journal.Record) error {
		replayed++
		return b.replay(st, r)
	})
	if err != nil {
		st.Close()
		return fmt.Errorf("bookie: open journal: %w", err)
	}
	// Everything replayed is now in storage; make it durable so the replayed journal files
	// can go.
	mark := jr.Mark()
	if err := st.Flush(); err != nil {
		jr.Close()
		st.Close()
		return fmt.Errorf("bookie: flush after replay: %w", err)
	}
	if err := jr.Release(mark); err != nil {
		b.log.Warn("release journal after replay", "err", err)
	}
	b.st, b.jr = st, jr
	fenced := 0
	if ids, err := st.Ledgers(); err == nil {
		for _, id := range ids {
			if m, ok, err := st.Meta(id); err == nil && ok && m.Fenced {
				fenced++
			}
		}
	}
	b.m.fencedLedgers.Set(float64(fenced))
	b.log.Info("journal replayed", "records", replayed)
	return nil
}

// replay applies one journal record to storage (idempotently: records may replay twice).
func (b *Bookie) replay(st *storage.Storage, r journal.Record) error {
	switch r.Type {
	case journal.RecAddEntry:
		return st.Put(r.LedgerID, r.EntryID, r.Data)
	case journal.RecMasterKey, journal.RecFence, journal.RecExplicitLAC:
		m, _, err := st.Meta(r.LedgerID)
		if err != nil {
			return err
		}
		switch r.Type {
		case journal.RecMasterKey:
			if len(r.Data) != bk.MasterKeyLen+1 {
				return fmt.Errorf("master key record of ledger %d: %d bytes", r.LedgerID, len(r.Data))
			}
			copy(m.MasterKey[:], r.Data)
			m.Digest = r.Data[bk.MasterKeyLen]
		case journal.RecFence:
			m.Fenced = true
		case journal.RecExplicitLAC:
			m.ExplicitLAC = append([]byte(nil), r.Data...)
		}
		return st.SetMeta(r.LedgerID, m)
	case journal.RecDeleteLedger:
		return st.DeleteLedger(r.LedgerID)
	}
	return fmt.Errorf("unknown journal record type %d", r.Type)
}

// ID is the bookie id.
func (b *Bookie) ID() string { return b.id }

// Addr is the advertised protocol address.
func (b *Bookie) Addr() string { return b.addr }

// State is the current service state.
func (b *Bookie) State() State { return State(b.state.Load()) }

// MetricsHandler serves the bookie's Prometheus metrics.
func (b *Bookie) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(b.m.reg, promhttp.HandlerOpts{})
}

// Close stops serving, unregisters, and closes the journal and storage. Pending requests get
// their answers or a closed connection. Idempotent; Done is closed when it is done.
func (b *Bookie) Close() error {
	b.closeOnce.Do(func() {
		b.log.Info("bookie stopping")
		b.mu.Lock()
		b.mu.closed = true
		conns := make([]*conn, 0, len(b.mu.conns))
		for c := range b.mu.conns {
			conns = append(conns, c)
		}
		b.mu.Unlock()
		b.cancel()
		b.ln.Close()
		for _, c := range conns {
			c.close()
		}
		b.wg.Wait()
		// answer parked long polls
		for _, ls := range b.ledgers.all() {
			ls.mu.Lock()
			ws := ls.waiters
			ls.waiters = nil
			ls.mu.Unlock()
			for _, w := range ws {
				w.stop()
				w.respond(bk.Response{Op: bk.OpLongPoll, RequestID: w.req.RequestID, Status: bk.StatusShuttingDown,
					LedgerID: w.req.LedgerID, EntryID: -1, MaxLAC: -1})
			}
		}
		errs := []error{b.reg.close()}
		errs = append(errs, b.jr.Close())
		errs = append(errs, b.st.Flush(), b.st.Close())
		b.state.Store(uint32(StateStopped))
		b.closeErr = errors.Join(errs...)
		b.log.Info("bookie stopped", "err", b.closeErr)
		close(b.done)
	})
	return b.closeErr
}

func (b *Bookie) acceptLoop() {
	defer b.wg.Done()
	for {
		nc, err := b.ln.Accept()
		if err != nil {
			if b.ctx.Err() == nil {
				b.log.Error("accept failed", "err", err)
			}
			return
		}
		if !b.serve(nc) {
			return
		}
	}
}

// serve runs a connection's reader and writer, or closes nc and reports false if the
// bookie is closing.
func (b *Bookie) serve(nc net.Conn) bool {
	c := newConn(b, nc)
	b.mu.Lock()
	if b.mu.closed {
		b.mu.Unlock()
		nc.Close()
		return false
	}
	b.mu.conns[c] = struct{}{}
	b.mu.Unlock()
	b.m.connections.Inc()
	b.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	return true
}

// DialLocal returns an in-process connection to this bookie (a synchronous net.Pipe),
// served as a TCP connection would be, for a client in the same process: it saves the
// loopback socket's system calls and wake-ups on every request and response. Use it as
// client.Options.Dial for the bookie's own address.
func (b *Bookie) DialLocal() (net.Conn, error) {
	client, server := net.Pipe()
	if !b.serve(server) {
		client.Close()
		return nil, fmt.Errorf("bookie %s: %w", b.addr, net.ErrClosed)
	}
	return client, nil
}

func (b *Bookie) removeConn(c *conn) {
	b.mu.Lock()
	if _, ok := b.mu.conns[c]; ok {
		delete(b.mu.conns, c)
		b.m.connections.Dec()
	}
	b.mu.Unlock()
}

// conn is one client connection. readLoop owns decoding and dispatch; writeLoop owns the
// socket's write side. Responses are queued from any goroutine (journal completions, timers)
// through the out queue, which never blocks the producer.
type conn struct {
	b       *Bookie
	nc      net.Conn
	log     *slog.Logger
	pending chan struct{} // semaphore of in-flight requests

	mu struct {
		sync.Mutex
		out    [][]byte
		closed bool
	}
	wake      chan struct{} // capacity 1: out has data or the conn closed
	closeOnce sync.Once
	done      chan struct{}
}

func newConn(b *Bookie, nc net.Conn) *conn {
	return &conn{b: b, nc: nc, log: b.log.With("remote", nc.RemoteAddr().String()),
		pending: make(chan struct{}, maxPendingPerConn), wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.mu.closed = true
		c.mu.Unlock()
		close(c.done)
		c.nc.Close()
		c.b.removeConn(c)
	})
}

// send queues a response; it never blocks. Responses to a closed connection are dropped.
func (c *conn) send(r bk.Response) {
	frame := bk.AppendResponse(nil, &r)
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return
	}
	c.mu.out = append(c.mu.out, frame)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// respond sends r and releases the request's in-flight slot.
func (c *conn) respond(r bk.Response) {
	c.send(r)
	select {
	case <-c.pending:
	default:
	}
}

func (c *conn) readLoop() {
	defer c.b.wg.Done()
	defer c.close()
	fr := bk.NewFrameReader(c.nc, bk.MaxFrameLen)
	for {
		frame, err := fr.Next()
		if err != nil {
			switch {
			case errors.Is(err, io.EOF), c.b.ctx.Err() != nil, isClosedConn(err):
			case errors.Is(err, bk.ErrFrameTooLarge):
				c.b.m.malformed.Inc()
				c.log.Warn("closing connection: oversized frame", "err", err)
			default:
				c.log.Warn("closing connection: read failed", "err", err)
			}
			return
		}
		req, err := bk.DecodeRequest(frame)
		if err != nil {
			c.b.m.malformed.Inc()
			c.log.Warn("closing connection: malformed frame", "err", err)
			return
		}
		// req.Body aliases the frame buffer, which the reader reuses for the next frame:
		// handlers copy what they keep (Storage.Put and Journal.Append copy their input).
		select {
		case c.pending <- struct{}{}:
		case <-c.done:
			return
		}
		c.b.handle(c, &req)
	}
}

func (c *conn) writeLoop() {
	defer c.b.wg.Done()
	defer c.close()
	w := bufio.NewWriterSize(c.nc, 256<<10)
	var batch [][]byte
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		for {
			c.mu.Lock()
			batch, c.mu.out = c.mu.out, batch[:0]
			c.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			for i, f := range batch {
				if _, err := w.Write(f); err != nil {
					if !isClosedConn(err) {
						c.log.Warn("closing connection: write failed", "err", err)
					}
					return
				}
				batch[i] = nil
			}
		}
		if err := w.Flush(); err != nil {
			if !isClosedConn(err) {
				c.log.Warn("closing connection: write failed", "err", err)
			}
			return
		}
	}
}

func isClosedConn(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrClosedPipe)
}
