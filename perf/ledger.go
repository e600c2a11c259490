package perf

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
)

// LedgerWriter is what the ledger benchmark needs of a ledger handle (*ledger.Handle).
type LedgerWriter interface {
	ID() int64
	AppendAsync(ctx context.Context, payload []byte, cb func(entryID int64, err error))
	Close(ctx context.Context) error
}

// LedgerClient creates and deletes the benchmark's ledger; LedgerClientOf adapts a
// *ledger.Client.
type LedgerClient interface {
	Create(ctx context.Context, o ledger.CreateOptions) (LedgerWriter, error)
	Delete(ctx context.Context, id int64) error
}

// LedgerClientOf adapts a ledger client.
func LedgerClientOf(c *ledger.Client) LedgerClient { return ledgerClient{c} }

type ledgerClient struct{ c *ledger.Client }

func (l ledgerClient) Create(ctx context.Context, o ledger.CreateOptions) (LedgerWriter, error) {
	return l.c.Create(ctx, o)
}

func (l ledgerClient) Delete(ctx context.Context, id int64) error { return l.c.Delete(ctx, id) }

// LedgerOptions configure Ledger.
type LedgerOptions struct {
	Client   LedgerClient
	Create   ledger.CreateOptions
	Size     int           // entry size in bytes
	Duration time.Duration // how long to append
	Rate     float64       // entries per second (0: as fast as possible)
	Keep     bool          // keep the ledger afterwards (default: delete it)
	// Progress, if not nil, receives a report once a second, on the calling goroutine.
	Progress func(Progress)
	// Clock paces the appends and times the reports (nil: RealClock).
	Clock Clock
}

// LedgerResult is the outcome of Ledger.
type LedgerResult struct {
	LedgerID   int64
	Create     ledger.CreateOptions
	Throughput Throughput
	Latency    Percentiles // add latency, from each entry's scheduled time
	// Lateness is how late the paced appends were made after their scheduled times (a part
	// of Latency); nil without a rate.
	Lateness *Percentiles
}

// String formats the result as `magnetar perf ledger` prints it.
func (r LedgerResult) String() string {
	s := fmt.Sprintf("ledger %d (E=%d WQ=%d AQ=%d): %s; add latency %s",
		r.LedgerID, r.Create.Ensemble, r.Create.WriteQuorum, r.Create.AckQuorum, r.Throughput, r.Latency)
	if r.Lateness != nil {
		// The pacer's own lateness (Go timers fire no sooner than about 1 ms on Linux) is
		// part of the add latency, which counts from the scheduled times.
		s += "; of which send lateness " + r.Lateness.String()
	}
	return s
}

// Ledger creates one ledger and appends to it for the duration (or until ctx ends), pacing
// at the rate if there is one; then it closes the ledger and deletes it unless Keep is set.
// Latency is counted from the scheduled append time, so a stalled writer shows up in the
// percentiles. The result is valid when the error is a failed append or close.
func Ledger(ctx context.Context, o LedgerOptions) (LedgerResult, error) {
	if o.Size <= 0 || o.Duration <= 0 || o.Rate < 0 {
		return LedgerResult{}, errors.New("perf: size and duration must be positive, rate not negative")
	}
	clock := o.Clock
	if clock == nil {
		clock = RealClock
	}
	h, err := o.Client.Create(ctx, o.Create)
	if err != nil {
		return LedgerResult{}, err
	}
	payload := make([]byte, o.Size)
	var (
		lat      Latencies
		late     Latencies // how late each paced append was made (part of lat)
		acked    atomic.Int64
		failed   atomic.Int64
		firstErr atomic.Value
		inflight sync.WaitGroup
	)
	pr := newMeter(clock, o.Size, "entries", o.Progress)
	pacer := NewPacer(clock, o.Rate, PacingStep)
	start := pacer.Start()
	for i := int64(0); ctx.Err() == nil; i++ {
		sched, _ := pacer.Wait(ctx, i) // an ended ctx ends the loop below
		if clock.Now().Sub(start) >= o.Duration {
			break
		}
		if pacer.Paced() {
			late.Add(clock.Now().Sub(sched))
		}
		inflight.Add(1)
		h.AppendAsync(ctx, payload, func(_ int64, err error) {
			defer inflight.Done()
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			lat.Add(clock.Now().Sub(sched))
			acked.Add(1)
		})
		pr.tick(acked.Load(), nil)
		if failed.Load() > 0 {
			break
		}
	}
	inflight.Wait()
	res := LedgerResult{LedgerID: h.ID(), Create: o.Create, Throughput: pr.throughput(acked.Load()), Latency: lat.Percentiles()}
	if pacer.Paced() {
		p := late.Percentiles()
		res.Lateness = &p
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	closeErr := h.Close(cctx)
	if !o.Keep {
		if err := o.Client.Delete(cctx, h.ID()); err != nil {
			closeErr = errors.Join(closeErr, err)
		}
	}
	if e, ok := firstErr.Load().(error); ok {
		return res, fmt.Errorf("%d adds failed, first: %w", failed.Load(), e)
	}
	return res, closeErr
}
