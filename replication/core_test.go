package replication

import (
	"errors"
	"slices"
	"testing"
)

// Scripted cases of the core's rules, each driven input by input; the upstream races are
// named after their apache/pulsar issues. The simulation (sim_test.go) checks the same rules
// under random interleavings.

const t0 = int64(1_700_000_000_000)

func pos(i int) Position { return Position{LedgerID: 3, EntryID: int64(i)} }

func data(i int, producer string, seq uint64) Entry {
	return Entry{Pos: pos(i), Meta: Meta{ProducerName: producer, SequenceID: seq, HighestSequenceID: seq, NumMessages: 1,
		PublishTime: t0 + int64(i)}, Data: []byte("payload")}
}

// connected returns a started core whose producer of epoch 1 is connected, and the read it
// asks for.
func connected(t *testing.T, cfg Config) (*Core, *Read) {
	t.Helper()
	if cfg.LocalCluster == "" {
		cfg.LocalCluster, cfg.RemoteCluster = "east", "west"
	}
	c := New(cfg, Earliest)
	c.Start(t0)
	r := c.Ready()
	if r.Connect == nil || r.Connect.Epoch != 1 || r.Connect.ProducerName != "pulsar.repl.east-->west" {
		t.Fatalf("start: connect %+v", r.Connect)
	}
	c.ProducerConnected(1)
	r = c.Ready()
	if c.State() != StateReplicating || r.Read == nil || r.Read.After != Earliest {
		t.Fatalf("connected: state %v, read %+v", c.State(), r.Read)
	}
	return c, r.Read
}

func seqs(ss []Send) []uint64 {
	var out []uint64
	for _, s := range ss {
		out = append(out, s.SequenceID)
	}
	return out
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name     string
		m        Meta
		replSubs bool
		want     Reason
	}{
		{"plain", Meta{ProducerName: "p"}, false, Replicate},
		{"replicate_to names the remote", Meta{ReplicateTo: []string{"north", "west"}}, false, Replicate},
		{"replicate_to excludes the remote", Meta{ReplicateTo: []string{"north"}}, false, FilteredReplicateTo},
		{"replication disabled", Meta{ReplicateTo: []string{"__local__"}}, false, FilteredReplicateTo},
		{"replicated from another cluster", Meta{ReplicatedFrom: "north"}, false, FilteredReplicated},
		{"aborted transaction", Meta{Aborted: true}, false, FilteredTxn},
		{"transaction marker", Meta{Marker: true, MarkerType: MarkerTxnCommit}, true, FilteredTxn},
		{"corrupt", Meta{Corrupt: true, ReplicatedFrom: "north"}, true, FilteredCorrupt},
		{"snapshot request, replicated subscriptions off", Meta{Marker: true, MarkerType: MarkerSnapshotRequest}, false, FilteredMarker},
		{"snapshot request", Meta{Marker: true, MarkerType: MarkerSnapshotRequest}, true, Replicate},
		{"update", Meta{Marker: true, MarkerType: MarkerUpdate}, true, Replicate},
		{"response to the remote", Meta{Marker: true, MarkerType: MarkerSnapshotResponse, ReplicateTo: []string{"west"}}, true, Replicate},
		{"response to another", Meta{Marker: true, MarkerType: MarkerSnapshotResponse, ReplicateTo: []string{"north"}}, true, FilteredReplicateTo},
		{"snapshot", Meta{Marker: true, MarkerType: MarkerSnapshot}, true, FilteredMarker},
		{"unknown marker", Meta{Marker: true}, true, FilteredMarker},
		{"request that came from another cluster", Meta{Marker: true, MarkerType: MarkerSnapshotRequest, ReplicatedFrom: "north"}, true, FilteredReplicated},
	} {
		if got := Classify(tc.m, "west", tc.replSubs); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRefusedHeadRewindsInOrder: a refused send ends its epoch; a receipt of the epoch that
// arrives after (a later send the remote stored before it learnt of the refusal, or not)
// changes nothing; the new epoch sends every unacknowledged entry again, the refused head
// first, with the same identity (apache/pulsar#26113, #20128: out-of-order re-sends dropped
// by the remote's deduplication).
func TestRefusedHeadRewindsInOrder(t *testing.T) {
	c, rd := connected(t, Config{})
	if err := c.ReadDone(rd.Tag, []Entry{data(0, "p", 1), data(1, "p", 2), data(2, "p", 3)}, nil); err != nil {
		t.Fatal(err)
	}
	r := c.Ready()
	if got := seqs(r.Sends); !slices.Equal(got, []uint64{1, 2, 3}) || r.Sends[0].Ticket != (Ticket{1, 1}) {
		t.Fatalf("sends %v %+v", got, r.Sends)
	}
	c.SendFailed(Ticket{1, 1}, errors.New("refused"))
	r = c.Ready()
	if c.State() != StateConnecting || !slices.Equal(r.CloseProducer, []uint64{1}) || len(r.Sends) > 0 || r.TimerAt == 0 {
		t.Fatalf("after the refusal: %v, %+v", c, r)
	}
	c.SendAcked(Ticket{1, 2}, false)
	if c.MarkDelete() != Earliest || c.Stats().StaleReceipts != 1 {
		t.Fatalf("a receipt of the ended epoch moved the core: %v", c)
	}
	c.Tick(r.TimerAt)
	r = c.Ready()
	if r.Connect == nil || r.Connect.Epoch != 2 {
		t.Fatalf("no reconnect: %+v", r)
	}
	c.ProducerConnected(2)
	r = c.Ready()
	if got := seqs(r.Sends); !slices.Equal(got, []uint64{1, 2, 3}) || !r.Sends[0].Resend || r.Sends[0].Ticket != (Ticket{2, 1}) ||
		r.Sends[0].ProducerName != "p" || r.Sends[0].ReplicatedFrom != "east" {
		t.Fatalf("re-sends %v %+v", got, r.Sends)
	}
	for n := uint64(1); n <= 3; n++ {
		c.SendAcked(Ticket{2, n}, n > 1)
	}
	if c.MarkDelete() != pos(2) {
		t.Fatalf("mark-delete %v", c.MarkDelete())
	}
}

// TestStaleEpochReceiptMatchesNothing: sends are numbered per epoch, so a late receipt of
// epoch 1 carries a number that epoch 2 uses for another entry; it must not acknowledge it.
func TestStaleEpochReceiptMatchesNothing(t *testing.T) {
	c, rd := connected(t, Config{ReadBatch: 1})
	_ = c.ReadDone(rd.Tag, []Entry{data(0, "p", 1)}, nil)
	r := c.Ready()                        // the send of entry 0 and the next read
	c.SendAcked(r.Sends[0].Ticket, false) // (1, 1)
	c.Ready()
	_ = c.ReadDone(r.Read.Tag, []Entry{data(1, "p", 2)}, nil)
	r = c.Ready()
	if r.Sends[0].Ticket != (Ticket{1, 2}) {
		t.Fatalf("send %+v", r.Sends)
	}
	c.Disconnected(1, errors.New("connection lost"))
	r = c.Ready()
	c.Tick(r.TimerAt)
	c.Ready()
	c.ProducerConnected(2)
	r = c.Ready()
	if len(r.Sends) != 1 || r.Sends[0].Ticket != (Ticket{2, 1}) || r.Sends[0].Pos != pos(1) {
		t.Fatalf("re-send %+v", r.Sends)
	}
	c.SendAcked(Ticket{1, 1}, false) // a copy of entry 0's receipt, late
	if c.MarkDelete() != pos(0) || c.InFlight() != 1 {
		t.Fatalf("the late receipt acknowledged entry 1: %v", c)
	}
	c.SendAcked(Ticket{2, 1}, true)
	if c.MarkDelete() != pos(1) {
		t.Fatalf("mark-delete %v", c.MarkDelete())
	}
}

// TestResetDropsReadInFlight: a reset cancels the read in flight and drops its entries when
// they arrive; reading starts again after the reset's position (apache/pulsar#26106,
// #21965: a rewind racing a read left the read position past unsent entries).
func TestResetDropsReadInFlight(t *testing.T) {
	c, rd := connected(t, Config{})
	if err := c.Reset(pos(4)); err != nil {
		t.Fatal(err)
	}
	if err := c.Reset(pos(5)); !errors.Is(err, ErrResetInProgress) {
		t.Fatalf("second reset: %v", err)
	}
	r := c.Ready()
	if r.CancelRead != rd.Tag || r.Reset == nil || r.Reset.To != pos(4) || c.State() != StateResetting {
		t.Fatalf("reset: %v %+v", c, r)
	}
	tag := r.Reset.Tag
	_ = c.ReadDone(rd.Tag, []Entry{data(0, "p", 1)}, nil)
	if r = c.Ready(); len(r.Sends) > 0 || c.Held() != 0 {
		t.Fatalf("the cancelled read was taken: %+v", r)
	}
	c.ResetDone(tag+1, nil) // not this reset's
	if c.State() != StateResetting {
		t.Fatal("a stale reset completion was taken")
	}
	c.ResetDone(tag, nil)
	r = c.Ready()
	if c.State() != StateReplicating || r.Read == nil || r.Read.After != pos(4) || c.MarkDelete() != pos(4) {
		t.Fatalf("after the reset: %v %+v", c, r.Read)
	}
}

// TestAbandonedProducerClosed: a connect that times out is given up; its producer, if it
// connects after all, is closed, or the remote would refuse every later producer of the
// name as busy (apache/pulsar#5104).
func TestAbandonedProducerClosed(t *testing.T) {
	c := New(Config{LocalCluster: "east", RemoteCluster: "west", ConnectTimeoutMs: 50}, Earliest)
	c.Start(t0)
	r := c.Ready()
	if r.TimerAt != t0+50 {
		t.Fatalf("timer %d", r.TimerAt-t0)
	}
	c.Tick(t0 + 50)
	r = c.Ready()
	if !slices.Equal(r.CloseProducer, []uint64{1}) || r.Connect != nil {
		t.Fatalf("timeout: %+v", r)
	}
	c.Tick(r.TimerAt)
	if r = c.Ready(); r.Connect == nil || r.Connect.Epoch != 2 {
		t.Fatalf("reconnect: %+v", r)
	}
	c.ProducerConnected(1)
	if r = c.Ready(); !slices.Equal(r.CloseProducer, []uint64{1}) || c.State() != StateConnecting {
		t.Fatalf("late producer: %v %+v", c, r)
	}
	c.ConnectFailed(2, errors.New("producer busy"))
	if r = c.Ready(); r.TimerAt == 0 {
		t.Fatal("no retry after a failed connect")
	}
}

// TestWindowBounded: with a remote that never answers, the core holds at most MaxPending
// entries, however large the backlog, and reads again as receipts free the window.
func TestWindowBounded(t *testing.T) {
	c, rd := connected(t, Config{MaxPending: 5, ReadBatch: 100})
	if rd.N != 5 {
		t.Fatalf("first read of %d", rd.N)
	}
	var es []Entry
	for i := range 5 {
		es = append(es, data(i, "p", uint64(i)))
	}
	_ = c.ReadDone(rd.Tag, es, nil)
	r := c.Ready()
	if len(r.Sends) != 5 || r.Read != nil || c.Held() != 5 {
		t.Fatalf("sends %d, read %+v, held %d", len(r.Sends), r.Read, c.Held())
	}
	c.SendAcked(r.Sends[1].Ticket, false)
	if r2 := c.Ready(); r2.Read != nil || r2.MarkDelete != nil {
		t.Fatalf("an ack behind the head freed the window: %+v", r2)
	}
	c.SendAcked(r.Sends[0].Ticket, false)
	r = c.Ready()
	if r.Read == nil || r.Read.N != 2 || r.Read.After != pos(4) || r.MarkDelete == nil || r.MarkDelete.Pos != pos(1) {
		t.Fatalf("after two receipts: read %+v, mark-delete %+v", r.Read, r.MarkDelete)
	}
}

// TestFilteredEntriesAdvanceTheCursor: entries that are not replicated are acknowledged
// without a send, and the mark-delete position passes them.
func TestFilteredEntriesAdvanceTheCursor(t *testing.T) {
	c, rd := connected(t, Config{})
	es := []Entry{data(0, "p", 1), data(1, "q", 1), data(2, "p", 2)}
	es[0].Meta.ReplicatedFrom = "north"
	es[1].Meta.ReplicateTo = []string{"__local__"}
	es[2].Meta.Marker, es[2].Meta.MarkerType = true, MarkerSnapshot
	_ = c.ReadDone(rd.Tag, es, nil)
	r := c.Ready()
	if len(r.Sends) != 0 || r.MarkDelete == nil || r.MarkDelete.Pos != pos(2) {
		t.Fatalf("sends %+v, mark-delete %+v", r.Sends, r.MarkDelete)
	}
	c.MarkDeleteDone(r.MarkDelete.Tag, errors.New("metadata store down"))
	r = c.Ready()
	if r.MarkDelete != nil || r.TimerAt == 0 {
		t.Fatalf("a failed mark-delete is not retried later: %+v", r)
	}
	c.Tick(r.TimerAt)
	if r = c.Ready(); r.MarkDelete == nil || r.MarkDelete.Pos != pos(2) {
		t.Fatalf("retry: %+v", r.MarkDelete)
	}
}

// TestRateGatesReads: at 10 messages per second, reads of single-message entries follow
// the rate (a bucket of one token, which a read may overdraw), each one at the timer the
// core asks for when the bucket is empty.
func TestRateGatesReads(t *testing.T) {
	c, rd := connected(t, Config{RateMsgs: 10})
	now, reads := t0, 0
	for i := 0; now < t0+1000; i++ {
		if rd == nil {
			t.Fatalf("no read at %d ms", now-t0)
		}
		if rd.N != 1 {
			t.Fatalf("a read of %d at %d ms", rd.N, now-t0)
		}
		reads++
		_ = c.ReadDone(rd.Tag, []Entry{data(i, "p", uint64(i))}, nil)
		r := c.Ready()
		c.SendAcked(r.Sends[0].Ticket, false)
		if r = c.Ready(); r.Read != nil {
			rd = r.Read
			continue
		}
		if r.TimerAt <= now {
			t.Fatalf("held back with no timer: %+v", r)
		}
		now = r.TimerAt
		c.Tick(now)
		rd = c.Ready().Read
	}
	if reads < 9 || reads > 12 {
		t.Fatalf("%d reads in a second at 10/s", reads)
	}
}

// TestCloseWritesLastMarkDelete: closing writes the mark-delete position a last time and
// closes the producer; later answers change nothing.
func TestCloseWritesLastMarkDelete(t *testing.T) {
	c, rd := connected(t, Config{})
	_ = c.ReadDone(rd.Tag, []Entry{data(0, "p", 1), data(1, "p", 2)}, nil)
	r := c.Ready()
	c.SendAcked(r.Sends[0].Ticket, false)
	r2 := c.Ready() // mark-delete at 0 in flight
	c.SendAcked(r.Sends[1].Ticket, false)
	c.Ready()
	if c.Delay(t0+100) != 0 {
		t.Fatalf("delay %d with nothing waiting", c.Delay(t0+100))
	}
	c.Close()
	r = c.Ready()
	if !slices.Equal(r.CloseProducer, []uint64{1}) || r.MarkDelete == nil || r.MarkDelete.Pos != pos(1) || c.State() != StateClosed {
		t.Fatalf("close: %v %+v", c, r)
	}
	c.MarkDeleteDone(r2.MarkDelete.Tag, nil)
	c.ProducerConnected(1)
	if r = c.Ready(); r.Connect != nil || r.Read != nil || r.TimerAt != 0 {
		t.Fatalf("a closed core acted: %+v", r)
	}
	if err := c.Reset(pos(0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("reset of a closed core: %v", err)
	}
}

// TestDelay: the replication delay is the age of the oldest entry not yet on the remote.
func TestDelay(t *testing.T) {
	c, rd := connected(t, Config{})
	_ = c.ReadDone(rd.Tag, []Entry{data(7, "p", 1)}, nil)
	c.Ready()
	if d := c.Delay(t0 + 1007); d != 1000 {
		t.Fatalf("delay %d", d)
	}
}

// BenchmarkCore measures the core alone: per entry, its read, filter, send and receipt,
// and the mark-delete position's advance (reads of 100, a window of 1000).
func BenchmarkCore(b *testing.B) {
	c := New(Config{LocalCluster: "east", RemoteCluster: "west"}, Earliest)
	c.Start(t0)
	c.Ready()
	c.ProducerConnected(1)
	rd := c.Ready().Read
	payload := make([]byte, 1024)
	es := make([]Entry, 100)
	next := 0
	b.SetBytes(int64(len(payload)) * int64(len(es)))
	for b.Loop() {
		for k := range es {
			es[k] = Entry{Pos: Position{LedgerID: 1, EntryID: int64(next)}, Data: payload,
				Meta: Meta{ProducerName: "p", SequenceID: uint64(next), NumMessages: 1}}
			next++
		}
		if err := c.ReadDone(rd.Tag, es, nil); err != nil {
			b.Fatal(err)
		}
		r := c.Ready()
		rd = r.Read // the next read goes out with the sends
		for _, s := range r.Sends {
			c.SendAcked(s.Ticket, false)
		}
		if r = c.Ready(); r.MarkDelete != nil {
			c.MarkDeleteDone(r.MarkDelete.Tag, nil)
			c.Ready()
		}
		if rd == nil {
			b.Fatalf("no read: %v", c)
		}
	}
}

// TestMessageTTLExpiresOldEntries: an entry read more than the message TTL after its publish
// time is acknowledged without a send; a younger one is sent.
func TestMessageTTLExpiresOldEntries(t *testing.T) {
	c, rd := connected(t, Config{MessageTTLMs: 1000})
	c.SetTime(t0 + 1500)
	old, young := data(0, "p", 1), data(1, "p", 2)
	old.Meta.PublishTime, young.Meta.PublishTime = t0, t0+1000
	_ = c.ReadDone(rd.Tag, []Entry{old, young}, nil)
	r := c.Ready()
	if len(r.Sends) != 1 || r.Sends[0].Pos != pos(1) || r.MarkDelete == nil || r.MarkDelete.Pos != pos(0) ||
		c.Stats().Filtered[FilteredExpired] != 1 {
		t.Fatalf("sends %+v, mark-delete %+v, stats %+v", r.Sends, r.MarkDelete, c.Stats())
	}
}
