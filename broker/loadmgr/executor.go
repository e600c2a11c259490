package loadmgr

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
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

func (e *Executor) put(ctx context.Context, ownerURL, bundle, op string, q url.Values) error {
	ns, rng, err := splitBundleName(bundle)
	if err != nil {
		return err
	}
	if ownerURL == "" {
		return fmt.Errorf("loadmgr: %s %s: the owner has no web service URL", op, bundle)
	}
	tenant, local, _ := strings.Cut(ns, "/")
	u := strings.TrimSuffix(ownerURL, "/") + "/admin/v2/namespaces/" + url.PathEscape(tenant) + "/" +
		url.PathEscape(local) + "/" + rng + "/" + op + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, nil)
	if err != nil {
		return err
	}
	if e.Prepare != nil {
		if err := e.Prepare(req); err != nil {
			return err
		}
	}
	c := e.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("loadmgr: %s %s: %w", op, bundle, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return &AdminError{Op: op, Bundle: bundle, Status: resp.StatusCode, Body: strings.TrimSpace(string(body))}
	}
	return nil
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
