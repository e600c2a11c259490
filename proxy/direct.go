package proxy

import (
	"io"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// spliceChunk is how many bytes a direction forwards between two updates of the byte
// counters. The copy itself is the kernel's splice(2) between TCP sockets.
const spliceChunk = 64 << 10

// direct serves a connection whose CONNECT names a broker (Pulsar's DirectProxyHandler):
// the proxy connects to that broker with the client's CONNECT (its own credentials and the
// client's principal when authentication is on), relays the broker's CONNECTED, and from
// then on copies bytes both ways until either side closes. A broker the proxy does not know
// or cannot reach is answered ServiceNotReady, which clients retry (with a new lookup).
func (c *clientConn) direct(target string) {
	addr := targetHost(target)
	log := c.log.With("broker", addr)
	if !c.s.brokers.allowed(c.ctx, addr) {
		log.Info("refusing to proxy to an address that is not a known broker")
		c.write(errorCmd(connectRequestID, notReady("%s is not a broker of this cluster", addr)))
		return
	}
	bc, err := c.s.brokerConnect(c.connect, c.principal)
	if err != nil {
		c.write(errorCmd(connectRequestID, codeOf(err)))
		return
	}
	bnc, connected, err := c.s.dialBroker(c.ctx, addr, bc)
	if err != nil {
		be := codeOf(err)
		if be.code == pb.ServerError_ServiceNotReady {
			c.s.brokers.invalidate()
		}
		log.Info("cannot connect the client to its broker", "err", err)
		c.write(errorCmd(connectRequestID, be))
		return
	}
	defer c.s.untrack(bnc)
	c.nc.SetReadDeadline(time.Time{}) //nolint:errcheck
	if err := writeRaw(c.nc, connected); err != nil {
		return
	}
	log.Debug("client connected through the proxy")
	c.s.m.direct.Inc()
	defer c.s.m.direct.Dec()
	done := make(chan struct{}, 2)
	go func() {
		pump(bnc, c.nc, c.s.m.bytes.WithLabelValues(toBroker))
		done <- struct{}{}
	}()
	go func() {
		pump(c.nc, bnc, c.s.m.bytes.WithLabelValues(toClient))
		done <- struct{}{}
	}()
	pending := 2
	select {
	case <-done:
		pending--
	case <-c.ctx.Done():
	}
	c.nc.Close()
	bnc.Close()
	for range pending {
		<-done
	}
	log.Debug("proxied connection ended")
}

// pump copies src to dst until either fails or src ends, counting the bytes.
func pump(dst, src net.Conn, n prometheus.Counter) {
	lr := &io.LimitedReader{R: src}
	for {
		lr.N = spliceChunk
		k, err := io.Copy(dst, lr)
		n.Add(float64(k))
		if err != nil || k < spliceChunk {
			return
		}
	}
}
