package autorecovery

import (
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
)

// AuditorConfig configures an Auditor. Zero values take the documented defaults.
type AuditorConfig struct {
	// ID names the auditor in the election key. Required.
	ID string
	// Interval is how often a follower looks for the leader's key, and how often the leader
	// checks its key and the bookies. Default 1s.
	Interval time.Duration
	// LostBookieDelay is how long a single bookie must stay unregistered before its ledgers
	// are marked (more than one lost bookie: at once). Default 30s; negative: at once.
	LostBookieDelay time.Duration
	// CheckInterval is the period of the full check of every ledger's closed fragments
	// against the bookies. Default 1h; negative disables it.
	CheckInterval time.Duration
	// CheckPercent is the share of entries per fragment and bookie whose presence the full
	// check verifies (first and last always). Default 100 (full).
	CheckPercent int
	// Metrics receives progress (nil: none).
	Metrics *Metrics
	// Logger receives logs (nil: discard).
	Logger *slog.Logger
}

func (c AuditorConfig) withDefaults() AuditorConfig {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.LostBookieDelay == 0 {
		c.LostBookieDelay = 30 * time.Second
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = time.Hour
	}
	if c.CheckPercent <= 0 || c.CheckPercent > 100 {
		c.CheckPercent = 100
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// AuditorInfo is the value of the election key (metadata.KeyAuditor).
type AuditorInfo struct {
	ID    string `json:"id"`
	Since int64  `json:"since"` // Unix milliseconds
}

// AuditorState is the role of an Auditor.
type AuditorState uint8

// Auditor states: Follower ⇄ Leader; any → Stopped (final).
const (
	// AuditorFollower waits for the election key to be free.
	AuditorFollower AuditorState = iota + 1
	// AuditorLeader holds the election key and audits.
	AuditorLeader
	// AuditorStopped: Stop was called.
	AuditorStopped
)

var auditorStateNames = map[AuditorState]string{AuditorFollower: "Follower", AuditorLeader: "Leader", AuditorStopped: "Stopped"}

func (s AuditorState) String() string { return auditorStateNames[s] }

// Auditor finds under-replicated ledgers. Auditors are leader-elected through an ephemeral
// key (metadata.KeyAuditor, put with "must not exist" through the process's session): at most
// one holds it, and when its process dies the key vanishes with the session and a follower
// takes over at its next look. The leader watches the bookies (registrations and cookies):
// a bookie known from its cookie or from ledger ensembles but not registered is lost; after
// LostBookieDelay every ledger with that bookie in an ensemble is marked under-replicated
// (durable marks listing the missing bookies). Every CheckInterval it also runs the full
// check (Checker) on every ledger. Auditor runs on an Env: all its methods and callbacks run
// on the Env's owner goroutine.
type Auditor struct {
	env   Env
	cfg   AuditorConfig
	log   *slog.Logger
	state AuditorState
	term  int // bumped on every role change: callbacks of an older term are ignored

	// Leader state.
	lostSince  map[string]time.Time
	markedLost map[string]bool // lost bookies whose ledgers were all marked this term
	known      map[string]bool // bookies seen in ensembles by the last scan
	busy       bool            // a scan is running
	lastCheck  time.Time

	// OnScan, if set, is called after every scan (tests).
	OnScan func(full bool)
}

// NewAuditor returns an auditor on env; call Start on the owner goroutine.
func NewAuditor(env Env, cfg AuditorConfig) *Auditor {
	cfg = cfg.withDefaults()
	return &Auditor{env: env, cfg: cfg, log: cfg.Logger.With("auditor", cfg.ID)}
}

// State returns the auditor's role.
func (a *Auditor) State() AuditorState { return a.state }

// Start begins the election.
func (a *Auditor) Start() {
	if a.state != 0 {
		return
	}
	a.state = AuditorFollower
	a.tick()
}

// Stop stops the auditor; its election key goes with the session.
func (a *Auditor) Stop() {
	a.become(AuditorStopped)
}

func (a *Auditor) become(s AuditorState) {
	if a.state == AuditorStopped || a.state == s {
		return
	}
	a.term++
	a.state = s
	if m := a.cfg.Metrics; m != nil {
		if s == AuditorLeader {
			m.auditorLeader.Set(1)
		} else {
			m.auditorLeader.Set(0)
		}
	}
	if s == AuditorLeader {
		a.lostSince, a.markedLost, a.known = map[string]time.Time{}, map[string]bool{}, map[string]bool{}
		a.busy, a.lastCheck = false, a.env.Now()
		a.log.Info("auditor elected")
	}
}

func (a *Auditor) tick() {
	if a.state == AuditorStopped {
		return
	}
	a.env.Get(metadata.KeyAuditor, func(kv metadata.KV, err error) {
		if a.state == AuditorStopped {
			return
		}
		// The tick chain never stops while the auditor runs; role changes only invalidate
		// the callbacks of audits and scans (term).
		defer a.env.After(a.cfg.Interval, a.tick)
		switch {
		case errors.Is(err, metadata.ErrNotFound):
			if a.state == AuditorLeader {
				a.log.Warn("auditor lost its election key")
				a.become(AuditorFollower)
			}
			a.elect()
		case err != nil:
		case a.state == AuditorFollower:
			// Our own key (an election put whose answer got lost) makes us the leader.
			var info AuditorInfo
			if json.Unmarshal(kv.Value, &info) == nil && info.ID == a.cfg.ID {
				a.become(AuditorLeader)
				a.audit()
			}
		case a.state == AuditorLeader:
			var info AuditorInfo
			if json.Unmarshal(kv.Value, &info) != nil || info.ID != a.cfg.ID {
				a.log.Warn("another auditor holds the election key", "holder", info.ID)
				a.become(AuditorFollower)
				return
			}
			a.audit()
		}
	})
}

func (a *Auditor) elect() {
	term := a.term
	v, _ := json.Marshal(AuditorInfo{ID: a.cfg.ID, Since: a.env.Now().UnixMilli()})
	a.env.PutEphemeral(metadata.KeyAuditor, v, metadata.NotExists, func(_ metadata.Version, err error) {
		if a.term != term || err != nil {
			return
		}
		a.become(AuditorLeader)
		a.audit()
	})
}

// audit compares the known bookies with the registered ones and starts a scan when lost
// bookies are due or the full check is.
func (a *Auditor) audit() {
	if a.busy {
		return
	}
	term := a.term
	a.busy = true
	registered(a.env, func(writable, readOnly []string, err error) {
		if a.term != term {
			return
		}
		if err != nil {
			a.busy = false
			return
		}
		a.env.List(metadata.PrefixCookies, func(cookies []metadata.KV, err error) {
			if a.term != term {
				return
			}
			if err != nil {
				a.busy = false
				return
			}
			live := map[string]bool{}
			for _, b := range writable {
				live[b] = true
			}
			for _, b := range readOnly {
				live[b] = true
			}
			known := map[string]bool{}
			for _, b := range idsOf(cookies, metadata.PrefixCookies) {
				known[b] = true
			}
			for b := range a.known {
				known[b] = true
			}
			now := a.env.Now()
			var lost []string
			for _, b := range sortedKeys(known) {
				if live[b] {
					delete(a.lostSince, b)
					delete(a.markedLost, b)
					continue
				}
				lost = append(lost, b)
				if _, ok := a.lostSince[b]; !ok {
					a.lostSince[b] = now
					a.log.Warn("bookie lost", "bookie", b, "delay", a.cfg.LostBookieDelay)
				}
			}
			for b := range a.lostSince {
				if !slices.Contains(lost, b) {
					delete(a.lostSince, b)
				}
			}
			if m := a.cfg.Metrics; m != nil {
				m.lostBookies.Set(float64(len(lost)))
			}
			var due []string
			for _, b := range lost {
				if !a.markedLost[b] && (len(lost) > 1 || now.Sub(a.lostSince[b]) >= a.cfg.LostBookieDelay) {
					due = append(due, b)
				}
			}
			full := a.cfg.CheckInterval > 0 && now.Sub(a.lastCheck) >= a.cfg.CheckInterval
			if len(due) == 0 && !full {
				a.busy = false
				return
			}
			a.scan(term, live, lost, due, full)
		})
	})
}

// scan lists every ledger, marks those with a due lost bookie in an ensemble, and with full
// runs the Checker on each ledger and marks what it finds.
func (a *Auditor) scan(term int, live map[string]bool, lost, due []string, full bool) {
	a.env.List(metadata.PrefixLedgers, func(kvs []metadata.KV, err error) {
		if a.term != term {
			return
		}
		if err != nil {
			a.busy = false
			return
		}
		known := map[string]bool{}
		var metas []*ledger.Metadata
		for _, kv := range kvs {
			m, err := ledger.UnmarshalMetadata(kv.Value)
			if err != nil {
				a.log.Warn("skipping unreadable ledger record", "key", kv.Key, "err", err)
				continue
			}
			metas = append(metas, m)
			for _, en := range m.Ensembles {
				for _, b := range en.Bookies {
					known[b] = true
				}
			}
		}
		a.known = known
		if full {
			a.log.Info("full check starting", "ledgers", len(metas))
		}
		var next func(i int)
		next = func(i int) {
			if a.term != term {
				return
			}
			if i == len(metas) {
				for _, b := range due {
					a.markedLost[b] = true
				}
				if full {
					a.lastCheck = a.env.Now()
					a.log.Info("full check done", "ledgers", len(metas))
				}
				a.busy = false
				if a.OnScan != nil {
					a.OnScan(full)
				}
				return
			}
			m := metas[i]
			var refs []string
			for _, en := range m.Ensembles {
				for _, b := range en.Bookies {
					if slices.Contains(due, b) && !slices.Contains(refs, b) {
						refs = append(refs, b)
					}
				}
			}
			mark := func(bookies []string, reason string, then func()) {
				if len(bookies) == 0 {
					then()
					return
				}
				markLedger(a.env, m.LedgerID, bookies, reason, func(changed bool, err error) {
					if a.term != term {
						return
					}
					if err != nil {
						a.log.Warn("mark failed", "ledger", m.LedgerID, "err", err)
					} else if changed {
						a.log.Info("ledger marked under-replicated", "ledger", m.LedgerID, "missing", bookies, "reason", reason)
						if mt := a.cfg.Metrics; mt != nil {
							mt.ledgersMarked.Inc()
						}
					}
					then()
				})
			}
			mark(refs, "lost-bookie", func() {
				if !full {
					next(i + 1)
					return
				}
				c := NewChecker(CheckerConfig{Meta: m, Live: func(b string) bool { return live[b] }, Percent: a.cfg.CheckPercent})
				runChecker(a.env, c, func(res *CheckResult) {
					if a.term != term {
						return
					}
					if mt := a.cfg.Metrics; mt != nil {
						mt.ledgersChecked.Inc()
					}
					var bad []string
					for _, b := range append(slices.Clone(res.Missing), res.Lost...) {
						// Lost bookies wait for their delay (their ledgers are marked then).
						if slices.Contains(res.Missing, b) || slices.Contains(lost, b) && a.markedLost[b] {
							bad = append(bad, b)
						}
					}
					mark(bad, "check", func() { next(i + 1) })
				})
			})
		}
		next(0)
	})
}
