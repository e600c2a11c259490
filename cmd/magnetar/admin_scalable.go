package main

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/adminclient"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// checkScalable validates topic://tenant/ns/name.
func checkScalable(s string) error {
	if _, err := layout.ParseTopic(s); err != nil {
		return usageError{err}
	}
	return nil
}

func segmentArg(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, usageError{fmt.Errorf("segment id %q: want a number", s)}
	}
	return n, nil
}

func newAdminScalableCmd(a *adminClient) *cobra.Command {
	c := group("scalable-topics", "Create, show, split, merge and delete scalable topics (topic://tenant/ns/name)")
	var segments int
	create := leaf("create TOPIC", "Create a scalable topic with --segments initial segments", 1, func(cmd *cobra.Command, args []string) error {
		if err := checkScalable(args[0]); err != nil {
			return err
		}
		if err := a.c.CreateScalableTopic(cmd.Context(), args[0], segments); err != nil {
			return err
		}
		return a.done(cmd, "created scalable topic "+args[0])
	})
	create.Flags().IntVar(&segments, "segments", 1, "initial segments (splitting the hash space evenly)")
	var at string
	split := leaf("split TOPIC SEGMENT", "Split an active segment at its midpoint (or --at HASH, hex)", 2, func(cmd *cobra.Command, args []string) error {
		if err := checkScalable(args[0]); err != nil {
			return err
		}
		seg, err := segmentArg(args[1])
		if err != nil {
			return err
		}
		if at != "" {
			if _, err := strconv.ParseUint(at, 16, 16); err != nil {
				return usageError{fmt.Errorf("--at %q: want a hash 0001-ffff in hex", at)}
			}
		}
		if err := a.c.SplitSegment(cmd.Context(), args[0], seg, at); err != nil {
			return err
		}
		return a.done(cmd, "split segment "+args[1]+" of "+args[0])
	})
	split.Flags().StringVar(&at, "at", "", "split point: the first hash of the upper child (hex; default the midpoint)")
	var seekTo string
	seek := leaf("seek TOPIC SUBSCRIPTION SEGMENT", "Rewind a subscription on one segment to -m earliest or LEDGER:ENTRY; "+
		"the segment's descendants are withheld from the stream consumers until it is drained again", 3, func(cmd *cobra.Command, args []string) error {
		if err := checkScalable(args[0]); err != nil {
			return err
		}
		seg, err := segmentArg(args[2])
		if err != nil {
			return err
		}
		if args[1] == "" {
			return usageError{fmt.Errorf("empty subscription name")}
		}
		var pos *adminclient.Position
		switch id, err := parseMessageID(seekTo); {
		case err != nil:
			return err
		case id.LedgerID < 0:
		case id.LedgerID == math.MaxInt64:
			return usageError{fmt.Errorf("-m latest: a scalable seek takes earliest or LEDGER:ENTRY")}
		default:
			pos = &id
		}
		if err := a.c.SeekScalableSubscription(cmd.Context(), args[0], args[1], seg, pos); err != nil {
			return err
		}
		return a.done(cmd, "rewound subscription "+args[1]+" on segment "+args[2]+" of "+args[0])
	})
	seek.Aliases = []string{"reset-cursor"}
	seek.Flags().StringVarP(&seekTo, "message-id", "m", "earliest", "earliest or LEDGER:ENTRY (a message id of the segment)")
	c.AddCommand(create, seek,
		leaf("delete TOPIC", "Delete a scalable topic and all its segments", 1, func(cmd *cobra.Command, args []string) error {
			if err := checkScalable(args[0]); err != nil {
				return err
			}
			if err := a.c.DeleteScalableTopic(cmd.Context(), args[0]); err != nil {
				return err
			}
			return a.done(cmd, "deleted scalable topic "+args[0])
		}),
		leaf("list TENANT/NAMESPACE", "List a namespace's scalable topics", 1, func(cmd *cobra.Command, args []string) error {
			if err := checkNamespace(args[0]); err != nil {
				return err
			}
			ts, err := a.c.ScalableTopics(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.showList(cmd, ts)
		}),
		leaf("layout TOPIC", "Show a topic's segment DAG (a tree; -o json: the layout record)", 1, func(cmd *cobra.Command, args []string) error {
			if err := checkScalable(args[0]); err != nil {
				return err
			}
			var raw json.RawMessage
			if err := a.c.ScalableLayout(cmd.Context(), args[0], &raw); err != nil {
				return err
			}
			l, err := layout.Unmarshal(raw)
			if err != nil {
				return err
			}
			if a.out.json() {
				return a.show(cmd, l)
			}
			fmt.Fprint(cmd.OutOrStdout(), l.Tree())
			return nil
		}),
		split,
		leaf("merge TOPIC SEGMENT SEGMENT", "Merge two adjacent active segments", 3, func(cmd *cobra.Command, args []string) error {
			if err := checkScalable(args[0]); err != nil {
				return err
			}
			s1, err := segmentArg(args[1])
			if err != nil {
				return err
			}
			s2, err := segmentArg(args[2])
			if err != nil {
				return err
			}
			if err := a.c.MergeSegments(cmd.Context(), args[0], s1, s2); err != nil {
				return err
			}
			return a.done(cmd, "merged segments "+args[1]+" and "+args[2]+" of "+args[0])
		}),
		leaf("stats TOPIC", "Show per-segment and aggregate statistics", 1, func(cmd *cobra.Command, args []string) error {
			if err := checkScalable(args[0]); err != nil {
				return err
			}
			var st api.ScalableStats
			if err := a.c.ScalableStats(cmd.Context(), args[0], &st); err != nil {
				return err
			}
			if a.out.json() {
				return a.show(cmd, st)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "%s epoch %d: %d active, %d sealed segments; in %d msgs (%.1f/s), out %d msgs (%.1f/s)\n",
				st.Topic, st.Epoch, st.Active, st.Sealed, st.MsgIn, st.RateIn, st.MsgOut, st.RateOut)
			for _, sub := range sortedKeys(st.Backlog) {
				fmt.Fprintf(w, "  subscription %s: backlog %d\n", sub, st.Backlog[sub])
			}
			for _, seg := range sortedKeys(st.Segments) {
				s := st.Segments[seg]
				fmt.Fprintf(w, "  %s: in %d, out %d, terminated %v\n", seg, s.MsgInCounter, s.MsgOutCounter, s.Terminated)
			}
			return nil
		}),
		leaf("subscriptions TOPIC", "List a topic's subscriptions", 1, func(cmd *cobra.Command, args []string) error {
			if err := checkScalable(args[0]); err != nil {
				return err
			}
			subs, err := a.c.ScalableSubscriptions(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.showList(cmd, subs)
		}),
		leaf("create-subscription TOPIC SUBSCRIPTION", "Add a subscription (a cursor at the earliest of every segment)", 2, func(cmd *cobra.Command, args []string) error {
			if err := checkScalable(args[0]); err != nil {
				return err
			}
			if err := a.c.CreateScalableSubscription(cmd.Context(), args[0], args[1]); err != nil {
				return err
			}
			return a.done(cmd, "created subscription "+args[1]+" on "+args[0])
		}),
	)
	return c
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
