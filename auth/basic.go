package auth

import "errors"

// NewBasicProvider is not there yet.
func NewBasicProvider(path string) (Provider, error) {
	return nil, errors.New("auth: basic authentication is not implemented yet")
}
