package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/metadata"
)

// openStore connects to the metadata store named by an etcd:// URL.
func openStore(ctx context.Context, url string) (metadata.Store, error) {
	eps, err := metadata.ParseURL(url)
	if err != nil {
		return nil, usageError{fmt.Errorf("--metadata-url: %w", err)}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return metadata.Open(ctx, metadata.Config{Endpoints: eps, Logger: slog.Default()})
}

// addMetadataFlag adds the --metadata-url flag every cluster command takes.
func addMetadataFlag(c *cobra.Command, dst *string) {
	c.Flags().StringVar(dst, "metadata-url", "etcd://127.0.0.1:2379", "metadata store, etcd://host:port[,host:port...]")
}

// outputFlag is the -o/--output flag: "text" for people, "json" for scripts.
type outputFlag struct{ format string }

func (o *outputFlag) add(c *cobra.Command) {
	c.Flags().StringVarP(&o.format, "output", "o", "text", "output format: text or json")
}

func (o *outputFlag) validate() error {
	if o.format != "text" && o.format != "json" {
		return usageError{fmt.Errorf("--output must be text or json, not %q", o.format)}
	}
	return nil
}

func (o *outputFlag) json() bool { return o.format == "json" }

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// setupLogging installs a structured logger on stderr at the given level.
func setupLogging(level string) error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return usageError{fmt.Errorf("--log-level: %w", err)}
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})))
	return nil
}

// serveHTTP serves h on addr until ctx ends. It returns once the listener is bound.
func serveHTTP(ctx context.Context, addr string, h http.Handler) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			slog.Error("http server failed", "addr", addr, "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	return ln.Addr(), nil
}

// mountPprof serves the Go profiler under /debug/pprof/ (on the loopback admin/metrics port).
func mountPprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
