package admin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/magnetar-io/magnetar/broker/api"
)

// SchemaService is the schema registry part of the broker API: Pulsar's
// /admin/v2/schemas/... and the schema compatibility policies. *broker.Service implements
// it; a Service that does not answers these paths with 501.
type SchemaService interface {
	Schema(ctx context.Context, topic string, version int64) (api.SchemaInfo, error)
	SchemaVersions(ctx context.Context, topic string) ([]api.SchemaInfo, error)
	CreateSchema(ctx context.Context, topic string, info api.SchemaInfo) (int64, error)
	SchemaVersionOf(ctx context.Context, topic string, info api.SchemaInfo) (int64, error)
	DeleteSchema(ctx context.Context, topic string, force bool) (int64, error)
	TestSchemaCompatibility(ctx context.Context, topic string, info api.SchemaInfo) (bool, string, error)
	TopicSchemaCompatibility(ctx context.Context, topic string, applied bool) (string, error)
	SetTopicSchemaCompatibility(ctx context.Context, topic, strategy string) error
}

// routeFunc registers one route (Handler's route closure).
type routeFunc func(pattern string, f func(w http.ResponseWriter, r *http.Request) error, sc func(r *http.Request) scope)

func (h *handler) schemaRoutes(route routeFunc, nsScope, topicScope func(r *http.Request) scope) {
	const s = "/admin/v2/schemas/{tenant}/{ns}/{topic}"
	route("GET "+s+"/schema", h.getSchema, topicScope)
	route("GET "+s+"/schema/{version}", h.getSchema, topicScope)
	route("GET "+s+"/schemas", h.listSchemas, topicScope)
	route("POST "+s+"/schema", h.postSchema, topicScope)
	route("DELETE "+s+"/schema", h.deleteSchema, topicScope)
	route("POST "+s+"/compatibility", h.testCompatibility, topicScope)
	route("POST "+s+"/version", h.schemaVersion, topicScope)

	const ns = "/admin/v2/namespaces/{tenant}/{ns}"
	route("GET "+ns+"/schemaCompatibilityStrategy", h.nsStrategy, nsScope)
	route("PUT "+ns+"/schemaCompatibilityStrategy", h.setNSStrategy, nsScope)
	route("POST "+ns+"/schemaCompatibilityStrategy", h.setNSStrategy, nsScope)
	route("GET "+ns+"/schemaValidationEnforced", h.nsBool("schemaValidationEnforced"), nsScope)
	route("POST "+ns+"/schemaValidationEnforced", h.setNSBool("schemaValidationEnforced"), nsScope)
	route("GET "+ns+"/isAllowAutoUpdateSchema", h.nsBool("isAllowAutoUpdateSchema"), nsScope)
	route("POST "+ns+"/isAllowAutoUpdateSchema", h.setNSBool("isAllowAutoUpdateSchema"), nsScope)

	for _, p := range []string{"/admin/v2/persistent/{tenant}/{ns}/{topic}", "/admin/v2/non-persistent/{tenant}/{ns}/{topic}"} {
		route("GET "+p+"/schemaCompatibilityStrategy", h.topicStrategy, topicScope)
		route("PUT "+p+"/schemaCompatibilityStrategy", h.setTopicStrategy, topicScope)
		route("POST "+p+"/schemaCompatibilityStrategy", h.setTopicStrategy, topicScope)
		route("DELETE "+p+"/schemaCompatibilityStrategy", h.removeTopicStrategy, topicScope)
	}
}

func (h *handler) schemaService() (SchemaService, error) {
	s, ok := h.svc.(SchemaService)
	if !ok {
		return nil, restErr(http.StatusNotImplemented, "schemas are not served")
	}
	return s, nil
}

// getSchemaResponse is Pulsar's GetSchemaResponse.
type getSchemaResponse struct {
	Version    int64             `json:"version"`
	Type       string            `json:"type"`
	Timestamp  int64             `json:"timestamp"`
	Data       string            `json:"data"`
	Properties map[string]string `json:"properties"`
}

func schemaResponse(i api.SchemaInfo) getSchemaResponse {
	return getSchemaResponse{Version: i.Version, Type: i.Type, Timestamp: i.Timestamp, Data: string(i.Data),
		Properties: i.Properties}
}

// postSchemaPayload is Pulsar's PostSchemaPayload.
type postSchemaPayload struct {
	Type       string            `json:"type"`
	Schema     string            `json:"schema"`
	Properties map[string]string `json:"properties"`
}

func readSchemaPayload(r *http.Request) (api.SchemaInfo, error) {
	var p postSchemaPayload
	if has, err := readJSON(r, &p); err != nil {
		return api.SchemaInfo{}, err
	} else if !has || p.Type == "" {
		return api.SchemaInfo{}, restErr(http.StatusBadRequest, "a schema payload (type, schema, properties) is required")
	}
	return api.SchemaInfo{Type: p.Type, Data: []byte(p.Schema), Properties: p.Properties}, nil
}

// schemaTopic validates a /admin/v2/schemas request: the service and the topic.
func (h *handler) schemaTopic(r *http.Request) (SchemaService, string, error) {
	svc, err := h.schemaService()
	if err != nil {
		return nil, "", err
	}
	n, err := checkTopic(r)
	return svc, n.String(), err
}

// schemaPost validates a /admin/v2/schemas request with a schema payload and calls f with
// it; f's answer is the response.
func (h *handler) schemaPost(w http.ResponseWriter, r *http.Request,
	f func(svc SchemaService, topic string, info api.SchemaInfo) (any, error)) error {
	svc, t, err := h.schemaTopic(r)
	if err != nil {
		return err
	}
	info, err := readSchemaPayload(r)
	if err != nil {
		return err
	}
	v, err := f(svc, t, info)
	if err != nil {
		return err
	}
	return ok(w, v)
}

func (h *handler) getSchema(w http.ResponseWriter, r *http.Request) error {
	svc, t, err := h.schemaTopic(r)
	if err != nil {
		return err
	}
	v := int64(-1)
	if s := r.PathValue("version"); s != "" {
		if v, err = strconv.ParseInt(s, 10, 64); err != nil || v < 0 {
			return restErr(http.StatusBadRequest, "invalid schema version %q", s)
		}
	}
	info, err := svc.Schema(r.Context(), t, v)
	if err != nil {
		return err
	}
	return ok(w, schemaResponse(info))
}

func (h *handler) listSchemas(w http.ResponseWriter, r *http.Request) error {
	svc, t, err := h.schemaTopic(r)
	if err != nil {
		return err
	}
	vs, err := svc.SchemaVersions(r.Context(), t)
	if err != nil {
		return err
	}
	out := struct {
		Schemas []getSchemaResponse `json:"getSchemaResponses"`
	}{Schemas: []getSchemaResponse{}}
	for _, v := range vs {
		out.Schemas = append(out.Schemas, schemaResponse(v))
	}
	return ok(w, out)
}

// versionAnswer is {"version": N}.
type versionAnswer struct {
	Version int64 `json:"version"`
}

func (h *handler) postSchema(w http.ResponseWriter, r *http.Request) error {
	return h.schemaPost(w, r, func(svc SchemaService, t string, info api.SchemaInfo) (any, error) {
		v, err := svc.CreateSchema(r.Context(), t, info)
		return struct {
			Version versionAnswer `json:"version"`
		}{versionAnswer{v}}, err
	})
}

func (h *handler) deleteSchema(w http.ResponseWriter, r *http.Request) error {
	svc, t, err := h.schemaTopic(r)
	if err != nil {
		return err
	}
	force, err := boolQuery(r, "force")
	if err != nil {
		return err
	}
	v, err := svc.DeleteSchema(r.Context(), t, force)
	if err != nil {
		return err
	}
	return ok(w, versionAnswer{v})
}

func (h *handler) testCompatibility(w http.ResponseWriter, r *http.Request) error {
	return h.schemaPost(w, r, func(svc SchemaService, t string, info api.SchemaInfo) (any, error) {
		compatible, strategy, err := svc.TestSchemaCompatibility(r.Context(), t, info)
		return map[string]any{"compatibility": compatible, "schemaCompatibilityStrategy": strategy}, err
	})
}

func (h *handler) schemaVersion(w http.ResponseWriter, r *http.Request) error {
	return h.schemaPost(w, r, func(svc SchemaService, t string, info api.SchemaInfo) (any, error) {
		v, err := svc.SchemaVersionOf(r.Context(), t, info)
		return versionAnswer{v}, err
	})
}

// readStrategy reads a strategy body: a JSON string ("BACKWARD") or the bare name.
func readStrategy(r *http.Request) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1024))
	if err != nil {
		return "", restErr(http.StatusBadRequest, "reading the body: %v", err)
	}
	s := strings.TrimSpace(string(b))
	var js string
	if json.Unmarshal([]byte(s), &js) == nil {
		s = js
	}
	if s == "" {
		return "", restErr(http.StatusBadRequest, "a schema compatibility strategy is required")
	}
	return s, nil
}

func (h *handler) nsStrategy(w http.ResponseWriter, r *http.Request) error {
	ns, err := checkNamespace(r)
	if err != nil {
		return err
	}
	p, err := h.svc.Namespace(r.Context(), ns)
	if err != nil {
		return err
	}
	s := p.SchemaCompatibility
	if s == "" {
		s = "UNDEFINED"
	}
	// Without the newline ok's encoder ends with: as Pulsar's answer, which pulsaradmin
	// parses whole once it has removed the quotes.
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	_, err = w.Write(b)
	return err
}

// updateNamespace reads, changes and writes back a namespace's policies.
func (h *handler) updateNamespace(r *http.Request, change func(p *api.NamespacePolicies) error) error {
	ns, err := checkNamespace(r)
	if err != nil {
		return err
	}
	p, err := h.svc.Namespace(r.Context(), ns)
	if err != nil {
		return err
	}
	if err := change(&p); err != nil {
		return err
	}
	return h.svc.SetNamespacePolicies(r.Context(), ns, p)
}

func (h *handler) setNSStrategy(w http.ResponseWriter, r *http.Request) error {
	s, err := readStrategy(r)
	if err != nil {
		return err
	}
	if err := h.updateNamespace(r, func(p *api.NamespacePolicies) error {
		p.SchemaCompatibility = strings.ToUpper(s)
		return nil
	}); err != nil {
		return err
	}
	return noContent(w)
}

func nsBoolField(p *api.NamespacePolicies, name string) **bool {
	if name == "schemaValidationEnforced" {
		return &p.SchemaValidationEnforced
	}
	return &p.AllowAutoUpdateSchema
}

func (h *handler) nsBool(name string) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		ns, err := checkNamespace(r)
		if err != nil {
			return err
		}
		p, err := h.svc.Namespace(r.Context(), ns)
		if err != nil {
			return err
		}
		v := *nsBoolField(&p, name)
		return ok(w, v == nil && name == "isAllowAutoUpdateSchema" || v != nil && *v)
	}
}

func (h *handler) setNSBool(name string) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		var v bool
		if has, err := readJSON(r, &v); err != nil {
			return err
		} else if !has {
			return restErr(http.StatusBadRequest, "a boolean body is required")
		}
		if err := h.updateNamespace(r, func(p *api.NamespacePolicies) error {
			*nsBoolField(p, name) = &v
			return nil
		}); err != nil {
			return err
		}
		return noContent(w)
	}
}

func (h *handler) topicStrategy(w http.ResponseWriter, r *http.Request) error {
	svc, err := h.schemaService()
	if err != nil {
		return err
	}
	applied, err := boolQuery(r, "applied")
	if err != nil {
		return err
	}
	s, err := svc.TopicSchemaCompatibility(r.Context(), fullName(r), applied)
	if err != nil {
		return err
	}
	if s == "" {
		return ok(w, nil)
	}
	return ok(w, s)
}

func (h *handler) setTopicStrategy(w http.ResponseWriter, r *http.Request) error {
	svc, err := h.schemaService()
	if err != nil {
		return err
	}
	s, err := readStrategy(r)
	if err != nil {
		return err
	}
	if err := svc.SetTopicSchemaCompatibility(r.Context(), fullName(r), s); err != nil {
		return err
	}
	return noContent(w)
}

func (h *handler) removeTopicStrategy(w http.ResponseWriter, r *http.Request) error {
	svc, err := h.schemaService()
	if err != nil {
		return err
	}
	if err := svc.SetTopicSchemaCompatibility(r.Context(), fullName(r), ""); err != nil {
		return err
	}
	return noContent(w)
}
