package adminclient

import (
	"context"

	"github.com/magnetar-io/magnetar/broker/api"
)

// TriggerOffload asks the broker to offload topic's closed ledgers before message id (one
// partition or a non-partitioned topic). It returns once the offload started.
func (c *Client) TriggerOffload(ctx context.Context, topic string, id api.MessageID) error {
	p, err := TopicOffloadPath(topic)
	if err != nil {
		return err
	}
	body := map[string]int64{"ledgerId": id.LedgerID, "entryId": id.EntryID, "partitionIndex": int64(id.Partition)}
	return c.Do(ctx, "PUT", p, body, nil)
}

// OffloadStatus reads the status of topic's last requested offload into out (Pulsar's
// OffloadProcessStatus JSON).
func (c *Client) OffloadStatus(ctx context.Context, topic string, out any) error {
	p, err := TopicOffloadPath(topic)
	if err != nil {
		return err
	}
	return c.Do(ctx, "GET", p, nil, out)
}

// RemoveNamespaceOffloadPolicies removes a namespace's offload policies (Pulsar's
// DELETE …/removeOffloadPolicies).
func (c *Client) RemoveNamespaceOffloadPolicies(ctx context.Context, namespace string) error {
	p, err := NamespaceRemoveOffloadPoliciesPath(namespace)
	if err != nil {
		return err
	}
	return c.Do(ctx, "DELETE", p, nil, nil)
}
