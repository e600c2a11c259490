package server

import (
	"errors"
	"testing"
)

// fakeObj stands for a producer or consumer; it counts its closes.
type fakeObj struct {
	id     uint64
	closes int
}

func (o *fakeObj) Close(done func()) {
	o.closes++
	if done != nil {
		done()
	}
}

// TestIDStateEdges: becomeLocked takes exactly the edges of idEdges and refuses the others.
func TestIDStateEdges(t *testing.T) {
	all := []idState{idCreating, idWaiting, idReady, idClosed}
	for _, from := range all {
		for _, to := range all {
			e := &idEntry[*fakeObj]{state: from}
			err := e.becomeLocked(to)
			legal := idEdges.Legal(from, to)
			switch {
			case legal && err != nil:
				t.Errorf("%v -> %v refused: %v", from, to, err)
			case !legal && !errors.Is(err, errIllegalIDTransition):
				t.Errorf("%v -> %v accepted (err %v)", from, to, err)
			case !legal && e.state != from:
				t.Errorf("%v -> %v refused but the state is %v", from, to, e.state)
			}
		}
	}
	if s := idState(9).String(); s != "idState(9)" {
		t.Errorf("unknown state prints %q", s)
	}
}

// TestRegistry walks ids through the registry as the connection does: a repeated create is
// refused while creating and answered again once ready; only Ready ids are served; closing a
// Creating id leaves nothing to close and makes its late ready fail; the topic forgets only
// its own object; closeAll closes what was created.
func TestRegistry(t *testing.T) {
	r := newRegistry[*fakeObj]()
	e1, again := r.register(1)
	if e1 == nil || again != nil {
		t.Fatal("first register of id 1")
	}
	if e, again := r.register(1); e != nil || again != nil {
		t.Fatal("register of an id being created must be refused without an answer")
	}
	if r.get(1) != nil {
		t.Fatal("a Creating id is served")
	}
	c1 := &fakeObj{id: 1}
	answered := uint64(0)
	if err := r.ready(e1, c1, nil, func(rid uint64) { answered = rid }); err != nil {
		t.Fatal(err)
	}
	if err := r.ready(e1, c1, nil, nil); !errors.Is(err, errIllegalIDTransition) {
		t.Fatalf("second ready: %v", err)
	}
	if e, again := r.register(1); e != nil || again == nil {
		t.Fatal("register of a Ready id must return its answer")
	} else if again(7); answered != 7 {
		t.Fatal("the repeated answer was not given")
	}
	if r.get(1) != e1 {
		t.Fatal("a Ready id is not served")
	}
	r.forgetObj(1, &fakeObj{id: 1}) // another object with the same id: kept
	if r.get(1) != e1 {
		t.Fatal("forgetObj of another object forgot the id")
	}

	// Closing an id being created: nothing to close, and its creator learns it at ready.
	e2, _ := r.register(2)
	if obj, ok := r.remove(2); ok || obj != nil {
		t.Fatalf("remove of a Creating id returned %v %v", obj, ok)
	}
	if err := r.ready(e2, &fakeObj{id: 2}, nil, nil); !errors.Is(err, errIllegalIDTransition) {
		t.Fatalf("ready after remove: %v", err)
	}
	if r.forget(2, e2) {
		t.Fatal("forget of a removed id reported true")
	}

	// A waiting id is closable but not served.
	e3, _ := r.register(3)
	c3 := &fakeObj{id: 3}
	if err := r.waiting(e3, c3, nil); err != nil {
		t.Fatal(err)
	}
	if r.get(3) != nil {
		t.Fatal("a Waiting id is served")
	}
	r.register(4) // stays Creating
	r.closeAll()
	if c1.closes != 1 || c3.closes != 1 {
		t.Fatalf("closeAll closed the Ready one %d times and the Waiting one %d times, want once each", c1.closes, c3.closes)
	}
	if e3.state != idClosed || e1.state != idClosed || r.get(1) != nil {
		t.Fatalf("after closeAll: %v %v", e1.state, e3.state)
	}
	if obj, ok := r.remove(3); ok || obj != nil {
		t.Fatal("remove after closeAll found something to close")
	}
	r.forgetObj(1, c1) // after closeAll: nothing left, no panic
}
