// Package proxy is Magnetar's Pulsar proxy (Pulsar's pulsar-proxy: ProxyService,
// ProxyConnection, LookupProxyHandler, DirectProxyHandler, AdminProxyHandler): one address
// for clients that cannot reach the brokers. It is stateless; several proxies may serve the
// same cluster side by side.
//
// # Binary protocol
//
// A client connects to the proxy and sends CONNECT. Without proxy_to_broker_url the
// connection is a lookup connection: the proxy answers CONNECTED itself and serves LOOKUP,
// PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE, GET_SCHEMA and GET_OR_CREATE_SCHEMA by
// asking a broker (round robin over the brokers, the next one if a broker is unreachable)
// and relaying the answer. A LOOKUP's redirects are followed by the proxy; the answer is
// Connect with the owning broker's URL (as both its plain and TLS URL: the proxy dials the
// broker's plain listener whichever the client picks) and proxy_through_service_url=true, so
// the client connects to the proxy again with CONNECT.proxy_to_broker_url = that broker. Such a
// connection is spliced: the proxy connects to the broker with the client's CONNECT (see
// Service.brokerConnect for the credentials), relays the broker's CONNECTED and then copies
// bytes both ways (splice(2) between TCP sockets) without reading frames. The proxy connects
// clients only to known brokers: listed in the metadata store (/brokers/available/), given
// as URLs, or named by a broker's lookup answer.
//
// Failures never hang a client: a broker that cannot be reached or does not answer within
// Config.DialTimeout or Config.RequestTimeout is answered ServiceNotReady, which clients
// retry; a malformed, oversized or unexpected frame closes the client's connection with a
// logged reason (metric magnetar_proxy_bad_frames_total).
//
// With authentication on, the proxy verifies CONNECT's credentials and sends the broker its
// own (Config.BrokerAuthMethod) with the client's role as original_principal; the broker must
// list the proxy's role in its proxyRoles. With authentication off and no proxy credentials,
// the client's credentials pass through and the broker authenticates the client.
//
// # HTTP
//
// HTTPHandler forwards /admin/ and /lookup/ to a broker's admin API and follows 307/308
// redirects to the owning broker itself (bodies are buffered, up to 32 MiB, to be sent
// again). As with Pulsar's proxy, an HTTP lookup answers the broker's own URLs: clients that
// can reach only the proxy must use its pulsar:// URL.
//
// # Goroutines and ownership
//
//   - Service: one accept goroutine per listener; one serve goroutine per client connection
//     (clientConn), all tracked by Service.wg. Service.mu guards the set of open sockets
//     (clients and brokers), which Close closes.
//   - clientConn: serve owns the read side and the connection's state (handshake, then lookup
//     or direct). A lookup connection runs each request on a goroutine of its own (clientConn.wg),
//     bounded by the proxy-wide MaxConcurrentLookups semaphore; writes to the client are
//     serialised by clientConn.wmu. Its upstreams (one per broker, clientConn.mu) are closed
//     when serve ends, after the request goroutines.
//   - upstream: a readLoop goroutine owns its read side, answers PINGs and completes the
//     pending requests (upstream.mu, a leaf lock) by request id; requests write under wmu.
//   - A direct connection runs two copy goroutines; serve waits for both after closing both
//     sockets.
//   - brokers: a cached list of the brokers (brokers.mu, a leaf lock), read again from the
//     store after Config.BrokerRefresh or after a broker failed.
//
// Lock order: none is held while taking another.
package proxy
