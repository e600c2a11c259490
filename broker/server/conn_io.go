package server

import (
	"errors"
	"io"
	"net"
	"time"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// The connection's I/O: the reader loop (serve) and the writer loop (writeLoop), and Send
// and SendMessage, which encode frames into the outbound buffer the writer drains.

// serve runs the reader loop until the connection ends, then detaches its producers and
// consumers.
func (c *conn) serve() {
	go c.writeLoop()
	defer func() {
		c.close("reader stopped")
		<-c.writerEnd
		c.drainers.Wait()
		c.nc.Close()
		c.state = connClosed
		c.detachAll()
	}()
	fr := pulsar.NewFrameReader(c.nc, c.s.cfg.MaxMessageSize+pulsar.FramePadding)
	idle := 2 * c.s.cfg.KeepAliveInterval
	for {
		c.nc.SetReadDeadline(time.Now().Add(idle)) //nolint:errcheck // a failing conn fails the read
		select {
		case <-c.done:
			return
		default:
		}
		f, err := fr.ReadFrame()
		if err != nil && !errors.Is(err, pulsar.ErrChecksum) {
			c.readFailed(err)
			return
		}
		if err != nil { // checksum mismatch: the stream is in sync, the frame is refused
			if f.Cmd.GetType() == pb.BaseCommand_SEND && c.state == connConnected {
				s := f.Cmd.GetSend()
				if e := c.producers.get(s.GetProducerId()); e != nil {
					e.obj.Refused() // a replicator producer's session ends at a refusal
				}
				c.Send(wrapSendError(s.GetProducerId(), s.GetSequenceId(), pb.ServerError_ChecksumError, err.Error()))
				continue
			}
			c.badFrame("checksum", err)
			return
		}
		if c.parkOrdered(f) { // conn_park.go
			continue
		}
		if err := c.handle(f); err != nil {
			c.badFrame("protocol", err)
			return
		}
	}
}

func (c *conn) readFailed(err error) {
	var fse *pulsar.FrameSizeError
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		c.log.Debug("connection closed by client")
	case errors.As(err, &fse):
		c.badFrame("oversized", err)
	case errors.Is(err, pulsar.ErrMalformed):
		c.badFrame("malformed", err)
	case errors.As(err, &ne) && ne.Timeout():
		select {
		case <-c.done:
		default:
			c.log.Info("closing idle connection: no data for twice the keep-alive interval")
		}
	default:
		select {
		case <-c.done:
		default:
			c.log.Debug("connection read failed", "err", err)
		}
	}
}

// badFrame closes the connection because of what the client sent.
func (c *conn) badFrame(reason string, err error) {
	c.s.m.BadFrames.WithLabelValues(reason).Inc()
	c.log.Warn("closing connection: bad frame", "reason", reason, "err", err)
	c.close(reason)
}

func (c *conn) writeLoop() {
	defer close(c.writerEnd)
	ping := time.NewTicker(c.s.cfg.KeepAliveInterval)
	defer ping.Stop()
	var refresh <-chan time.Time // credential expiry checks (conn_auth.go)
	if c.s.cfg.Auth.Enabled() {
		t := time.NewTicker(c.s.cfg.AuthRefreshInterval)
		defer t.Stop()
		refresh = t.C
	}
	var spare []byte
	for {
		stop := false
		select {
		case <-c.wake:
		case <-ping.C:
			if c.state != connHandshaking {
				c.Send(pulsar.Wrap(&pb.CommandPing{}))
			}
			continue
		case now := <-refresh:
			c.checkAuthExpiry(now)
			continue
		case <-c.done:
			stop = true
		}
		c.out.Lock()
		buf := c.out.buf
		c.out.buf = spare[:0]
		if stop {
			c.out.closed = true
		}
		c.out.Unlock()
		if len(buf) > 0 {
			if !stop {
				c.nc.SetWriteDeadline(time.Now().Add(2 * c.s.cfg.KeepAliveInterval)) //nolint:errcheck
			}
			if _, err := c.nc.Write(buf); err != nil {
				c.close("write failed: " + err.Error())
				c.out.Lock()
				c.out.closed = true
				c.out.buf = nil
				c.out.Unlock()
				return
			}
		}
		if stop {
			return
		}
		if cap(buf) > 4<<20 {
			buf = nil // do not keep a burst's buffer
		}
		spare = buf
	}
}

func (c *conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Send queues a command (topic.Conn).
func (c *conn) Send(cmd *pb.BaseCommand) {
	c.out.Lock()
	if c.out.closed {
		c.out.Unlock()
		return
	}
	buf, err := pulsar.AppendCommand(c.out.buf, cmd)
	c.out.buf = buf
	c.out.Unlock()
	if err != nil {
		c.log.Error("bug: cannot encode a command", "type", cmd.GetType(), "err", err)
		return
	}
	c.signal()
}

// SendMessage queues a MESSAGE with a stored entry (topic.Conn).
func (c *conn) SendMessage(cmd *pb.BaseCommand, headersAndPayload []byte) {
	c.out.Lock()
	if c.out.closed {
		c.out.Unlock()
		return
	}
	buf, err := pulsar.AppendRawPayloadCommand(c.out.buf, cmd, nil, headersAndPayload)
	c.out.buf = buf
	c.out.Unlock()
	if err != nil {
		c.log.Error("bug: cannot encode a message", "err", err)
		return
	}
	c.signal()
}
