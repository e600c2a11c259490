package autorecovery

import (
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/internal/fsm"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
)

// WorkerConfig configures a replication Worker. Zero values take the documented defaults.
type WorkerConfig struct {
	// ID names the worker in locks and in its registration. Required.
	ID string
	// PollInterval is how often the worker lists the marks when idle. Default 1s.
	PollInterval time.Duration
	// OpenLedgerGrace is how long the LAC of a ledger that is not CLOSED must stay unchanged,
	// while a fragment with a lost bookie is beyond it, before the writer is taken as gone and
	// the ledger is recovered (fenced and closed). Default 30s.
	OpenLedgerGrace time.Duration
	// BackoffBase and BackoffMax bound the exponential backoff after failed attempts.
	// Defaults 1s and 5m.
	BackoffBase, BackoffMax time.Duration
	// Window bounds the entries copied at once. Default 256 (and at most 8 MiB read ahead).
	Window int
	// Metrics receives progress (nil: none).
	Metrics *Metrics
	// Logger receives logs (nil: discard).
	Logger *slog.Logger

	// neverRecover and swapWithoutCopy are test-only mutations (see Replicator).
	neverRecover, swapWithoutCopy bool
}

func (c WorkerConfig) withDefaults() WorkerConfig {
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.OpenLedgerGrace <= 0 {
		c.OpenLedgerGrace = 30 * time.Second
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = time.Second
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 5 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// WorkerInfo is the value of a worker's registration key (metadata.RecoveryWorkerKey).
type WorkerInfo struct {
	ID      string `json:"id"`
	Started int64  `json:"started"` // Unix milliseconds
	// Ledger is the ledger being re-replicated (0: idle) and Since when that began.
	Ledger int64 `json:"ledger,omitempty"`
	Since  int64 `json:"since,omitempty"`
}

// WorkerState is what a Worker is doing.
type WorkerState uint8

// Worker states. Legal edges (become):
//
//	Idle → Locking → Idle | Working
//	Working → Releasing → Releasing | Idle
//	any → Stopped (final)
const (
	// WorkerIdle: waiting for the next poll.
	WorkerIdle WorkerState = iota + 1
	// WorkerLocking: listing marks and taking a ledger's lock.
	WorkerLocking
	// WorkerWorking: a Replicator runs on the locked ledger.
	WorkerWorking
	// WorkerReleasing: recording the outcome and releasing the lock.
	WorkerReleasing
	// WorkerStopped: Stop was called.
	WorkerStopped
)

var workerStateNames = map[WorkerState]string{WorkerIdle: "Idle", WorkerLocking: "Locking",
	WorkerWorking: "Working", WorkerReleasing: "Releasing", WorkerStopped: "Stopped"}

func (s WorkerState) String() string { return workerStateNames[s] }

// workerEdges are the edges of the diagram above (0: not started).
var workerEdges = fsm.Edges[WorkerState]{
	0:               {WorkerIdle, WorkerStopped},
	WorkerIdle:      {WorkerLocking, WorkerStopped},
	WorkerLocking:   {WorkerIdle, WorkerWorking, WorkerStopped},
	WorkerWorking:   {WorkerReleasing, WorkerStopped},
	WorkerReleasing: {WorkerReleasing, WorkerIdle, WorkerStopped},
}

// Worker re-replicates under-replicated ledgers, one at a time: it lists the marks, takes the
// ephemeral lock of one that is due (metadata.ReplicationLockKey: a dead worker's lock frees
// itself), runs a Replicator on it, and then clears the mark (at the version it read: a mark
// extended meanwhile stays), or records a deferral or a failure with its retry time in the
// mark, and releases the lock. Worker runs on an Env: all its methods and callbacks run on
// the Env's owner goroutine.
type Worker struct {
	env     Env
	cfg     WorkerConfig
	log     *slog.Logger
	state   WorkerState
	started time.Time

	// current attempt (Working, Releasing)
	ledgerID int64
	lockVer  metadata.Version
	mark     Mark
	markVer  metadata.Version
	began    time.Time

	// OnOutcome, if set, sees every finished attempt (tests, metrics).
	OnOutcome func(ledgerID int64, res Result)
}

// NewWorker returns a worker on env; call Start on the owner goroutine.
func NewWorker(env Env, cfg WorkerConfig) *Worker {
	cfg = cfg.withDefaults()
	return &Worker{env: env, cfg: cfg, log: cfg.Logger.With("worker", cfg.ID)}
}

// State returns what the worker is doing.
func (w *Worker) State() WorkerState { return w.state }

// become moves to state to, rejecting edges the state diagram does not have.
func (w *Worker) become(to WorkerState) {
	w.state = workerEdges.Must(ErrIllegalTransition, "worker", w.state, to)
}

// Start registers the worker and begins polling.
func (w *Worker) Start() {
	if w.state != 0 {
		return
	}
	w.become(WorkerIdle)
	w.started = w.env.Now()
	w.register(0)
	w.poll()
}

// Stop stops the worker: no new attempt starts and callbacks of the current one are ignored.
// The lock of a ledger being worked on is released by the session's end.
func (w *Worker) Stop() {
	if w.state != WorkerStopped {
		w.become(WorkerStopped)
	}
}

func (w *Worker) register(ledgerID int64) {
	info := WorkerInfo{ID: w.cfg.ID, Started: w.started.UnixMilli(), Ledger: ledgerID}
	if ledgerID != 0 {
		info.Since = w.env.Now().UnixMilli()
	}
	v, _ := json.Marshal(info)
	w.env.PutEphemeral(metadata.RecoveryWorkerKey(w.cfg.ID), v, metadata.AnyVersion, func(_ metadata.Version, err error) {
		if err != nil && w.state != WorkerStopped {
			w.log.Debug("worker registration failed", "err", err)
		}
	})
}

func (w *Worker) schedule(d time.Duration) {
	w.env.After(d, func() {
		if w.state == WorkerIdle {
			w.poll()
		}
	})
}

// poll lists marks and locks and tries to lock one due, unlocked ledger.
func (w *Worker) poll() {
	w.become(WorkerLocking)
	w.env.List(metadata.PrefixUnderReplicated, func(marks []metadata.KV, err error) {
		if w.state != WorkerLocking {
			return
		}
		if err != nil {
			w.idle(w.cfg.PollInterval)
			return
		}
		if m := w.cfg.Metrics; m != nil {
			m.underReplicated.Set(float64(len(marks)))
		}
		if len(marks) == 0 {
			w.idle(w.cfg.PollInterval)
			return
		}
		w.env.List(metadata.PrefixReplicationLocks, func(locks []metadata.KV, err error) {
			if w.state != WorkerLocking {
				return
			}
			if err != nil {
				w.idle(w.cfg.PollInterval)
				return
			}
			locked := map[int64]bool{}
			for _, kv := range locks {
				// A lock of ours left over (its release got lost) is free for us.
				if id, err := metadata.LedgerIDFromSuffix(kv.Key, metadata.PrefixReplicationLocks); err == nil && string(kv.Value) != w.cfg.ID {
					locked[id] = true
				}
			}
			now := w.env.Now().UnixMilli()
			var due []int64
			for _, kv := range marks {
				id, err := metadata.LedgerIDFromSuffix(kv.Key, metadata.PrefixUnderReplicated)
				if err != nil || locked[id] {
					continue
				}
				if m, err := decodeMark(kv.Value); err == nil && m.RetryAt > now {
					continue
				}
				due = append(due, id)
			}
			if len(due) == 0 {
				w.idle(w.cfg.PollInterval)
				return
			}
			// Random choice spreads ledgers over the workers.
			w.lock(due[w.env.Rand().IntN(len(due))])
		})
	})
}

func (w *Worker) idle(d time.Duration) {
	w.become(WorkerIdle)
	w.schedule(d)
}

func (w *Worker) lock(id int64) {
	key := metadata.ReplicationLockKey(id)
	locked := func(v metadata.Version) {
		w.ledgerID, w.lockVer, w.began = id, v, w.env.Now()
		w.become(WorkerWorking)
		w.register(id)
		w.work()
	}
	w.env.PutEphemeral(key, []byte(w.cfg.ID), metadata.NotExists, func(v metadata.Version, err error) {
		if w.state != WorkerLocking {
			return
		}
		if err == nil {
			locked(v)
			return
		}
		// Taken by another worker — or by us: a put whose answer got lost, or a lock whose
		// release got lost. Ask the store who holds it.
		w.env.Get(key, func(kv metadata.KV, err error) {
			if w.state != WorkerLocking {
				return
			}
			if err == nil && string(kv.Value) == w.cfg.ID {
				locked(kv.Version)
				return
			}
			w.idle(w.cfg.PollInterval / 4)
		})
	})
}

// work reads the mark, the ledger and the live bookies, and runs a Replicator.
func (w *Worker) work() {
	id := w.ledgerID
	w.env.Get(metadata.UnderReplicatedKey(id), func(kv metadata.KV, err error) {
		if w.state != WorkerWorking {
			return
		}
		if err != nil { // cleared meanwhile, or the store failed
			w.release(w.cfg.PollInterval / 4)
			return
		}
		m, derr := decodeMark(kv.Value)
		if derr != nil {
			m = Mark{}
		}
		w.mark, w.markVer = m, kv.Version
		readLedger(w.env, id, func(meta *ledger.Metadata, v metadata.Version, err error) {
			if w.state != WorkerWorking {
				return
			}
			if errors.Is(err, ledger.ErrNoSuchLedger) {
				w.log.Info("ledger deleted; clearing its mark", "ledger", id)
				w.clearMark()
				return
			}
			if err != nil {
				w.finished(Result{Outcome: Failed, Err: err, LAC: -1})
				return
			}
			registered(w.env, func(writable, readOnly []string, err error) {
				if w.state != WorkerWorking {
					return
				}
				if err != nil {
					w.finished(Result{Outcome: Failed, Err: err, LAC: -1})
					return
				}
				w.replicate(meta, v, writable, readOnly)
			})
		})
	})
}

func (w *Worker) replicate(meta *ledger.Metadata, v metadata.Version, writable, readOnly []string) {
	live := map[string]bool{}
	for _, b := range writable {
		live[b] = true
	}
	for _, b := range readOnly {
		live[b] = true
	}
	var suspects []string
	for _, b := range w.mark.Missing {
		if live[b] {
			suspects = append(suspects, b)
		}
	}
	mark, now := w.mark, w.env.Now()
	grace := w.cfg.OpenLedgerGrace
	placement := listPlacement{env: w.env, writable: writable}
	r, err := NewReplicator(ReplicatorConfig{
		Meta: meta, Version: v, Live: func(b string) bool { return live[b] }, Suspects: suspects,
		Placement: placement, Window: w.cfg.Window, swapWithoutCopy: w.cfg.swapWithoutCopy,
		Recover: func(lac int64) bool {
			// The writer is gone if the LAC has not moved for the grace period.
			return !w.cfg.neverRecover && mark.OpenSince != 0 && lac <= mark.OpenLAC &&
				now.Sub(time.UnixMilli(mark.OpenSince)) >= grace
		},
	})
	if err != nil {
		w.finished(Result{Outcome: Failed, Err: err, LAC: -1})
		return
	}
	runReplicator(w.env, r, placement, func(res Result) {
		if w.state == WorkerWorking {
			w.finished(res)
		}
	})
}

// finished records the attempt's outcome in the mark and releases the lock.
func (w *Worker) finished(res Result) {
	id := w.ledgerID
	if m := w.cfg.Metrics; m != nil {
		m.observe(res, w.env.Now().Sub(w.began))
	}
	if w.OnOutcome != nil {
		w.OnOutcome(id, res)
	}
	lg := w.log.With("ledger", id, "outcome", res.Outcome, "fragments", res.Fragments, "entries", res.Entries,
		"bytes", res.Bytes, "recovered", res.Recovered, "took", w.env.Now().Sub(w.began))
	now := w.env.Now()
	m := w.mark
	switch res.Outcome {
	case Replicated:
		lg.Info("ledger re-replicated")
		w.clearMark()
		return
	case Deferred:
		lg.Info("ledger deferred: a fragment with a lost bookie is beyond the LAC", "lac", res.LAC)
		if m.OpenSince == 0 || res.LAC > m.OpenLAC {
			m.OpenLAC, m.OpenSince = res.LAC, now.UnixMilli()
		}
		m.Failures = 0
		m.RetryAt = now.Add(max(w.cfg.PollInterval, w.cfg.OpenLedgerGrace/4)).UnixMilli()
	default:
		lg.Warn("ledger re-replication failed", "err", res.Err, "failures", m.Failures+1)
		m.Failures++
		m.RetryAt = now.Add(w.backoff(m.Failures)).UnixMilli()
	}
	w.become(WorkerReleasing)
	w.env.Put(metadata.UnderReplicatedKey(id), m.encode(), w.markVer, func(_ metadata.Version, err error) {
		// A conflict means the mark changed (extended or cleared): it stands as it is.
		w.release(w.cfg.PollInterval / 4)
	})
}

// backoff is the bounded exponential delay after n consecutive failures.
func (w *Worker) backoff(n int) time.Duration {
	return backoff.Policy{Base: w.cfg.BackoffBase, Max: w.cfg.BackoffMax}.Delay(n - 1)
}

// clearMark deletes the mark at the version read (a mark extended meanwhile stays for the
// next attempt), then releases the lock.
func (w *Worker) clearMark() {
	w.become(WorkerReleasing)
	id := w.ledgerID
	w.env.Delete(metadata.UnderReplicatedKey(id), w.markVer, func(err error) {
		if err == nil {
			if m := w.cfg.Metrics; m != nil {
				m.ledgersReplicated.Inc()
			}
		}
		w.release(0)
	})
}

// release deletes the lock and goes back to polling after d.
func (w *Worker) release(d time.Duration) {
	if w.state == WorkerStopped {
		return
	}
	w.become(WorkerReleasing)
	id, v := w.ledgerID, w.lockVer
	w.env.Delete(metadata.ReplicationLockKey(id), v, func(error) {
		if w.state != WorkerReleasing {
			return
		}
		w.ledgerID = 0
		w.register(0)
		w.idle(max(d, time.Millisecond))
	})
}

// sortedKeys is a helper for deterministic iteration.
func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
