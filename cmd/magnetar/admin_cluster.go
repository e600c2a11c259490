package main

import (
	"errors"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
)

// The admin commands of a cluster of brokers: brokers, clusters and namespace bundles
// (Pulsar's /admin/v2/brokers, /admin/v2/clusters and /admin/v2/namespaces/{ns}/{bundle}).

// getJSON builds a command with n arguments that shows what GET path(args) answers.
func (a *adminClient) getJSON(use, short string, n int, path func(args []string) (string, error)) *cobra.Command {
	return leaf(use, short, n, func(cmd *cobra.Command, args []string) error {
		p, err := path(args)
		if err != nil {
			return err
		}
		var v any
		if err := a.do(cmd.Context(), "GET", p, nil, &v); err != nil {
			return err
		}
		return a.show(cmd, v)
	})
}

func newAdminBrokersCmd(a *adminClient) *cobra.Command {
	c := group("brokers", "List the live brokers, show the leader, check health, list a broker's bundles")
	c.AddCommand(
		a.getJSON("list [CLUSTER]", "List the live brokers (of CLUSTER)", -1, func(args []string) (string, error) {
			if len(args) > 0 {
				return "/admin/v2/brokers/" + url.PathEscape(args[0]), nil
			}
			return "/admin/v2/brokers", nil
		}),
		a.getJSON("leader", "Show the load manager's leader broker", 0, func([]string) (string, error) {
			return "/admin/v2/brokers/leaderBroker", nil
		}),
		leaf("health", "Check the broker's health (its metadata session and store)", 0, func(cmd *cobra.Command, _ []string) error {
			if _, _, err := a.send(cmd.Context(), "GET", "/admin/v2/brokers/health", nil); err != nil {
				return err
			}
			return a.done(cmd, "ok")
		}),
		a.getJSON("owned-namespaces CLUSTER BROKER", "List the bundles a broker owns", 2, func(args []string) (string, error) {
			return "/admin/v2/brokers/" + url.PathEscape(args[0]) + "/" + url.PathEscape(args[1]) + "/ownedNamespaces", nil
		}),
	)
	for _, sub := range c.Commands() {
		if strings.HasPrefix(sub.Use, "list") {
			sub.Args = cobra.MaximumNArgs(1)
		}
	}
	return c
}

func newAdminClustersCmd(a *adminClient) *cobra.Command {
	c := group("clusters", "List clusters and show a cluster's record")
	c.AddCommand(
		a.getJSON("list", "List the clusters", 0, func([]string) (string, error) { return "/admin/v2/clusters", nil }),
		a.getJSON("get CLUSTER", "Show a cluster's service URLs", 1, func(args []string) (string, error) {
			return "/admin/v2/clusters/" + url.PathEscape(args[0]), nil
		}),
	)
	return c
}

// namespaceBundleCmds are the bundle commands of "admin namespaces".
func namespaceBundleCmds(a *adminClient) []*cobra.Command {
	var bundle, dest, algo string
	var unloadHalves bool
	unload := leaf("unload TENANT/NAMESPACE", "Unload a namespace, or one bundle of it (--bundle; --destination-broker hands it over)", 1,
		func(cmd *cobra.Command, args []string) error {
			p, err := namespacePath(args[0])
			if err != nil {
				return err
			}
			path := "/admin/v2/namespaces/" + p + "/unload"
			if bundle != "" {
				path = "/admin/v2/namespaces/" + p + "/" + url.PathEscape(bundle) + "/unload"
				if dest != "" {
					path += "?destinationBroker=" + url.QueryEscape(dest)
				}
			} else if dest != "" {
				return usageError{errors.New("--destination-broker needs --bundle")}
			}
			if err := a.do(cmd.Context(), "PUT", path, nil, nil); err != nil {
				return err
			}
			return a.done(cmd, "unloaded "+strings.TrimSuffix(args[0]+"/"+bundle, "/"))
		})
	unload.Flags().StringVar(&bundle, "bundle", "", "bundle range, e.g. 0x00000000_0x40000000")
	unload.Flags().StringVar(&dest, "destination-broker", "", "broker id (or URL) to hand the bundle over to")
	split := leaf("split-bundle TENANT/NAMESPACE", "Split a bundle in two (--bundle)", 1, func(cmd *cobra.Command, args []string) error {
		p, err := namespacePath(args[0])
		if err != nil {
			return err
		}
		if bundle == "" {
			return usageError{errors.New("--bundle is required")}
		}
		q := url.Values{}
		if unloadHalves {
			q.Set("unload", "true")
		}
		if algo != "" {
			q.Set("splitAlgorithmName", algo)
		}
		if err := a.do(cmd.Context(), "PUT", "/admin/v2/namespaces/"+p+"/"+url.PathEscape(bundle)+"/split?"+q.Encode(), nil, nil); err != nil {
			return err
		}
		return a.done(cmd, "split "+args[0]+"/"+bundle)
	})
	split.Flags().StringVar(&bundle, "bundle", "", "bundle range, e.g. 0x00000000_0x40000000")
	split.Flags().BoolVar(&unloadHalves, "unload", false, "unload the two halves after the split")
	split.Flags().StringVar(&algo, "split-algorithm-name", "", "split algorithm (range_equally_divide)")
	return []*cobra.Command{
		a.getJSON("bundles TENANT/NAMESPACE", "Show a namespace's bundles", 1, func(args []string) (string, error) {
			p, err := namespacePath(args[0])
			return "/admin/v2/namespaces/" + p + "/bundles", err
		}),
		unload, split,
	}
}

// topicBundleCmd is "admin topics bundle TOPIC": the bundle range a topic belongs to.
func topicBundleCmd(a *adminClient) *cobra.Command {
	return leaf("bundle TOPIC", "Show the bundle range a topic belongs to", 1, func(cmd *cobra.Command, args []string) error {
		p, _, err := topicPath(args[0])
		if err != nil {
			return err
		}
		_, b, err := a.send(cmd.Context(), "GET", "/lookup/v2/topic/"+p+"/bundle", nil)
		if err != nil {
			return err
		}
		if a.out.json() {
			return printJSON(cmd.OutOrStdout(), map[string]string{"bundle": string(b)})
		}
		cmd.Println(string(b))
		return nil
	})
}
