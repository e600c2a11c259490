package resources

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/magnetar-io/magnetar/metadata"
)

// Decode decodes the JSON record kv that a store or cache read returned with err: a
// missing record is notFound wrapped with what ("tenant t", "broker b"); an empty value
// is T's zero value.
func Decode[T any](kv metadata.KV, err error, notFound error, what string) (T, error) {
	var v T
	if errors.Is(err, metadata.ErrNotFound) {
		return v, fmt.Errorf("%w: %s", notFound, what)
	}
	if err != nil {
		return v, err
	}
	if len(kv.Value) > 0 {
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			return v, fmt.Errorf("%s record: %w", what, err)
		}
	}
	return v, nil
}
