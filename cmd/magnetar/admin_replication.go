package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/config"
)

// The cluster records and replication clusters commands, with pulsar-admin's verbs and
// flags: clusters create|update|delete, namespaces set-clusters|get-clusters, topics
// set-|get-|remove-replication-clusters.

// ownFlagsAnnotation marks a command whose own flags --url, --auth-plugin and
// --tls-allow-insecure describe the cluster record (pulsar-admin's names) and so hide the
// admin commands' ones: its broker is --admin-url, its credentials --config's.
const ownFlagsAnnotation = "magnetar/record-flags"

// clusterFlags are pulsar-admin's clusters create|update flags.
type clusterFlags struct {
	cd api.ClusterData
}

func (f *clusterFlags) add(fs *pflag.FlagSet) {
	cd := &f.cd
	fs.StringVar(&cd.ServiceURL, "url", "", "the cluster's admin URL, http://host:8080 (serviceUrl)")
	fs.StringVar(&cd.ServiceURLTLS, "url-secure", "", "the cluster's admin URL over TLS, https://host:8443 (serviceUrlTls)")
	fs.StringVar(&cd.BrokerServiceURL, "broker-url", "", "the cluster's binary URL, pulsar://host:6650 (brokerServiceUrl)")
	fs.StringVar(&cd.BrokerServiceURLTLS, "broker-url-secure", "", "the cluster's binary URL over TLS, pulsar+ssl://host:6651 (brokerServiceUrlTls)")
	fs.StringVar(&cd.ProxyServiceURL, "proxy-url", "", "reach the cluster through this proxy (proxyServiceUrl)")
	fs.StringVar(&cd.ProxyProtocol, "proxy-protocol", "", "the proxy's routing: SNI (proxyProtocol)")
	fs.StringVar(&cd.AuthenticationPlugin, "auth-plugin", "", "authentication a broker uses toward the cluster (authenticationPlugin)")
	fs.StringVar(&cd.AuthenticationParameters, "auth-parameters", "", "its parameters, a secret (authenticationParameters)")
	fs.BoolVar(&cd.BrokerClientTLSEnabled, "tls-enable", false, "use the TLS URLs toward the cluster (brokerClientTlsEnabled)")
	fs.BoolVar(&cd.TLSAllowInsecureConnection, "tls-allow-insecure", false, "accept any certificate from the cluster (tlsAllowInsecureConnection)")
	fs.BoolVar(&cd.BrokerClientTLSEnabledWithKeyStore, "tls-enable-keystore", false, "use Java key stores (brokerClientTlsEnabledWithKeyStore)")
	fs.StringVar(&cd.BrokerClientTLSTrustStoreType, "tls-trust-store-type", "", "trust store type: JKS, PKCS12")
	fs.StringVar(&cd.BrokerClientTLSTrustStore, "tls-trust-store", "", "trust store path")
	fs.StringVar(&cd.BrokerClientTLSTrustStorePassword, "tls-trust-store-pwd", "", "trust store password")
	fs.StringVar(&cd.BrokerClientTLSKeyStoreType, "tls-key-store-type", "", "key store type: JKS, PKCS12")
	fs.StringVar(&cd.BrokerClientTLSKeyStore, "tls-key-store", "", "key store path")
	fs.StringVar(&cd.BrokerClientTLSKeyStorePassword, "tls-key-store-pwd", "", "key store password")
	fs.StringVar(&cd.BrokerClientTrustCertsFilePath, "tls-trust-certs-filepath", "", "PEM CA bundle the cluster's certificates chain to")
	fs.StringVar(&cd.BrokerClientKeyFilePath, "tls-key-filepath", "", "PEM key of the client certificate used toward the cluster")
	fs.StringVar(&cd.BrokerClientCertificateFilePath, "tls-certs-filepath", "", "PEM client certificate used toward the cluster")
	fs.StringVar(&cd.ListenerName, "listener-name", "", "the cluster's advertised listener to use")
}

func newAdminClustersCmd(a *adminClient) *cobra.Command {
	c := group("clusters", "List, show, create, update and delete cluster records")
	var create, update clusterFlags
	write := func(use, short, verb string, f *clusterFlags, call func(*adminClient, *cobra.Command, string, api.ClusterData) error) *cobra.Command {
		cmd := leaf(use, short, 1, func(cmd *cobra.Command, args []string) error {
			if err := checkTenant(args[0]); err != nil { // cluster names follow the tenant rule
				return err
			}
			if err := call(a, cmd, args[0], f.cd); err != nil {
				return err
			}
			return a.done(cmd, verb+" cluster "+args[0])
		})
		f.add(cmd.Flags())
		cmd.Annotations = map[string]string{ownFlagsAnnotation: "true"}
		return cmd
	}
	var peers []string
	peerSet := leaf("update-peer-clusters CLUSTER", "Set a cluster's peer clusters (--peer-clusters a,b)", 1, func(cmd *cobra.Command, args []string) error {
		if err := checkTenant(args[0]); err != nil {
			return err
		}
		if err := a.c.SetPeerClusters(cmd.Context(), args[0], peers); err != nil {
			return err
		}
		return a.done(cmd, "updated the peer clusters of "+args[0])
	})
	peerSet.Flags().StringSliceVar(&peers, "peer-clusters", nil, "peer clusters (comma-separated; none: no peers)")
	c.AddCommand(
		leaf("list", "List the clusters", 0, func(cmd *cobra.Command, _ []string) error {
			var l []string
			if err := a.c.Clusters(cmd.Context(), &l); err != nil {
				return err
			}
			return a.showList(cmd, l)
		}),
		a.getJSON("get CLUSTER", "Show a cluster's record", 1, func(ctx context.Context, args []string, out any) error {
			return a.c.Cluster(ctx, args[0], out)
		}),
		write("create CLUSTER", "Create a cluster's record (superusers; the broker to ask is --admin-url)", "created", &create,
			func(a *adminClient, cmd *cobra.Command, name string, cd api.ClusterData) error {
				return a.c.CreateCluster(cmd.Context(), name, cd)
			}),
		write("update CLUSTER", "Replace a cluster's record (flags not given are cleared, as pulsar-admin's update)", "updated", &update,
			func(a *adminClient, cmd *cobra.Command, name string, cd api.ClusterData) error {
				return a.c.UpdateCluster(cmd.Context(), name, cd)
			}),
		peerSet,
		leaf("get-peer-clusters CLUSTER", "Show a cluster's peer clusters", 1, func(cmd *cobra.Command, args []string) error {
			if err := checkTenant(args[0]); err != nil {
				return err
			}
			l, err := a.c.PeerClusters(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.showList(cmd, l)
		}),
		leaf("delete CLUSTER", "Delete a cluster's record no tenant or namespace uses", 1, func(cmd *cobra.Command, args []string) error {
			if err := checkTenant(args[0]); err != nil {
				return err
			}
			if err := a.c.DeleteCluster(cmd.Context(), args[0]); err != nil {
				return err
			}
			return a.done(cmd, "deleted cluster "+args[0])
		}),
	)
	return c
}

// clusterList parses --clusters a,b (required, no blank names).
func clusterList(l []string) ([]string, error) {
	if len(l) == 0 {
		return nil, usageError{errors.New("--clusters is required")}
	}
	for _, c := range l {
		if strings.TrimSpace(c) == "" {
			return nil, usageError{errors.New("--clusters: a blank cluster name")}
		}
	}
	return l, nil
}

// namespaceReplicationCmds are "admin namespaces set-clusters|get-clusters".
func namespaceReplicationCmds(a *adminClient) []*cobra.Command {
	var clusters []string
	set := leaf("set-clusters TENANT/NAMESPACE", "Set a namespace's replication clusters (--clusters a,b; the local cluster among them)", 1,
		func(cmd *cobra.Command, args []string) error {
			if err := checkNamespace(args[0]); err != nil {
				return err
			}
			l, err := clusterList(clusters)
			if err != nil {
				return err
			}
			if err := a.c.SetNamespaceReplicationClusters(cmd.Context(), args[0], l); err != nil {
				return err
			}
			return a.done(cmd, "set the replication clusters of "+args[0])
		})
	set.Flags().StringSliceVarP(&clusters, "clusters", "c", nil, "replication clusters (comma-separated)")
	get := leaf("get-clusters TENANT/NAMESPACE", "Show a namespace's replication clusters", 1, func(cmd *cobra.Command, args []string) error {
		if err := checkNamespace(args[0]); err != nil {
			return err
		}
		l, err := a.c.NamespaceReplicationClusters(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		return a.showList(cmd, l)
	})
	return []*cobra.Command{set, get}
}

// topicReplicationCmds are "admin topics set-|get-|remove-replication-clusters".
func topicReplicationCmds(a *adminClient) []*cobra.Command {
	var clusters []string
	var applied bool
	set := leaf("set-replication-clusters TOPIC", "Set a topic's own replication clusters (--clusters a,b)", 1,
		func(cmd *cobra.Command, args []string) error {
			if _, err := checkTopic(args[0]); err != nil {
				return err
			}
			l, err := clusterList(clusters)
			if err != nil {
				return err
			}
			if err := a.c.SetTopicReplicationClusters(cmd.Context(), args[0], l); err != nil {
				return err
			}
			return a.done(cmd, "set the replication clusters of "+args[0])
		})
	set.Flags().StringSliceVarP(&clusters, "clusters", "c", nil, "replication clusters (comma-separated)")
	get := leaf("get-replication-clusters TOPIC", "Show a topic's own replication clusters (--applied: the ones in force)", 1,
		func(cmd *cobra.Command, args []string) error {
			if _, err := checkTopic(args[0]); err != nil {
				return err
			}
			l, err := a.c.TopicReplicationClusters(cmd.Context(), args[0], applied)
			if err != nil {
				return err
			}
			return a.showList(cmd, l)
		})
	get.Flags().BoolVar(&applied, "applied", false, "the clusters in force: the topic's, else its namespace's")
	remove := leaf("remove-replication-clusters TOPIC", "Remove a topic's own replication clusters (its namespace's apply)", 1,
		func(cmd *cobra.Command, args []string) error {
			if _, err := checkTopic(args[0]); err != nil {
				return err
			}
			if err := a.c.RemoveTopicReplicationClusters(cmd.Context(), args[0]); err != nil {
				return err
			}
			return a.done(cmd, "removed the replication clusters of "+args[0])
		})
	return []*cobra.Command{set, get, remove}
}

// applyConfigTo applies a client.conf-style file to fs (a flag set with the admin
// commands' persistent flags), as applyConfig does to a command's flags.
func applyConfigTo(fs *pflag.FlagSet, path string, keys []config.Key) error {
	if path == "" {
		return nil
	}
	es, err := config.Load(path)
	if err != nil {
		return usageError{fmt.Errorf("--config: %w", err)}
	}
	if _, err := config.Apply(fs, path, es, keys); err != nil {
		return usageError{err}
	}
	return nil
}
