package topic

import "github.com/magnetar-io/magnetar/broker/api"

// The statistics types live in package broker/api (JSON-compatible with Pulsar's admin v2
// responses); these names are the topic package's view of them.
type (
	Stats             = api.TopicStats
	PublisherStats    = api.PublisherStats
	SubscriptionStats = api.SubscriptionStats
	ConsumerStats     = api.ConsumerStats
	InternalStats     = api.InternalStats
	LedgerStats       = api.LedgerStats
	CursorStats       = api.CursorStats
)
