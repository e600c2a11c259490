package loadmgr

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/magnetar-io/magnetar/broker/peer"
)

// Executor carries out the leader's actions through Pulsar's admin REST API on the bundle's
// owner, as Pulsar's modular load manager does. Safe for concurrent use.
type Executor struct {
	// Client sends the requests (nil: http.DefaultClient).
	Client *http.Client
	// Prepare, if set, is called on every request before it is sent (e.g. to add the
	// superuser's credentials).
	Prepare func(*http.Request) error
}

// Unload asks the owner at ownerURL (its web service URL) to unload bundle to broker dest:
// PUT {ownerURL}/admin/v2/namespaces/{tenant}/{ns}/{range}/unload?destinationBroker={dest}.
func (e *Executor) Unload(ctx context.Context, ownerURL, bundle, dest string) error {
	q := url.Values{}
	if dest != "" {
		q.Set("destinationBroker", dest)
	}
	return e.put(ctx, ownerURL, bundle, "unload", q)
}

// Split asks the owner at ownerURL to split bundle in two halves of its range, keeping both:
// PUT .../{range}/split?unload=false&splitAlgorithmName=range_equally_divide.
func (e *Executor) Split(ctx context.Context, ownerURL, bundle string) error {
	q := url.Values{"unload": {"false"}, "splitAlgorithmName": {"range_equally_divide"}}
	return e.put(ctx, ownerURL, bundle, "split", q)
}

// Execute runs one action on the owner at ownerURL.
func (e *Executor) Execute(ctx context.Context, ownerURL string, a Action) error {
	switch a.Kind {
	case ActionUnload:
		return e.Unload(ctx, ownerURL, a.Bundle, a.To)
	case ActionSplit:
		return e.Split(ctx, ownerURL, a.Bundle)
	}
	return fmt.Errorf("loadmgr: unknown action %v", a.Kind)
}

// put runs op on bundle's owner through the broker's peer client (package broker/peer,
// which owns the admin paths), with Client's transport and Prepare's additions.
func (e *Executor) put(ctx context.Context, ownerURL, bundle, op string, q url.Values) error {
	ns, rng, err := splitBundleName(bundle)
	if err != nil {
		return err
	}
	if ownerURL == "" {
		return fmt.Errorf("loadmgr: %s %s: the owner has no web service URL", op, bundle)
	}
	pc := peer.New(e.httpClient())
	switch op {
	case "unload":
		err = pc.BundleUnload(ctx, ownerURL, ns, rng, q.Get("destinationBroker"))
	case "split":
		err = pc.BundleSplit(ctx, ownerURL, ns, rng)
	default:
		return fmt.Errorf("loadmgr: unknown bundle operation %q", op)
	}
	var se *peer.StatusError
	switch {
	case errors.As(err, &se):
		return &AdminError{Op: op, Bundle: bundle, Status: se.Status, Body: se.Body}
	case err != nil:
		return fmt.Errorf("loadmgr: %s %s: %w", op, bundle, err)
	}
	return nil
}

// httpClient is Client (http.DefaultClient if nil) with Prepare applied to every request.
func (e *Executor) httpClient() *http.Client {
	c := e.Client
	if c == nil {
		c = http.DefaultClient
	}
	if e.Prepare == nil {
		return c
	}
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	cc := *c
	cc.Transport = prepareTransport{next: next, prepare: e.Prepare}
	return &cc
}

// prepareTransport calls prepare on a copy of every request before sending it.
type prepareTransport struct {
	next    http.RoundTripper
	prepare func(*http.Request) error
}

func (t prepareTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if err := t.prepare(r); err != nil {
		return nil, err
	}
	return t.next.RoundTrip(r)
}

// AdminError is an admin request the owner refused.
type AdminError struct {
	Op, Bundle string
	Status     int
	Body       string
}

func (e *AdminError) Error() string {
	return fmt.Sprintf("loadmgr: %s %s: HTTP %d: %s", e.Op, e.Bundle, e.Status, e.Body)
}
