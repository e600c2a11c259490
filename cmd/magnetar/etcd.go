package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/metadata"
)

func init() { register(newEtcdCmd) }

// newEtcdCmd builds `magnetar etcd`: a single-member etcd for Magnetar's metadata.
func newEtcdCmd() *cobra.Command {
	var dataDir, listen, peerListen, name string
	var debug bool
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run a single-member etcd server for Magnetar metadata",
		Long: "Run a single-member etcd server (embedded, no external binary) until SIGINT or SIGTERM.\n" +
			"Point brokers and bookies at it with etcd://HOST:PORT.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return usageError{errors.New("--data-dir must not be empty")}
			}
			if err := checkHostPort("--listen", listen); err != nil {
				return err
			}
			if peerListen != "" {
				if err := checkHostPort("--peer-listen", peerListen); err != nil {
					return err
				}
			}
			level := slog.LevelInfo
			if debug {
				level = slog.LevelDebug
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			e, err := metadata.StartEmbedded(ctx, metadata.EmbeddedConfig{
				Name:         name,
				DataDir:      dataDir,
				ListenClient: listen,
				ListenPeer:   peerListen,
				Logger:       log,
			})
			if err != nil {
				return err
			}
			eps := e.Endpoints()
			log.Info("etcd listening", "client", eps, "peer", e.PeerAddr(), "data_dir", dataDir,
				"url", "etcd://"+eps[0])

			select {
			case <-ctx.Done():
				log.Info("etcd shutting down", "reason", "signal")
			case <-e.Done():
				err = errors.New("etcd server stopped unexpectedly")
				log.Error("etcd server stopped unexpectedly")
			}
			return errors.Join(err, e.Close())
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "", "directory for the etcd WAL and database (required)")
	f.StringVar(&listen, "listen", "127.0.0.1:2379", "client address host:port (port 0 picks a free port)")
	f.StringVar(&peerListen, "peer-listen", "", "peer (raft) address host:port (default: the --listen host, a free port)")
	f.StringVar(&name, "name", "magnetar", "member name")
	f.BoolVar(&debug, "debug", false, "log etcd's own debug output")
	_ = cmd.MarkFlagRequired("data-dir")
	return cmd
}

// checkHostPort rejects a flag value that is not host:port with a numeric port.
func checkHostPort(flag, v string) error {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return usageError{fmt.Errorf("invalid %s %q: want host:port: %w", flag, v, err)}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return usageError{fmt.Errorf("invalid %s %q: port must be 0..65535", flag, v)}
	}
	return nil
}
