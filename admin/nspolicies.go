package admin

import (
	"encoding/json"
	"net/http"
)

// pulsarPolicyDefaults are the members of Pulsar's Policies object that its GET
// /admin/v2/namespaces/{t}/{ns} always carries (ObjectMapperFactory serializes non-null
// members only), with the values of a namespace that never set them: Policies' field
// initializers. The members Pulsar initializes to null (message_ttl_in_seconds,
// retention_policies, persistence, …) are present only once set, as in Pulsar.
func pulsarPolicyDefaults() map[string]any {
	return map[string]any{
		"auth_policies":                             map[string]any{"namespace_auth": map[string]any{}, "destination_auth": map[string]any{}, "subscription_auth_roles": map[string]any{}},
		"replication_clusters":                      []string{},
		"backlog_quota_map":                         map[string]any{},
		"clusterDispatchRate":                       map[string]any{},
		"topicDispatchRate":                         map[string]any{},
		"subscriptionDispatchRate":                  map[string]any{},
		"replicatorDispatchRate":                    map[string]any{},
		"clusterSubscribeRate":                      map[string]any{},
		"publishMaxMessageRate":                     map[string]any{},
		"latency_stats_sample_rate":                 map[string]any{},
		"deleted":                                   false,
		"encryption_required":                       false,
		"subscription_auth_mode":                    "None",
		"offload_threshold":                         -1,
		"schema_auto_update_compatibility_strategy": "Full",
		"schema_compatibility_strategy":             "UNDEFINED",
		"schema_validation_enforced":                false,
		"subscription_types_enabled":                []string{},
		"properties":                                map[string]any{},
	}
}

// getNamespace answers a namespace's whole Policies object, as Pulsar's: the stored
// policies over Pulsar's defaults (pulsarPolicyDefaults), and the namespace's bundles when
// the service keeps them.
func (h *handler) getNamespace(w http.ResponseWriter, r *http.Request) error {
	ns, err := checkNamespace(r)
	if err != nil {
		return err
	}
	p, err := h.svc.Namespace(r.Context(), ns)
	if err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	var stored map[string]json.RawMessage
	if err := json.Unmarshal(b, &stored); err != nil {
		return err
	}
	out := map[string]any{}
	for k, v := range pulsarPolicyDefaults() {
		out[k] = v
	}
	for k, v := range stored {
		if string(v) != "null" {
			out[k] = v
		}
	}
	if cs, isCS := h.svc.(BrokersService); isCS {
		if _, has := out["bundles"]; !has {
			if bd, err := cs.NamespaceBundles(r.Context(), ns); err == nil {
				out["bundles"] = bd
			}
		}
	}
	return ok(w, out)
}
