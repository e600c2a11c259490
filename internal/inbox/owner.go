package inbox

import (
	"sync"
	"sync/atomic"
	"time"
)

// Owner runs a component's owner loop on a goroutine that exists only while there is work:
// an idle component costs no goroutine (and no stack). Work arrives through Wake — called
// by the Push of every Queue made with NewOwned(o), or directly (a timer, a close request)
// — and Owner runs step on its goroutine until step has run once after the last Wake. Then
// the goroutine lingers (waits for a Wake, as a long-lived owner goroutine would, so a busy
// component pays no goroutine start per burst) and ends when no Wake came for the linger
// period; the next Wake starts a new one.
//
// At most one goroutine runs step at a time, and each run of step happens after the
// previous one ended (a new goroutine is started only under the lock the previous one
// released when it gave up ownership), so step owns the component's state exactly as a
// long-lived owner goroutine would; a Wake during a step makes step run again before the
// goroutine lingers or ends, so no work is ever left waiting for a Wake that was spent.
//
// A new Owner is held by its creator: the creating goroutine is the owner (it may set up
// the state step owns) until it calls Release, which starts the goroutine if work arrived
// meanwhile. Owner is safe for concurrent use.
type Owner struct {
	step   func()
	linger time.Duration
	// onPark, if set (SetParkHook), is called each time the owner gives up ownership.
	onPark atomic.Pointer[func()]
	// timer bounds a linger; used by the owner goroutine only, made at its first linger and
	// dropped when it ends (an idle Owner holds none).
	timer *time.Timer
	mu    struct {
		sync.Mutex // guards the fields below; a leaf lock, never held while running step
		// running is set while a goroutine (or the creator, before Release) owns the
		// component. Invariant: at most one owner goroutine exists, and only while running.
		running bool
		// lingering is set while the owner goroutine waits on wake; a Wake clears it.
		// Invariant: lingering implies running.
		lingering bool
		// wake takes a Wake's token while the goroutine lingers (cap 1); made at the
		// goroutine's first linger, dropped when it ends.
		wake chan struct{}
		// pending is set by Wake and cleared by the owner just before it runs step.
		pending bool
		// stopped is set by Stop: no run starts any more.
		stopped bool
	}
}

// DefaultLinger is the linger of the components' owners: a component with events every
// few milliseconds (a topic being published to) keeps its goroutine, woken as a long-lived
// one would be; one that is woken now and then (a periodic timer of an idle managed ledger)
// holds a goroutine for no longer than this after each wake-up.
const DefaultLinger = 20 * time.Millisecond

// NewOwner returns an Owner that runs step, held by the caller until Release. After a run
// finds no new work, its goroutine lingers for linger (0: it ends at once).
func NewOwner(step func(), linger time.Duration) *Owner {
	o := &Owner{step: step, linger: linger}
	o.mu.running = true
	return o
}

// Wake asks for a run of step after this call: it wakes the lingering owner goroutine, or
// starts one if none runs.
func (o *Owner) Wake() {
	o.mu.Lock()
	if o.mu.stopped {
		o.mu.Unlock()
		return
	}
	o.mu.pending = true
	switch {
	case o.mu.lingering:
		o.mu.lingering = false
		wake := o.mu.wake
		o.mu.Unlock()
		select {
		case wake <- struct{}{}:
		default: // a token is there already
		}
		return
	case o.mu.running:
		o.mu.Unlock()
		return
	}
	o.mu.running = true
	o.mu.Unlock()
	go o.loop()
}

// Stop ends the owner for good (the component has ended; called from step): no run of step starts after the current one, and the
// goroutine ends instead of lingering.
func (o *Owner) Stop() {
	o.mu.Lock()
	o.mu.stopped = true
	o.mu.pending = false
	if o.mu.lingering {
		o.mu.lingering = false
		wake := o.mu.wake
		o.mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
		return
	}
	o.mu.Unlock()
}

// Release ends the creator's hold (call it once, from the creating goroutine, after it set
// the state up): a Wake that came meanwhile starts the owner goroutine now.
func (o *Owner) Release() {
	o.mu.Lock()
	if !o.mu.pending {
		o.mu.running = false
		o.mu.Unlock()
		o.parked()
		return
	}
	o.mu.Unlock()
	go o.loop()
}

// loop runs step while work is pending, lingers, and returns, giving up ownership, when no
// work came for the linger period.
func (o *Owner) loop() {
	for {
		o.mu.Lock()
		if o.mu.pending {
			o.mu.pending = false
			o.mu.Unlock()
			o.step()
			continue
		}
		if o.linger <= 0 || o.mu.stopped {
			o.mu.running, o.mu.wake, o.timer = false, nil, nil
			o.mu.Unlock()
			o.parked()
			return
		}
		if o.mu.wake == nil {
			o.mu.wake = make(chan struct{}, 1)
		}
		wake := o.mu.wake
		select { // a token left by a Wake that did not need it: stale
		case <-wake:
		default:
		}
		o.mu.lingering = true
		o.mu.Unlock()
		if !o.lingerOnce(wake) {
			return
		}
	}
}

// lingerOnce waits for a Wake or the end of the linger period. It returns false after
// giving up ownership (no Wake came).
func (o *Owner) lingerOnce(wake chan struct{}) bool {
	if o.timer == nil {
		o.timer = time.NewTimer(o.linger)
	} else {
		o.timer.Reset(o.linger)
	}
	select {
	case <-wake:
	case <-o.timer.C:
	}
	o.timer.Stop() // before giving up ownership
	o.mu.Lock()
	if o.mu.lingering { // no Wake came: give up ownership
		o.mu.lingering = false
		o.mu.running, o.mu.wake, o.timer = false, nil, nil
		o.mu.Unlock()
		o.parked()
		return false
	}
	o.mu.Unlock()
	return true // woken: pending is set
}

func (o *Owner) parked() {
	if f := o.onPark.Load(); f != nil {
		(*f)()
	}
}

// SetParkHook makes f run each time the owner gives up ownership (after the fact: another
// goroutine may own it by then), for tests that wait until an idle component has no
// goroutine. f must not block.
func (o *Owner) SetParkHook(f func()) { o.onPark.Store(&f) }

// Running reports whether the owner is held or has a goroutine (tests: an idle Owner has
// none).
func (o *Owner) Running() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.running
}
