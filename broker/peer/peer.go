// Package peer is the broker's one client for calling another broker of its cluster: the
// admin REST paths a broker calls on a peer (a bundle's unload and split on its owner, a
// scalable topic's segment operations on the segment's owner, consumer sessions on the
// topic's controller leader), each built here and nowhere else, sent with the broker's own
// credentials (Pulsar's brokerClientAuthenticationPlugin/Parameters and brokerClientTls*,
// carried by the *http.Client the broker is configured with), and one classification of
// the answers.
//
// A Client is safe for concurrent use. It imports only the API types (package broker/api),
// so the load manager and the broker's parts can use it without importing the broker.
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

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
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
	q := url.Values{}
	if dest != "" {
		q.Set("destinationBroker", dest)
	}
	return c.bundle(ctx, ownerURL, ns, rng, "unload", q)
}

// BundleSplit asks the owner at ownerURL to split bundle rng of ns in two halves of its
// range, keeping both: PUT .../{range}/split?unload=false&splitAlgorithmName=range_equally_divide.
func (c *Client) BundleSplit(ctx context.Context, ownerURL, ns, rng string) error {
	q := url.Values{"unload": {"false"}, "splitAlgorithmName": {"range_equally_divide"}}
	return c.bundle(ctx, ownerURL, ns, rng, "split", q)
}

func (c *Client) bundle(ctx context.Context, ownerURL, ns, rng, op string, q url.Values) error {
	tenant, local, ok := strings.Cut(ns, "/")
	if !ok || tenant == "" || local == "" {
		return fmt.Errorf("%w: namespace %q", api.ErrInvalidName, ns)
	}
	return c.do(ctx, http.MethodPut, ownerURL, "/admin/v2/namespaces/"+url.PathEscape(tenant)+"/"+
		url.PathEscape(local)+"/"+rng+"/"+op, q, nil)
}

// Segment asks the owner at ownerURL to run op (create, seal, delete, drained, fence,
// reset, stats) on a scalable topic's segment whose admin path is segmentPath
// (/admin/v2/scalable/{tenant}/{ns}/{topic}/segments/{descriptor}): POST segmentPath/op.
// out, if not nil, receives the JSON answer.
func (c *Client) Segment(ctx context.Context, ownerURL, segmentPath, op string, q url.Values, out any) error {
	return c.do(ctx, http.MethodPost, ownerURL, segmentPath+"/"+op, q, out)
}

// Scalable calls the controller leader at leaderURL on path below a scalable topic's admin
// path topicPath (/admin/v2/scalable/{tenant}/{ns}/{topic}): consumer sessions and their
// assignments. out, if not nil, receives the JSON answer.
func (c *Client) Scalable(ctx context.Context, leaderURL, method, topicPath, path string, q url.Values, out any) error {
	return c.do(ctx, method, leaderURL, topicPath+path, q, out)
}

// TopicStats fetches one topic's (or partition's) stats from the broker at ownerURL that
// serves it: GET {ownerURL}/admin/v2/{domain}/{tenant}/{ns}/{topic}/stats. topic is the
// fully qualified name.
func (c *Client) TopicStats(ctx context.Context, ownerURL, topic string) (api.TopicStats, error) {
	var st api.TopicStats
	n, err := topicname.Parse(topic)
	if err != nil {
		return st, err
	}
	p := "/admin/v2/" + n.Domain + "/" + url.PathEscape(n.Tenant) + "/" + url.PathEscape(n.Namespace) + "/" +
		url.PathEscape(n.Local) + "/stats"
	err = c.do(ctx, http.MethodGet, ownerURL, p, nil, &st)
	if errors.Is(err, ErrNotFound) {
		err = fmt.Errorf("%w: %s on %s: %v", api.ErrTopicNotFound, topic, ownerURL, err)
	}
	return st, err
}

// do sends one request to base+path and decodes a 2xx answer into out. A transport failure
// is api.ErrServiceNotReady; a refusal is a *StatusError.
func (c *Client) do(ctx context.Context, method, base, path string, q url.Values, out any) error {
	if base == "" {
		return fmt.Errorf("%w: peer has no web service URL", api.ErrServiceNotReady)
	}
	u := strings.TrimSuffix(base, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
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
