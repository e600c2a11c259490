package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/internal/fsm"
)

// idState is the state of a producer or consumer id on a connection. Transitions happen only
// in idEntry.becomeLocked, along idEdges:
//
//	Creating ──▶ Waiting ──▶ Ready ──▶ Closed
//	    │           │          ▲         ▲
//	    ├───────────┼──────────┘         │
//	    └───────────┴────────────────────┘
type idState uint8

const (
	// idCreating: the id is registered and its producer or consumer is being made (topic
	// load, schema, initial subscription, the topic's admission). Nothing of it can be
	// closed yet: closing the id forgets it, and whoever creates it closes what it made.
	idCreating idState = iota + 1
	// idWaiting: a WaitForExclusive producer the topic queued (the client got
	// PRODUCER_SUCCESS with producer_ready=false). It is not served; closing the id closes
	// it.
	idWaiting
	// idReady: the topic accepted it: its commands are served, closing the id closes it, and
	// a repeated create is answered again.
	idReady
	// idClosed: the id was forgotten (closed by the client or the topic, failed,
	// unsubscribed, or the connection ended). Terminal.
	idClosed
)

var idStateNames = [...]string{idCreating: "Creating", idWaiting: "Waiting", idReady: "Ready", idClosed: "Closed"}

func (s idState) String() string { return fsm.Name(idStateNames[:], s, "idState") }

var idEdges = fsm.Edges[idState]{
	idCreating: {idWaiting, idReady, idClosed},
	idWaiting:  {idReady, idClosed},
	idReady:    {idClosed},
	idClosed:   {},
}

// errIllegalIDTransition: a registry entry was asked to take an edge it does not have (a
// bug, or a topic callback repeated).
var errIllegalIDTransition = errors.New("broker: illegal producer/consumer id transition")

// closer is what a registry holds: *topic.Producer or *topic.Consumer.
type closer interface {
	comparable
	// Close detaches it from its topic and calls done (may be nil) once it is.
	Close(done func())
}

// idEntry is one producer or consumer id of a connection; T is *topic.Producer or
// *topic.Consumer. Its fields are guarded by the registry's lock. obj and t are set when
// the entry becomes Waiting or Ready and never change after, so whoever got the entry from
// the registry in one of those states may read them without the lock.
type idEntry[T closer] struct {
	state idState
	obj   T            // the producer or consumer (zero while Creating)
	t     *topic.Topic // its topic (nil while Creating)
	// again answers a repeated create of a Ready id (with the new request id), as Pulsar
	// does: the client asks again after a reconnect race.
	again func(rid uint64)
}

func (e *idEntry[T]) becomeLocked(to idState) error {
	if !idEdges.Legal(e.state, to) {
		return fsm.Illegal(errIllegalIDTransition, "id", e.state, to)
	}
	e.state = to
	return nil
}

// registry is a connection's producer ids or consumer ids. It is safe for concurrent use:
// the reader goroutine registers, looks up and closes ids, the goroutines creating them
// (and the topic's callbacks) ready or forget them, and topic and subscription goroutines
// forget the ones they close. mu is a leaf lock.
type registry[T closer] struct {
	mu struct {
		sync.Mutex // guards the fields below and every entry's fields
		// ids holds the entries that are not Closed. Invariant: an entry is in ids iff its
		// state is not idClosed.
		ids map[uint64]*idEntry[T]
	}
}

func newRegistry[T closer]() *registry[T] {
	r := &registry[T]{}
	r.mu.ids = map[uint64]*idEntry[T]{}
	return r
}

// register adds id as Creating and returns its entry. If id is taken it returns nil and, if
// the id is Ready, the function that answers a repeated create (nil while it is being
// created or waits).
func (r *registry[T]) register(id uint64) (e *idEntry[T], again func(rid uint64)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.mu.ids[id]; old != nil {
		if old.state == idReady {
			return nil, old.again
		}
		return nil, nil
	}
	e = &idEntry[T]{state: idCreating}
	r.mu.ids[id] = e
	return e, nil
}

// ready moves e (Creating or Waiting) to Ready with its object, topic and repeated-create
// answer. It returns an error if e was forgotten meanwhile (or is Ready already): the caller
// then closes obj.
func (r *registry[T]) ready(e *idEntry[T], obj T, t *topic.Topic, again func(rid uint64)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := e.becomeLocked(idReady); err != nil {
		return err
	}
	e.obj, e.t, e.again = obj, t, again
	return nil
}

// waiting moves e (Creating) to Waiting with its object and topic. It returns an error if e
// was forgotten meanwhile: the caller then closes obj.
func (r *registry[T]) waiting(e *idEntry[T], obj T, t *topic.Topic) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := e.becomeLocked(idWaiting); err != nil {
		return err
	}
	e.obj, e.t = obj, t
	return nil
}

// get returns id's entry if it is Ready (nil otherwise).
func (r *registry[T]) get(id uint64) *idEntry[T] {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.mu.ids[id]; e != nil && e.state == idReady {
		return e
	}
	return nil
}

// forget removes id if it is still e; false if it was forgotten before (then someone else
// answered the client).
func (r *registry[T]) forget(id uint64, e *idEntry[T]) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.ids[id] != e {
		return false
	}
	r.forgetLocked(id, e)
	return true
}

// forgetObj removes id if its entry holds obj (the topic closed it).
func (r *registry[T]) forgetObj(id uint64, obj T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.mu.ids[id]; e != nil && e.state != idCreating && e.obj == obj {
		r.forgetLocked(id, e)
	}
}

// remove forgets id (the client closes it) and returns what there is to close: its object
// if it was Waiting or Ready; ok is false if there is nothing to close (the id is unknown,
// or still Creating and whoever creates it closes what it made).
func (r *registry[T]) remove(id uint64) (obj T, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.mu.ids[id]
	if e == nil {
		return obj, false
	}
	creating := e.state == idCreating
	r.forgetLocked(id, e)
	if creating {
		return obj, false
	}
	return e.obj, true
}

// closeAll forgets every id (the connection ended) and closes what there is to close; the
// ids still being created find themselves gone and close what they make.
func (r *registry[T]) closeAll() {
	r.mu.Lock()
	var objs []T
	for id, e := range r.mu.ids {
		if e.state != idCreating {
			objs = append(objs, e.obj)
		}
		r.forgetLocked(id, e)
	}
	r.mu.Unlock()
	for _, o := range objs {
		o.Close(nil)
	}
}

func (r *registry[T]) forgetLocked(id uint64, e *idEntry[T]) {
	delete(r.mu.ids, id)
	e.becomeLocked(idClosed) //nolint:errcheck // every state in ids has the edge to Closed
}

// createID serves a create command (PRODUCER, SUBSCRIBE) of id with request id rid. A taken
// id is answered at once: again if it is Ready, ServiceNotReady while it is being created.
// Otherwise id is registered as Creating and, on its own goroutine, topicName is loaded
// (created if create is set) and build is called with the topic. fail, for the goroutine and
// the topic's callbacks, forgets the id and answers rid with the error, unless the id was
// forgotten before (closed by the client, or the connection ended: that was answered).
// build's ctx ends when build returns or the connection closes.
func createID[T closer](c *conn, r *registry[T], kind string, id, rid uint64, topicName string, create bool, act auth.Action, sub string,
	build func(ctx context.Context, t *topic.Topic, e *idEntry[T], fail func(error))) {
	e, again := r.register(id)
	if e == nil {
		if again == nil {
			c.sendError(rid, fmt.Errorf("%w: %s id %d is being created on this connection", api.ErrServiceNotReady, kind, id))
			return
		}
		again(rid) // as Pulsar: an id that is ready is answered with its success again
		return
	}
	go func() {
		fail := func(err error) {
			if r.forget(id, e) {
				c.sendError(rid, err)
			}
		}
		ctx, cancel := c.ctx(time.Minute)
		defer cancel()
		name, err := topicname.Parse(topicName)
		if err != nil {
			fail(err)
			return
		}
		// Authorized before the topic is loaded (or created): a refusal changes nothing.
		if err := c.authorizeSub(ctx, name, act, sub); err != nil {
			fail(err)
			return
		}
		t, err := c.b.Topic(ctx, name, create)
		if err != nil {
			fail(err)
			return
		}
		build(ctx, t, e, fail)
	}()
}

// closeID serves a close command (CLOSE_PRODUCER, CLOSE_CONSUMER) of id with request id rid:
// it forgets id and answers rid once what id names is closed, or at once if there is nothing
// to close (the id is unknown, or still being created: whoever creates it finds it gone and
// closes what it made).
func closeID[T closer](c *conn, r *registry[T], id, rid uint64) {
	obj, ok := r.remove(id)
	if !ok {
		c.sendSuccess(rid)
		return
	}
	obj.Close(func() { c.sendSuccess(rid) })
}
