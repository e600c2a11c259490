package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/adminclient"
)

// newAdminTransactionsCmd is `magnetar admin transactions`, pulsar-admin's transactions
// commands over the admin API's v3 transactions resource.
func newAdminTransactionsCmd(a *adminClient) *cobra.Command {
	c := group("transactions", "Transaction coordinators, transactions, buffers and pending acknowledgements")
	var coordinator int
	var most, least uint64
	var topic, sub string
	var age time.Duration
	show := func(cmd *cobra.Command, read func(out any) error) error {
		var v any
		if err := read(&v); err != nil {
			return err
		}
		return a.show(cmd, v)
	}
	needTopic := func() error {
		if topic == "" {
			return usageError{fmt.Errorf("--topic is required")}
		}
		_, err := checkTopic(topic)
		return err
	}
	needSub := func() error {
		if err := needTopic(); err != nil {
			return err
		}
		if sub == "" {
			return usageError{fmt.Errorf("--sub is required")}
		}
		return nil
	}
	txn := func() adminclient.TxnID { return adminclient.TxnID{Most: most, Least: least} }

	coordStats := leaf("coordinator-stats", "Stats of one coordinator (-c) or all", 0, func(cmd *cobra.Command, _ []string) error {
		return show(cmd, func(out any) error { return a.c.CoordinatorStats(cmd.Context(), coordinator, out) })
	})
	coordStats.Flags().IntVarP(&coordinator, "coordinator-id", "c", -1, "coordinator id (default: all)")
	metadata := leaf("transaction-metadata", "Status, participants and timestamps of a transaction", 0, func(cmd *cobra.Command, _ []string) error {
		return show(cmd, func(out any) error { return a.c.TransactionMetadata(cmd.Context(), txn(), out) })
	})
	slow := leaf("slow-transactions", "Open transactions older than --time", 0, func(cmd *cobra.Command, _ []string) error {
		if age < 0 {
			return usageError{fmt.Errorf("--time must not be negative")}
		}
		return show(cmd, func(out any) error { return a.c.SlowTransactions(cmd.Context(), age, coordinator, out) })
	})
	slow.Flags().DurationVarP(&age, "time", "t", 0, "minimum age, e.g. 1m")
	slow.Flags().IntVarP(&coordinator, "coordinator-id", "c", -1, "coordinator id (default: all)")
	inBuffer := leaf("transaction-in-buffer-stats", "A transaction in a topic's transaction buffer", 0, func(cmd *cobra.Command, _ []string) error {
		if err := needTopic(); err != nil {
			return err
		}
		return show(cmd, func(out any) error { return a.c.TransactionInBufferStats(cmd.Context(), topic, txn(), out) })
	})
	bufferStats := leaf("transaction-buffer-stats", "A topic's transaction buffer", 0, func(cmd *cobra.Command, _ []string) error {
		if err := needTopic(); err != nil {
			return err
		}
		return show(cmd, func(out any) error { return a.c.TransactionBufferStats(cmd.Context(), topic, out) })
	})
	inPending := leaf("transaction-in-pending-ack-stats", "A transaction in a subscription's pending acknowledgements", 0, func(cmd *cobra.Command, _ []string) error {
		if err := needSub(); err != nil {
			return err
		}
		return show(cmd, func(out any) error { return a.c.TransactionInPendingAckStats(cmd.Context(), topic, sub, txn(), out) })
	})
	pendingStats := leaf("pending-ack-stats", "A subscription's pending acknowledgements", 0, func(cmd *cobra.Command, _ []string) error {
		if err := needSub(); err != nil {
			return err
		}
		return show(cmd, func(out any) error { return a.c.PendingAckStats(cmd.Context(), topic, sub, out) })
	})
	for _, cc := range []*cobra.Command{metadata, inBuffer, inPending} {
		cc.Flags().Uint64VarP(&most, "most-sig-bits", "m", 0, "transaction id: most significant bits (the coordinator)")
		cc.Flags().Uint64VarP(&least, "least-sig-bits", "l", 0, "transaction id: least significant bits")
	}
	for _, cc := range []*cobra.Command{inBuffer, bufferStats, inPending, pendingStats} {
		cc.Flags().StringVarP(&topic, "topic", "t", "", "topic name")
	}
	for _, cc := range []*cobra.Command{inPending, pendingStats} {
		cc.Flags().StringVarP(&sub, "sub-name", "s", "", "subscription name")
	}
	c.AddCommand(coordStats, metadata, slow, inBuffer, bufferStats, inPending, pendingStats)
	return c
}
