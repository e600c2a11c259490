package txn

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

// TestCoordinatorCollectsTogether: transactions ending together are collected by one commit;
// when one participant still holds its record, the commit is refused and each is tried
// alone: the others go, that one stays until its record is gone.
func TestCoordinatorCollectsTogether(t *testing.T) {
	st := metadatatest.NewStore(t, metadatatest.Embedded(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := StartCoordinator(ctx, CoordinatorConfig{CoreConfig: CoreConfig{TC: 7, GCDelayMs: 10}, Store: st,
		Canon: func(s string) (string, error) { return s, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	call := func(f func(done func(ID, error))) ID {
		t.Helper()
		ch := make(chan error, 1)
		var got ID
		f(func(id ID, err error) { got = id; ch <- err })
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
		return got
	}
	var ids []ID
	for i := 0; i < 3; i++ {
		id := call(func(d func(ID, error)) { c.NewTxn(time.Minute, d) })
		call(func(d func(ID, error)) { c.AddPartitions(id, []string{"t/a"}, d) })
		ids = append(ids, id)
	}
	record := func(id ID) string { return metadata.TxnOpenKey("t/a", id.Key()) }
	for _, id := range ids {
		if _, err := st.Get(ctx, record(id)); err != nil {
			t.Fatalf("record of %v after its add: %v", id, err)
		}
	}
	// The participant applied two of them; the third keeps its record.
	for _, id := range ids[:2] {
		if err := st.Delete(ctx, record(id), metadata.AnyVersion); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		call(func(d func(ID, error)) { c.End(id, true, d) })
	}
	gone := func(id ID) bool {
		_, err := st.Get(ctx, metadata.TxnHeaderKey(id.Most, id.Least))
		return errors.Is(err, metadata.ErrNotFound)
	}
	for !gone(ids[0]) || !gone(ids[1]) {
		if ctx.Err() != nil {
			t.Fatal("the headers of the applied transactions were not collected")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
	if gone(ids[2]) {
		t.Fatal("a header was collected while its participant's record remains")
	}
	if err := st.Delete(ctx, record(ids[2]), metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	for !gone(ids[2]) {
		if ctx.Err() != nil {
			t.Fatal("the last header was not collected once its record was gone")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
}
