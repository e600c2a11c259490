package loadmgr

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestExecutorRequests(t *testing.T) {
	type call struct{ method, path, query, auth string }
	var calls []call
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls = append(calls, call{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Authorization")})
		if r.URL.Query().Get("destinationBroker") == "gone" {
			http.Error(w, `{"reason":"broker gone is not available"}`, http.StatusPreconditionFailed)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	e := &Executor{Client: srv.Client(), Prepare: func(r *http.Request) error {
		r.Header.Set("Authorization", "Bearer admin")
		return nil
	}}
	ctx := context.Background()
	bundle := "my-tenant/my-ns/0x40000000_0x80000000"
	if err := e.Execute(ctx, srv.URL+"/", Action{Kind: ActionUnload, Bundle: bundle, From: "b1", To: "b2:8080"}); err != nil {
		t.Fatal(err)
	}
	if err := e.Execute(ctx, srv.URL, Action{Kind: ActionSplit, Bundle: bundle, From: "b1"}); err != nil {
		t.Fatal(err)
	}
	err := e.Unload(ctx, srv.URL, bundle, "gone")
	var ae *AdminError
	if !errors.As(err, &ae) || ae.Status != http.StatusPreconditionFailed || ae.Op != "unload" {
		t.Fatalf("unload refused by the owner: err %v, want an AdminError with 412", err)
	}
	want := []call{
		{"PUT", "/admin/v2/namespaces/my-tenant/my-ns/0x40000000_0x80000000/unload", "destinationBroker=b2%3A8080", "Bearer admin"},
		{"PUT", "/admin/v2/namespaces/my-tenant/my-ns/0x40000000_0x80000000/split", "splitAlgorithmName=range_equally_divide&unload=false", "Bearer admin"},
		{"PUT", "/admin/v2/namespaces/my-tenant/my-ns/0x40000000_0x80000000/unload", "destinationBroker=gone", "Bearer admin"},
	}
	if len(calls) != len(want) {
		t.Fatalf("calls %+v, want %+v", calls, want)
	}
	for i := range want {
		if calls[i] != want[i] {
			t.Errorf("call %d: %+v, want %+v", i, calls[i], want[i])
		}
	}
	if err := e.Unload(ctx, "", bundle, "b2"); err == nil {
		t.Error("unload with no owner URL succeeded")
	}
	if err := e.Unload(ctx, srv.URL, "my-tenant/my-ns", "b2"); err == nil {
		t.Error("unload of a malformed bundle name succeeded")
	}
}
