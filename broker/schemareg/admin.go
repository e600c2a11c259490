package schemareg

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/schema"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// The admin API of schemas (Pulsar's /admin/v2/schemas and the topic-level compatibility
// strategy). Topics are given in any form topicname.Parse accepts; a partition's calls
// are its partitioned topic's.

func (rec *Record) info() api.SchemaInfo {
	props := maps.Clone(rec.Properties)
	if props == nil {
		props = map[string]string{}
	}
	return api.SchemaInfo{Version: rec.Version, Type: schema.TypeName(pb.Schema_Type(rec.Type)), Timestamp: rec.Timestamp,
		Data: rec.Data, Properties: props}
}

func schemaProto(i api.SchemaInfo) (*pb.Schema, error) {
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
func schemaArgs(topic string, info api.SchemaInfo) (topicname.Name, *pb.Schema, error) {
	n, err := schemaTopic(topic)
	if err != nil {
		return n, nil, err
	}
	sc, err := schemaProto(info)
	return n, sc, err
}

// Schema returns version v of topic's schema (v < 0: the latest). api.ErrSchemaNotFound if
// the topic has no such (live) version.
func (r *Registry) Schema(ctx context.Context, topic string, v int64) (api.SchemaInfo, error) {
	n, err := schemaTopic(topic)
	if err != nil {
		return api.SchemaInfo{}, err
	}
	var ver []byte
	if v >= 0 {
		ver = EncodeVersion(v)
	}
	rec, err := r.get(ctx, n, ver, true)
	if err != nil {
		return api.SchemaInfo{}, err
	}
	return rec.info(), nil
}

// SchemaVersions returns topic's live schema versions, oldest first (none:
// api.ErrSchemaNotFound).
func (r *Registry) SchemaVersions(ctx context.Context, topic string) ([]api.SchemaInfo, error) {
	n, err := schemaTopic(topic)
	if err != nil {
		return nil, err
	}
	all, err := r.versions(ctx, prefixOf(n), true)
	if err != nil {
		return nil, err
	}
	vs := live(all)
	if len(vs) == 0 {
		return nil, fmt.Errorf("%w: topic %s", api.ErrSchemaNotFound, n)
	}
	out := make([]api.SchemaInfo, len(vs))
	for i := range vs {
		out[i] = vs[i].info()
	}
	return out, nil
}

// CreateSchema registers schema info for topic (whatever the auto-update policy says) and
// returns its version: an existing version if the same schema is live, else a new one if
// the topic's strategy accepts it (api.ErrIncompatibleSchema, api.ErrInvalidSchema if not).
func (r *Registry) CreateSchema(ctx context.Context, topic string, info api.SchemaInfo) (int64, error) {
	n, sc, err := schemaArgs(topic, info)
	if err != nil {
		return 0, err
	}
	v, err := r.Offer(ctx, n, sc, admin)
	if err != nil {
		return 0, err
	}
	return DecodeVersion(v), nil
}

// SchemaVersionOf returns the version of a live schema of topic equal to info
// (api.ErrSchemaNotFound if none).
func (r *Registry) SchemaVersionOf(ctx context.Context, topic string, info api.SchemaInfo) (int64, error) {
	n, sc, err := schemaArgs(topic, info)
	if err != nil {
		return 0, err
	}
	all, err := r.versions(ctx, prefixOf(n), true)
	if err != nil {
		return 0, err
	}
	if v, ok := sameVersion(live(all), protoDefinition(sc)); ok {
		return v, nil
	}
	return 0, fmt.Errorf("%w: topic %s has no such schema", api.ErrSchemaNotFound, n)
}

// DeleteSchema deletes topic's schema (force: every version is removed, so versions start
// again at 0) and returns the deletion's version.
func (r *Registry) DeleteSchema(ctx context.Context, topic string, force bool) (int64, error) {
	n, err := schemaTopic(topic)
	if err != nil {
		return 0, err
	}
	return r.delete(ctx, n, force)
}

// TestSchemaCompatibility reports whether topic would take schema info under its strategy,
// and the strategy's name. A definition that does not parse is api.ErrInvalidSchema.
func (r *Registry) TestSchemaCompatibility(ctx context.Context, topic string, info api.SchemaInfo) (bool, string, error) {
	n, sc, err := schemaArgs(topic, info)
	if err != nil {
		return false, "", err
	}
	pol, err := r.policyOf(ctx, n)
	if err != nil {
		return false, "", err
	}
	def := protoDefinition(sc)
	if err := schema.Validate(def); err != nil {
		return false, pol.strategy.String(), err
	}
	all, err := r.versions(ctx, prefixOf(n), true)
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
func (r *Registry) TopicSchemaCompatibility(ctx context.Context, topic string, applied bool) (string, error) {
	n, err := schemaTopic(topic)
	if err != nil {
		return "", err
	}
	if applied {
		pol, err := r.policyOf(ctx, n)
		return pol.strategy.String(), err
	}
	tp, err := r.cfg.Policies.TopicRecord(ctx, n)
	return tp.SchemaStrategy(), err
}

// SetTopicSchemaCompatibility sets the topic-level schema compatibility strategy ("":
// remove it, so the namespace's applies). An unknown name is api.ErrInvalidSchema.
func (r *Registry) SetTopicSchemaCompatibility(ctx context.Context, topic, strategy string) error {
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
	return r.cfg.Policies.UpdateTopicRecord(ctx, n, func(rec policy.Record) error {
		if name == "" {
			delete(rec, policy.KeySchemaStrategy)
			return nil
		}
		return rec.Set(nil, policy.KeySchemaStrategy, "", name)
	})
}
