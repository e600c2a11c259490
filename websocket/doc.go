// Package websocket serves Pulsar's WebSocket API (Pulsar's pulsar-websocket:
// WebSocketService, ProducerHandler, ConsumerHandler, ReaderHandler, PingPongHandler) as an
// http.Handler, for browsers and languages without a Pulsar client. Like Pulsar's, it is a
// client of the broker: every socket is a producer or consumer of package pulsarclient on
// the broker's (or the proxy's) Pulsar listener.
//
// # Paths
//
//	/ws/v2/producer/persistent/{tenant}/{namespace}/{topic}
//	/ws/v2/consumer/persistent/{tenant}/{namespace}/{topic}/{subscription}
//	/ws/v2/reader/persistent/{tenant}/{namespace}/{topic}
//	/ws/v2/pingpong
//
// and the v1 forms (/ws/producer/persistent/{property}/{cluster}/{namespace}/{topic}, ...).
// non-persistent works in place of persistent. The v3 multi-topic consumer is not served
// (404). Query parameters are Pulsar's (see parseProducer, parseConsumer, parseReader); a bad
// one refuses the upgrade with 400.
//
// # Messages (JSON text frames)
//
//	producer → {"payload":"<base64>","properties":{...},"context":"c1","key":"k",
//	            "eventTime":"2021-10-29T16:01:38.967-07:00","deliverAt":ms,"deliverAfterMs":ms}
//	producer ← {"result":"ok","messageId":"<base64>","context":"c1","errorCode":0,"schemaVersion":0}
//	           {"result":"send-error:<code>","errorMsg":"...","context":"c1",...}
//	consumer ← {"messageId":"<base64>","payload":"<base64>","properties":{...},
//	            "publishTime":"...","redeliveryCount":0,"eventTime":"...","key":"k"}
//	consumer → {"messageId":"<base64>"}                              acknowledge
//	           {"type":"negativeAcknowledge","messageId":"<base64>"} redeliver later
//	           {"type":"permit","permitMessages":N}                   pull mode (pullMode=true)
//	           {"type":"isEndOfTopic"}  ← {"endOfTopic":true|false}
//	           {"type":"unsubscribe"}
//
// A messageId is base64 of the MessageIdData protobuf (Pulsar's MessageId.toByteArray), so
// ids are interchangeable with Pulsar's. A producer socket answers a bad message with a
// send-error result and stays open; a consumer or reader socket answers a command it cannot
// read with {"result":"error","errorCode":3,"errorMsg":...} and closes. Pulsar's
// WebSocketError codes (1 failed to create producer ... 8 unknown) are the send-error codes,
// and 4000 + the code is the close status (Pulsar closes with the bare code, which RFC 6455
// does not allow).
//
// Push mode writes at most receiverQueueSize (≤ 1000) unacknowledged messages to a socket;
// acknowledgements (positive or negative) make room. Pull mode writes exactly as many
// messages as the client's permits ask for. isEndOfTopic answers whether the broker told the
// consumer that it read the whole of a terminated topic with nothing left unacknowledged
// (REACHED_END_OF_TOPIC).
//
// # Authentication and authorization
//
// With Config.Auth, the upgrade request authenticates as the admin API's do (Authorization:
// Bearer or Basic, or the client certificate); browsers, which cannot set headers on a
// WebSocket, pass the token query parameter, which stands for "Authorization: Bearer
// <token>" when there is no header. A failure answers 401 before the upgrade. The broker
// authorizes: the socket's producer or consumer is created on the broker for the client's
// role (its own credentials, or the service's with original_principal: Config.ServiceAuth),
// so produce and consume permissions, tenant admins and superusers are decided by the same
// code as for binary-protocol clients, and a refusal answers 403 before the upgrade.
//
// # Usage
//
//	ws, err := websocket.New(websocket.Config{ServiceURL: "pulsar://127.0.0.1:6650", Auth: authn})
//	mux.Handle("/ws/", ws)
//	defer ws.Close()
//
// Caller obligations:
//  1. Mount the Service on /ws/ of an HTTP server; it answers 404 outside its paths.
//  2. Close it before the broker: Close ends every socket (going away) and waits for them.
//
// # Goroutines and ownership
//
//   - One per socket: the HTTP server's handler goroutine reads the socket (run) and owns
//     the session until it ends; it then closes the producer or consumer.
//   - Producer sockets: a writer goroutine drains the session's outbox (answers in order);
//     receipts are pushed to it from the producer's goroutine, never blocking it.
//   - Consumer and reader sockets: a deliver goroutine receives and writes messages while
//     the session has credit; the credit counters and the delivered-message map are a
//     mutex-guarded leaf.
//   - Broker clients are shared by the sockets of one identity (Service.pool, a leaf lock)
//     and closed with their last socket.
package websocket
