package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/adminclient"
	"github.com/magnetar-io/magnetar/broker/api"
)

// Tiered storage verbs, with pulsar-admin's names and flags:
//
//	namespaces set-offload-threshold NS -s SIZE [--time AGE] | get-offload-threshold
//	namespaces set-offload-deletion-lag NS -l AGE | get-offload-deletion-lag | clear-offload-deletion-lag
//	namespaces|topics set-offload-policies X --driver … | get-offload-policies | remove-offload-policies
//	topics offload TOPIC -s SIZE | offload-status TOPIC [-w]

// offloadStatus is Pulsar's OffloadProcessStatus JSON.
type offloadStatus struct {
	Status                  string         `json:"status"`
	LastError               string         `json:"lastError"`
	FirstUnoffloadedMessage *api.MessageID `json:"firstUnoffloadedMessage,omitempty"`
}

// offloadPolicyFlags are set-offload-policies' flags (pulsar-admin's long names; its
// two-letter short forms such as -rb do not exist in this flag parser).
type offloadPolicyFlags struct {
	driver, region, bucket, endpoint, maxBlock, readBuffer, threshold, thresholdSecs, lag, priority string
}

func (o *offloadPolicyFlags) add(c *cobra.Command) {
	f := c.Flags()
	f.StringVarP(&o.driver, "driver", "d", "", "driver: aws-s3, S3, google-cloud-storage, azureblob or filesystem")
	f.StringVarP(&o.region, "region", "r", "", "region")
	f.StringVarP(&o.bucket, "bucket", "b", "", "bucket")
	f.StringVarP(&o.endpoint, "endpoint", "e", "", "alternative endpoint to connect to")
	f.StringVarP(&o.maxBlock, "maxBlockSize", "m", "", "max block size (e.g. 64M)")
	f.StringVar(&o.readBuffer, "readBufferSize", "", "read buffer size (e.g. 1M)")
	f.StringVarP(&o.threshold, "offloadAfterThreshold", "t", "", "offload once a topic holds more than this in BookKeeper (e.g. 10G; -1: off)")
	f.StringVar(&o.thresholdSecs, "offloadAfterThresholdInSeconds", "", "offload ledgers older than this (e.g. 1h; -1: off)")
	f.StringVar(&o.lag, "offloadAfterElapsed", "", "delete the bookie copy this long after the offload (e.g. 4h; -1: never)")
	f.StringVar(&o.priority, "offloadedReadPriority", "", "tiered-storage-first or bookkeeper-first")
}

// body builds the OffloadPolicies JSON of the flags given (Pulsar's field names).
func (o *offloadPolicyFlags) body() (map[string]any, error) {
	b := map[string]any{}
	str := func(field, v string) {
		if v != "" {
			b[field] = v
		}
	}
	str("managedLedgerOffloadDriver", o.driver)
	str("managedLedgerOffloadRegion", o.region)
	str("managedLedgerOffloadBucket", o.bucket)
	str("managedLedgerOffloadServiceEndpoint", o.endpoint)
	str("managedLedgerOffloadedReadPriority", o.priority)
	for _, s := range []struct{ field, flag, v string }{
		{"managedLedgerOffloadMaxBlockSizeInBytes", "--maxBlockSize", o.maxBlock},
		{"managedLedgerOffloadReadBufferSizeInBytes", "--readBufferSize", o.readBuffer},
		{"managedLedgerOffloadThresholdInBytes", "--offloadAfterThreshold", o.threshold},
	} {
		if s.v == "" {
			continue
		}
		n, err := parseSize(s.v)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a size", s.flag, s.v)
		}
		b[s.field] = n
	}
	for _, s := range []struct {
		field, flag, v string
		unit           time.Duration
	}{
		{"managedLedgerOffloadThresholdInSeconds", "--offloadAfterThresholdInSeconds", o.thresholdSecs, time.Second},
		{"managedLedgerOffloadDeletionLagInMillis", "--offloadAfterElapsed", o.lag, time.Millisecond},
	} {
		if s.v == "" {
			continue
		}
		n, err := ageOrOff(s.v, s.unit)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.flag, err)
		}
		b[s.field] = n
	}
	return b, nil
}

// ageOrOff reads an age (parseAge) in unit, or -1.
func ageOrOff(s string, unit time.Duration) (int64, error) {
	if s == "-1" {
		return -1, nil
	}
	d, err := parseAge(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not an age (e.g. 10m, 4h) or -1", s)
	}
	return int64(d / unit), nil
}

// offloadPolicyCmds are set-|get-|remove-offload-policies of namespaces (topic false) or topics.
func offloadPolicyCmds(a *adminClient, topic bool) []*cobra.Command {
	argName := "TENANT/NAMESPACE"
	if topic {
		argName = "TOPIC"
	}
	target := func(arg string) (adminclient.PolicyTarget, error) {
		if topic {
			_, err := checkTopic(arg)
			return adminclient.PolicyTarget{Topic: arg}, err
		}
		return adminclient.PolicyTarget{Namespace: arg}, checkNamespace(arg)
	}
	var pf offloadPolicyFlags
	set := leaf("set-offload-policies "+argName, "Set the offload policies", 1, func(cmd *cobra.Command, args []string) error {
		t, err := target(args[0])
		if err != nil {
			return err
		}
		body, err := pf.body()
		if err != nil {
			return usageError{err}
		}
		if err := a.c.SetPolicy(cmd.Context(), t, "offloadPolicies", nil, body); err != nil {
			return err
		}
		return a.done(cmd, "set offload policies of "+args[0])
	})
	pf.add(set)
	var applied bool
	get := leaf("get-offload-policies "+argName, "Show the offload policies", 1, func(cmd *cobra.Command, args []string) error {
		t, err := target(args[0])
		if err != nil {
			return err
		}
		var v any
		if err := a.c.GetPolicy(cmd.Context(), t, "offloadPolicies", applied, &v); err != nil {
			return err
		}
		return a.show(cmd, v)
	})
	if topic {
		get.Flags().BoolVar(&applied, "applied", false, "the policies in force (topic, namespace or broker)")
	}
	remove := leaf("remove-offload-policies "+argName, "Remove the offload policies", 1, func(cmd *cobra.Command, args []string) error {
		t, err := target(args[0])
		if err != nil {
			return err
		}
		if topic {
			err = a.c.RemovePolicy(cmd.Context(), t, "offloadPolicies", nil)
		} else {
			err = a.c.RemoveNamespaceOffloadPolicies(cmd.Context(), args[0])
		}
		if err != nil {
			return err
		}
		return a.done(cmd, "removed offload policies of "+args[0])
	})
	return []*cobra.Command{set, get, remove}
}

// namespaceOffloadCmds are the namespace verbs of tiered storage.
func namespaceOffloadCmds(a *adminClient) []*cobra.Command {
	ns := func(arg string) (adminclient.PolicyTarget, error) {
		return adminclient.PolicyTarget{Namespace: arg}, checkNamespace(arg)
	}
	var size, age, lag string
	setThreshold := leaf("set-offload-threshold TENANT/NAMESPACE", "Set the size (and age) beyond which a topic's ledgers are offloaded", 1,
		func(cmd *cobra.Command, args []string) error {
			t, err := ns(args[0])
			if err != nil {
				return err
			}
			if size == "" && age == "" {
				return usageError{fmt.Errorf("-s/--size or --time is required")}
			}
			if size != "" {
				n, err := parseSize(size)
				if err != nil {
					return usageError{fmt.Errorf("-s/--size: %q is not a size", size)}
				}
				if err := a.c.SetPolicy(cmd.Context(), t, "offloadThreshold", nil, n); err != nil {
					return err
				}
			}
			if age != "" {
				n, err := ageOrOff(age, time.Second)
				if err != nil {
					return usageError{fmt.Errorf("--time: %w", err)}
				}
				if err := a.c.SetPolicy(cmd.Context(), t, "offloadThresholdInSeconds", nil, n); err != nil {
					return err
				}
			}
			return a.done(cmd, "set offload threshold of "+args[0])
		})
	setThreshold.Flags().StringVarP(&size, "size", "s", "", "bytes a topic keeps in BookKeeper before offloading (e.g. 10M, 16G; -1: off)")
	setThreshold.Flags().StringVar(&age, "time", "", "age of a ledger before offloading (e.g. 1h; -1: off)")
	getThreshold := leaf("get-offload-threshold TENANT/NAMESPACE", "Show the offload threshold (bytes; -1: off)", 1,
		func(cmd *cobra.Command, args []string) error {
			t, err := ns(args[0])
			if err != nil {
				return err
			}
			var bytes, secs any
			if err := a.c.GetPolicy(cmd.Context(), t, "offloadThreshold", false, &bytes); err != nil {
				return err
			}
			if err := a.c.GetPolicy(cmd.Context(), t, "offloadThresholdInSeconds", false, &secs); err != nil {
				return err
			}
			if a.out.json() {
				return a.show(cmd, map[string]any{"offloadThreshold": bytes, "offloadThresholdInSeconds": secs})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "offloadThresholdInBytes: %v\noffloadThresholdInSeconds: %v\n", bytes, secs)
			return nil
		})
	setLag := leaf("set-offload-deletion-lag TENANT/NAMESPACE", "Set how long after an offload the bookie copy is deleted", 1,
		func(cmd *cobra.Command, args []string) error {
			t, err := ns(args[0])
			if err != nil {
				return err
			}
			if lag == "" {
				return usageError{fmt.Errorf("-l/--lag is required")}
			}
			n, err := ageOrOff(lag, time.Millisecond)
			if err != nil {
				return usageError{fmt.Errorf("-l/--lag: %w", err)}
			}
			if err := a.c.SetPolicy(cmd.Context(), t, "offloadDeletionLagMs", nil, n); err != nil {
				return err
			}
			return a.done(cmd, "set offload deletion lag of "+args[0])
		})
	setLag.Flags().StringVarP(&lag, "lag", "l", "", "delay (e.g. 10m, 4h; -1: never)")
	getLag := leaf("get-offload-deletion-lag TENANT/NAMESPACE", "Show the offload deletion lag (ms; null: the broker's)", 1,
		func(cmd *cobra.Command, args []string) error {
			t, err := ns(args[0])
			if err != nil {
				return err
			}
			var v any
			if err := a.c.GetPolicy(cmd.Context(), t, "offloadDeletionLagMs", false, &v); err != nil {
				return err
			}
			return a.show(cmd, v)
		})
	clearLag := leaf("clear-offload-deletion-lag TENANT/NAMESPACE", "Clear the offload deletion lag (the broker's applies)", 1,
		func(cmd *cobra.Command, args []string) error {
			t, err := ns(args[0])
			if err != nil {
				return err
			}
			if err := a.c.RemovePolicy(cmd.Context(), t, "offloadDeletionLagMs", nil); err != nil {
				return err
			}
			return a.done(cmd, "cleared offload deletion lag of "+args[0])
		})
	return append([]*cobra.Command{setThreshold, getThreshold, setLag, getLag, clearLag}, offloadPolicyCmds(a, false)...)
}

// firstLedgerWithinThreshold is pulsar-admin's choice of where `topics offload -s` stops:
// walking the ledgers from the newest, the first message of the ledger after the one at
// which their total size exceeds threshold (nil: everything fits, nothing to offload).
func firstLedgerWithinThreshold(ledgers []api.LedgerStats, threshold int64) *api.MessageID {
	if len(ledgers) == 0 {
		return nil
	}
	rev := slices.Clone(ledgers)
	slices.Reverse(rev)
	var suffix int64
	previous := rev[0].LedgerID
	for _, l := range rev {
		suffix += l.Size
		if suffix > threshold {
			return &api.MessageID{LedgerID: previous, EntryID: 0, Partition: -1, BatchIndex: -1}
		}
		previous = l.LedgerID
	}
	return nil
}

// topicOffloadCmds are `topics offload` and `topics offload-status` plus the topic policies.
func topicOffloadCmds(a *adminClient) []*cobra.Command {
	var size string
	off := leaf("offload TOPIC", "Offload a topic's data to tiered storage, keeping at most --size-threshold in BookKeeper", 1,
		func(cmd *cobra.Command, args []string) error {
			if _, err := checkTopic(args[0]); err != nil {
				return err
			}
			if size == "" {
				return usageError{fmt.Errorf("-s/--size-threshold is required")}
			}
			n, err := parseSize(size)
			if err != nil || n < 0 {
				return usageError{fmt.Errorf("-s/--size-threshold: %q is not a size", size)}
			}
			var is api.InternalStats
			if err := a.c.InternalStats(cmd.Context(), args[0], &is); err != nil {
				return err
			}
			id := firstLedgerWithinThreshold(is.Ledgers, n)
			if id == nil {
				return a.done(cmd, "Nothing to offload")
			}
			if err := a.c.TriggerOffload(cmd.Context(), args[0], *id); err != nil {
				return err
			}
			return a.done(cmd, fmt.Sprintf("Offload triggered for %s for messages before %d:%d:-1", args[0], id.LedgerID, id.EntryID))
		})
	off.Flags().StringVarP(&size, "size-threshold", "s", "", "maximum amount of data to keep in BookKeeper (e.g. 10M, 5G)")
	var wait bool
	status := leaf("offload-status TOPIC", "Show the status of a topic's last offload", 1,
		func(cmd *cobra.Command, args []string) error {
			if _, err := checkTopic(args[0]); err != nil {
				return err
			}
			st, err := waitOffload(cmd.Context(), a, args[0], wait)
			if err != nil {
				return err
			}
			if a.out.json() {
				return a.show(cmd, st)
			}
			w := cmd.OutOrStdout()
			switch st.Status {
			case "SUCCESS":
				fmt.Fprintln(w, "Offload was a success")
			case "NOT_RUN":
				fmt.Fprintln(w, "Offload has not been run")
			case "RUNNING":
				fmt.Fprintln(w, "Offload is currently running")
			default:
				fmt.Fprintln(w, "Error in offload")
				return fmt.Errorf("offload of %s failed: %s", args[0], st.LastError)
			}
			return nil
		})
	status.Flags().BoolVarP(&wait, "wait-complete", "w", false, "wait for the offload to finish")
	return append([]*cobra.Command{off, status}, offloadPolicyCmds(a, true)...)
}

// waitOffload reads the offload status, and with wait, until it is no longer RUNNING
// (re-reading it every second, as pulsar-admin does, or until ctx ends).
func waitOffload(ctx context.Context, a *adminClient, topic string, wait bool) (offloadStatus, error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		var st offloadStatus
		if err := a.c.OffloadStatus(ctx, topic, &st); err != nil {
			return st, err
		}
		if !wait || st.Status != "RUNNING" {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-tick.C:
		}
	}
}
