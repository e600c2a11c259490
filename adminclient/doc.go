// Package adminclient is a typed client of Pulsar's admin REST API (/admin/v2, /admin/v3 and
// /lookup/v2) as Magnetar's brokers serve it: what `magnetar admin`, the scalable-topic
// clients and Go programs use to administer a cluster, and what a broker can use to call
// another. It imports no broker package (only the leaf broker/api for the wire types), so
// the broker itself may import it.
//
// # Usage
//
//	c, err := adminclient.New(adminclient.Options{
//		URLs: []string{"http://broker-1:8080", "http://broker-2:8080"},
//		Auth: adminclient.TokenAuth(func() ([]byte, error) { return os.ReadFile(tokenFile) }),
//	})
//	err = c.CreateTenant(ctx, "acme", api.TenantInfo{AdminRoles: []string{"ops"}})
//	err = c.CreateNamespace(ctx, "acme/orders", 0)
//	err = c.CreatePartitionedTopic(ctx, "persistent://acme/orders/in", 4)
//	var st api.TopicStats
//	err = c.TopicStats(ctx, "persistent://acme/orders/in", &st)
//	var raw json.RawMessage // or keep the broker's JSON as it is
//	err = c.InternalStats(ctx, "persistent://acme/orders/in", &raw)
//	if adminclient.IsNotFound(err) { ... }
//
// Paths are built in one place (paths.go: TenantPath, NamespacePath, TopicPath,
// SubscriptionPath, SchemaPath, ScalablePath, ... returning a Path whose segments are
// escaped). Do and Get send any request on a Path for an operation without a method.
//
// Caller's obligations:
//
//  1. Names are checked before anything is sent: an invalid tenant, namespace or topic
//     name is an error that errors.Is ErrInvalidName.
//  2. A read decodes into the out argument the caller gives: the broker/api type named in
//     the method's comment, or any JSON target (*any, *json.RawMessage).
//  3. A non-2xx answer is an *Error (errors.As) with the status and Pulsar's reason; the
//     caller decides what a status means (IsNotFound, StatusOf).
//
// # Credentials and redirects
//
// The Auth function's Authorization header goes on every request, redirected ones too: a
// broker answers 307 Temporary Redirect with the owner of a topic or bundle, often another
// host, to which net/http would not forward an Authorization header set on the request.
// The header is therefore set by the transport (HTTPClient gives that transport to other
// callers). TLS client certificates are the Options.TLS configuration's.
//
// # Concurrency
//
// A Client is safe for concurrent use and starts no goroutines; each call blocks until its
// answer, its context, or the Options.Timeout (30 s by default) ends. With several URLs, a
// request that cannot connect tries the next; an HTTP answer, whatever its status, is
// final.
package adminclient
