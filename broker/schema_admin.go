package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"

	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/schema"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

func (rec *schemaRecord) info() SchemaInfo {
	props := maps.Clone(rec.Properties)
	if props == nil {
		props = map[string]string{}
	}
	return SchemaInfo{Version: rec.Version, Type: schema.TypeName(pb.Schema_Type(rec.Type)), Timestamp: rec.Timestamp,
		Data: rec.Data, Properties: props}
}

func schemaProto(i SchemaInfo) (*pb.Schema, error) {
	t, err := schema.ParseType(i.Type)
	if err != nil {
		return nil, err
	}
	name := ""
	s := &pb.Schema{Name: &name, Type: &t, SchemaData: i.Data}
	if s.SchemaData == nil {
		s.SchemaData = []byte{}
	}
	for k, v := range i.Properties {
		s.Properties = append(s.Properties, &pb.KeyValue{Key: &k, Value: &v})
	}
	return s, nil
}

func schemaTopic(topic string) (topicname.Name, error) {
	n, err := topicname.Parse(topic)
	if err != nil {
		return n, err
	}
	return n.Base(), nil
}

// schemaArgs parses the topic and the schema of a call.
func schemaArgs(topic string, info SchemaInfo) (topicname.Name, *pb.Schema, error) {
	n, err := schemaTopic(topic)
	if err != nil {
		return n, nil, err
	}
	sc, err := schemaProto(info)
	return n, sc, err
}

// Schema returns version v of topic's schema (v < 0: the latest). ErrSchemaNotFound if the
// topic has no such (live) version.
func (s *Service) Schema(ctx context.Context, topic string, v int64) (SchemaInfo, error) {
	n, err := schemaTopic(topic)
	if err != nil {
		return SchemaInfo{}, err
	}
	var ver []byte
	if v >= 0 {
		ver = encodeSchemaVersion(v)
	}
	rec, err := s.schemas.get(ctx, n, ver, true)
	if err != nil {
		return SchemaInfo{}, err
	}
	return rec.info(), nil
}

// SchemaVersions returns topic's live schema versions, oldest first (none: ErrSchemaNotFound).
func (s *Service) SchemaVersions(ctx context.Context, topic string) ([]SchemaInfo, error) {
	n, err := schemaTopic(topic)
	if err != nil {
		return nil, err
	}
	all, err := s.schemas.versions(ctx, schemaPrefix(n), true)
	if err != nil {
		return nil, err
	}
	vs := live(all)
	if len(vs) == 0 {
		return nil, fmt.Errorf("%w: topic %s", ErrSchemaNotFound, n)
	}
	out := make([]SchemaInfo, len(vs))
	for i := range vs {
		out[i] = vs[i].info()
	}
	return out, nil
}

// CreateSchema registers schema info for topic (whatever the auto-update policy says) and
// returns its version: an existing version if the same schema is live, else a new one if
// the topic's strategy accepts it (ErrIncompatibleSchema, ErrInvalidSchema if not).
func (s *Service) CreateSchema(ctx context.Context, topic string, info SchemaInfo) (int64, error) {
	n, sc, err := schemaArgs(topic, info)
	if err != nil {
		return 0, err
	}
	v, err := s.offerSchema(ctx, n, sc, opAdmin)
	if err != nil {
		return 0, err
	}
	return decodeSchemaVersion(v), nil
}

// SchemaVersionOf returns the version of a live schema of topic equal to info
// (ErrSchemaNotFound if none).
func (s *Service) SchemaVersionOf(ctx context.Context, topic string, info SchemaInfo) (int64, error) {
	n, sc, err := schemaArgs(topic, info)
	if err != nil {
		return 0, err
	}
	all, err := s.schemas.versions(ctx, schemaPrefix(n), true)
	if err != nil {
		return 0, err
	}
	if v, ok := sameVersion(live(all), protoDefinition(sc)); ok {
		return v, nil
	}
	return 0, fmt.Errorf("%w: topic %s has no such schema", ErrSchemaNotFound, n)
}

// DeleteSchema deletes topic's schema (force: every version is removed, so versions start
// again at 0) and returns the deletion's version.
func (s *Service) DeleteSchema(ctx context.Context, topic string, force bool) (int64, error) {
	n, err := schemaTopic(topic)
	if err != nil {
		return 0, err
	}
	return s.schemas.delete(ctx, n, force)
}

// TestSchemaCompatibility reports whether topic would take schema info under its strategy,
// and the strategy's name. A definition that does not parse is ErrInvalidSchema.
func (s *Service) TestSchemaCompatibility(ctx context.Context, topic string, info SchemaInfo) (bool, string, error) {
	n, sc, err := schemaArgs(topic, info)
	if err != nil {
		return false, "", err
	}
	pol, err := s.schemaPolicy(ctx, n)
	if err != nil {
		return false, "", err
	}
	def := protoDefinition(sc)
	if err := schema.Validate(def); err != nil {
		return false, pol.strategy.String(), err
	}
	all, err := s.schemas.versions(ctx, schemaPrefix(n), true)
	if err != nil {
		return false, "", err
	}
	err = schema.Check(definitions(live(all)), def, pol.strategy)
	if errors.Is(err, schema.ErrIncompatible) {
		return false, pol.strategy.String(), nil
	}
	return err == nil, pol.strategy.String(), err
}

// TopicSchemaCompatibility returns the topic-level schema compatibility strategy ("" if
// none) and, if applied, the one in force (topic, else namespace, else broker).
func (s *Service) TopicSchemaCompatibility(ctx context.Context, topic string, applied bool) (string, error) {
	n, err := schemaTopic(topic)
	if err != nil {
		return "", err
	}
	if applied {
		pol, err := s.schemaPolicy(ctx, n)
		return pol.strategy.String(), err
	}
	tp, err := s.topicRecord(ctx, n)
	return tp.SchemaStrategy(), err
}

// SetTopicSchemaCompatibility sets the topic-level schema compatibility strategy ("":
// remove it, so the namespace's applies). An unknown name is ErrInvalidSchema.
func (s *Service) SetTopicSchemaCompatibility(ctx context.Context, topic, strategy string) error {
	n, err := schemaTopic(topic)
	if err != nil {
		return err
	}
	st, err := schema.ParseStrategy(strategy)
	if err != nil {
		return err
	}
	name := ""
	if st != schema.Undefined {
		name = st.String()
	}
	return s.updateTopicRecord(ctx, n, func(r policy.Record) error {
		if name == "" {
			delete(r, policy.KeySchemaStrategy)
			return nil
		}
		return r.Set(nil, policy.KeySchemaStrategy, "", name)
	})
}

func decodeSchemaVersion(v []byte) int64 {
	if len(v) != 8 {
		return -1
	}
	return int64(binary.BigEndian.Uint64(v))
}
