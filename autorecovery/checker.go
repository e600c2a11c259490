package autorecovery

import (
	"fmt"
	"slices"

	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// CheckerConfig configures the full check of one ledger.
type CheckerConfig struct {
	Meta *ledger.Metadata
	// Live reports whether a bookie is registered.
	Live func(bookie string) bool
	// Percent of the entries of each fragment whose presence is verified on each bookie that
	// should hold them (1..100; the first and last entries always are). 0: 100.
	Percent int
}

// CheckResult is what the check of one ledger found.
type CheckResult struct {
	// Lost are bookies referenced by an ensemble that are not registered; Missing are live
	// bookies that lack entries of a closed fragment they should hold. Both sorted.
	Lost, Missing []string
	// Unchecked are live bookies that did not answer (they are checked again next time).
	Unchecked []string
}

// Checker is the sans-I/O core of the auditor's full check of one ledger: it learns the LAC
// (unless CLOSED), lists the entries each live bookie of a closed fragment holds
// (bk.OpListEntries), and reports bookies missing entries. Only closed fragments are checked
// (L4): entries beyond the known LAC of an open ledger may legitimately be absent. Thread-unsafe;
// driven like Replicator.
type Checker struct {
	cfg       CheckerConfig
	key       [bk.MasterKeyLen]byte
	lac       int64
	reqs      map[uint64]string // token → bookie
	lacTokens map[uint64]bool
	nextToken uint64
	waiting   int
	held      map[string][]bk.Range
	failed    map[string]bool
	res       *CheckResult
	ready     []BookieRequest
}

// NewChecker returns a checker; call Start.
func NewChecker(cfg CheckerConfig) *Checker {
	if cfg.Percent <= 0 || cfg.Percent > 100 {
		cfg.Percent = 100
	}
	return &Checker{cfg: cfg, key: bk.MasterKey(cfg.Meta.Password), lac: -1, reqs: map[uint64]string{},
		lacTokens: map[uint64]bool{}, held: map[string][]bk.Range{}, failed: map[string]bool{}}
}

// Start begins the check.
func (c *Checker) Start() {
	m := c.cfg.Meta
	if m.State == ledger.StateClosed {
		c.lac = m.LastEntryID
		c.list()
		return
	}
	for _, b := range m.LastEnsemble().Bookies {
		t := c.send(b, &bk.Request{Op: bk.OpReadLAC, LedgerID: m.LedgerID, MasterKey: c.key})
		c.lacTokens[t] = true
	}
}

func (c *Checker) send(b string, req *bk.Request) uint64 {
	c.nextToken++
	c.reqs[c.nextToken] = b
	c.waiting++
	c.ready = append(c.ready, BookieRequest{Token: c.nextToken, Bookie: b, Req: req})
	return c.nextToken
}

// Ready returns the requests to send (BookieResult answers them) and, once finished, the
// result.
func (c *Checker) Ready() ([]BookieRequest, *CheckResult) {
	rd := c.ready
	c.ready = nil
	return rd, c.res
}

// Step feeds an answer.
func (c *Checker) Step(m BookieResult) {
	b, ok := c.reqs[m.Token]
	if !ok || c.res != nil {
		return
	}
	delete(c.reqs, m.Token)
	c.waiting--
	if c.lacTokens[m.Token] {
		if m.Err == nil {
			c.lac = max(c.lac, lacOf(c.cfg.Meta, m.Resp))
		}
		if c.waiting == 0 {
			c.list()
		}
		return
	}
	switch {
	case m.Err == nil && m.Resp.Status == bk.StatusOK:
		c.held[b] = m.Resp.Ranges
	case m.Err == nil && m.Resp.Status == bk.StatusNoSuchLedger:
		c.held[b] = nil
	default:
		c.failed[b] = true
	}
	if c.waiting == 0 {
		c.decide()
	}
}

// list asks every live bookie of a closed fragment for its entries.
func (c *Checker) list() {
	asked := map[string]bool{}
	for _, f := range Fragments(c.cfg.Meta, c.lac) {
		if !f.Closed || f.Last < f.First {
			continue
		}
		for _, b := range f.Bookies {
			if !asked[b] && c.cfg.Live(b) {
				asked[b] = true
				c.send(b, &bk.Request{Op: bk.OpListEntries, LedgerID: c.cfg.Meta.LedgerID, MasterKey: c.key})
			}
		}
	}
	if c.waiting == 0 {
		c.decide()
	}
}

func (c *Checker) decide() {
	m := c.cfg.Meta
	res := &CheckResult{}
	for _, f := range Fragments(m, c.lac) {
		for idx, b := range f.Bookies {
			if !c.cfg.Live(b) {
				if !slices.Contains(res.Lost, b) {
					res.Lost = append(res.Lost, b)
				}
				continue
			}
			if !f.Closed || slices.Contains(res.Missing, b) {
				continue
			}
			if c.failed[b] {
				if !slices.Contains(res.Unchecked, b) {
					res.Unchecked = append(res.Unchecked, b)
				}
				continue
			}
			ents := f.Entries(m, idx)
			for i, e := range ents {
				if i != 0 && i != len(ents)-1 && sampleOut(m.LedgerID, e, c.cfg.Percent) {
					continue
				}
				if !inRanges(c.held[b], e) {
					res.Missing = append(res.Missing, b)
					break
				}
			}
		}
	}
	slices.Sort(res.Lost)
	slices.Sort(res.Missing)
	slices.Sort(res.Unchecked)
	c.res = res
	clear(c.reqs)
}

// sampleOut reports whether entry e is left out of a percent sample (a fixed hash, so a
// check is reproducible).
func sampleOut(ledgerID, e int64, percent int) bool {
	if percent >= 100 {
		return false
	}
	h := uint64(ledgerID)*0x9e3779b97f4a7c15 ^ uint64(e)*0xbf58476d1ce4e5b9
	h ^= h >> 31
	return int(h%100) >= percent
}

func inRanges(rs []bk.Range, e int64) bool {
	_, found := slices.BinarySearchFunc(rs, e, func(r bk.Range, e int64) int {
		switch {
		case r.Last < e:
			return -1
		case r.First > e:
			return 1
		}
		return 0
	})
	return found
}

// runChecker drives c on env and calls done with its result.
func runChecker(env Env, c *Checker, done func(*CheckResult)) {
	finished := false
	var pump func()
	pump = func() {
		if finished {
			return
		}
		reqs, res := c.Ready()
		for _, q := range reqs {
			env.Bookie(q.Bookie, q.Req, func(resp bk.Response, err error) {
				c.Step(BookieResult{Token: q.Token, Resp: resp, Err: err})
				pump()
			})
		}
		if res != nil {
			finished = true
			done(res)
		}
	}
	c.Start()
	pump()
}

func (r CheckResult) String() string {
	return fmt.Sprintf("lost %v missing %v unchecked %v", r.Lost, r.Missing, r.Unchecked)
}
