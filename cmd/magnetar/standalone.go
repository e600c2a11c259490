package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/metadata"
)

func init() { register(newStandaloneCmd) }

func newStandaloneCmd() *cobra.Command {
	var dataDir, etcdAddr, bookieAddr, httpAddr, logLevel string
	c := &cobra.Command{
		Use:   "standalone",
		Short: "Run a whole Magnetar cluster in one process: embedded etcd and a bookie",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := setupLogging(logLevel); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runStandalone(ctx, dataDir, etcdAddr, bookieAddr, httpAddr)
		},
	}
	f := c.Flags()
	f.StringVar(&dataDir, "data-dir", "./data", "data directory for etcd and the bookie")
	f.StringVar(&etcdAddr, "etcd-listen", "127.0.0.1:2379", "embedded etcd client address (loopback)")
	f.StringVar(&bookieAddr, "bookie-listen", "127.0.0.1:3181", "bookie protocol address")
	f.StringVar(&httpAddr, "http", "127.0.0.1:8080", "admin and metrics HTTP address")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	return c
}

func runStandalone(ctx context.Context, dataDir, etcdAddr, bookieAddr, httpAddr string) error {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	etcd, err := metadata.StartEmbedded(ctx, metadata.EmbeddedConfig{
		Name: "standalone", DataDir: filepath.Join(abs, "etcd"), ListenClient: etcdAddr,
		ListenPeer: "127.0.0.1:0", Logger: slog.Default(),
	})
	if err != nil {
		return fmt.Errorf("embedded etcd: %w", err)
	}
	defer etcd.Close()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	store, err := metadata.Open(sctx, metadata.Config{Endpoints: etcd.Endpoints(), Logger: slog.Default()})
	cancel()
	if err != nil {
		return err
	}
	defer store.Close()
	b, err := bookie.Start(ctx, bookie.Config{
		Listen: bookieAddr, DataDir: filepath.Join(abs, "bookie"), Store: store, Logger: slog.Default(),
	})
	if err != nil {
		return err
	}
	defer b.Close()
	mux := http.NewServeMux()
	mux.Handle("/metrics", b.MetricsHandler())
	ha, err := serveHTTP(ctx, httpAddr, mux)
	if err != nil {
		return err
	}
	fmt.Printf("magnetar standalone is up (data in %s)\n", abs)
	fmt.Printf("  metadata (etcd): etcd://%s\n", hostPorts(etcd.Endpoints()))
	fmt.Printf("  bookie:          %s\n", b.Addr())
	fmt.Printf("  metrics:         http://%s/metrics\n", ha)
	<-ctx.Done()
	slog.Info("shutting down")
	return nil
}

func hostPorts(eps []string) string {
	s := ""
	for i, e := range eps {
		if i > 0 {
			s += ","
		}
		for _, p := range []string{"http://", "https://"} {
			if len(e) > len(p) && e[:len(p)] == p {
				e = e[len(p):]
			}
		}
		s += e
	}
	return s
}
