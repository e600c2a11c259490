package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/autorecovery"
)

func newBookieDecommissionCmd() *cobra.Command {
	var (
		metaURL, id string
		interval    time.Duration
	)
	c := &cobra.Command{
		Use:   "decommission",
		Short: "Retire a stopped bookie: re-replicate every ledger that references it, then delete its cookie",
		Long: "The bookie must be stopped. Every ledger with the bookie in an ensemble is marked under-replicated;\n" +
			"replication workers (bookies embed them, or run 'magnetar autorecovery') move its replicas. A progress\n" +
			"line is printed until no ledger references it; then its cookie is deleted and the command exits 0.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id == "" {
				return usageError{errors.New("--bookie is required")}
			}
			if interval <= 0 {
				return usageError{fmt.Errorf("--interval must be positive")}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			store, err := openStore(ctx, metaURL)
			if err != nil {
				return err
			}
			defer store.Close()
			err = autorecovery.RunDecommission(ctx, store, id, interval, func(p autorecovery.DecommissionProgress) {
				fmt.Fprintln(os.Stdout, p)
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stdout, "bookie %s decommissioned: no ledger references it; cookie deleted\n", id)
			return nil
		},
	}
	addMetadataFlag(c, &metaURL)
	c.Flags().StringVar(&id, "bookie", "", "id of the bookie to retire (its address)")
	c.Flags().DurationVar(&interval, "interval", time.Second, "time between progress checks")
	return c
}
