package broker

import (
	"errors"
	"time"

	"google.golang.org/protobuf/proto"

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
	c.s.m.lookups.Inc()
	r, err := c.s.lookup(ctx, cmd.GetTopic())
	resp := &pb.CommandLookupTopicResponse{RequestId: &rid}
	if err != nil {
		msg := err.Error()
		resp.Response = pb.CommandLookupTopicResponse_Failed.Enum()
		resp.Error, resp.Message = serverError(err).Enum(), &msg
	} else {
		resp.Response = pb.CommandLookupTopicResponse_Connect.Enum()
		resp.BrokerServiceUrl = &r.ServiceURL
		resp.Authoritative = proto.Bool(true)
		resp.ProxyThroughServiceUrl = proto.Bool(false)
	}
	c.Send(pulsar.Wrap(resp))
}

func (c *conn) handlePartitionedMetadata(cmd *pb.CommandPartitionedTopicMetadata) {
	rid := cmd.GetRequestId()
	ctx, cancel := c.ctx(30 * time.Second)
	defer cancel()
	n, err := c.s.res.partitions(ctx, cmd.GetTopic())
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

func (c *conn) handleTopicsOfNamespace(cmd *pb.CommandGetTopicsOfNamespace) {
	rid := cmd.GetRequestId()
	ctx, cancel := c.ctx(30 * time.Second)
	defer cancel()
	var topics []string
	if cmd.GetMode() != pb.CommandGetTopicsOfNamespace_NON_PERSISTENT {
		var err error
		if topics, err = c.s.res.topics(ctx, cmd.GetNamespace()); err != nil {
			c.sendError(rid, err)
			return
		}
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
		sc, v, err = c.s.schemas.get(ctx, name, cmd.GetSchemaVersion())
	}
	if err != nil {
		msg := err.Error()
		code := serverError(err)
		if errors.Is(err, ErrSchemaNotFound) {
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
		v, err = c.s.schemas.getOrCreate(ctx, name, cmd.GetSchema())
	}
	if err != nil {
		msg := err.Error()
		resp.ErrorCode, resp.ErrorMessage = serverError(err).Enum(), &msg
	} else {
		resp.SchemaVersion = v
	}
	c.Send(pulsar.Wrap(resp))
}
