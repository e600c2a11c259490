package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/adminclient"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

func init() { register(newAdminCmd) }

// adminClient is the admin commands' state: their flags and the REST client (package
// adminclient) built from them.
type adminClient struct {
	base string // http://host:port
	// adminURL (--admin-url, pulsar-admin's name) overrides base: the one way to name the
	// broker for a command whose own --url is a record's (ownFlagsAnnotation).
	adminURL string
	out      outputFlag
	sec      clientSecurity
	conf     string // --config (client.conf)
	c        *adminclient.Client
}

func (a *adminClient) check() error {
	if err := a.out.validate(); err != nil {
		return err
	}
	u, err := url.Parse(a.base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError{fmt.Errorf("--url must be http://host:port, not %q", a.base)}
	}
	a.base = strings.TrimSuffix(a.base, "/")
	return nil
}

// show prints a decoded JSON document (always as indented JSON).
func (a *adminClient) show(cmd *cobra.Command, v any) error { return printJSON(cmd.OutOrStdout(), v) }

// showList prints names one per line, or as a JSON array with -o json.
func (a *adminClient) showList(cmd *cobra.Command, names []string) error {
	if a.out.json() {
		if names == nil {
			names = []string{}
		}
		return printJSON(cmd.OutOrStdout(), names)
	}
	for _, n := range names {
		fmt.Fprintln(cmd.OutOrStdout(), n)
	}
	return nil
}

// done reports a successful write.
func (a *adminClient) done(cmd *cobra.Command, what string) error {
	if a.out.json() {
		return printJSON(cmd.OutOrStdout(), map[string]bool{"ok": true})
	}
	fmt.Fprintln(cmd.OutOrStdout(), what)
	return nil
}

// checkTopic validates a topic name in any form.
func checkTopic(s string) (topicname.Name, error) {
	n, err := topicname.Parse(s)
	if err != nil {
		return n, usageError{err}
	}
	return n, nil
}

// checkNamespace validates tenant/namespace.
func checkNamespace(s string) error {
	if _, _, err := topicname.ParseNamespace(s); err != nil {
		return usageError{err}
	}
	return nil
}

func checkTenant(s string) error {
	if err := topicname.CheckTenant(s); err != nil {
		return usageError{err}
	}
	return nil
}

// parseMessageID parses earliest, latest or LEDGER:ENTRY[:BATCH] (batch -1 if not given).
func parseMessageID(s string) (adminclient.Position, error) {
	switch strings.ToLower(s) {
	case "earliest":
		return adminclient.Earliest, nil
	case "latest":
		return adminclient.Latest, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return adminclient.Position{}, usageError{fmt.Errorf("message id %q: want earliest, latest or LEDGER:ENTRY[:BATCH]", s)}
	}
	v := [3]int64{0, 0, -1}
	for i, k := range []string{"ledgerId", "entryId", "batchIndex"}[:len(parts)] {
		n, err := strconv.ParseInt(parts[i], 10, 64)
		if err != nil || n < 0 || (i == 2 && n > math.MaxInt32) {
			return adminclient.Position{}, usageError{fmt.Errorf("message id %q: %s is not a non-negative number", s, k)}
		}
		v[i] = n
	}
	batch := int32(v[2])
	return adminclient.Position{LedgerID: v[0], EntryID: v[1], Partition: -1, BatchIndex: &batch}, nil
}

func newAdminCmd() *cobra.Command {
	a := &adminClient{}
	c := group("admin", "Administer tenants, namespaces, topics and subscriptions over the admin REST API")
	c.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if _, own := cmd.Annotations[ownFlagsAnnotation]; own {
			// The command's own --url, --auth-plugin... are the record's: the config file
			// sets the admin client's flags, not those.
			if err := applyConfigTo(c.PersistentFlags(), a.conf, clientKeys("webServiceUrl")); err != nil {
				return err
			}
		} else if _, err := applyConfig(cmd, a.conf, clientKeys("webServiceUrl")); err != nil {
			return err
		}
		if a.adminURL != "" {
			a.base = a.adminURL
		}
		if err := a.check(); err != nil {
			return err
		}
		var err error
		a.c, err = a.sec.adminClient(a.base)
		return err
	}
	c.PersistentFlags().StringVar(&a.base, "url", "http://127.0.0.1:8080", "admin REST base URL of a broker (http:// or https://)")
	c.PersistentFlags().StringVar(&a.adminURL, "admin-url", "", "the same as --url (pulsar-admin's name; the one clusters create|update take)")
	c.PersistentFlags().StringVar(&a.conf, "config", "", "client.conf-style file (webServiceUrl, authPlugin, authParams, tls...; flags override it)")
	a.sec.add(c.PersistentFlags())
	c.PersistentFlags().StringVarP(&a.out.format, "output", "o", "text", "output format: text or json")
	c.AddCommand(newAdminTenantsCmd(a), newAdminNamespacesCmd(a), newAdminTopicsCmd(a), newAdminSubscriptionsCmd(a),
		newAdminTransactionsCmd(a), newAdminSchemasCmd(a), newAdminBrokersCmd(a), newAdminClustersCmd(a), // admin_cluster.go
		newAdminScalableCmd(a)) // admin_scalable.go
	return c
}

// group builds a command that only holds subcommands: an unknown subcommand is a usage
// error (exit 2), no subcommand prints the help.
func group(use, short string) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())}
			}
			return cmd.Help()
		}}
}

// leaf builds a subcommand with exactly n positional arguments.
func leaf(use, short string, n int, run func(cmd *cobra.Command, args []string) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: cobra.ExactArgs(n), RunE: run}
}

func newAdminTenantsCmd(a *adminClient) *cobra.Command {
	c := group("tenants", "List, show, create, update and delete tenants")
	var roles, clusters []string
	info := func() api.TenantInfo {
		return api.TenantInfo{AdminRoles: nonNilStrings(roles), AllowedClusters: nonNilStrings(clusters)}
	}
	create := leaf("create TENANT", "Create a tenant", 1, func(cmd *cobra.Command, args []string) error {
		if err := checkTenant(args[0]); err != nil {
			return err
		}
		if err := a.c.CreateTenant(cmd.Context(), args[0], info()); err != nil {
			return err
		}
		return a.done(cmd, "created tenant "+args[0])
	})
	update := leaf("update TENANT", "Replace a tenant's admin roles and allowed clusters", 1, func(cmd *cobra.Command, args []string) error {
		if err := checkTenant(args[0]); err != nil {
			return err
		}
		if err := a.c.UpdateTenant(cmd.Context(), args[0], info()); err != nil {
			return err
		}
		return a.done(cmd, "updated tenant "+args[0])
	})
	for _, sub := range []*cobra.Command{create, update} {
		sub.Flags().StringSliceVarP(&roles, "admin-roles", "r", nil, "admin roles (comma-separated)")
		sub.Flags().StringSliceVarP(&clusters, "allowed-clusters", "c", nil, "allowed clusters (default: the broker's)")
	}
	c.AddCommand(
		leaf("list", "List tenants", 0, func(cmd *cobra.Command, _ []string) error {
			ts, err := a.c.Tenants(cmd.Context())
			if err != nil {
				return err
			}
			return a.showList(cmd, ts)
		}),
		leaf("get TENANT", "Show a tenant", 1, func(cmd *cobra.Command, args []string) error {
			if err := checkTenant(args[0]); err != nil {
				return err
			}
			var v any
			if err := a.c.Tenant(cmd.Context(), args[0], &v); err != nil {
				return err
			}
			return a.show(cmd, v)
		}),
		create, update,
		leaf("delete TENANT", "Delete a tenant without namespaces", 1, func(cmd *cobra.Command, args []string) error {
			if err := checkTenant(args[0]); err != nil {
				return err
			}
			if err := a.c.DeleteTenant(cmd.Context(), args[0]); err != nil {
				return err
			}
			return a.done(cmd, "deleted tenant "+args[0])
		}),
	)
	return c
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func newAdminNamespacesCmd(a *adminClient) *cobra.Command {
	c := group("namespaces", "List, show, create and delete namespaces")
	var force bool
	del := leaf("delete TENANT/NAMESPACE", "Delete a namespace (--force: with its topics)", 1, func(cmd *cobra.Command, args []string) error {
		if err := checkNamespace(args[0]); err != nil {
			return err
		}
		if err := a.c.DeleteNamespace(cmd.Context(), args[0], force); err != nil {
			return err
		}
		return a.done(cmd, "deleted namespace "+args[0])
	})
	del.Flags().BoolVar(&force, "force", false, "delete the namespace's topics too")
	var bundles int
	create := leaf("create TENANT/NAMESPACE", "Create a namespace (--bundles: its bundle count)", 1, func(cmd *cobra.Command, args []string) error {
		if err := checkNamespace(args[0]); err != nil {
			return err
		}
		if err := a.c.CreateNamespace(cmd.Context(), args[0], bundles); err != nil {
			return err
		}
		return a.done(cmd, "created namespace "+args[0])
	})
	create.Flags().IntVar(&bundles, "bundles", 0, "number of bundles (default: the broker's defaultNumberOfNamespaceBundles)")
	c.AddCommand(
		leaf("list TENANT", "List a tenant's namespaces", 1, func(cmd *cobra.Command, args []string) error {
			if err := checkTenant(args[0]); err != nil {
				return err
			}
			nss, err := a.c.Namespaces(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.showList(cmd, nss)
		}),
		leaf("get TENANT/NAMESPACE", "Show a namespace's policies", 1, func(cmd *cobra.Command, args []string) error {
			if err := checkNamespace(args[0]); err != nil {
				return err
			}
			var v any
			if err := a.c.NamespacePolicies(cmd.Context(), args[0], &v); err != nil {
				return err
			}
			return a.show(cmd, v)
		}),
		create,
		del,
		leaf("topics TENANT/NAMESPACE", "List a namespace's topics", 1, func(cmd *cobra.Command, args []string) error {
			if err := checkNamespace(args[0]); err != nil {
				return err
			}
			ts, err := a.c.NamespaceTopics(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.showList(cmd, ts)
		}),
	)
	c.AddCommand(permissionCmds(a, "namespace")...)
	c.AddCommand(namespaceBundleCmds(a)...)      // admin_cluster.go
	c.AddCommand(namespaceReplicationCmds(a)...) // admin_replication.go
	c.AddCommand(policyCommands(a, false)...)    // admin_policies.go
	c.AddCommand(namespaceOffloadCmds(a)...)     // admin_offload.go
	return c
}

func newAdminTopicsCmd(a *adminClient) *cobra.Command {
	c := group("topics", "Create, delete, list, inspect, unload and terminate topics")
	// get builds "NAME TOPIC" commands that show what one read answers.
	get := func(use, short string, read func(c *adminclient.Client, ctx context.Context, topic string, out any) error) *cobra.Command {
		return leaf(use+" TOPIC", short, 1, func(cmd *cobra.Command, args []string) error {
			if _, err := checkTopic(args[0]); err != nil {
				return err
			}
			var v any
			if err := read(a.c, cmd.Context(), args[0], &v); err != nil {
				return err
			}
			return a.show(cmd, v)
		})
	}
	var force bool
	var partitions int
	var perPartition bool
	del := leaf("delete TOPIC", "Delete a non-partitioned topic", 1, func(cmd *cobra.Command, args []string) error {
		if _, err := checkTopic(args[0]); err != nil {
			return err
		}
		if err := a.c.DeleteTopic(cmd.Context(), args[0], force); err != nil {
			return err
		}
		return a.done(cmd, "deleted topic "+args[0])
	})
	del.Flags().BoolVar(&force, "force", false, "disconnect producers and consumers")
	delPart := leaf("delete-partitioned-topic TOPIC", "Delete a partitioned topic and its partitions", 1, func(cmd *cobra.Command, args []string) error {
		if _, err := checkTopic(args[0]); err != nil {
			return err
		}
		if err := a.c.DeletePartitionedTopic(cmd.Context(), args[0], force); err != nil {
			return err
		}
		return a.done(cmd, "deleted partitioned topic "+args[0])
	})
	delPart.Flags().BoolVar(&force, "force", false, "disconnect producers and consumers")
	partitioned := func(use, short string, write func(c *adminclient.Client, ctx context.Context, topic string, partitions int) error, verb string) *cobra.Command {
		cmd := leaf(use+" TOPIC", short, 1, func(cmd *cobra.Command, args []string) error {
			n, err := checkTopic(args[0])
			if err != nil {
				return err
			}
			if partitions < 1 {
				return usageError{fmt.Errorf("-p/--partitions must be at least 1")}
			}
			if n.IsPartition() {
				return usageError{fmt.Errorf("%s is a partition name", args[0])}
			}
			if err := write(a.c, cmd.Context(), args[0], partitions); err != nil {
				return err
			}
			return a.done(cmd, fmt.Sprintf("%s partitioned topic %s with %d partitions", verb, args[0], partitions))
		})
		cmd.Flags().IntVarP(&partitions, "partitions", "p", 0, "number of partitions")
		_ = cmd.MarkFlagRequired("partitions")
		return cmd
	}
	pstats := leaf("partitioned-stats TOPIC", "Show a partitioned topic's stats, summed over its partitions", 1, func(cmd *cobra.Command, args []string) error {
		if _, err := checkTopic(args[0]); err != nil {
			return err
		}
		var v any
		if err := a.c.PartitionedTopicStats(cmd.Context(), args[0], perPartition, &v); err != nil {
			return err
		}
		return a.show(cmd, v)
	})
	pstats.Flags().BoolVar(&perPartition, "per-partition", false, "include each partition's stats")
	c.AddCommand(
		leaf("list TENANT/NAMESPACE", "List a namespace's topics (partitions included)", 1, func(cmd *cobra.Command, args []string) error {
			if err := checkNamespace(args[0]); err != nil {
				return err
			}
			ts, err := a.c.Topics(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.showList(cmd, ts)
		}),
		leaf("list-partitioned-topics TENANT/NAMESPACE", "List a namespace's partitioned topics", 1, func(cmd *cobra.Command, args []string) error {
			if err := checkNamespace(args[0]); err != nil {
				return err
			}
			ts, err := a.c.PartitionedTopics(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.showList(cmd, ts)
		}),
		leaf("create TOPIC", "Create a non-partitioned topic", 1, func(cmd *cobra.Command, args []string) error {
			if _, err := checkTopic(args[0]); err != nil {
				return err
			}
			if err := a.c.CreateTopic(cmd.Context(), args[0]); err != nil {
				return err
			}
			return a.done(cmd, "created topic "+args[0])
		}),
		del,
		partitioned("create-partitioned-topic", "Create a partitioned topic", (*adminclient.Client).CreatePartitionedTopic, "created"),
		partitioned("update-partitioned-topic", "Grow a partitioned topic", (*adminclient.Client).UpdatePartitionedTopic, "updated"),
		delPart,
		get("get-partitioned-topic-metadata", "Show a topic's partition count (0: not partitioned)", (*adminclient.Client).PartitionedTopicMetadata),
		get("stats", "Show a topic's stats (a partitioned topic's summed over its partitions)", (*adminclient.Client).TopicStats),
		pstats,
		get("internal-stats", "Show a topic's managed-ledger stats", (*adminclient.Client).InternalStats),
		get("last-message-id", "Show the id of a topic's last message", (*adminclient.Client).LastMessageID),
		get("lookup", "Show the broker that serves a topic", (*adminclient.Client).Lookup),
		leaf("unload TOPIC", "Unload a topic (its clients reconnect)", 1, func(cmd *cobra.Command, args []string) error {
			if _, err := checkTopic(args[0]); err != nil {
				return err
			}
			if err := a.c.UnloadTopic(cmd.Context(), args[0]); err != nil {
				return err
			}
			return a.done(cmd, "unloaded topic "+args[0])
		}),
		leaf("terminate TOPIC", "Terminate a topic: no more messages are accepted", 1, func(cmd *cobra.Command, args []string) error {
			if _, err := checkTopic(args[0]); err != nil {
				return err
			}
			var id any
			if err := a.c.TerminateTopic(cmd.Context(), args[0], &id); err != nil {
				return err
			}
			if a.out.json() {
				return a.show(cmd, id)
			}
			b, _ := json.Marshal(id)
			fmt.Fprintf(cmd.OutOrStdout(), "terminated topic %s; last message id %s\n", args[0], b)
			return nil
		}),
	)
	c.AddCommand(newAdminInspectCmds(a)...)
	c.AddCommand(permissionCmds(a, "topic")...)
	c.AddCommand(topicBundleCmd(a))          // admin_cluster.go
	c.AddCommand(topicReplicationCmds(a)...) // admin_replication.go
	c.AddCommand(policyCommands(a, true)...) // admin_policies.go
	c.AddCommand(topicOffloadCmds(a)...)     // admin_offload.go
	return c
}

func newAdminSubscriptionsCmd(a *adminClient) *cobra.Command {
	c := group("subscriptions", "List, create, delete, reset and skip subscriptions")
	var sub, messageID, at string
	var force bool
	var n int
	// checkSub checks -s and the topic.
	checkSub := func(topic string) error {
		if sub == "" {
			return usageError{errors.New("-s/--subscription is required")}
		}
		_, err := checkTopic(topic)
		return err
	}
	create := leaf("create TOPIC", "Create a durable subscription", 1, func(cmd *cobra.Command, args []string) error {
		if err := checkSub(args[0]); err != nil {
			return err
		}
		id, err := parseMessageID(messageID)
		if err != nil {
			return err
		}
		if err := a.c.CreateSubscription(cmd.Context(), args[0], sub, id); err != nil {
			return err
		}
		return a.done(cmd, fmt.Sprintf("created subscription %s on %s", sub, args[0]))
	})
	create.Flags().StringVarP(&messageID, "message-id", "m", "latest", "start position: earliest, latest or LEDGER:ENTRY[:BATCH]")
	del := leaf("delete TOPIC", "Delete a subscription", 1, func(cmd *cobra.Command, args []string) error {
		if err := checkSub(args[0]); err != nil {
			return err
		}
		if err := a.c.DeleteSubscription(cmd.Context(), args[0], sub, force); err != nil {
			return err
		}
		return a.done(cmd, fmt.Sprintf("deleted subscription %s on %s", sub, args[0]))
	})
	del.Flags().BoolVar(&force, "force", false, "disconnect its consumers")
	reset := leaf("reset-cursor TOPIC", "Move a subscription to a time or a message id", 1, func(cmd *cobra.Command, args []string) error {
		if err := checkSub(args[0]); err != nil {
			return err
		}
		switch {
		case (at == "") == (messageID == ""):
			return usageError{errors.New("give exactly one of -t/--time and -m/--message-id")}
		case at != "":
			ts, err := parseResetTime(at)
			if err != nil {
				return err
			}
			if err := a.c.ResetCursorToTime(cmd.Context(), args[0], sub, ts); err != nil {
				return err
			}
		default:
			id, err := parseMessageID(messageID)
			if err != nil {
				return err
			}
			if err := a.c.ResetCursor(cmd.Context(), args[0], sub, id); err != nil {
				return err
			}
		}
		return a.done(cmd, fmt.Sprintf("reset subscription %s on %s", sub, args[0]))
	})
	reset.Flags().StringVarP(&at, "time", "t", "", "a time (RFC 3339) or a duration ago (e.g. 10m)")
	reset.Flags().StringVarP(&messageID, "message-id", "m", "", "earliest, latest or LEDGER:ENTRY[:BATCH]")
	skip := leaf("skip TOPIC", "Skip (acknowledge) the next N entries of a subscription", 1, func(cmd *cobra.Command, args []string) error {
		if err := checkSub(args[0]); err != nil {
			return err
		}
		if n < 0 {
			return usageError{fmt.Errorf("-n must not be negative")}
		}
		if err := a.c.Skip(cmd.Context(), args[0], sub, n); err != nil {
			return err
		}
		return a.done(cmd, fmt.Sprintf("skipped %d entries of subscription %s on %s", n, sub, args[0]))
	})
	skip.Flags().IntVarP(&n, "count", "n", 0, "number of entries to skip")
	_ = skip.MarkFlagRequired("count")
	clear := leaf("clear-backlog TOPIC", "Acknowledge a subscription's whole backlog", 1, func(cmd *cobra.Command, args []string) error {
		if err := checkSub(args[0]); err != nil {
			return err
		}
		if err := a.c.ClearBacklog(cmd.Context(), args[0], sub); err != nil {
			return err
		}
		return a.done(cmd, fmt.Sprintf("cleared the backlog of subscription %s on %s", sub, args[0]))
	})
	list := leaf("list TOPIC", "List a topic's subscriptions", 1, func(cmd *cobra.Command, args []string) error {
		if _, err := checkTopic(args[0]); err != nil {
			return err
		}
		subs, err := a.c.Subscriptions(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		return a.showList(cmd, subs)
	})
	for _, cmd := range []*cobra.Command{create, del, reset, skip, clear} {
		cmd.Flags().StringVarP(&sub, "subscription", "s", "", "subscription name")
	}
	c.AddCommand(list, create, del, reset, skip, clear)
	return c
}

// parseResetTime parses an RFC 3339 time or a duration before now.
func parseResetTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, usageError{fmt.Errorf("-t %q: want an RFC 3339 time or a duration ago (e.g. 10m)", s)}
	}
	return time.Now().Add(-d), nil
}
