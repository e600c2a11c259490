package main

import (
	"context"
	"errors"
	"strings"

	"github.com/spf13/cobra"
)

// The admin commands of a cluster of brokers: brokers and namespace bundles (Pulsar's
// brokers and namespace bundle resources; package adminclient). The clusters commands are
// in admin_replication.go.

// getJSON builds a command with n arguments that shows what read(args) answers.
func (a *adminClient) getJSON(use, short string, n int, read func(ctx context.Context, args []string, out any) error) *cobra.Command {
	return leaf(use, short, n, func(cmd *cobra.Command, args []string) error {
		var v any
		if err := read(cmd.Context(), args, &v); err != nil {
			return err
		}
		return a.show(cmd, v)
	})
}

func newAdminBrokersCmd(a *adminClient) *cobra.Command {
	c := group("brokers", "List the live brokers, show the leader, check health, list a broker's bundles")
	c.AddCommand(
		a.getJSON("list [CLUSTER]", "List the live brokers (of CLUSTER)", -1, func(ctx context.Context, args []string, out any) error {
			cluster := ""
			if len(args) > 0 {
				cluster = args[0]
			}
			return a.c.Brokers(ctx, cluster, out)
		}),
		a.getJSON("leader", "Show the load manager's leader broker", 0, func(ctx context.Context, _ []string, out any) error {
			return a.c.LeaderBroker(ctx, out)
		}),
		leaf("health", "Check the broker's health (its metadata session and store)", 0, func(cmd *cobra.Command, _ []string) error {
			if err := a.c.Health(cmd.Context()); err != nil {
				return err
			}
			return a.done(cmd, "ok")
		}),
		a.getJSON("owned-namespaces CLUSTER BROKER", "List the bundles a broker owns", 2, func(ctx context.Context, args []string, out any) error {
			return a.c.OwnedNamespaces(ctx, args[0], args[1], out)
		}),
	)
	for _, sub := range c.Commands() {
		if strings.HasPrefix(sub.Use, "list") {
			sub.Args = cobra.MaximumNArgs(1)
		}
	}
	return c
}

// namespaceBundleCmds are the bundle commands of "admin namespaces".
func namespaceBundleCmds(a *adminClient) []*cobra.Command {
	var bundle, dest, algo string
	var unloadHalves bool
	unload := leaf("unload TENANT/NAMESPACE", "Unload a namespace, or one bundle of it (--bundle; --destination-broker hands it over)", 1,
		func(cmd *cobra.Command, args []string) error {
			if err := checkNamespace(args[0]); err != nil {
				return err
			}
			var err error
			if bundle != "" {
				err = a.c.UnloadBundle(cmd.Context(), args[0], bundle, dest)
			} else if dest != "" {
				return usageError{errors.New("--destination-broker needs --bundle")}
			} else {
				err = a.c.UnloadNamespace(cmd.Context(), args[0])
			}
			if err != nil {
				return err
			}
			return a.done(cmd, "unloaded "+strings.TrimSuffix(args[0]+"/"+bundle, "/"))
		})
	unload.Flags().StringVar(&bundle, "bundle", "", "bundle range, e.g. 0x00000000_0x40000000")
	unload.Flags().StringVar(&dest, "destination-broker", "", "broker id (or URL) to hand the bundle over to")
	split := leaf("split-bundle TENANT/NAMESPACE", "Split a bundle in two (--bundle)", 1, func(cmd *cobra.Command, args []string) error {
		if err := checkNamespace(args[0]); err != nil {
			return err
		}
		if bundle == "" {
			return usageError{errors.New("--bundle is required")}
		}
		if err := a.c.SplitBundle(cmd.Context(), args[0], bundle, unloadHalves, algo); err != nil {
			return err
		}
		return a.done(cmd, "split "+args[0]+"/"+bundle)
	})
	split.Flags().StringVar(&bundle, "bundle", "", "bundle range, e.g. 0x00000000_0x40000000")
	split.Flags().BoolVar(&unloadHalves, "unload", false, "unload the two halves after the split")
	split.Flags().StringVar(&algo, "split-algorithm-name", "", "split algorithm (range_equally_divide)")
	return []*cobra.Command{
		a.getJSON("bundles TENANT/NAMESPACE", "Show a namespace's bundles", 1, func(ctx context.Context, args []string, out any) error {
			if err := checkNamespace(args[0]); err != nil {
				return err
			}
			return a.c.Bundles(ctx, args[0], out)
		}),
		unload, split,
	}
}

// topicBundleCmd is "admin topics bundle TOPIC": the bundle range a topic belongs to.
func topicBundleCmd(a *adminClient) *cobra.Command {
	return leaf("bundle TOPIC", "Show the bundle range a topic belongs to", 1, func(cmd *cobra.Command, args []string) error {
		if _, err := checkTopic(args[0]); err != nil {
			return err
		}
		b, err := a.c.TopicBundle(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		if a.out.json() {
			return printJSON(cmd.OutOrStdout(), map[string]string{"bundle": b})
		}
		cmd.Println(b)
		return nil
	})
}
