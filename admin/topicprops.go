package admin

import (
	"encoding/json"
	"maps"
	"net/http"
)

// Topic properties, Pulsar's …/{topic}/properties (a topic's own string map, given when it
// is created and changed later):
//
//	GET    /admin/v2/persistent/{t}/{ns}/{topic}/properties         the map ({} when none)
//	PUT    /admin/v2/persistent/{t}/{ns}/{topic}/properties         merge the body's keys in
//	DELETE /admin/v2/persistent/{t}/{ns}/{topic}/properties?key=k   remove key k
//
// PUT …/{topic} (a map body) and PUT …/{topic}/partitions ({"partitions": N, "properties":
// {…}}) create a topic with properties. They are kept in the topic's policy record under
// "properties" (package broker/policy), for a partitioned topic once for all its
// partitions, where Pulsar keeps them in the managed ledger's properties or the partitioned
// topic's metadata. A change is a read, a merge and a write: two concurrent changes of one
// topic's properties may lose one of them (last writer wins).

// topicPropertiesPath is the policy path of topic properties (broker/policy's table).
const topicPropertiesPath = "properties"

func (h *handler) topicPropertyRoutes(ps PolicyService, route routeFunc, topicScope func(r *http.Request) scope) {
	const tp = "/admin/v2/persistent/{tenant}/{ns}/{topic}/properties"
	route("GET "+tp, func(w http.ResponseWriter, r *http.Request) error {
		n, err := checkTopic(r)
		if err != nil {
			return err
		}
		m, err := h.topicProperties(r, ps, n.String())
		if err != nil {
			return err
		}
		return ok(w, m)
	}, topicScope)
	route("PUT "+tp, func(w http.ResponseWriter, r *http.Request) error {
		n, err := checkTopic(r)
		if err != nil {
			return err
		}
		var add map[string]string
		if _, err := readJSON(r, &add); err != nil {
			return err
		}
		if err := h.mergeTopicProperties(r, ps, n.String(), add, ""); err != nil {
			return err
		}
		return noContent(w)
	}, topicScope)
	route("DELETE "+tp, func(w http.ResponseWriter, r *http.Request) error {
		n, err := checkTopic(r)
		if err != nil {
			return err
		}
		key := r.URL.Query().Get("key")
		if key == "" {
			return restErr(http.StatusBadRequest, "the key of the property to remove is required")
		}
		if err := h.mergeTopicProperties(r, ps, n.String(), nil, key); err != nil {
			return err
		}
		return noContent(w)
	}, topicScope)
}

// topicProperties reads topic's properties (never nil).
func (h *handler) topicProperties(r *http.Request, ps PolicyService, topic string) (map[string]string, error) {
	raw, err := ps.TopicPolicy(r.Context(), topic, topicPropertiesPath, false)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// mergeTopicProperties sets the keys of add on topic's properties and removes key remove
// (""), writing the result (no properties left: the record's entry is removed).
func (h *handler) mergeTopicProperties(r *http.Request, ps PolicyService, topic string, add map[string]string, remove string) error {
	if len(add) == 0 && remove == "" {
		return nil
	}
	m, err := h.topicProperties(r, ps, topic)
	if err != nil {
		return err
	}
	maps.Copy(m, add)
	delete(m, remove)
	if len(m) == 0 {
		return ps.RemoveTopicPolicy(r.Context(), topic, topicPropertiesPath, "")
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return ps.SetTopicPolicy(r.Context(), topic, topicPropertiesPath, "", b)
}

// createdWithProperties stores the properties a topic was created with (none: nothing).
func (h *handler) createdWithProperties(r *http.Request, topic string, props map[string]string) error {
	ps, isPolicy := h.svc.(PolicyService)
	if !isPolicy || len(props) == 0 {
		return nil
	}
	return h.mergeTopicProperties(r, ps, topic, props, "")
}
