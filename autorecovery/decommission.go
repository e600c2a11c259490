package autorecovery

import (
	"fmt"
	"slices"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
)

// DecommissionProgress is reported after every round of a decommission.
type DecommissionProgress struct {
	Bookie string
	// Remaining is how many ledgers still have the bookie in an ensemble; Ledgers lists up
	// to ten of them.
	Remaining int
	Ledgers   []int64
	// Marked counts marks created or extended by this decommission so far.
	Marked  int
	Elapsed time.Duration
}

func (p DecommissionProgress) String() string {
	return fmt.Sprintf("decommission %s: %d ledgers still reference it %v (marked %d, %v elapsed)",
		p.Bookie, p.Remaining, p.Ledgers, p.Marked, p.Elapsed.Round(time.Second))
}

// DecommissionConfig configures a Decommission.
type DecommissionConfig struct {
	// Bookie is the id of the bookie to retire. It must not be registered.
	Bookie string
	// Interval between rounds. Default 1s.
	Interval time.Duration
	// Progress is called after every round (nil: none).
	Progress func(DecommissionProgress)
	// Done is called once: nil when no ledger references the bookie any more and its cookie
	// is deleted; ErrBookieUp if the bookie is (or comes back) up; or a metadata error.
	Done func(error)
}

// Decommission retires a stopped bookie (BookKeeper's decommissionBookie): every round it
// checks that the bookie is still down, lists every ledger, marks those whose ensembles
// contain the bookie (replication workers then move its replicas), and reports progress;
// once no ledger references it, it deletes the bookie's cookie and finishes. Runs on an Env.
type Decommission struct {
	env     Env
	cfg     DecommissionConfig
	start   time.Time
	marked  int
	stopped bool
}

// NewDecommission returns a decommission on env; call Start on the owner goroutine.
func NewDecommission(env Env, cfg DecommissionConfig) *Decommission {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Progress == nil {
		cfg.Progress = func(DecommissionProgress) {}
	}
	return &Decommission{env: env, cfg: cfg}
}

// Start begins the first round.
func (d *Decommission) Start() {
	d.start = d.env.Now()
	d.round()
}

// Stop abandons the decommission (Done is not called).
func (d *Decommission) Stop() { d.stopped = true }

func (d *Decommission) finish(err error) {
	if d.stopped {
		return
	}
	d.stopped = true
	d.cfg.Done(err)
}

func (d *Decommission) round() {
	if d.stopped {
		return
	}
	registered(d.env, func(writable, readOnly []string, err error) {
		if d.stopped {
			return
		}
		if err != nil {
			d.retry()
			return
		}
		if slices.Contains(writable, d.cfg.Bookie) || slices.Contains(readOnly, d.cfg.Bookie) {
			d.finish(fmt.Errorf("%w: %s is registered; stop it before decommissioning it", ErrBookieUp, d.cfg.Bookie))
			return
		}
		d.env.List(metadata.PrefixLedgers, func(kvs []metadata.KV, err error) {
			if d.stopped {
				return
			}
			if err != nil {
				d.retry()
				return
			}
			var refs []int64
			for _, kv := range kvs {
				m, err := ledger.UnmarshalMetadata(kv.Value)
				if err != nil {
					continue
				}
				for _, en := range m.Ensembles {
					if slices.Contains(en.Bookies, d.cfg.Bookie) {
						refs = append(refs, m.LedgerID)
						break
					}
				}
			}
			d.markAll(refs, 0)
		})
	})
}

func (d *Decommission) markAll(refs []int64, i int) {
	if d.stopped {
		return
	}
	if i < len(refs) {
		markLedger(d.env, refs[i], []string{d.cfg.Bookie}, "decommission", func(changed bool, err error) {
			if changed {
				d.marked++
			}
			d.markAll(refs, i+1)
		})
		return
	}
	p := DecommissionProgress{Bookie: d.cfg.Bookie, Remaining: len(refs), Ledgers: refs[:min(len(refs), 10)],
		Marked: d.marked, Elapsed: d.env.Now().Sub(d.start)}
	d.cfg.Progress(p)
	if len(refs) > 0 {
		d.retry()
		return
	}
	d.env.Delete(metadata.CookieKey(d.cfg.Bookie), metadata.AnyVersion, func(err error) {
		if err != nil {
			d.retry()
			return
		}
		d.finish(nil)
	})
}

func (d *Decommission) retry() { d.env.After(d.cfg.Interval, d.round) }
