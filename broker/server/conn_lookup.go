package server

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// Lookups and metadata: LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE, GET_SCHEMA and
// GET_OR_CREATE_SCHEMA, each on its own goroutine (they wait for the metadata store).

func (c *conn) handleLookup(cmd *pb.CommandLookupTopic) {
	rid := cmd.GetRequestId()
	ctx, cancel := c.ctx(30 * time.Second)
	defer cancel()
	c.s.m.Lookups.Inc()
	r, err := c.lookupAuthorized(ctx, cmd.GetTopic(), cmd.GetAuthoritative())
	if err == nil {
		// The URLs of the listener the client names (advertised_listener_name), else the
		// internal listener's.
		r.BrokerInfo, err = r.BrokerInfo.ForListener(cmd.GetAdvertisedListenerName())
	}
	resp := &pb.CommandLookupTopicResponse{RequestId: &rid}
	if err != nil {
		msg := err.Error()
		resp.Response = pb.CommandLookupTopicResponse_Failed.Enum()
		resp.Error, resp.Message = serverError(err).Enum(), &msg
	} else {
		// The owner answers Connect; any other broker redirects (authoritatively) to the
		// owner, or to the broker chosen for an unowned bundle, which then takes it.
		resp.Response = pb.CommandLookupTopicResponse_Connect.Enum()
		if !r.Self {
			resp.Response = pb.CommandLookupTopicResponse_Redirect.Enum()
		}
		resp.BrokerServiceUrl = &r.ServiceURL
		if r.ServiceURLTLS != "" {
			resp.BrokerServiceUrlTls = &r.ServiceURLTLS
		}
		resp.Authoritative = proto.Bool(!r.ToLeader) // to the leader: it chooses the owner
		resp.ProxyThroughServiceUrl = proto.Bool(false)
	}
	c.Send(pulsar.Wrap(resp))
}

func (c *conn) handlePartitionedMetadata(cmd *pb.CommandPartitionedTopicMetadata) {
	rid := cmd.GetRequestId()
	ctx, cancel := c.ctx(30 * time.Second)
	defer cancel()
	n, err := c.partitionsAuthorized(ctx, cmd.GetTopic())
	resp := &pb.CommandPartitionedTopicMetadataResponse{RequestId: &rid}
	if err != nil {
		msg := err.Error()
		resp.Response = pb.CommandPartitionedTopicMetadataResponse_Failed.Enum()
		resp.Error, resp.Message = serverError(err).Enum(), &msg
	} else {
		p := uint32(n)
		resp.Partitions = &p
		resp.Response = pb.CommandPartitionedTopicMetadataResponse_Success.Enum()
	}
	c.Send(pulsar.Wrap(resp))
}

// handleTopicsOfNamespace answers as Pulsar does. PERSISTENT mode (the one the Go client's
// pattern consumers use) lists the persistent topics stored under the namespace without
// looking the namespace up, so a namespace or tenant that does not exist has no topics (an
// error would leave the client retrying until its operation timeout). NON_PERSISTENT and
// ALL modes check the namespace first and answer a missing one with MetadataError, and list
// the non-persistent topics (ALL: after the persistent ones).
func (c *conn) handleTopicsOfNamespace(cmd *pb.CommandGetTopicsOfNamespace) {
	rid := cmd.GetRequestId()
	ctx, cancel := c.ctx(30 * time.Second)
	defer cancel()
	mode := cmd.GetMode()
	tenant, ns, err := topicname.ParseNamespace(cmd.GetNamespace())
	if err == nil {
		err = c.authorizeNamespace(ctx, tenant, ns)
	}
	if err != nil {
		c.sendError(rid, err)
		return
	}
	if mode != pb.CommandGetTopicsOfNamespace_PERSISTENT {
		err := c.b.CheckNamespace(ctx, tenant, ns)
		if errors.Is(err, api.ErrNamespaceNotFound) {
			msg := fmt.Sprintf("Policies not found for %s/%s namespace", tenant, ns)
			c.Send(pulsar.Wrap(&pb.CommandError{RequestId: &rid, Error: pb.ServerError_MetadataError.Enum(), Message: &msg}))
			return
		}
		if err != nil {
			c.sendError(rid, err)
			return
		}
	}
	topics := []string{}
	for _, d := range []struct {
		domain string
		mode   pb.CommandGetTopicsOfNamespace_Mode
	}{{topicname.Persistent, pb.CommandGetTopicsOfNamespace_PERSISTENT},
		{topicname.NonPersistent, pb.CommandGetTopicsOfNamespace_NON_PERSISTENT}} {
		if mode != d.mode && mode != pb.CommandGetTopicsOfNamespace_ALL {
			continue
		}
		ts, err := c.b.NamespaceTopics(ctx, tenant, ns, d.domain)
		if err != nil {
			c.sendError(rid, err)
			return
		}
		topics = append(topics, ts...)
	}
	c.Send(pulsar.Wrap(&pb.CommandGetTopicsOfNamespaceResponse{RequestId: &rid, Topics: topics}))
}

func (c *conn) handleGetSchema(cmd *pb.CommandGetSchema) {
	rid := cmd.GetRequestId()
	ctx, cancel := c.ctx(30 * time.Second)
	defer cancel()
	resp := &pb.CommandGetSchemaResponse{RequestId: &rid}
	name, err := topicname.Parse(cmd.GetTopic())
	var sc *pb.Schema
	var v []byte
	if err == nil {
		err = c.authorize(ctx, name, auth.ActionLookup)
	}
	if err == nil {
		sc, v, err = c.b.Schema(ctx, name, cmd.GetSchemaVersion())
	}
	if err != nil {
		msg := err.Error()
		code := serverError(err)
		if errors.Is(err, api.ErrSchemaNotFound) {
			code = pb.ServerError_TopicNotFound
		}
		resp.ErrorCode, resp.ErrorMessage = code.Enum(), &msg
	} else {
		resp.Schema, resp.SchemaVersion = sc, v
	}
	c.Send(pulsar.Wrap(resp))
}

func (c *conn) handleGetOrCreateSchema(cmd *pb.CommandGetOrCreateSchema) {
	rid := cmd.GetRequestId()
	ctx, cancel := c.ctx(30 * time.Second)
	defer cancel()
	resp := &pb.CommandGetOrCreateSchemaResponse{RequestId: &rid}
	name, err := topicname.Parse(cmd.GetTopic())
	var v []byte
	if err == nil {
		err = c.authorize(ctx, name, auth.ActionProduce)
	}
	if err == nil {
		v, err = c.b.OfferSchema(ctx, name, cmd.GetSchema(), SchemaProduce)
	}
	if err != nil {
		msg := err.Error()
		resp.ErrorCode, resp.ErrorMessage = serverError(err).Enum(), &msg
	} else {
		resp.SchemaVersion = v
	}
	c.Send(pulsar.Wrap(resp))
}
