package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/broker/topicname"
)

func init() { register(newAdminCmd) }

// adminClient calls the admin REST API (package admin) of a broker.
type adminClient struct {
	base string // http://host:port
	out  outputFlag
	sec  clientSecurity
	conf string // --config (client.conf)
	http *http.Client
}

// adminHTTPError is a non-2xx answer: the status and Pulsar's {"reason": ...}.
type adminHTTPError struct {
	status int
	reason string
}

func (e *adminHTTPError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.status, http.StatusText(e.status), e.reason)
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

// do sends a request with an optional JSON body and decodes a JSON answer into out (if not
// nil). Non-2xx answers become *adminHTTPError.
func (a *adminClient) do(ctx context.Context, method, path string, body, out any) error {
	_, b, err := a.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	if out != nil && len(b) > 0 {
		return json.Unmarshal(b, out)
	}
	return nil
}

// send sends a request with an optional JSON body and returns the answer's headers and
// body. Non-2xx answers become *adminHTTPError.
func (a *adminClient) send(ctx context.Context, method, path string, body any) (http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, nil, err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Reason string `json:"reason"`
		}
		if json.Unmarshal(b, &e) != nil || e.Reason == "" {
			e.Reason = strings.TrimSpace(string(b))
		}
		return nil, nil, &adminHTTPError{status: resp.StatusCode, reason: e.Reason}
	}
	return resp.Header, b, nil
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

// topicPath validates a topic name in any form and returns its REST path
// "persistent/tenant/ns/topic" or "non-persistent/tenant/ns/topic" (escaped).
func topicPath(s string) (string, topicname.Name, error) {
	n, err := topicname.Parse(s)
	if err != nil {
		return "", n, usageError{err}
	}
	return n.Domain + "/" + url.PathEscape(n.Tenant) + "/" + url.PathEscape(n.Namespace) + "/" + url.PathEscape(n.Local), n, nil
}

func namespacePath(s string) (string, error) {
	t, ns, err := topicname.ParseNamespace(s)
	if err != nil {
		return "", usageError{err}
	}
	return url.PathEscape(t) + "/" + url.PathEscape(ns), nil
}

func tenantPath(s string) (string, error) {
	if err := topicname.CheckTenant(s); err != nil {
		return "", usageError{err}
	}
	return url.PathEscape(s), nil
}

// parseMessageID parses earliest, latest or LEDGER:ENTRY[:BATCH] into the REST body.
func parseMessageID(s string) (map[string]int64, error) {
	switch strings.ToLower(s) {
	case "earliest":
		return map[string]int64{"ledgerId": -1, "entryId": -1, "partitionIndex": -1}, nil
	case "latest":
		return map[string]int64{"ledgerId": 1<<63 - 1, "entryId": 1<<63 - 1, "partitionIndex": -1}, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return nil, usageError{fmt.Errorf("message id %q: want earliest, latest or LEDGER:ENTRY[:BATCH]", s)}
	}
	m := map[string]int64{"partitionIndex": -1, "batchIndex": -1}
	for i, k := range []string{"ledgerId", "entryId", "batchIndex"}[:len(parts)] {
		v, err := strconv.ParseInt(parts[i], 10, 64)
		if err != nil || v < 0 {
			return nil, usageError{fmt.Errorf("message id %q: %s is not a non-negative number", s, k)}
		}
		m[k] = v
	}
	return m, nil
}

func newAdminCmd() *cobra.Command {
	a := &adminClient{}
	c := group("admin", "Administer tenants, namespaces, topics and subscriptions over the admin REST API")
	c.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if _, err := applyConfig(cmd, a.conf, clientKeys("webServiceUrl")); err != nil {
			return err
		}
		if err := a.check(); err != nil {
			return err
		}
		var err error
		a.http, err = a.sec.httpClient()
		return err
	}
	c.PersistentFlags().StringVar(&a.base, "url", "http://127.0.0.1:8080", "admin REST base URL of a broker (http:// or https://)")
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
	info := func() map[string][]string {
		return map[string][]string{"adminRoles": nonNilStrings(roles), "allowedClusters": nonNilStrings(clusters)}
	}
	create := leaf("create TENANT", "Create a tenant", 1, func(cmd *cobra.Command, args []string) error {
		p, err := tenantPath(args[0])
		if err != nil {
			return err
		}
		if err := a.do(cmd.Context(), "PUT", "/admin/v2/tenants/"+p, info(), nil); err != nil {
			return err
		}
		return a.done(cmd, "created tenant "+args[0])
	})
	update := leaf("update TENANT", "Replace a tenant's admin roles and allowed clusters", 1, func(cmd *cobra.Command, args []string) error {
		p, err := tenantPath(args[0])
		if err != nil {
			return err
		}
		if err := a.do(cmd.Context(), "POST", "/admin/v2/tenants/"+p, info(), nil); err != nil {
			return err
		}
		return a.done(cmd, "updated tenant "+args[0])
	})
	for _, sub := range []*cobra.Command{create, update} {
		sub.Flags().StringSliceVar(&roles, "admin-roles", nil, "admin roles (comma-separated)")
		sub.Flags().StringSliceVar(&clusters, "allowed-clusters", nil, "allowed clusters (default: the broker's)")
	}
	c.AddCommand(
		leaf("list", "List tenants", 0, func(cmd *cobra.Command, _ []string) error {
			var ts []string
			if err := a.do(cmd.Context(), "GET", "/admin/v2/tenants", nil, &ts); err != nil {
				return err
			}
			return a.showList(cmd, ts)
		}),
		leaf("get TENANT", "Show a tenant", 1, func(cmd *cobra.Command, args []string) error {
			p, err := tenantPath(args[0])
			if err != nil {
				return err
			}
			var v any
			if err := a.do(cmd.Context(), "GET", "/admin/v2/tenants/"+p, nil, &v); err != nil {
				return err
			}
			return a.show(cmd, v)
		}),
		create, update,
		leaf("delete TENANT", "Delete a tenant without namespaces", 1, func(cmd *cobra.Command, args []string) error {
			p, err := tenantPath(args[0])
			if err != nil {
				return err
			}
			if err := a.do(cmd.Context(), "DELETE", "/admin/v2/tenants/"+p, nil, nil); err != nil {
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
		p, err := namespacePath(args[0])
		if err != nil {
			return err
		}
		if err := a.do(cmd.Context(), "DELETE", "/admin/v2/namespaces/"+p+"?force="+strconv.FormatBool(force), nil, nil); err != nil {
			return err
		}
		return a.done(cmd, "deleted namespace "+args[0])
	})
	del.Flags().BoolVar(&force, "force", false, "delete the namespace's topics too")
	var bundles int
	create := leaf("create TENANT/NAMESPACE", "Create a namespace (--bundles: its bundle count)", 1, func(cmd *cobra.Command, args []string) error {
		p, err := namespacePath(args[0])
		if err != nil {
			return err
		}
		var body any
		if bundles > 0 {
			body = map[string]any{"bundles": map[string]int{"numBundles": bundles}}
		}
		if err := a.do(cmd.Context(), "PUT", "/admin/v2/namespaces/"+p, body, nil); err != nil {
			return err
		}
		return a.done(cmd, "created namespace "+args[0])
	})
	create.Flags().IntVar(&bundles, "bundles", 0, "number of bundles (default: the broker's defaultNumberOfNamespaceBundles)")
	c.AddCommand(
		leaf("list TENANT", "List a tenant's namespaces", 1, func(cmd *cobra.Command, args []string) error {
			p, err := tenantPath(args[0])
			if err != nil {
				return err
			}
			var nss []string
			if err := a.do(cmd.Context(), "GET", "/admin/v2/namespaces/"+p, nil, &nss); err != nil {
				return err
			}
			return a.showList(cmd, nss)
		}),
		leaf("get TENANT/NAMESPACE", "Show a namespace's policies", 1, func(cmd *cobra.Command, args []string) error {
			p, err := namespacePath(args[0])
			if err != nil {
				return err
			}
			var v any
			if err := a.do(cmd.Context(), "GET", "/admin/v2/namespaces/"+p, nil, &v); err != nil {
				return err
			}
			return a.show(cmd, v)
		}),
		create,
		del,
		leaf("topics TENANT/NAMESPACE", "List a namespace's topics", 1, func(cmd *cobra.Command, args []string) error {
			p, err := namespacePath(args[0])
			if err != nil {
				return err
			}
			var ts []string
			if err := a.do(cmd.Context(), "GET", "/admin/v2/namespaces/"+p+"/topics", nil, &ts); err != nil {
				return err
			}
			return a.showList(cmd, ts)
		}),
	)
	c.AddCommand(permissionCmds(a, "namespace", namespacePermPath)...)
	c.AddCommand(namespaceBundleCmds(a)...)   // admin_cluster.go
	c.AddCommand(policyCommands(a, false)...) // admin_policies.go
	return c
}

func newAdminTopicsCmd(a *adminClient) *cobra.Command {
	c := group("topics", "Create, delete, list, inspect, unload and terminate topics")
	// get builds "NAME TOPIC" commands that show what one REST path answers.
	get := func(use, short, suffix string) *cobra.Command {
		return leaf(use+" TOPIC", short, 1, func(cmd *cobra.Command, args []string) error {
			p, _, err := topicPath(args[0])
			if err != nil {
				return err
			}
			var v any
			if err := a.do(cmd.Context(), "GET", "/admin/v2/"+p+suffix, nil, &v); err != nil {
				return err
			}
			return a.show(cmd, v)
		})
	}
	var force bool
	var partitions int
	var perPartition bool
	del := leaf("delete TOPIC", "Delete a non-partitioned topic", 1, func(cmd *cobra.Command, args []string) error {
		p, _, err := topicPath(args[0])
		if err != nil {
			return err
		}
		if err := a.do(cmd.Context(), "DELETE", "/admin/v2/"+p+"?force="+strconv.FormatBool(force), nil, nil); err != nil {
			return err
		}
		return a.done(cmd, "deleted topic "+args[0])
	})
	del.Flags().BoolVar(&force, "force", false, "disconnect producers and consumers")
	delPart := leaf("delete-partitioned-topic TOPIC", "Delete a partitioned topic and its partitions", 1, func(cmd *cobra.Command, args []string) error {
		p, _, err := topicPath(args[0])
		if err != nil {
			return err
		}
		if err := a.do(cmd.Context(), "DELETE", "/admin/v2/"+p+"/partitions?force="+strconv.FormatBool(force), nil, nil); err != nil {
			return err
		}
		return a.done(cmd, "deleted partitioned topic "+args[0])
	})
	delPart.Flags().BoolVar(&force, "force", false, "disconnect producers and consumers")
	partitioned := func(use, short, method, verb string) *cobra.Command {
		cmd := leaf(use+" TOPIC", short, 1, func(cmd *cobra.Command, args []string) error {
			p, n, err := topicPath(args[0])
			if err != nil {
				return err
			}
			if partitions < 1 {
				return usageError{fmt.Errorf("-p/--partitions must be at least 1")}
			}
			if n.IsPartition() {
				return usageError{fmt.Errorf("%s is a partition name", args[0])}
			}
			if err := a.do(cmd.Context(), method, "/admin/v2/"+p+"/partitions", partitions, nil); err != nil {
				return err
			}
			return a.done(cmd, fmt.Sprintf("%s partitioned topic %s with %d partitions", verb, args[0], partitions))
		})
		cmd.Flags().IntVarP(&partitions, "partitions", "p", 0, "number of partitions")
		_ = cmd.MarkFlagRequired("partitions")
		return cmd
	}
	pstats := leaf("partitioned-stats TOPIC", "Show a partitioned topic's stats, summed over its partitions", 1, func(cmd *cobra.Command, args []string) error {
		p, _, err := topicPath(args[0])
		if err != nil {
			return err
		}
		var v any
		if err := a.do(cmd.Context(), "GET", "/admin/v2/"+p+"/partitioned-stats?perPartition="+strconv.FormatBool(perPartition), nil, &v); err != nil {
			return err
		}
		return a.show(cmd, v)
	})
	pstats.Flags().BoolVar(&perPartition, "per-partition", false, "include each partition's stats")
	c.AddCommand(
		leaf("list TENANT/NAMESPACE", "List a namespace's topics (partitions included)", 1, func(cmd *cobra.Command, args []string) error {
			p, err := namespacePath(args[0])
			if err != nil {
				return err
			}
			var ts []string
			if err := a.do(cmd.Context(), "GET", "/admin/v2/persistent/"+p, nil, &ts); err != nil {
				return err
			}
			return a.showList(cmd, ts)
		}),
		leaf("list-partitioned-topics TENANT/NAMESPACE", "List a namespace's partitioned topics", 1, func(cmd *cobra.Command, args []string) error {
			p, err := namespacePath(args[0])
			if err != nil {
				return err
			}
			var ts []string
			if err := a.do(cmd.Context(), "GET", "/admin/v2/persistent/"+p+"/partitioned", nil, &ts); err != nil {
				return err
			}
			return a.showList(cmd, ts)
		}),
		leaf("create TOPIC", "Create a non-partitioned topic", 1, func(cmd *cobra.Command, args []string) error {
			p, _, err := topicPath(args[0])
			if err != nil {
				return err
			}
			if err := a.do(cmd.Context(), "PUT", "/admin/v2/"+p, nil, nil); err != nil {
				return err
			}
			return a.done(cmd, "created topic "+args[0])
		}),
		del,
		partitioned("create-partitioned-topic", "Create a partitioned topic", "PUT", "created"),
		partitioned("update-partitioned-topic", "Grow a partitioned topic", "POST", "updated"),
		delPart,
		get("get-partitioned-topic-metadata", "Show a topic's partition count (0: not partitioned)", "/partitions"),
		get("stats", "Show a topic's stats (a partitioned topic's summed over its partitions)", "/stats"),
		pstats,
		get("internal-stats", "Show a topic's managed-ledger stats", "/internalStats"),
		get("last-message-id", "Show the id of a topic's last message", "/lastMessageId"),
		leaf("lookup TOPIC", "Show the broker that serves a topic", 1, func(cmd *cobra.Command, args []string) error {
			p, _, err := topicPath(args[0])
			if err != nil {
				return err
			}
			var v any
			if err := a.do(cmd.Context(), "GET", "/lookup/v2/topic/"+p, nil, &v); err != nil {
				return err
			}
			return a.show(cmd, v)
		}),
		leaf("unload TOPIC", "Unload a topic (its clients reconnect)", 1, func(cmd *cobra.Command, args []string) error {
			p, _, err := topicPath(args[0])
			if err != nil {
				return err
			}
			if err := a.do(cmd.Context(), "PUT", "/admin/v2/"+p+"/unload", nil, nil); err != nil {
				return err
			}
			return a.done(cmd, "unloaded topic "+args[0])
		}),
		leaf("terminate TOPIC", "Terminate a topic: no more messages are accepted", 1, func(cmd *cobra.Command, args []string) error {
			p, _, err := topicPath(args[0])
			if err != nil {
				return err
			}
			var id any
			if err := a.do(cmd.Context(), "POST", "/admin/v2/"+p+"/terminate", nil, &id); err != nil {
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
	c.AddCommand(permissionCmds(a, "topic", topicPermPath)...)
	c.AddCommand(topicBundleCmd(a))          // admin_cluster.go
	c.AddCommand(policyCommands(a, true)...) // admin_policies.go
	return c
}

func newAdminSubscriptionsCmd(a *adminClient) *cobra.Command {
	c := group("subscriptions", "List, create, delete, reset and skip subscriptions")
	var sub, messageID, at string
	var force bool
	var n int
	needSub := func() error {
		if sub == "" {
			return usageError{errors.New("-s/--subscription is required")}
		}
		return nil
	}
	subPath := func(topic string) (string, error) {
		if err := needSub(); err != nil {
			return "", err
		}
		p, _, err := topicPath(topic)
		if err != nil {
			return "", err
		}
		return "/admin/v2/" + p + "/subscription/" + url.PathEscape(sub), nil
	}
	create := leaf("create TOPIC", "Create a durable subscription", 1, func(cmd *cobra.Command, args []string) error {
		p, err := subPath(args[0])
		if err != nil {
			return err
		}
		id, err := parseMessageID(messageID)
		if err != nil {
			return err
		}
		if err := a.do(cmd.Context(), "PUT", p, id, nil); err != nil {
			return err
		}
		return a.done(cmd, fmt.Sprintf("created subscription %s on %s", sub, args[0]))
	})
	create.Flags().StringVarP(&messageID, "message-id", "m", "latest", "start position: earliest, latest or LEDGER:ENTRY[:BATCH]")
	del := leaf("delete TOPIC", "Delete a subscription", 1, func(cmd *cobra.Command, args []string) error {
		p, err := subPath(args[0])
		if err != nil {
			return err
		}
		if err := a.do(cmd.Context(), "DELETE", p+"?force="+strconv.FormatBool(force), nil, nil); err != nil {
			return err
		}
		return a.done(cmd, fmt.Sprintf("deleted subscription %s on %s", sub, args[0]))
	})
	del.Flags().BoolVar(&force, "force", false, "disconnect its consumers")
	reset := leaf("reset-cursor TOPIC", "Move a subscription to a time or a message id", 1, func(cmd *cobra.Command, args []string) error {
		p, err := subPath(args[0])
		if err != nil {
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
			err = a.do(cmd.Context(), "POST", p+"/resetcursor/"+strconv.FormatInt(ts.UnixMilli(), 10), nil, nil)
			if err != nil {
				return err
			}
		default:
			id, err := parseMessageID(messageID)
			if err != nil {
				return err
			}
			if err := a.do(cmd.Context(), "POST", p+"/resetcursor", id, nil); err != nil {
				return err
			}
		}
		return a.done(cmd, fmt.Sprintf("reset subscription %s on %s", sub, args[0]))
	})
	reset.Flags().StringVarP(&at, "time", "t", "", "a time (RFC 3339) or a duration ago (e.g. 10m)")
	reset.Flags().StringVarP(&messageID, "message-id", "m", "", "earliest, latest or LEDGER:ENTRY[:BATCH]")
	skip := leaf("skip TOPIC", "Skip (acknowledge) the next N entries of a subscription", 1, func(cmd *cobra.Command, args []string) error {
		p, err := subPath(args[0])
		if err != nil {
			return err
		}
		if n < 0 {
			return usageError{fmt.Errorf("-n must not be negative")}
		}
		if err := a.do(cmd.Context(), "POST", p+"/skip/"+strconv.Itoa(n), nil, nil); err != nil {
			return err
		}
		return a.done(cmd, fmt.Sprintf("skipped %d entries of subscription %s on %s", n, sub, args[0]))
	})
	skip.Flags().IntVarP(&n, "count", "n", 0, "number of entries to skip")
	_ = skip.MarkFlagRequired("count")
	clear := leaf("clear-backlog TOPIC", "Acknowledge a subscription's whole backlog", 1, func(cmd *cobra.Command, args []string) error {
		p, err := subPath(args[0])
		if err != nil {
			return err
		}
		if err := a.do(cmd.Context(), "POST", p+"/skip_all", nil, nil); err != nil {
			return err
		}
		return a.done(cmd, fmt.Sprintf("cleared the backlog of subscription %s on %s", sub, args[0]))
	})
	list := leaf("list TOPIC", "List a topic's subscriptions", 1, func(cmd *cobra.Command, args []string) error {
		p, _, err := topicPath(args[0])
		if err != nil {
			return err
		}
		var subs []string
		if err := a.do(cmd.Context(), "GET", "/admin/v2/"+p+"/subscriptions", nil, &subs); err != nil {
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
