package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/broker"
)

func init() { register(newInitClusterCmd) }

// newInitClusterCmd is `magnetar initialize-cluster-metadata`, as Pulsar's: the cluster
// record with its service URLs, tenants public and pulsar, namespaces public/default and
// pulsar/system, in the configuration store (--configuration-metadata-store, Pulsar's
// name; the deprecated --configuration-store too), which is the metadata store
// (--metadata-url) unless given. It is idempotent: records that exist are kept (the
// cluster is added to the existing tenants' allowed clusters, see
// resources.InitializeCluster).
func newInitClusterCmd() *cobra.Command {
	var metaURL, confURL, cluster string
	var cd broker.ClusterData
	c := &cobra.Command{
		Use:   "initialize-cluster-metadata",
		Short: "Write a cluster's record and its default tenants and namespaces to the metadata store",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cluster == "" {
				return usageError{errors.New("--cluster is required")}
			}
			if cd.BrokerServiceURL == "" && cd.BrokerServiceURLTLS == "" {
				return usageError{errors.New("give --broker-service-url or --broker-service-url-tls")}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			// Every record written lives in the configuration store: the local store is
			// opened only when it is that store too.
			url, flag := metaURL, "--metadata-url"
			if confURL != "" {
				url, flag = confURL, "--configuration-metadata-store"
			}
			store, err := openStoreFlag(ctx, flag, url)
			if err != nil {
				return err
			}
			defer store.Close()
			created, err := broker.InitializeCluster(ctx, store, cluster, cd)
			if err != nil {
				return err
			}
			if created {
				fmt.Fprintf(cmd.OutOrStdout(), "cluster %s initialized\n", cluster)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "cluster %s exists: record kept, missing defaults created\n", cluster)
			}
			return nil
		},
	}
	f := c.Flags()
	addMetadataFlag(c, &metaURL)
	aliasFlag(f, "metadata-store", "metadata-url") // Pulsar's name
	f.StringVar(&confURL, "configuration-metadata-store", "",
		"configuration store shared between clusters, etcd://host:port[,host:port...] (default: the metadata store)")
	aliasFlag(f, "configuration-store", "configuration-metadata-store") // Pulsar's deprecated name
	f.StringVar(&cluster, "cluster", "", "cluster name")
	f.StringVar(&cd.ServiceURL, "web-service-url", "", "http:// admin URL of the cluster")
	f.StringVar(&cd.ServiceURLTLS, "web-service-url-tls", "", "https:// admin URL of the cluster")
	f.StringVar(&cd.BrokerServiceURL, "broker-service-url", "", "pulsar:// URL of the cluster")
	f.StringVar(&cd.BrokerServiceURLTLS, "broker-service-url-tls", "", "pulsar+ssl:// URL of the cluster")
	return c
}
