package broker

import "context"

// The admin API of schemas, answered by the schema registry (package broker/schemareg).

// Schema returns version v of topic's schema (v < 0: the latest). ErrSchemaNotFound if the
// topic has no such (live) version.
func (s *Service) Schema(ctx context.Context, topic string, v int64) (SchemaInfo, error) {
	return s.schemas.Schema(ctx, topic, v)
}

// SchemaVersions returns topic's live schema versions, oldest first (none: ErrSchemaNotFound).
func (s *Service) SchemaVersions(ctx context.Context, topic string) ([]SchemaInfo, error) {
	return s.schemas.SchemaVersions(ctx, topic)
}

// CreateSchema registers schema info for topic (whatever the auto-update policy says) and
// returns its version: an existing version if the same schema is live, else a new one if
// the topic's strategy accepts it (ErrIncompatibleSchema, ErrInvalidSchema if not).
func (s *Service) CreateSchema(ctx context.Context, topic string, info SchemaInfo) (int64, error) {
	return s.schemas.CreateSchema(ctx, topic, info)
}

// SchemaVersionOf returns the version of a live schema of topic equal to info
// (ErrSchemaNotFound if none).
func (s *Service) SchemaVersionOf(ctx context.Context, topic string, info SchemaInfo) (int64, error) {
	return s.schemas.SchemaVersionOf(ctx, topic, info)
}

// DeleteSchema deletes topic's schema (force: every version is removed, so versions start
// again at 0) and returns the deletion's version.
func (s *Service) DeleteSchema(ctx context.Context, topic string, force bool) (int64, error) {
	return s.schemas.DeleteSchema(ctx, topic, force)
}

// TestSchemaCompatibility reports whether topic would take schema info under its strategy,
// and the strategy's name. A definition that does not parse is ErrInvalidSchema.
func (s *Service) TestSchemaCompatibility(ctx context.Context, topic string, info SchemaInfo) (bool, string, error) {
	return s.schemas.TestSchemaCompatibility(ctx, topic, info)
}

// TopicSchemaCompatibility returns the topic-level schema compatibility strategy ("" if
// none) and, if applied, the one in force (topic, else namespace, else broker).
func (s *Service) TopicSchemaCompatibility(ctx context.Context, topic string, applied bool) (string, error) {
	return s.schemas.TopicSchemaCompatibility(ctx, topic, applied)
}

// SetTopicSchemaCompatibility sets the topic-level schema compatibility strategy ("":
// remove it, so the namespace's applies). An unknown name is ErrInvalidSchema.
func (s *Service) SetTopicSchemaCompatibility(ctx context.Context, topic, strategy string) error {
	return s.schemas.SetTopicSchemaCompatibility(ctx, topic, strategy)
}
