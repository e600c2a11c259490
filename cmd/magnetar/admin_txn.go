package main

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// newAdminTransactionsCmd is `magnetar admin transactions`, pulsar-admin's transactions
// commands over /admin/v3/transactions.
func newAdminTransactionsCmd(a *adminClient) *cobra.Command {
	c := group("transactions", "Transaction coordinators, transactions, buffers and pending acknowledgements")
	var coordinator int
	var most, least uint64
	var topic, sub string
	var age time.Duration
	get := func(cmd *cobra.Command, path string) error {
		var v any
		if err := a.do(cmd.Context(), "GET", "/admin/v3/transactions/"+path, nil, &v); err != nil {
			return err
		}
		return a.show(cmd, v)
	}
	query := func() string {
		if coordinator < 0 {
			return ""
		}
		return fmt.Sprintf("?coordinatorId=%d", coordinator)
	}
	topicRest := func() (string, error) {
		if topic == "" {
			return "", usageError{fmt.Errorf("--topic is required")}
		}
		p, _, err := topicPath(topic)
		return strings.TrimPrefix(p, "persistent/"), err
	}
	subRest := func() (string, error) {
		p, err := topicRest()
		if err != nil {
			return "", err
		}
		if sub == "" {
			return "", usageError{fmt.Errorf("--sub is required")}
		}
		return p + "/" + url.PathEscape(sub), nil
	}
	txnRest := func() string { return fmt.Sprintf("%d/%d", most, least) }

	coordStats := leaf("coordinator-stats", "Stats of one coordinator (-c) or all", 0, func(cmd *cobra.Command, _ []string) error {
		return get(cmd, "coordinatorStats"+query())
	})
	coordStats.Flags().IntVarP(&coordinator, "coordinator-id", "c", -1, "coordinator id (default: all)")
	metadata := leaf("transaction-metadata", "Status, participants and timestamps of a transaction", 0, func(cmd *cobra.Command, _ []string) error {
		return get(cmd, "transactionMetadata/"+txnRest())
	})
	slow := leaf("slow-transactions", "Open transactions older than --time", 0, func(cmd *cobra.Command, _ []string) error {
		if age < 0 {
			return usageError{fmt.Errorf("--time must not be negative")}
		}
		return get(cmd, fmt.Sprintf("slowTransactions/%d", age.Milliseconds())+query())
	})
	slow.Flags().DurationVarP(&age, "time", "t", 0, "minimum age, e.g. 1m")
	slow.Flags().IntVarP(&coordinator, "coordinator-id", "c", -1, "coordinator id (default: all)")
	inBuffer := leaf("transaction-in-buffer-stats", "A transaction in a topic's transaction buffer", 0, func(cmd *cobra.Command, _ []string) error {
		p, err := topicRest()
		if err != nil {
			return err
		}
		return get(cmd, "transactionInBufferStats/"+p+"/"+txnRest())
	})
	bufferStats := leaf("transaction-buffer-stats", "A topic's transaction buffer", 0, func(cmd *cobra.Command, _ []string) error {
		p, err := topicRest()
		if err != nil {
			return err
		}
		return get(cmd, "transactionBufferStats/"+p)
	})
	inPending := leaf("transaction-in-pending-ack-stats", "A transaction in a subscription's pending acknowledgements", 0, func(cmd *cobra.Command, _ []string) error {
		p, err := subRest()
		if err != nil {
			return err
		}
		return get(cmd, "transactionInPendingAckStats/"+p+"/"+txnRest())
	})
	pendingStats := leaf("pending-ack-stats", "A subscription's pending acknowledgements", 0, func(cmd *cobra.Command, _ []string) error {
		p, err := subRest()
		if err != nil {
			return err
		}
		return get(cmd, "pendingAckStats/"+p)
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
