package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/access"
	"github.com/magnetar-io/magnetar/internal/ratelog"
	"github.com/magnetar-io/magnetar/metadata"
)

// openStore connects to the metadata store named by an etcd:// URL.
func openStore(ctx context.Context, url string) (metadata.Store, error) {
	return openStoreFlag(ctx, "--metadata-url", url)
}

// openStoreFlag is openStore for the URL of flag (named in a usage error).
func openStoreFlag(ctx context.Context, flag, url string) (metadata.Store, error) {
	eps, err := metadata.ParseURL(url)
	if err != nil {
		return nil, usageError{fmt.Errorf("%s: %w", flag, err)}
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
	// Repeated warnings and errors (a failing disk, an unreachable peer: one per request)
	// are rate-limited, each kind to a line every ratelog.DefaultInterval.
	h := ratelog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}), ratelog.Options{})
	slog.SetDefault(slog.New(h))
	return nil
}

// stopTimeout bounds a role's stop: past it the process exits anyway (see shutdown). A
// broker's own unload of its topics is bounded by 30 s of the same budget.
const stopTimeout = 30 * time.Second

// shutdown bounds how long a role takes to stop once asked, whatever state its disk, etcd or
// peers are in. Create it right after signal.NotifyContext and defer done first (so it runs
// after every other deferred close); call begin when the role starts stopping.
type shutdown struct {
	role           string
	restoreSignals func() // the NotifyContext stop: a second signal then kills the process
	start          time.Time
	timer          *time.Timer
}

func newShutdown(role string, restoreSignals func()) *shutdown {
	return &shutdown{role: role, restoreSignals: restoreSignals}
}

// begin starts the stop clock: after stopTimeout the process exits with status 3.
func (s *shutdown) begin() {
	if s.timer != nil {
		return
	}
	s.restoreSignals()
	s.start = time.Now()
	s.timer = time.AfterFunc(stopTimeout, func() {
		slog.Error(s.role+" did not stop in time; exiting", "timeout", stopTimeout.String())
		os.Exit(3)
	})
	slog.Info(s.role + " shutting down")
}

// done logs how long the stop took, if one began.
func (s *shutdown) done() {
	if s.timer == nil {
		return
	}
	s.timer.Stop()
	slog.Info(s.role+" exiting", "stop took", time.Since(s.start).Round(time.Millisecond).String())
}

// listenError names the flag whose address could not be bound, so an operator running a
// second process on a host knows which flag to change.
func listenError(flag, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s %s: address already in use (another process on this host? pick a free port with %s): %w",
			flag, addr, flag, err)
	}
	return fmt.Errorf("%s %s: %w", flag, addr, err)
}

// serveHTTP serves h on addr (the value of flag) until ctx ends. It returns once the
// listener is bound: a role binds it before it registers anywhere, so a taken port fails
// the start with the flag's name (listenError) instead of a running role dying later.
func serveHTTP(ctx context.Context, flag, addr string, h http.Handler) (net.Addr, error) {
	return serveHTTPS(ctx, flag, addr, h, nil)
}

// serveHTTPS serves h on addr over TLS (plain HTTP if cfg is nil), as serveHTTP.
func serveHTTPS(ctx context.Context, flag, addr string, h http.Handler, cfg *tls.Config) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, listenError(flag, addr, err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
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

// metricsMux binds the metrics HTTP address of --http (empty: none, nil mux) and serves a
// mux the caller fills once its role runs. Called before the role registers anywhere, so a
// taken port fails the start naming the flag.
func metricsMux(ctx context.Context, addr string) (*http.ServeMux, error) {
	if addr == "" {
		return nil, nil
	}
	mux := http.NewServeMux()
	a, err := serveHTTP(ctx, "--http", addr, mux)
	if err != nil {
		return nil, err
	}
	slog.Info("metrics listening", "addr", "http://"+a.String()+"/metrics")
	return mux, nil
}

// mountPprof serves the Go profiler under /debug/pprof/. With authentication on (a
// enabled) only superUsers may use it: a request without valid credentials is answered 401,
// one of another role 403, both written to the audit log (package broker/access); a role
// without superusers (the proxy) serves it to nobody then. With authentication off it is
// open, as the metrics are.
func mountPprof(mux *http.ServeMux, a *auth.Service, superUsers []string) {
	var h http.Handler = pprofMux()
	if a.Enabled() {
		audit := access.NewAudit(slog.Default(), ratelog.Options{})
		h = audit.Authenticate(a, audit.RequireSuperUser(superUsers, "profile", "/debug/pprof", h))
	}
	mux.Handle("/debug/pprof/", h)
}

// pprofMux serves net/http/pprof's pages (the index serves the named profiles). Not
// /debug/pprof/cmdline: a command line can hold a key given as a flag.
func pprofMux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("/debug/pprof/", pprof.Index)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return m
}
