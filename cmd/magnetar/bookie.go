package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/autorecovery"
	"github.com/magnetar-io/magnetar/bookie"
	bkclient "github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/bookie/journal"
	"github.com/magnetar-io/magnetar/config"
	"github.com/magnetar-io/magnetar/tlsconf"
)

func init() { register(newBookieCmd) }

func newBookieCmd() *cobra.Command {
	var (
		metaURL, dataDir, listen, advertise, id, httpAddr, logLevel string
		ttl, groupWait, gcInterval, syncInterval, diskCheck         time.Duration
		prepareRate, journalFileSize                                int64
		threshold                                                   float64
		arOn                                                        bool
		ar                                                          autorecoveryFlags
		tf                                                          tlsFlags
	)
	c := &cobra.Command{
		Use:   "bookie",
		Short: "Run a bookie (storage node); see also 'bookie list'",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := setupLogging(logLevel); err != nil {
				return err
			}
			if dataDir == "" {
				return usageError{fmt.Errorf("--data-dir is required")}
			}
			if threshold <= 0 || threshold > 1 {
				return usageError{fmt.Errorf("--disk-threshold must be in (0,1], got %v", threshold)}
			}
			if diskCheck <= 0 {
				return usageError{fmt.Errorf("--disk-check-interval must be positive")}
			}
			if journalFileSize < 0 {
				return usageError{fmt.Errorf("--journal-file-size must not be negative")}
			}
			if prepareRate < 0 {
				return usageError{fmt.Errorf("--journal-prepare-rate must not be negative")}
			}
			if err := ar.validate("autorecovery-"); err != nil {
				return err
			}
			// TLS: the listener serves TLS only, and the bookie's auto-recovery dials the
			// other bookies over TLS with the same certificate and CAs.
			var tlsCfg *tls.Config
			var arPool *bkclient.Pool
			if tf.certFile != "" {
				ts, err := tf.load()
				if err != nil {
					return err
				}
				cc, err := tlsconf.Client(tlsconf.ClientOptions{TrustCertsFile: tf.trust, CertFile: tf.certFile, KeyFile: tf.keyFile})
				if err != nil {
					return usageError{err}
				}
				tlsCfg = ts.Config()
				arPool = bkclient.NewPool(bkclient.Options{Logger: slog.Default(), Dial: bkclient.DialTLS(cc)})
				defer arPool.Close()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			sd := newShutdown("bookie", stop)
			defer sd.done()
			// The metrics port first: a port taken by another process on the host fails here,
			// before the bookie registers, naming the flag.
			mux, err := metricsMux(ctx, httpAddr)
			if err != nil {
				return err
			}
			store, err := openStore(ctx, metaURL)
			if err != nil {
				return err
			}
			defer store.Close()
			b, err := bookie.Start(ctx, bookie.Config{TLS: tlsCfg,
				ID: id, Listen: listen, Advertise: advertise, DataDir: dataDir, Store: store,
				SessionTTL: ttl, DiskThreshold: threshold, DiskCheckInterval: diskCheck, GCInterval: gcInterval,
				Journal: journal.Options{MaxGroupWait: journalZeroOff(groupWait), MinSyncInterval: journalZeroOff(syncInterval), PrepareRate: prepareRate,
					FileSize: journalFileSize},
				Logger: slog.Default(),
			})
			if err != nil {
				if ctx.Err() != nil {
					// SIGINT/SIGTERM while starting: a clean stop, not a failure.
					slog.Info("bookie stopped while starting", "reason", err)
					return nil
				}
				if errors.Is(err, syscall.EADDRINUSE) {
					return listenError("--listen", listen, err)
				}
				return err
			}
			// Auto-recovery (auditor candidate + replication worker) runs in every bookie by
			// default, as in BookKeeper; its metrics are at /metrics/autorecovery.
			var svc *autorecovery.Service
			if arOn {
				cfg := ar.config()
				cfg.Store, cfg.ID, cfg.SessionTTL = store, b.ID(), ttl
				if arPool != nil {
					cfg.Pool = arPool
				}
				if svc, err = autorecovery.Start(cfg); err != nil {
					b.Close()
					return err
				}
			}
			if mux != nil {
				mux.Handle("/metrics", b.MetricsHandler())
				mountPprof(mux, nil, nil) // the bookie authenticates nobody
				if svc != nil {
					mux.Handle("/metrics/autorecovery", svc.MetricsHandler())
				}
			}
			fmt.Fprintf(os.Stdout, "bookie %s listening on %s\n", b.ID(), b.Addr())
			select {
			case <-ctx.Done():
			case <-b.Done(): // a failed disk stopped it (logged)
			}
			sd.begin()
			if svc != nil {
				svc.Close()
			}
			err = b.Close()
			if ferr := b.Err(); ferr != nil {
				return ferr
			}
			return err
		},
	}
	f := c.Flags()
	addMetadataFlag(c, &metaURL)
	f.StringVar(&dataDir, "data-dir", "", "data directory (cookie, journal, entry logs, index)")
	f.StringVar(&listen, "listen", "127.0.0.1:3181", "protocol listen address")
	f.StringVar(&advertise, "advertise", "", "address clients dial (default: the listen address)")
	f.StringVar(&id, "bookie-id", "", "bookie id (default: the advertised address)")
	f.StringVar(&httpAddr, "http", "127.0.0.1:8000", "metrics HTTP address (empty disables)")
	f.DurationVar(&ttl, "session-ttl", 10*time.Second, "metadata session TTL: how long a dead bookie stays registered")
	f.Float64Var(&threshold, "disk-threshold", 0.95, "disk usage fraction at which the bookie turns read-only")
	f.Int64Var(&prepareRate, "journal-prepare-rate", 0,
		fmt.Sprintf("zero-fill the next journal file ahead of use at this many bytes/s, e.g. %d (0: fallocate only); for a journal on a disk of its own", journal.DefaultPrepareRate))
	f.DurationVar(&diskCheck, "disk-check-interval", 5*time.Second, "how often disk usage and the data directory are checked")
	f.Int64Var(&journalFileSize, "journal-file-size", journal.DefaultFileSize, "size each journal file is preallocated to, bytes")
	f.DurationVar(&groupWait, "journal-group-wait", journal.DefaultMaxGroupWait, groupWaitUsage)
	f.DurationVar(&syncInterval, "journal-sync-interval", journal.DefaultMinSyncInterval, syncIntervalUsage)
	f.DurationVar(&gcInterval, "gc-interval", 10*time.Minute, "how often to reclaim deleted ledgers")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.BoolVar(&arOn, "autorecovery", true, "run the auto-recovery auditor and a replication worker in this bookie")
	ar.add(c, "autorecovery-")
	tf.add(f, "")
	c.AddCommand(newBookieListCmd())
	c.AddCommand(newBookieDecommissionCmd())
	return withConfig(c, slices.Concat(bookieKeys, bookieTLSKeys))
}

// bookieKeys are the bookkeeper.conf keys the bookie has.
var bookieKeys = []config.Key{
	{Name: "metadataServiceUri", Flag: "metadata-url", Map: etcdURL},
	{Name: "bookiePort", Flag: "listen", Map: portOn("", "0.0.0.0", false)},
	{Name: "advertisedAddress", Flag: "advertise", Map: advertisedOn("bookiePort", "3181")},
	{Name: "bookieId", Flag: "bookie-id"},
	{Name: "ledgerDirectories", Flag: "data-dir", Map: oneDir},
	{Name: "diskUsageThreshold", Flag: "disk-threshold"},
	{Name: "gcWaitTime", Flag: "gc-interval", Map: config.Millis},
	{Name: "journalMaxGroupWaitMSec", Flag: "journal-group-wait", Map: config.Millis},
	{Name: "httpServerEnabled", Map: func(v string, _ func(string) (string, bool)) (string, error) {
		if _, err := strconv.ParseBool(v); v != "" && err != nil {
			return "", errors.New("want true or false")
		}
		return "", config.Skip
	}},
	{Name: "httpServerPort", Flag: "http", Map: func(v string, get func(string) (string, bool)) (string, error) {
		if on, _ := get("httpServerEnabled"); on == "false" {
			return "", nil
		}
		return portOn("", "0.0.0.0", true)(v, get)
	}},
	{Name: "autoRecoveryDaemonEnabled", Flag: "autorecovery"},
	{Name: "zkTimeout", Flag: "session-ttl", Map: config.Millis},
}

// oneDir maps bookkeeper's ledgerDirectories (a list) to --data-dir: Magnetar's bookie keeps
// everything in one directory.
func oneDir(v string, _ func(string) (string, bool)) (string, error) {
	if v == "" {
		return "", config.Skip
	}
	if strings.Contains(v, ",") {
		return "", errors.New("one directory only: Magnetar's bookie has one data directory")
	}
	return strings.TrimSpace(v), nil
}

func newBookieListCmd() *cobra.Command {
	var (
		metaURL string
		all     bool
		out     outputFlag
	)
	c := &cobra.Command{
		Use:   "list",
		Short: "List live bookies and their state (writable or read-only)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			store, err := openStore(ctx, metaURL)
			if err != nil {
				return err
			}
			defer store.Close()
			infos, err := bookie.ListBookies(ctx, store, all)
			if err != nil {
				return err
			}
			if out.json() {
				if infos == nil {
					infos = []bookie.Info{}
				}
				return printJSON(os.Stdout, infos)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tADDRESS\tSTATE")
			for _, i := range infos {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", i.ID, i.Address, i.State)
			}
			return tw.Flush()
		},
	}
	addMetadataFlag(c, &metaURL)
	c.Flags().BoolVar(&all, "all", false, "also list bookies known from cookies but not alive")
	out.add(c)
	return c
}

const groupWaitUsage = "longest wait for company before a journal fsync (0: sync as soon as the queue is empty)"

const syncIntervalUsage = "shortest time between the starts of two journal fsyncs under an open-loop load (0: no pacing); records arriving meanwhile join the next group"

// journalZeroOff maps a journal duration flag (--journal-group-wait,
// --journal-sync-interval) to bookie.Config, where 0 means "default" and a negative value
// means "off".
func journalZeroOff(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
