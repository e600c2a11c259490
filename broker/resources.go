package broker

import (
	"context"

	"github.com/magnetar-io/magnetar/broker/resources"
)

// records is the broker's typed records (package resources). The two lower-case names are
// those schema.go and txn.go call.
type records struct{ *resources.Records }

func (r records) namespacePolicies(ctx context.Context, tenant, ns string) (NamespacePolicies, error) {
	return r.NamespacePolicies(ctx, tenant, ns)
}

func (r records) createPartitioned(ctx context.Context, topic string, n int) error {
	return r.CreatePartitioned(ctx, topic, n)
}

// startCaches runs the records' watched caches until the broker closes; s.wg counts them.
func (s *Service) startCaches() {
	for _, c := range s.res.Caches() {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			c.Run(s.ctx)
		}()
	}
}
