package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Sim is a deterministic discrete-event loop on a virtual clock. Every event is a function
// scheduled at a virtual time; events at the same time run in scheduling order. All randomness
// comes from one seeded *rand.Rand, so a seed fixes the whole run. Sim is thread-unsafe:
// everything it runs executes on the caller's goroutine inside Step.
type Sim struct {
	seed  int64
	rand  *rand.Rand
	now   time.Duration
	queue eventQueue
	seq   uint64
	steps uint64

	// trace keeps the last traceCap lines (all of them when Verbose is set).
	trace    []string
	traceAt  int
	traceCap int
	// Verbose keeps the whole trace (for replaying one seed).
	Verbose bool
}

type event struct {
	at   time.Duration
	seq  uint64
	name string
	fn   func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}

// New returns a simulation seeded with seed.
func New(seed int64) *Sim {
	return &Sim{
		seed:     seed,
		rand:     rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15)),
		traceCap: 256,
	}
}

// Seed returns the seed the simulation was created with.
func (s *Sim) Seed() int64 { return s.seed }

// Rand returns the simulation's only source of randomness.
func (s *Sim) Rand() *rand.Rand { return s.rand }

// Now returns the virtual time since the start.
func (s *Sim) Now() time.Duration { return s.now }

// Steps returns how many events have run.
func (s *Sim) Steps() uint64 { return s.steps }

// Pending returns how many events are scheduled.
func (s *Sim) Pending() int { return len(s.queue) }

// After schedules fn to run d after now. name labels the event in the trace.
func (s *Sim) After(d time.Duration, name string, fn func()) {
	if d < 0 {
		d = 0
	}
	s.seq++
	heap.Push(&s.queue, &event{at: s.now + d, seq: s.seq, name: name, fn: fn})
}

// Between returns a uniformly random duration in [lo, hi].
func (s *Sim) Between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rand.Int64N(int64(hi-lo)+1))
}

// Chance returns true with probability p.
func (s *Sim) Chance(p float64) bool { return p > 0 && s.rand.Float64() < p }

// Step runs the next event, advancing the clock to its time. It returns false when nothing is
// scheduled.
func (s *Sim) Step() bool {
	if len(s.queue) == 0 {
		return false
	}
	e := heap.Pop(&s.queue).(*event)
	s.now = e.at
	s.steps++
	if e.name != "" {
		s.Tracef("%s", e.name)
	}
	e.fn()
	return true
}

// Tracef records a line in the trace, stamped with the virtual time.
func (s *Sim) Tracef(format string, args ...any) {
	line := fmt.Sprintf("%10.3fms %s", float64(s.now)/float64(time.Millisecond), fmt.Sprintf(format, args...))
	if s.Verbose {
		s.trace = append(s.trace, line)
		return
	}
	if len(s.trace) < s.traceCap {
		s.trace = append(s.trace, line)
		return
	}
	s.trace[s.traceAt] = line
	s.traceAt = (s.traceAt + 1) % s.traceCap
}

// Trace returns the recorded trace, oldest line first.
func (s *Sim) Trace() string {
	var b strings.Builder
	for i := range s.trace {
		b.WriteString(s.trace[(s.traceAt+i)%len(s.trace)])
		b.WriteByte('\n')
	}
	return b.String()
}
