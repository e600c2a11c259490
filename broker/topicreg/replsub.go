package topicreg

import "context"

// SetReplicatedSubscriptionStatus sets whether a subscription is replicated (its
// mark-delete position carried to the topic's other clusters; Pulsar's POST
// …/subscription/{sub}/replicatedSubscriptionStatus), loading the topic if needed.
func (reg *Registry) SetReplicatedSubscriptionStatus(ctx context.Context, topic, sub string, on bool) error {
	t, err := reg.AdminTopic(ctx, topic)
	if err != nil {
		return err
	}
	return t.SetSubscriptionReplicated(ctx, sub, on)
}
