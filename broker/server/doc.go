// Package server is the broker's Pulsar protocol server: it accepts client connections
// on the listeners it is given and serves each one — handshake and authentication,
// lookups, producers and SENDs, consumers and their FLOW, ACK and SEEK, schemas,
// transaction coordinator commands and scalable-topic sessions — against a Backend, the
// small set of interfaces (backend.go) through which it reaches the rest of the broker. It
// imports no part of the broker above it: the broker root (package broker) implements
// Backend over its Service and starts and stops the server; tests run it against a fake
// Backend over in-memory topics (broker/topic/topictest), without etcd or bookies.
//
// # Usage
//
//	ls, err := server.Listen(server.ListenConfig{Listen: "127.0.0.1:6650"})
//	srv := server.New(ctx, backend, server.Config{MaxMessageSize: 5 << 20,
//		MaxPendingPublishPerConnection: 1000, KeepAliveInterval: 30 * time.Second,
//		Metrics: server.NewMetrics(reg)})
//	srv.Serve(ls.Plain)
//	// shutting down:
//	srv.Refuse()                  // new connections are closed at once
//	ls.Plain.Close()              // the accept loop ends
//	srv.CloseConns("shutting down") // writers flush, sockets close
//	cancel()                      // ctx: requests still in flight end
//	srv.Wait()
//
// Caller obligations:
//  1. Fill Config's limits (MaxMessageSize, MaxPendingPublishPerConnection,
//     KeepAliveInterval; AuthRefreshInterval with Auth): New does not default them.
//  2. Close the listeners given to Serve before Wait: Wait waits for their accept loops.
//  3. End ctx (New's) after CloseConns: the Backend requests and the scalable sessions of
//     the connections run under it, and Wait does not wait for them.
//  4. The Backend must be safe for concurrent use and honour its methods' ctx.
//
// # Backend contract
//
// A connection asks the Backend for what it cannot do itself: authorization of a role
// (Authorizer; authentication itself is Config.Auth), where a topic is served and what a
// namespace holds (Lookups), the loaded topic its producers and consumers attach to
// (Topics: a *topic.Topic, which then talks back to the connection through topic.Conn),
// schemas (Schemas), transaction coordinators (Transactions) and the scalable topics'
// DAGs, watches and stream-consumer assignments (ScalableTopics, StreamConsumers). The
// Backend's errors wrap the sentinels of broker/api, broker/topic, auth, txn, mledger and
// metadata; serverError (errors.go) is the one table that maps them to the protocol's
// ServerError codes (txnError for the coordinator commands), which decide what the
// clients do next.
//
// # Goroutines
//
//   - Accept loop (Serve): one per listener, until the listener closes; it registers each
//     connection in the server's set (a leaf mutex) and starts its reader.
//   - Reader (conn.serve, conn_io.go): one per connection; it owns the FrameReader and the
//     connection state (Handshaking → Connected → Closed) and handles every command in
//     order. Commands that wait for I/O (lookups, topic loads with their schema and initial
//     subscription, GET_LAST_MESSAGE_ID, schemas, coordinator commands) run on goroutines
//     of their own under a context that ends with the connection or the server's ctx.
//   - Drainer (conn.drain, conn_park.go): at most one per connection, while SENDs beyond
//     the in-flight limit are parked; it hands them to their topics in order as room frees,
//     with the commands parked behind them, and ends when the park queue is empty.
//   - Writer (conn.writeLoop): one per connection; it drains the outbound buffer, which
//     any goroutine fills under a leaf mutex (Send, SendMessage: the reader, request
//     goroutines, topic and subscription goroutines), writes it in batches, pings the
//     client every KeepAliveInterval and, with authentication on, checks the credential's
//     expiry every AuthRefreshInterval (AUTH_CHALLENGE; no fresh answer by the next check
//     closes the connection).
//   - Scalable sessions (conn_scalable.go): one goroutine per DAG watch, stream consumer
//     and namespace watch, keyed by its id in a leaf-locked map of the connection, ending
//     with its close command or the connection.
//
// # Invariants
//
//   - Nothing but CONNECT is served before CONNECTED is sent; a refused authentication is
//     answered with AuthenticationError (request id -1) and closes the connection.
//   - A malformed, oversized or out-of-order frame closes that connection only, with a
//     logged reason and a magnetar_broker_bad_frames_total{reason} count; a SEND whose
//     payload checksum fails is refused with ChecksumError and the stream goes on.
//   - A request the server does not serve is answered (NotAllowedError) so the client does
//     not wait for its timeout; a command that is not a request is ignored.
//   - Producer and consumer ids (conn_registry.go) have an explicit state (Creating →
//     Waiting → Ready → Closed); only Ready ids are served, a repeated create of a Ready id
//     is answered again, and whoever creates an id that was closed meanwhile closes what it
//     made. When the connection ends, every producer and consumer it created is closed.
//   - Backpressure: a connection has at most MaxPendingPublishPerConnection SENDs in flight
//     to its topics, each within its topic's byte budget (topic.AcquirePublish); the SENDs
//     beyond wait in arrival order (parked), and so do CLOSE_PRODUCER and the transaction
//     commands behind them, while every other command (FLOW, ACK, PING, lookups, producers,
//     subscriptions) is served at once: publish back-pressure does not starve a consumer on
//     the same connection. Beyond MaxParkedPublishBytes of parked SENDs the connection
//     stops reading.
//   - Authorization (Config.Authz) runs before a topic is loaded or created, so a refusal
//     changes nothing; on a proxied connection the proxy's role is authorized too, unless
//     it is a superuser. Each refused authentication and authorization writes an audit line
//     (package broker/access: client address, principal, action, resource; rate-limited).
//   - A topic name is parsed (package broker/topicname: Pulsar's rules and lengths) before
//     anything else is done with it: a producer or consumer on an invalid name gets
//     InvalidTopicName and nothing is created.
package server
