package replhost

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/magnetar-io/magnetar/adminclient"
	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// A partitioned topic replicates partition by partition: the replicator of partition i
// publishes to partition i of the same topic on the remote cluster, so before its producer
// connects the remote's partitioned metadata must have the same partition count. As
// Pulsar's GeoPersistentReplicator.prepareCreateProducer does (with its default
// createTopicToRemoteClusterForReplication=true), through the remote cluster's admin API:
// a remote without the partitioned topic gets it created with the local count; a remote
// whose count differs is refused (ErrPartitionsMismatch: the connect fails, is logged and
// retried with the backoff, and the backlog grows) rather than replicated into the wrong
// partitions or into a non-partitioned topic of the partition's name. Clusters sharing a
// configuration store share the partitioned metadata, so the check always passes there.
//
// Unlike Pulsar, a non-partitioned topic is not created on the remote through its admin
// API: the replicator's producer creates it there (as every version of Magnetar did).

// ErrPartitionsMismatch: the remote cluster's partitioned metadata of the topic does not
// match the local one; the replicator does not connect.
var ErrPartitionsMismatch = errors.New("replhost: partitioned topic mismatch between clusters")

// RemoteAdmin is what a replicator needs of a remote cluster's admin API (Pulsar's
// replicationAdmin): a topic's partitioned metadata, read and created.
type RemoteAdmin interface {
	// Partitions returns the partition count of topic there (0: not partitioned, or no
	// such topic).
	Partitions(ctx context.Context, topic string) (int, error)
	// CreatePartitioned creates topic with n partitions (nil if it exists already).
	CreatePartitioned(ctx context.Context, topic string, n int) error
}

// checkRemotePartitions makes sure partition topic of a partitioned topic with local
// partitions exists as a partition on the remote cluster (admin), creating the
// partitioned topic there if it has none.
func checkRemotePartitions(ctx context.Context, n topicname.Name, local int, admin RemoteAdmin) error {
	base := n.Base().String()
	remote, err := admin.Partitions(ctx, base)
	if err != nil {
		return fmt.Errorf("partitioned metadata of %s on the remote cluster: %w", base, err)
	}
	switch {
	case remote == local:
		return nil
	case remote != 0:
		return fmt.Errorf("%w: the number of partitions of %s is %d here and %d on the remote cluster", ErrPartitionsMismatch,
			base, local, remote)
	}
	if err := admin.CreatePartitioned(ctx, base, local); err != nil {
		return fmt.Errorf("create partitioned topic %s (%d partitions) on the remote cluster: %w", base, local, err)
	}
	if remote, err = admin.Partitions(ctx, base); err != nil {
		return fmt.Errorf("partitioned metadata of %s on the remote cluster: %w", base, err)
	}
	if n.Partition >= remote {
		// The name exists there as a non-partitioned topic, or was created meanwhile with
		// fewer partitions.
		return fmt.Errorf("%w: %s has %d partitions here and %d on the remote cluster", ErrPartitionsMismatch, base, local, remote)
	}
	if remote != local {
		return fmt.Errorf("%w: the number of partitions of %s is %d here and %d on the remote cluster", ErrPartitionsMismatch,
			base, local, remote)
	}
	return nil
}

// adminClient is a RemoteAdmin over package adminclient.
type adminClient struct{ c *adminclient.Client }

func (a *adminClient) Partitions(ctx context.Context, topic string) (int, error) {
	var md api.PartitionedTopicMetadata
	err := a.c.PartitionedTopicMetadata(ctx, topic, &md)
	if adminclient.IsNotFound(err) {
		return 0, nil
	}
	return md.Partitions, err
}

func (a *adminClient) CreatePartitioned(ctx context.Context, topic string, n int) error {
	err := a.c.CreatePartitionedTopic(ctx, topic, n)
	if adminclient.StatusOf(err) == http.StatusConflict {
		return nil // it exists (partitioned or not): the caller reads the metadata again
	}
	return err
}

// newAdminClient builds the admin client of a cluster from its record.
func newAdminClient(cd api.ClusterData) (*adminClient, error) {
	url := cd.ServiceURL
	if cd.BrokerClientTLSEnabled && cd.ServiceURLTLS != "" {
		url = cd.ServiceURLTLS
	}
	if url == "" {
		return nil, errors.New("the cluster record has no service URL (serviceUrl: the admin API, needed to check or create a partitioned topic there)")
	}
	opts := adminclient.Options{URLs: []string{url}}
	if strings.HasPrefix(url, "https://") {
		tc, err := clusterTLS(cd)
		if err != nil {
			return nil, err
		}
		opts.TLS = tc
	}
	a, err := clusterAuth(cd.AuthenticationPlugin, cd.AuthenticationParameters)
	if err != nil {
		return nil, err
	}
	if a != nil {
		data := a.Data
		switch a.Method {
		case auth.MethodToken:
			opts.Auth = adminclient.TokenAuth(data)
		case auth.MethodBasic:
			opts.Auth = func(context.Context) (string, error) {
				b, err := data()
				if err != nil {
					return "", err
				}
				return "Basic " + base64.StdEncoding.EncodeToString(b), nil
			}
		}
	}
	c, err := adminclient.New(opts)
	if err != nil {
		return nil, err
	}
	return &adminClient{c: c}, nil
}
