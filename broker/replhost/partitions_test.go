package replhost

import (
	"context"
	"errors"
	"testing"

	"github.com/magnetar-io/magnetar/broker/topicname"
)

// fakeAdmin is a remote cluster's partitioned metadata.
type fakeAdmin struct {
	parts   map[string]int
	created int
	// createAs, if set, is what a create stores instead of the count asked (a racing
	// creator won with another count).
	createAs int
}

func (f *fakeAdmin) Partitions(_ context.Context, topic string) (int, error) {
	return f.parts[topic], nil
}

func (f *fakeAdmin) CreatePartitioned(_ context.Context, topic string, n int) error {
	f.created++
	if _, ok := f.parts[topic]; ok {
		return nil
	}
	if f.createAs != 0 {
		n = f.createAs
	}
	f.parts[topic] = n
	return nil
}

// TestCheckRemotePartitions: the remote gets the partitioned topic with the local count
// when it has none; the same count passes; another count, or a count the partition does
// not fit in after a racing create, is refused with ErrPartitionsMismatch.
func TestCheckRemotePartitions(t *testing.T) {
	ctx := context.Background()
	const base = "persistent://geo/ns/t"
	p := func(i int) topicname.Name { return topicname.MustParse(base).PartitionName(i) }

	missing := &fakeAdmin{parts: map[string]int{}}
	if err := checkRemotePartitions(ctx, p(2), 4, missing); err != nil || missing.parts[base] != 4 || missing.created != 1 {
		t.Fatalf("missing remote: %v, remote %v, %d creates", err, missing.parts, missing.created)
	}
	if err := checkRemotePartitions(ctx, p(3), 4, missing); err != nil || missing.created != 1 {
		t.Fatalf("same count: %v, %d creates", err, missing.created)
	}
	other := &fakeAdmin{parts: map[string]int{base: 2}}
	if err := checkRemotePartitions(ctx, p(0), 4, other); !errors.Is(err, ErrPartitionsMismatch) || other.created != 0 {
		t.Fatalf("another count: %v, %d creates", err, other.created)
	}
	raced := &fakeAdmin{parts: map[string]int{}, createAs: 2}
	if err := checkRemotePartitions(ctx, p(3), 4, raced); !errors.Is(err, ErrPartitionsMismatch) {
		t.Fatalf("a racing create with 2 partitions: %v", err)
	}
}
