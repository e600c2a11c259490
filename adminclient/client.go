package adminclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ErrInvalidName marks an invalid tenant, namespace or topic name given to a Client method.
var ErrInvalidName = errors.New("adminclient: invalid name")

// NameError is an invalid name; its message is the name check's.
type NameError struct{ Err error }

func (e *NameError) Error() string { return e.Err.Error() }

// Unwrap returns the name check's error.
func (e *NameError) Unwrap() error { return e.Err }

// Is reports ErrInvalidName.
func (e *NameError) Is(target error) bool { return target == ErrInvalidName }

func nameError(err error) error { return &NameError{Err: err} }

// Error is a non-2xx answer: the HTTP status and Pulsar's {"reason": ...} (or the body's
// text if it has none).
type Error struct {
	Method string
	Path   string
	Status int
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Reason)
}

// StatusOf returns the HTTP status of an *Error in err's chain, or 0.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool { return StatusOf(err) == http.StatusNotFound }

// Auth supplies the Authorization header of each request; "" sends none. It is called for
// every request, redirected ones included, and must be safe for concurrent use.
type Auth func(ctx context.Context) (string, error)

// TokenAuth sends "Bearer <token>", the token read by tok on every request (a token file is
// re-read each time).
func TokenAuth(tok func() ([]byte, error)) Auth {
	return func(context.Context) (string, error) {
		t, err := tok()
		if err != nil {
			return "", fmt.Errorf("credentials: %w", err)
		}
		return "Bearer " + string(t), nil
	}
}

// BasicAuth sends HTTP basic credentials.
func BasicAuth(user, password string) Auth {
	h := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	return func(context.Context) (string, error) { return h, nil }
}

// Options configure a Client.
type Options struct {
	// URLs are brokers' admin base URLs (http://host:port or https://host:port); a request
	// that cannot reach one (a connection error, not an HTTP answer) tries the next.
	URLs []string
	// TLS configures https:// (with a client certificate for TLS authentication); nil: the
	// system's roots.
	TLS *tls.Config
	// Auth sets each request's Authorization header (nil: none).
	Auth Auth
	// Transport is the round tripper under the authentication (nil: a clone of
	// http.DefaultTransport with TLS).
	Transport http.RoundTripper
	// Timeout bounds each request (0: 30 s).
	Timeout time.Duration
}

// Client is a typed client of Pulsar's admin REST API (/admin/v2, /admin/v3, /lookup/v2) as
// Magnetar's brokers serve it. It is safe for concurrent use.
//
// Credentials go on every request, redirects included: a broker answers 307 Temporary
// Redirect with the owner of a topic or bundle, which checks them again.
type Client struct {
	urls    []string
	http    *http.Client
	timeout time.Duration
}

// New returns a client. The URLs are checked; nothing is dialled.
func New(o Options) (*Client, error) {
	if len(o.URLs) == 0 {
		return nil, errors.New("adminclient: no URL")
	}
	c := &Client{timeout: o.Timeout}
	if c.timeout <= 0 {
		c.timeout = 30 * time.Second
	}
	for _, s := range o.URLs {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("adminclient: URL must be http://host:port, not %q", s)
		}
		c.urls = append(c.urls, strings.TrimSuffix(s, "/"))
	}
	c.http = HTTPClient(o)
	return c, nil
}

// HTTPClient returns the HTTP client a Client with these options uses (o.URLs and o.Timeout
// are not used): o.TLS, and o.Auth on every request, redirects included. For other callers
// of the admin API, such as the scalable-topic clients and the load manager's executor.
func HTTPClient(o Options) *http.Client {
	tr := o.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = o.TLS
		tr = t
	}
	if o.Auth != nil {
		tr = authTransport{next: tr, auth: o.Auth}
	}
	return &http.Client{Transport: tr}
}

// HTTPClient returns the client's *http.Client: its transport adds the credentials to every
// request. It has no timeout of its own.
func (c *Client) HTTPClient() *http.Client { return c.http }

// URL is the first base URL.
func (c *Client) URL() string { return c.urls[0] }

// authTransport adds the Authorization header to every request it sends, so that a
// redirected request keeps it (net/http drops it on a redirect to another host).
type authTransport struct {
	next http.RoundTripper
	auth Auth
}

func (t authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	h, err := t.auth(r.Context())
	if err != nil {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, err
	}
	if h != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", h)
	}
	return t.next.RoundTrip(r)
}

// Response is a 2xx answer's headers and body.
type Response struct {
	Header http.Header
	Body   []byte
}

// Do sends a request with an optional JSON body (nil: none) and decodes a JSON answer into
// out if out is not nil and the answer has a body. A non-2xx answer is an *Error.
func (c *Client) Do(ctx context.Context, method string, p Path, body, out any) error {
	r, err := c.Send(ctx, method, p, body)
	if err != nil {
		return err
	}
	if out != nil && len(r.Body) > 0 {
		if err := json.Unmarshal(r.Body, out); err != nil {
			return fmt.Errorf("%s %s: decode the answer: %w", method, p, err)
		}
	}
	return nil
}

// Send sends a request with an optional JSON body and returns the answer. A non-2xx answer
// is an *Error.
func (c *Client) Send(ctx context.Context, method string, p Path, body any) (*Response, error) {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	path := p.String()
	var lastErr error
	for _, base := range c.urls {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(b) // NewRequest sets GetBody: a 307 resends it
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json")
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.http.Do(req)
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				break
			}
			continue // try the next broker
		}
		return readAnswer(method, path, resp)
	}
	return nil, lastErr
}

func readAnswer(method, path string, resp *http.Response) (*Response, error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Reason string `json:"reason"`
		}
		if json.Unmarshal(b, &e) != nil || e.Reason == "" {
			e.Reason = strings.TrimSpace(string(b))
		}
		return nil, &Error{Method: method, Path: path, Status: resp.StatusCode, Reason: e.Reason}
	}
	return &Response{Header: resp.Header, Body: b}, nil
}

// Get decodes the JSON answer of GET p into out.
func (c *Client) Get(ctx context.Context, p Path, out any) error {
	return c.Do(ctx, "GET", p, nil, out)
}
