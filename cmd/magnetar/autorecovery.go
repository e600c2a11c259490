package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/autorecovery"
)

func init() { register(newAutorecoveryCmd) }

// autorecoveryFlags are the tuning flags shared by `magnetar autorecovery` and the
// auto-recovery embedded in `magnetar bookie`.
type autorecoveryFlags struct {
	lostDelay, checkInterval, grace, poll, audit, ttl time.Duration
	checkPercent                                      int
}

func (f *autorecoveryFlags) add(c *cobra.Command, prefix string) {
	fs := c.Flags()
	fs.DurationVar(&f.lostDelay, prefix+"lost-bookie-delay", 30*time.Second, "how long a bookie must be gone before its ledgers are marked under-replicated")
	fs.DurationVar(&f.checkInterval, prefix+"check-interval", time.Hour, "period of the full check of every ledger's replicas (0 disables)")
	fs.IntVar(&f.checkPercent, prefix+"check-percent", 100, "percent of entries per fragment the full check verifies (100: all)")
	fs.DurationVar(&f.grace, prefix+"open-ledger-grace", 30*time.Second, "how long the LAC of an open ledger must stand still before its writer is taken as gone and the ledger recovered")
	fs.DurationVar(&f.poll, prefix+"poll-interval", time.Second, "how often an idle worker looks for under-replicated ledgers")
	fs.DurationVar(&f.audit, prefix+"audit-interval", time.Second, "how often the auditor checks the registered bookies (and a standby auditor its leader)")
}

func (f *autorecoveryFlags) validate(prefix string) error {
	switch {
	case f.lostDelay < 0:
		return usageError{fmt.Errorf("--%slost-bookie-delay must not be negative", prefix)}
	case f.checkInterval < 0:
		return usageError{fmt.Errorf("--%scheck-interval must not be negative", prefix)}
	case f.checkPercent < 1 || f.checkPercent > 100:
		return usageError{fmt.Errorf("--%scheck-percent must be in 1..100, got %d", prefix, f.checkPercent)}
	case f.grace <= 0 || f.poll <= 0 || f.audit <= 0:
		return usageError{fmt.Errorf("--%sopen-ledger-grace, --%spoll-interval and --%saudit-interval must be positive", prefix, prefix, prefix)}
	}
	return nil
}

// config turns the flags into a service configuration (store, ID and roles set by the caller).
func (f *autorecoveryFlags) config() autorecovery.Config {
	lost, check := f.lostDelay, f.checkInterval
	if lost == 0 {
		lost = -1 // at once
	}
	if check == 0 {
		check = -1 // disabled
	}
	return autorecovery.Config{
		RunAuditor: true, RunWorker: true, SessionTTL: f.ttl, Logger: slog.Default(),
		Auditor: autorecovery.AuditorConfig{Interval: f.audit, LostBookieDelay: lost, CheckInterval: check, CheckPercent: f.checkPercent},
		Worker:  autorecovery.WorkerConfig{OpenLedgerGrace: f.grace, PollInterval: f.poll},
	}
}

func newAutorecoveryCmd() *cobra.Command {
	var (
		metaURL, id, httpAddr, logLevel string
		flags                           autorecoveryFlags
	)
	c := &cobra.Command{
		Use:   "autorecovery",
		Short: "Run the auto-recovery auditor and a replication worker; see also 'autorecovery status'",
		Long: "Runs a leader-elected auditor (marks ledgers with replicas on lost bookies, periodic full check)\n" +
			"and a replication worker (copies missing replicas to new bookies). Bookies embed both by default.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := setupLogging(logLevel); err != nil {
				return err
			}
			if err := flags.validate(""); err != nil {
				return err
			}
			if id == "" {
				host, _ := os.Hostname()
				id = fmt.Sprintf("%s-%d", host, os.Getpid())
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			sd := newShutdown("autorecovery", stop)
			defer sd.done()
			// The metrics port before anything registers: a taken port fails the start,
			// naming the flag.
			mux, err := metricsMux(ctx, httpAddr)
			if err != nil {
				return err
			}
			store, err := openStore(ctx, metaURL)
			if err != nil {
				return err
			}
			defer store.Close()
			cfg := flags.config()
			cfg.Store, cfg.ID = store, id
			svc, err := autorecovery.Start(cfg)
			if err != nil {
				return err
			}
			if mux != nil {
				mux.Handle("/metrics", svc.MetricsHandler())
			}
			fmt.Fprintf(os.Stdout, "autorecovery %s running\n", id)
			<-ctx.Done()
			sd.begin()
			return svc.Close()
		},
	}
	addMetadataFlag(c, &metaURL)
	c.Flags().StringVar(&id, "id", "", "id of this process in locks and the auditor election (default: hostname-pid)")
	c.Flags().StringVar(&httpAddr, "http", "127.0.0.1:8001", "metrics HTTP address (empty disables)")
	c.Flags().DurationVar(&flags.ttl, "session-ttl", 10*time.Second, "metadata session TTL: how long locks and the election key outlive a dead process")
	c.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	flags.add(c, "")
	c.AddCommand(newAutorecoveryStatusCmd())
	return c
}

func newAutorecoveryStatusCmd() *cobra.Command {
	var (
		metaURL string
		out     outputFlag
	)
	c := &cobra.Command{
		Use:   "status",
		Short: "Show the auditor, the replication workers and the under-replicated ledgers",
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
			st, err := autorecovery.ReadStatus(ctx, store)
			if err != nil {
				return err
			}
			if out.json() {
				return printJSON(os.Stdout, st)
			}
			if st.Auditor != nil {
				fmt.Printf("auditor: %s (since %s)\n", st.Auditor.ID, time.UnixMilli(st.Auditor.Since).Format(time.RFC3339))
			} else {
				fmt.Println("auditor: none elected")
			}
			fmt.Printf("workers: %d\n", len(st.Workers))
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			for _, w := range st.Workers {
				doing := "idle"
				if w.Ledger != 0 {
					doing = fmt.Sprintf("ledger %d since %s", w.Ledger, time.UnixMilli(w.Since).Format(time.RFC3339))
				}
				fmt.Fprintf(tw, "  %s\t%s\n", w.ID, doing)
			}
			tw.Flush()
			fmt.Printf("under-replicated ledgers: %d\n", len(st.Ledgers))
			if len(st.Ledgers) > 0 {
				tw = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "LEDGER\tMISSING\tREASON\tSINCE\tLOCKED BY\tFAILURES\tRETRY AT")
				for _, l := range st.Ledgers {
					retry := "-"
					if l.RetryAt != 0 {
						retry = time.UnixMilli(l.RetryAt).Format(time.RFC3339)
					}
					locked := l.LockedBy
					if locked == "" {
						locked = "-"
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\n", l.LedgerID, strings.Join(l.Missing, ","), l.Reason,
						time.UnixMilli(l.Created).Format(time.RFC3339), locked, l.Failures, retry)
				}
				tw.Flush()
			}
			return nil
		},
	}
	addMetadataFlag(c, &metaURL)
	out.add(c)
	return c
}
