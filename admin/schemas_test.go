package admin

import (
	"encoding/json"
	"testing"
)

// TestSchemasOnRealBroker: the /admin/v2/schemas paths and the schema policies on a real
// broker: post, get (latest, by version), list, version lookup, compatibility test under
// the namespace's and the topic's strategy, refusals (409 incompatible, 422 invalid, 404
// missing), delete (a deletion version; force removes everything).
func TestSchemasOnRealBroker(t *testing.T) {
	rb := startRealBroker(t)
	const s = "/admin/v2/schemas/public/default/users"
	v1, _ := json.Marshal(map[string]any{"type": "AVRO", "properties": map[string]string{},
		"schema": `{"type":"record","name":"u","fields":[{"name":"id","type":"int"}]}`})
	v2bad, _ := json.Marshal(map[string]any{"type": "AVRO",
		"schema": `{"type":"record","name":"u","fields":[{"name":"id","type":"int"},{"name":"e","type":"string"}]}`})
	str, _ := json.Marshal(map[string]any{"type": "STRING", "schema": ""})
	invalid, _ := json.Marshal(map[string]any{"type": "JSON", "schema": `{"type":"record","name":"u"}`})
	runSteps(t, rb.http.URL, []step{
		{"GET", s + "/schema", "", 404, "Schema not found"},
		{"GET", s + "/schemas", "", 404, "Schema not found"},
		{"POST", s + "/schema", string(v1), 200, `{"version":{"version":0}}`},
		{"POST", s + "/schema", string(v1), 200, `{"version":{"version":0}}`},
		{"GET", s + "/schema", "", 200, `"type":"AVRO"`},
		{"GET", s + "/schema/0", "", 200, `"version":0`},
		{"GET", s + "/schema/7", "", 404, "Schema not found"},
		{"GET", s + "/schema/x", "", 400, "invalid schema version"},
		{"POST", s + "/version", string(v1), 200, `{"version":0}`},
		{"POST", s + "/version", string(v2bad), 404, "Schema not found"},
		// The broker's default is FULL.
		{"GET", "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy", "", 200, `"UNDEFINED"`},
		{"POST", s + "/compatibility", string(v2bad), 200, `"compatibility":false,"schemaCompatibilityStrategy":"FULL"`},
		{"POST", s + "/schema", string(v2bad), 409, "new schema cannot read"},
		{"POST", s + "/schema", string(str), 409, "exists schema type AVRO, new schema type STRING"},
		{"POST", s + "/schema", string(invalid), 422, "JSON definition"},
		{"PUT", "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy", `"FORWARD"`, 204, ""},
		{"GET", "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy", "", 200, `"FORWARD"`},
		{"POST", s + "/compatibility", string(v2bad), 200, `"compatibility":true,"schemaCompatibilityStrategy":"FORWARD"`},
		{"PUT", "/admin/v2/persistent/public/default/users/schemaCompatibilityStrategy", `"ALWAYS_INCOMPATIBLE"`, 204, ""},
		{"GET", "/admin/v2/persistent/public/default/users/schemaCompatibilityStrategy", "", 200, `"ALWAYS_INCOMPATIBLE"`},
		{"PUT", "/admin/v2/persistent/public/default/users/schemaCompatibilityStrategy", `"SIDEWAYS"`, 422, "unknown schema compatibility strategy"},
		{"POST", s + "/schema", string(v2bad), 409, "ALWAYS_INCOMPATIBLE"},
		{"DELETE", "/admin/v2/persistent/public/default/users/schemaCompatibilityStrategy", "", 204, ""},
		{"GET", "/admin/v2/persistent/public/default/users/schemaCompatibilityStrategy?applied=true", "", 200, `"FORWARD"`},
		{"POST", s + "/schema", string(v2bad), 200, `{"version":{"version":1}}`},
		{"GET", s + "/schemas", "", 200, `"getSchemaResponses":[{"version":0`},
		{"GET", "/admin/v2/namespaces/public/default/isAllowAutoUpdateSchema", "", 200, "true"},
		{"POST", "/admin/v2/namespaces/public/default/schemaValidationEnforced", "true", 204, ""},
		{"GET", "/admin/v2/namespaces/public/default/schemaValidationEnforced", "", 200, "true"},
		{"DELETE", s + "/schema", "", 200, `{"version":2}`},
		{"GET", s + "/schema", "", 404, "Schema not found"},
		{"DELETE", s + "/schema", "", 404, "Schema not found"},
		{"POST", s + "/schema", string(str), 200, `{"version":{"version":3}}`},
		{"DELETE", s + "/schema?force=true", "", 200, `{"version":3}`},
		{"POST", s + "/schema", string(str), 200, `{"version":{"version":0}}`},
	})
}
