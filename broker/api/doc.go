// Package api holds the broker's API types and errors: the records, statistics and
// sentinel errors that the broker's service API, the admin REST layer (package admin), the
// proxy and the REST client (package adminclient) share. It is a leaf: it imports no other
// part of the broker, so those packages can use the types without importing the broker.
//
// The JSON forms follow Pulsar's admin v2 API (field names and keys as pulsar-client-go's
// pulsaradmin utils package writes them).
package api
