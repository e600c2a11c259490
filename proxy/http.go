package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	"github.com/magnetar-io/magnetar/auth"
)

const (
	// maxHTTPBody bounds a request body the proxy buffers (to send it again on a redirect).
	maxHTTPBody = 32 << 20
	// maxHTTPRedirects bounds the redirects followed for one request.
	maxHTTPRedirects = 10
)

// httpProxy forwards the admin and lookup REST API to a broker (Pulsar's
// AdminProxyHandler): a broker from the discovery list, the next one if it cannot be
// reached, and on a 307 or 308 the broker it names (the topic's owner), so that clients see
// the owner's answer and never a broker address.
type httpProxy struct {
	s  *Service
	rp *httputil.ReverseProxy
	tr *http.Transport
}

func newHTTPProxy(s *Service) *httpProxy {
	h := &httpProxy{s: s}
	h.tr = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: s.cfg.DialTimeout}).DialContext,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     s.cfg.IdleTimeout,
	}
	h.rp = &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetXForwarded() },
		Transport: h,
		ModifyResponse: func(resp *http.Response) error {
			s.m.httpReqs.WithLabelValues(strconv.Itoa(resp.StatusCode)).Inc()
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			code := http.StatusServiceUnavailable
			var he *httpStatusError
			if errors.As(err, &he) {
				code = he.code
			}
			s.m.httpReqs.WithLabelValues(strconv.Itoa(code)).Inc()
			s.log.Info("admin request not forwarded", "path", r.URL.Path, "err", err)
			auth.WriteJSONError(w, code, err.Error())
		},
	}
	return h
}

func (h *httpProxy) close() { h.tr.CloseIdleConnections() }

// ServeHTTP forwards /admin/ and /lookup/ requests; other paths are not the proxy's.
func (h *httpProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/admin/") && !strings.HasPrefix(r.URL.Path, "/lookup/") {
		auth.WriteJSONError(w, http.StatusNotFound, "not found: "+r.URL.Path)
		return
	}
	h.rp.ServeHTTP(w, r)
}

// httpStatusError is a request the proxy answers itself with code.
type httpStatusError struct {
	code int
	msg  string
}

func (e *httpStatusError) Error() string { return e.msg }

// RoundTrip sends req to a broker and follows the redirects to other brokers.
func (h *httpProxy) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(req.Body, maxHTTPBody+1))
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		if len(b) > maxHTTPBody {
			return nil, &httpStatusError{code: http.StatusRequestEntityTooLarge,
				msg: fmt.Sprintf("request body over %d bytes", maxHTTPBody)}
		}
		body = b
	}
	bases, err := h.s.brokers.webs(req.Context())
	if err != nil {
		return nil, err
	}
	var resp *http.Response
	for _, base := range bases {
		u, err := url.Parse(base)
		if err != nil {
			return nil, err
		}
		resp, err = h.tr.RoundTrip(outgoing(req, u.ResolveReference(&url.URL{Path: req.URL.Path, RawQuery: req.URL.RawQuery}), body))
		if err == nil {
			break
		}
		if !isDialError(err) {
			return nil, err
		}
		h.s.brokers.invalidate() // not sent: the next broker may take it
		h.s.log.Debug("broker unreachable for an admin request", "broker", base, "err", err)
	}
	if resp == nil {
		return nil, fmt.Errorf("no broker reachable for %s", req.URL.Path)
	}
	for range maxHTTPRedirects {
		if resp.StatusCode != http.StatusTemporaryRedirect && resp.StatusCode != http.StatusPermanentRedirect {
			return resp, nil
		}
		loc, err := resp.Location()
		if err != nil {
			return resp, nil
		}
		base := loc.Scheme + "://" + loc.Host
		if h.s.brokers.store != nil && !h.s.brokers.knownWeb(req.Context(), base) {
			return resp, nil // not a broker's: the client decides
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) //nolint:errcheck // drained for reuse
		resp.Body.Close()
		if resp, err = h.tr.RoundTrip(outgoing(req, loc, body)); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// outgoing is req sent to u, with its body.
func outgoing(req *http.Request, u *url.URL, body []byte) *http.Request {
	out := req.Clone(req.Context())
	out.URL = u
	out.Host = ""
	out.RequestURI = ""
	if body != nil {
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		out.ContentLength = int64(len(body))
	} else {
		out.Body, out.ContentLength = http.NoBody, 0
	}
	return out
}

// isDialError reports whether err happened before the request was sent.
func isDialError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}
