package admin

import (
	"context"
	"errors"
	"net/http"

	"github.com/magnetar-io/magnetar/broker/policy"
)

// DynamicConfigService is implemented by services with a dynamic broker configuration
// (*broker.Service does): Pulsar's …/brokers/configuration, superusers only.
//
//	GET    /admin/v2/brokers/configuration                  the names of the dynamic keys
//	GET    /admin/v2/brokers/configuration/values           the stored values {"name": "value"}
//	GET    /admin/v2/brokers/configuration/runtime          the values in force
//	POST   /admin/v2/brokers/configuration/{name}/{value}   store a value (200, as Pulsar)
//	DELETE /admin/v2/brokers/configuration/{name}           remove it (204)
//
// A key that is not dynamic is refused with Pulsar's 412 "Cannot update non-dynamic
// configuration" (a delete: " Can't update non-dynamic configuration"), a value the key
// does not take with 412 " Invalid dynamic-config value"; nothing is stored then.
type DynamicConfigService interface {
	DynamicConfigNames() []string
	DynamicConfig(ctx context.Context) (map[string]string, error)
	RuntimeConfig(ctx context.Context) (map[string]string, error)
	SetDynamicConfig(ctx context.Context, name, value string) error
	DeleteDynamicConfig(ctx context.Context, name string) error
}

func (h *handler) dynamicConfigRoutes(route routeFunc) {
	ds, isDS := h.svc.(DynamicConfigService)
	if !isDS {
		return
	}
	none := func(*http.Request) scope { return scope{} }
	const c = "/admin/v2/brokers/configuration"
	route("GET "+c, func(w http.ResponseWriter, r *http.Request) error {
		return ok(w, ds.DynamicConfigNames())
	}, none)
	route("GET "+c+"/values", func(w http.ResponseWriter, r *http.Request) error {
		m, err := ds.DynamicConfig(r.Context())
		if err != nil {
			return err
		}
		return ok(w, m)
	}, none)
	route("GET "+c+"/runtime", func(w http.ResponseWriter, r *http.Request) error {
		m, err := ds.RuntimeConfig(r.Context())
		if err != nil {
			return err
		}
		return ok(w, m)
	}, none)
	route("POST "+c+"/{name}/{value}", func(w http.ResponseWriter, r *http.Request) error {
		err := ds.SetDynamicConfig(r.Context(), r.PathValue("name"), r.PathValue("value"))
		switch {
		case errors.Is(err, policy.ErrNotDynamic):
			return restErr(http.StatusPreconditionFailed, "Cannot update non-dynamic configuration")
		case errors.Is(err, policy.ErrInvalidDynamicValue):
			return restErr(http.StatusPreconditionFailed, " Invalid dynamic-config value")
		case err != nil:
			return err
		}
		w.WriteHeader(http.StatusOK) // Pulsar's Response.ok()
		return nil
	}, none)
	route("DELETE "+c+"/{name}", func(w http.ResponseWriter, r *http.Request) error {
		err := ds.DeleteDynamicConfig(r.Context(), r.PathValue("name"))
		if errors.Is(err, policy.ErrNotDynamic) {
			return restErr(http.StatusPreconditionFailed, " Can't update non-dynamic configuration")
		}
		if err != nil {
			return err
		}
		return noContent(w)
	}, none)
}
