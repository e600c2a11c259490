package mledger

import (
	"testing"
)

// TestCursorProperties: a cursor property set with SetProperty is durable when the call
// returns: it survives a crash of the owner (a second process opens the log without the
// first closing it) and acknowledgements persisted after it (their states carry it), and a
// removal and a reset keep to what was asked. The mark-delete rate does not delay it.
func TestCursorProperties(t *testing.T) {
	e := newMemEnv(t)
	ctx := tctx(t)
	cfg := memConfig()
	cfg.MaxMarkDeleteRate = 0.001 // one state write, then everything is held
	m1 := mustOpen(t, e.f, "x", cfg)
	ps := addN(t, m1, 0, 20)
	cu, err := m1.OpenCursor(ctx, "sub", Earliest)
	if err != nil {
		t.Fatal(err)
	}
	if err := cu.Ack(ctx, ps[0]); err != nil { // takes the one token
		t.Fatal(err)
	}
	if err := cu.SetProperty(ctx, "pulsar.replicated.subscription", 1); err != nil {
		t.Fatal(err)
	}
	if err := cu.SetProperty(ctx, "other", 7); err != nil {
		t.Fatal(err)
	}
	if err := cu.RemoveProperty(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 8; i++ { // states after the property, some written, some held
		if err := cu.Ack(ctx, ps[i]); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := cu.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cu.Reset(ctx, ps[4]); err != nil {
		t.Fatal(err)
	}
	if err := cu.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := cu.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Properties) != 1 || st.Properties["pulsar.replicated.subscription"] != 1 {
		t.Fatalf("properties after a reset: %v", st.Properties)
	}

	// The first owner never closes: the second recovers from what was persisted.
	m2 := mustOpen(t, e.second(t), "x", cfg)
	cu2, err := m2.OpenCursor(ctx, "sub", Latest)
	if err != nil {
		t.Fatal(err)
	}
	st2, err := cu2.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st2.MarkDelete != ps[3] {
		t.Fatalf("recovered at %v, want %v (reset to %v)", st2.MarkDelete, ps[3], ps[4])
	}
	if len(st2.Properties) != 1 || st2.Properties["pulsar.replicated.subscription"] != 1 {
		t.Fatalf("recovered properties %v, want pulsar.replicated.subscription=1 only", st2.Properties)
	}
	if err := cu2.RemoveProperty(ctx, "pulsar.replicated.subscription"); err != nil {
		t.Fatal(err)
	}
	if err := m2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m3 := mustOpen(t, e.second(t), "x", cfg)
	cu3, err := m3.OpenCursor(ctx, "sub", Latest)
	if err != nil {
		t.Fatal(err)
	}
	if st3, err := cu3.Stats(ctx); err != nil || len(st3.Properties) != 0 {
		t.Fatalf("properties after a removal and a reopen: %v, %v", st3.Properties, err)
	}
	if err := cu3.SetProperty(ctx, "", 1); err == nil {
		t.Fatal("an empty property name was accepted")
	}
}
