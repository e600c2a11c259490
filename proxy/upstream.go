package proxy

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// upstream is a connection from the proxy to a broker for a lookup connection's requests.
// Its readLoop goroutine owns the read side: it answers the broker's PINGs and hands each
// response to the request waiting for its request id. Requests write under wmu.
type upstream struct {
	s    *Service
	addr string
	nc   net.Conn
	log  *slog.Logger
	ids  atomic.Uint64
	wmu  sync.Mutex    // serialises writes to nc
	done chan struct{} // closed when the connection ended

	mu struct {
		sync.Mutex // guards the fields below
		pending    map[uint64]chan *pb.BaseCommand
		ended      bool
	}
}

// openUpstream connects to the broker at addr with connect and starts its reader.
func (s *Service) openUpstream(ctx context.Context, addr string, connect *pb.CommandConnect, log *slog.Logger) (*upstream, error) {
	nc, _, err := s.dialBroker(ctx, addr, connect)
	if err != nil {
		return nil, err
	}
	u := &upstream{s: s, addr: addr, nc: nc, log: log.With("broker", addr), done: make(chan struct{})}
	u.mu.pending = make(map[uint64]chan *pb.BaseCommand)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		u.readLoop()
	}()
	return u, nil
}

func (u *upstream) readLoop() {
	defer u.end()
	fr := pulsar.NewFrameReader(u.nc, u.s.cfg.MaxFrameSize)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			u.log.Debug("broker connection ended", "err", err)
			return
		}
		switch f.Cmd.GetType() {
		case pb.BaseCommand_PING:
			u.write(pulsar.Wrap(&pb.CommandPong{}))
			continue
		case pb.BaseCommand_PONG:
			continue
		case pb.BaseCommand_AUTH_CHALLENGE:
			// Only the proxy's own credentials can be refreshed; a client's that passed
			// through cannot: the next request opens a new connection.
			if !u.answerChallenge() {
				return
			}
			continue
		}
		id, ok := requestOf(f.Cmd)
		if !ok {
			continue
		}
		u.mu.Lock()
		ch := u.mu.pending[id]
		delete(u.mu.pending, id)
		u.mu.Unlock()
		if ch != nil {
			ch <- f.Cmd
		}
	}
}

// answerChallenge answers AUTH_CHALLENGE with fresh proxy credentials; false if the proxy
// has none of its own.
func (u *upstream) answerChallenge() bool {
	cfg := &u.s.cfg
	if cfg.BrokerAuthMethod == "" {
		return false
	}
	data, err := cfg.BrokerAuthData()
	if err != nil {
		u.log.Warn("cannot refresh the proxy's credentials", "err", err)
		return false
	}
	method := cfg.BrokerAuthMethod
	u.write(pulsar.Wrap(&pb.CommandAuthResponse{Response: &pb.AuthData{AuthMethodName: &method, AuthData: data}}))
	return true
}

// end marks the connection dead, fails the waiting requests and closes the socket.
func (u *upstream) end() {
	u.mu.Lock()
	u.mu.ended = true
	pending := u.mu.pending
	u.mu.pending = nil
	u.mu.Unlock()
	for _, ch := range pending {
		close(ch)
	}
	close(u.done)
	u.s.untrack(u.nc)
}

func (u *upstream) dead() bool {
	select {
	case <-u.done:
		return true
	default:
		return false
	}
}

func (u *upstream) close() { u.nc.Close() }

func (u *upstream) write(cmd *pb.BaseCommand) error {
	u.wmu.Lock()
	defer u.wmu.Unlock()
	err := writeCmd(u.nc, cmd)
	if err != nil {
		u.nc.Close()
	}
	return err
}

// request sends cmd with a request id of this connection and waits for the answer. A
// connection that ends first, or ctx ending, is a ServiceNotReady error.
func (u *upstream) request(ctx context.Context, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	id := u.ids.Add(1)
	setRequestID(cmd, id)
	ch := make(chan *pb.BaseCommand, 1)
	u.mu.Lock()
	if u.mu.ended {
		u.mu.Unlock()
		return nil, notReady("broker %s: connection closed", u.addr)
	}
	u.mu.pending[id] = ch
	u.mu.Unlock()
	if err := u.write(cmd); err != nil {
		return nil, notReady("broker %s: %v", u.addr, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, notReady("broker %s: connection closed before it answered", u.addr)
		}
		return r, nil
	case <-ctx.Done():
		u.mu.Lock()
		if u.mu.pending != nil {
			delete(u.mu.pending, id)
		}
		u.mu.Unlock()
		return nil, notReady("broker %s did not answer %v in time", u.addr, cmd.GetType())
	}
}
