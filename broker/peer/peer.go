// Package peer is the broker's one client for calling another broker of its cluster: the
// admin REST calls a broker makes on a peer (a bundle's unload and split on its owner, a
// scalable topic's segment operations on the segment's owner, consumer sessions on the
// topic's controller leader, a partition's stats on its owner), their paths built by
// package adminclient (the one place the admin API's paths are built), sent with the broker's own
// credentials (Pulsar's brokerClientAuthenticationPlugin/Parameters and brokerClientTls*,
// carried by the *http.Client the broker is configured with), and one classification of
// the answers.
//
// A Client is safe for concurrent use. It imports the API types (package broker/api) and
// the REST client's paths, not the broker, so the load manager and the broker's parts can
// use it.
package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/adminclient"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// DefaultTimeout bounds a request when the broker is given no client of its own.
const DefaultTimeout = 30 * time.Second

// Client calls peers' admin APIs. The zero value is not usable; use New.
type Client struct {
	http *http.Client
}

// New returns a client sending with hc, which carries the broker's credentials and TLS
// settings towards its peers (nil: an unauthenticated client with DefaultTimeout).
func New(hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: DefaultTimeout}
	}
	return &Client{http: hc}
}

// StatusError is a request the peer answered with a non-2xx status.
type StatusError struct {
	Method, URL string
	Status      int
	Body        string // the answer's body, trimmed (Pulsar's {"reason": ...})
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("peer: %s %s: HTTP %d: %s", e.Method, e.URL, e.Status, e.Body)
}

// Unwrap classifies the refusal: 404 is ErrNotFound (each call says what was not found);
// 401 and 403 are ErrRefused, which waiting does not cure; every other status is
// api.ErrServiceNotReady (the peer is moving or busy).
func (e *StatusError) Unwrap() error {
	switch e.Status {
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusUnauthorized, http.StatusForbidden:
		return ErrRefused
	}
	return api.ErrServiceNotReady
}

// ErrNotFound: the peer answered 404.
var ErrNotFound = errors.New("peer: not found")

// ErrRefused: the peer refused the broker's credentials (401 or 403). It is a
// configuration problem (brokerClientAuthentication*), not a transient one.
var ErrRefused = errors.New("peer: credentials refused")

// BundleUnload asks the owner at ownerURL (its web service URL) to unload bundle "rng" of
// namespace ns ("tenant/ns") to broker dest ("": any):
// PUT {ownerURL}/admin/v2/namespaces/{tenant}/{ns}/{range}/unload?destinationBroker={dest}.
func (c *Client) BundleUnload(ctx context.Context, ownerURL, ns, rng, dest string) error {
	p, err := adminclient.BundlePath(ns, rng)
	if err != nil {
		return err
	}
	p = p.Sub("unload")
	if dest != "" {
		p = p.Query("destinationBroker", dest)
	}
	return c.do(ctx, http.MethodPut, ownerURL, p, nil)
}

// BundleSplit asks the owner at ownerURL to split bundle rng of ns in two halves of its
// range, keeping both: PUT .../{range}/split?unload=false&splitAlgorithmName=range_equally_divide.
func (c *Client) BundleSplit(ctx context.Context, ownerURL, ns, rng string) error {
	p, err := adminclient.BundlePath(ns, rng)
	if err != nil {
		return err
	}
	p = p.Sub("split").Query("unload", "false").Query("splitAlgorithmName", "range_equally_divide")
	return c.do(ctx, http.MethodPut, ownerURL, p, nil)
}

// Segment asks the owner at ownerURL to run op (create, seal, delete, drained, fence,
// reset, stats) on segment seg of scalable topic t:
// POST /admin/v2/scalable/{tenant}/{ns}/{topic}/segments/{descriptor}/{op}. q holds the
// operation's parameters; out, if not nil, receives the JSON answer.
func (c *Client) Segment(ctx context.Context, ownerURL string, t layout.Topic, seg layout.Segment, op string, q url.Values, out any) error {
	p := adminclient.ScalableTopicPath(t).Sub("segments", seg.Descriptor(), op)
	return c.do(ctx, http.MethodPost, ownerURL, withQuery(p, q), out)
}

// Consumer calls the controller leader at leaderURL on a scalable topic's consumer session:
// method /admin/v2/scalable/{tenant}/{ns}/{topic}/subscription/{sub}/consumers/{consumer}
// (PUT registers it), or its /assignment (GET) when assignment is set. out, if not nil,
// receives the JSON answer.
func (c *Client) Consumer(ctx context.Context, leaderURL, method string, t layout.Topic, sub, consumer string, assignment bool, q url.Values, out any) error {
	p := adminclient.ScalableTopicPath(t).Sub("subscription", sub, "consumers", consumer)
	if assignment {
		p = p.Sub("assignment")
	}
	return c.do(ctx, method, leaderURL, withQuery(p, q), out)
}

// TopicStats fetches one topic's (or partition's) stats from the broker at ownerURL that
// serves it: GET {ownerURL}/admin/v2/{domain}/{tenant}/{ns}/{topic}/stats. topic is the
// fully qualified name.
func (c *Client) TopicStats(ctx context.Context, ownerURL, topic string) (api.TopicStats, error) {
	var st api.TopicStats
	p, err := adminclient.TopicPath(topic)
	if err != nil {
		return st, err
	}
	err = c.do(ctx, http.MethodGet, ownerURL, p.Sub("stats"), &st)
	if errors.Is(err, ErrNotFound) {
		err = fmt.Errorf("%w: %s on %s: %v", api.ErrTopicNotFound, topic, ownerURL, err)
	}
	return st, err
}

// withQuery adds q's parameters to p.
func withQuery(p adminclient.Path, q url.Values) adminclient.Path {
	for k, vs := range q {
		for _, v := range vs {
			p = p.Query(k, v)
		}
	}
	return p
}

// do sends one request to base+p and decodes a 2xx answer into out. A transport failure
// is api.ErrServiceNotReady; a refusal is a *StatusError.
func (c *Client) do(ctx context.Context, method, base string, p adminclient.Path, out any) error {
	if base == "" {
		return fmt.Errorf("%w: peer has no web service URL", api.ErrServiceNotReady)
	}
	u := strings.TrimSuffix(base, "/") + p.String()
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(nil))
	if err != nil {
		return fmt.Errorf("%w: %v", api.ErrInvalidArgument, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s %s: %v", api.ErrServiceNotReady, method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return &StatusError{Method: method, URL: u, Status: resp.StatusCode, Body: string(bytes.TrimSpace(b))}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("peer: %s %s: decode the answer: %w", method, u, err)
		}
	}
	return nil
}
