package resources_test

import (
	"errors"
	"testing"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/resources"
	"github.com/magnetar-io/magnetar/metadata"
)

func TestDecode(t *testing.T) {
	ti, err := resources.Decode[api.TenantInfo](metadata.KV{Value: []byte(`{"adminRoles":["a"]}`)}, nil, api.ErrTenantNotFound, "tenant t")
	if err != nil || len(ti.AdminRoles) != 1 || ti.AdminRoles[0] != "a" {
		t.Fatalf("decode: %+v %v", ti, err)
	}
	if _, err := resources.Decode[api.TenantInfo](metadata.KV{}, metadata.ErrNotFound, api.ErrTenantNotFound, "tenant t"); !errors.Is(err, api.ErrTenantNotFound) || err.Error() != api.ErrTenantNotFound.Error()+": tenant t" {
		t.Fatalf("missing record: %v", err)
	}
	boom := errors.New("store down")
	if _, err := resources.Decode[api.TenantInfo](metadata.KV{}, boom, api.ErrTenantNotFound, "tenant t"); !errors.Is(err, boom) {
		t.Fatalf("read error: %v", err)
	}
	if _, err := resources.Decode[api.TenantInfo](metadata.KV{Value: []byte(`{`)}, nil, api.ErrTenantNotFound, "tenant t"); err == nil || errors.Is(err, api.ErrTenantNotFound) {
		t.Fatalf("corrupt record: %v", err)
	}
	if ti, err := resources.Decode[api.TenantInfo](metadata.KV{}, nil, api.ErrTenantNotFound, "tenant t"); err != nil || ti.AdminRoles != nil {
		t.Fatalf("empty record: %+v %v", ti, err)
	}
}
