package dispatch

import "testing"

// TestRateGatesReads: at 10 msg/s (a burst of one), a read of new entries waits until the
// bucket has a token again, the core asks for a timer at that time, and a tick before it
// reads nothing; a retuned rate keeps the debt.
func TestRateGatesReads(t *testing.T) {
	const t0 = 1_700_000_000_000
	d := New(Config{Partition: -1})
	id, err := d.AddConsumer(ConsumerSpec{Type: Shared, Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	d.SetTime(t0)
	d.SetRate(10, 0)
	d.Flow(id, 100)
	r := d.Ready()
	if r.Read == nil || r.Read.N != 1 {
		t.Fatalf("first read %+v, want one entry (the burst)", r.Read)
	}
	entry := func(i int64) []Entry { return []Entry{{Pos: Position{LedgerID: 1, EntryID: i}, Info: Info{Msgs: 1}}} }
	d.ReadDone(r.Read.Epoch, entry(0), ReadOK, t0)
	if r = d.Ready(); r.Read != nil || r.TimerAt != t0+1 {
		t.Fatalf("after the burst: read %+v, timer at %d; want none, and a timer at %d", r.Read, r.TimerAt, t0+1)
	}
	d.Tick(t0 + 1) // 0.01 token earned: one read
	if r = d.Ready(); r.Read == nil || r.Read.N != 1 {
		t.Fatalf("tick with a token: read %+v, want one entry", r.Read)
	}
	d.ReadDone(r.Read.Epoch, entry(1), ReadOK, t0+1) // 0.99 token owed: 99.1 ms at 10/s
	if r = d.Ready(); r.Read != nil || r.TimerAt != t0+1+100 {
		t.Fatalf("in debt: read %+v, timer at %d; want none, and a timer at %d", r.Read, r.TimerAt, t0+101)
	}
	d.Tick(t0 + 50)
	if r = d.Ready(); r.Read != nil {
		t.Fatalf("read %+v before the rate allows it", r.Read)
	}
	d.SetTime(t0 + 50)
	d.RetuneRate(1000, 0)
	if msgs, bytes := d.RateOf(); msgs != 1000 || bytes != 0 {
		t.Fatalf("retuned rate %v/%v, want 1000/0 (a rate that is off stays off)", msgs, bytes)
	}
	d.Tick(t0 + 101)
	if r = d.Ready(); r.Read == nil {
		t.Fatal("no read once the rate allows it")
	}
}
