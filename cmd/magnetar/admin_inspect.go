package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/adminclient"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/proto/pulsar"
)

// inspectedMessage is one message an inspection command prints.
type inspectedMessage struct {
	ID          string            `json:"messageId"`
	PublishTime string            `json:"publishTime,omitempty"`
	Key         string            `json:"key,omitempty"`
	Properties  map[string]string `json:"properties"`
	Payload     string            `json:"payload"`         // text, or hex if not printable UTF-8
	Encoding    string            `json:"payloadEncoding"` // "text" or "hex"
}

// printablePayload returns b as text if it is printable UTF-8, else as a hex dump.
func printablePayload(b []byte) (string, string) {
	if utf8.Valid(b) && !strings.ContainsFunc(string(b), func(r rune) bool {
		return r < 0x20 && r != '\n' && r != '\t' && r != '\r' || r == 0x7f || r == utf8.RuneError
	}) {
		return string(b), "text"
	}
	return hex.Dump(b), "hex"
}

// splitMessages turns a message inspection answer (X-Pulsar-* headers, the payload uncompressed)
// into its messages: one, or the messages of a batch.
func splitMessages(hd http.Header, body []byte) ([]inspectedMessage, error) {
	id := hd.Get("X-Pulsar-Message-ID")
	props := map[string]string{}
	if js := hd.Get("X-Pulsar-Property"); js != "" {
		if err := json.Unmarshal([]byte(js), &props); err != nil {
			return nil, fmt.Errorf("X-Pulsar-Property: %w", err)
		}
	} else {
		for k := range hd {
			if p, ok := strings.CutPrefix(k, "X-Pulsar-Property-"); ok {
				props[p] = hd.Get(k)
			}
		}
	}
	base := inspectedMessage{ID: id, PublishTime: hd.Get("X-Pulsar-Publish-Time"), Key: hd.Get("X-Pulsar-Partition-Key")}
	nb := hd.Get("X-Pulsar-Num-Batch-Message")
	if nb == "" {
		m := base
		m.Properties = props
		m.Payload, m.Encoding = printablePayload(body)
		return []inspectedMessage{m}, nil
	}
	n, err := strconv.Atoi(nb)
	if err != nil {
		return nil, fmt.Errorf("X-Pulsar-Num-Batch-Message %q", nb)
	}
	// The broker answers a compressed batch uncompressed (X-Pulsar-Compression is only
	// informative); an encrypted one it cannot open.
	if a := hd.Get("X-Pulsar-Encryption-Algo"); a != "" {
		return nil, fmt.Errorf("batch %s is encrypted (%s): cannot split it", id, a)
	}
	msgs, err := pulsar.ParseBatch(body, n)
	if err != nil {
		return nil, fmt.Errorf("batch %s: %w", id, err)
	}
	out := make([]inspectedMessage, len(msgs))
	for i, sm := range msgs {
		m := base
		m.ID = fmt.Sprintf("%s:%d", id, i)
		m.Properties = map[string]string{}
		for k, v := range props {
			m.Properties[k] = v
		}
		for _, kv := range sm.Metadata.GetProperties() {
			m.Properties[kv.GetKey()] = kv.GetValue()
		}
		if sm.Metadata.PartitionKey != nil {
			m.Key = sm.Metadata.GetPartitionKey()
		}
		m.Payload, m.Encoding = printablePayload(sm.Payload)
		out[i] = m
	}
	return out, nil
}

// printMessages prints inspected messages as text blocks or (-o json) a JSON array.
func (a *adminClient) printMessages(cmd *cobra.Command, msgs []inspectedMessage) error {
	if a.out.json() {
		if msgs == nil {
			msgs = []inspectedMessage{}
		}
		return printJSON(cmd.OutOrStdout(), msgs)
	}
	w := cmd.OutOrStdout()
	for _, m := range msgs {
		fmt.Fprintf(w, "Message ID: %s\n", m.ID)
		if m.PublishTime != "" {
			fmt.Fprintf(w, "Publish time: %s\n", m.PublishTime)
		}
		if m.Key != "" {
			fmt.Fprintf(w, "Key: %s\n", m.Key)
		}
		keys := make([]string, 0, len(m.Properties))
		for k := range m.Properties {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "Property: %s=%s\n", k, m.Properties[k])
		}
		fmt.Fprintf(w, "Payload (%s):\n%s", m.Encoding, m.Payload)
		if !strings.HasSuffix(m.Payload, "\n") {
			io.WriteString(w, "\n")
		}
		io.WriteString(w, "\n")
	}
	return nil
}

func newAdminInspectCmds(a *adminClient) []*cobra.Command {
	var sub, initial string
	var count, position int
	var ledger, entry int64
	var at string
	split := func(r *adminclient.Response, err error) ([]inspectedMessage, error) {
		if err != nil {
			return nil, err
		}
		return splitMessages(r.Header, r.Body)
	}
	peek := leaf("peek-messages TOPIC", "Show the first N messages of a subscription's backlog without consuming them", 1,
		func(cmd *cobra.Command, args []string) error {
			if sub == "" {
				return usageError{fmt.Errorf("-s/--subscription is required")}
			}
			if count < 1 {
				return usageError{fmt.Errorf("-n/--count must be at least 1")}
			}
			if _, err := checkTopic(args[0]); err != nil {
				return err
			}
			var all []inspectedMessage
			for i := 1; len(all) < count; i++ {
				msgs, err := split(a.c.PeekMessage(cmd.Context(), args[0], sub, i))
				if adminclient.IsNotFound(err) && len(all) > 0 {
					break // the backlog is shorter
				}
				if err != nil {
					return err
				}
				all = append(all, msgs...)
			}
			return a.printMessages(cmd, all[:min(count, len(all))])
		})
	peek.Flags().StringVarP(&sub, "subscription", "s", "", "subscription name")
	peek.Flags().IntVarP(&count, "count", "n", 1, "number of messages")
	byID := leaf("get-message-by-id TOPIC", "Show the message(s) stored at ledger:entry", 1,
		func(cmd *cobra.Command, args []string) error {
			if ledger < 0 || entry < 0 {
				return usageError{fmt.Errorf("-l/--ledger-id and -e/--entry-id are required")}
			}
			if _, err := checkTopic(args[0]); err != nil {
				return err
			}
			msgs, err := split(a.c.MessageByID(cmd.Context(), args[0], ledger, entry))
			if err != nil {
				return err
			}
			return a.printMessages(cmd, msgs)
		})
	byID.Flags().Int64VarP(&ledger, "ledger-id", "l", -1, "ledger id")
	byID.Flags().Int64VarP(&entry, "entry-id", "e", -1, "entry id")
	examine := leaf("examine-message TOPIC", "Show the N-th message from the earliest or the latest", 1,
		func(cmd *cobra.Command, args []string) error {
			if initial != "earliest" && initial != "latest" {
				return usageError{fmt.Errorf("-i/--initial-position must be earliest or latest")}
			}
			if position < 1 {
				return usageError{fmt.Errorf("-m/--message-position must be at least 1")}
			}
			if _, err := checkTopic(args[0]); err != nil {
				return err
			}
			msgs, err := split(a.c.ExamineMessage(cmd.Context(), args[0], initial, position))
			if err != nil {
				return err
			}
			return a.printMessages(cmd, msgs)
		})
	examine.Flags().StringVarP(&initial, "initial-position", "i", "latest", "earliest or latest")
	examine.Flags().IntVarP(&position, "message-position", "m", 1, "position from the initial position (from 1)")
	msgID := leaf("get-message-id TOPIC", "Show the id of the first message published at or after a time", 1,
		func(cmd *cobra.Command, args []string) error {
			if at == "" {
				return usageError{fmt.Errorf("-d/--datetime is required")}
			}
			t, err := parseResetTime(at)
			if err != nil {
				return err
			}
			if _, err := checkTopic(args[0]); err != nil {
				return err
			}
			var id any
			if err := a.c.MessageIDByTime(cmd.Context(), args[0], t, &id); err != nil {
				return err
			}
			return a.show(cmd, id)
		})
	msgID.Flags().StringVarP(&at, "datetime", "d", "", "an RFC 3339 time or a duration ago (e.g. 10m)")
	compact := leaf("compact TOPIC", "Start a compaction of a topic (latest message per key)", 1,
		func(cmd *cobra.Command, args []string) error {
			if _, err := checkTopic(args[0]); err != nil {
				return err
			}
			if err := a.c.Compact(cmd.Context(), args[0]); err != nil {
				return err
			}
			return a.done(cmd, "compaction of "+args[0]+" started")
		})
	status := leaf("compaction-status TOPIC", "Show the status of a topic's latest compaction", 1,
		func(cmd *cobra.Command, args []string) error {
			if _, err := checkTopic(args[0]); err != nil {
				return err
			}
			var st api.CompactionStatus
			if err := a.c.CompactionStatus(cmd.Context(), args[0], &st); err != nil {
				return err
			}
			if a.out.json() {
				return a.show(cmd, st)
			}
			fmt.Fprintln(cmd.OutOrStdout(), st.Status)
			if st.LastError != "" {
				fmt.Fprintln(cmd.OutOrStdout(), "last error:", st.LastError)
			}
			return nil
		})
	return []*cobra.Command{peek, byID, examine, msgID, compact, status}
}
