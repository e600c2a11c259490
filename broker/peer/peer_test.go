package peer

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// tokenTransport adds a bearer token, as the broker's configured client does.
type tokenTransport struct{ next http.RoundTripper }

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer broker-token")
	return t.next.RoundTrip(r)
}

type seen struct {
	method, path, query, auth string
}

func server(t *testing.T, status int, body string) (*httptest.Server, *seen) {
	t.Helper()
	var s seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s = seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Authorization")}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, &s
}

func credentialed(srv *httptest.Server) *Client {
	return New(&http.Client{Transport: tokenTransport{next: srv.Client().Transport}})
}

var (
	topicX  = layout.Topic{Tenant: "t", Namespace: "ns", Name: "x"}
	segment = layout.Segment{ID: 1, Range: layout.FullRange()}
)

// TestPathsAndCredentials: each call builds its admin path and carries the broker's
// credentials.
func TestPathsAndCredentials(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name              string
		call              func(c *Client, base string) error
		method, path, raw string
	}{
		{"unload", func(c *Client, base string) error {
			return c.BundleUnload(ctx, base, "t/ns", "0x00000000_0x80000000", "b2")
		},
			http.MethodPut, "/admin/v2/namespaces/t/ns/0x00000000_0x80000000/unload", "destinationBroker=b2"},
		{"split", func(c *Client, base string) error { return c.BundleSplit(ctx, base, "t/ns", "0x00000000_0x80000000") },
			http.MethodPut, "/admin/v2/namespaces/t/ns/0x00000000_0x80000000/split", "splitAlgorithmName=range_equally_divide&unload=false"},
		{"segment", func(c *Client, base string) error {
			return c.Segment(ctx, base, topicX, segment, "create", url.Values{"sub": {"s"}}, nil)
		}, http.MethodPost, "/admin/v2/scalable/t/ns/x/segments/" + segment.Descriptor() + "/create", "sub=s"},
		{"consumer", func(c *Client, base string) error {
			return c.Consumer(ctx, base, http.MethodPut, topicX, "s", "c 1", false, nil, nil)
		}, http.MethodPut, "/admin/v2/scalable/t/ns/x/subscription/s/consumers/c%201", ""},
		{"assignment", func(c *Client, base string) error {
			return c.Consumer(ctx, base, http.MethodGet, topicX, "s", "c", true, url.Values{"after": {"3"}}, nil)
		}, http.MethodGet, "/admin/v2/scalable/t/ns/x/subscription/s/consumers/c/assignment", "after=3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, s := server(t, http.StatusNoContent, "")
			if err := c.call(credentialed(srv), srv.URL+"/"); err != nil {
				t.Fatal(err)
			}
			if s.method != c.method || s.path != c.path || s.query != c.raw {
				t.Fatalf("sent %s %s?%s, want %s %s?%s", s.method, s.path, s.query, c.method, c.path, c.raw)
			}
			if s.auth != "Bearer broker-token" {
				t.Fatalf("Authorization %q: the broker's credentials were not sent", s.auth)
			}
		})
	}
}

// TestClassification: one classification of the answers.
func TestClassification(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		status int
		want   error
	}{
		{http.StatusNotFound, ErrNotFound},
		{http.StatusUnauthorized, ErrRefused},
		{http.StatusForbidden, ErrRefused},
		{http.StatusServiceUnavailable, api.ErrServiceNotReady},
		{http.StatusConflict, api.ErrServiceNotReady},
	}
	for _, c := range cases {
		srv, _ := server(t, c.status, `{"reason":"no"}`)
		err := credentialed(srv).Segment(ctx, srv.URL, topicX, segment, "seal", nil, nil)
		var se *StatusError
		if !errors.As(err, &se) || se.Status != c.status || se.Body != `{"reason":"no"}` {
			t.Fatalf("HTTP %d: %v, want a StatusError with the body", c.status, err)
		}
		if !errors.Is(err, c.want) {
			t.Fatalf("HTTP %d: %v is not %v", c.status, err, c.want)
		}
	}
	srv, _ := server(t, http.StatusOK, "")
	srv.Close()
	if err := New(nil).BundleSplit(ctx, srv.URL, "t/ns", "0x0_0x1"); !errors.Is(err, api.ErrServiceNotReady) {
		t.Fatalf("unreachable peer: %v, want ErrServiceNotReady", err)
	}
	if err := New(nil).BundleSplit(ctx, "", "t/ns", "0x0_0x1"); !errors.Is(err, api.ErrServiceNotReady) {
		t.Fatalf("no URL: %v, want ErrServiceNotReady", err)
	}
	if err := New(nil).BundleSplit(ctx, "http://x", "nons", "0x0_0x1"); !errors.Is(err, api.ErrInvalidName) {
		t.Fatalf("bad namespace: %v, want ErrInvalidName", err)
	}
}

// TestDecode: a 2xx answer is decoded into out; an undecodable one is an error.
func TestDecode(t *testing.T) {
	srv, _ := server(t, http.StatusOK, `{"drained":true}`)
	var out struct{ Drained bool }
	if err := credentialed(srv).Segment(context.Background(), srv.URL, topicX, segment, "drained", nil, &out); err != nil || !out.Drained {
		t.Fatalf("decoded %+v, err %v", out, err)
	}
	bad, _ := server(t, http.StatusOK, `not json`)
	if err := credentialed(bad).Segment(context.Background(), bad.URL, topicX, segment, "drained", nil, &out); err == nil {
		t.Fatal("an undecodable answer was accepted")
	}
}

// TestTopicStats: a partition's stats are fetched from its owner's stats path.
func TestTopicStats(t *testing.T) {
	srv, s := server(t, http.StatusOK, `{"msgInCounter":7}`)
	st, err := credentialed(srv).TopicStats(context.Background(), srv.URL, "persistent://t/ns/x-partition-1")
	if err != nil || st.MsgInCounter != 7 {
		t.Fatalf("stats %+v err %v", st, err)
	}
	if s.method != http.MethodGet || s.path != "/admin/v2/persistent/t/ns/x-partition-1/stats" || s.auth == "" {
		t.Fatalf("sent %+v", *s)
	}
}
