package loadmgr

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"
)

// Thresholds are the load manager's decision parameters, under Pulsar's broker.conf keys.
// The zero value takes no defaults: use DefaultThresholds and change what differs.
type Thresholds struct {
	// SheddingEnabled turns shedding on (loadBalancerSheddingEnabled).
	SheddingEnabled bool
	// GracePeriod is how long a bundle that was moved (or split) is left where it is
	// (loadBalancerSheddingGracePeriodMinutes), so nothing flaps.
	GracePeriod time.Duration
	// ThresholdPercent is how far, in percentage points, a broker's usage may exceed the
	// average before it sheds (loadBalancerBrokerThresholdShedderPercentage).
	ThresholdPercent float64
	// OverloadedPercent is the resource usage above which a broker gets no new bundles
	// unless every broker is above it (loadBalancerBrokerOverloadedThresholdPercentage).
	OverloadedPercent float64
	// MinUnloadMsgRate is the least message rate (in+out, msg/s) a shedding decision moves;
	// a smaller overload is left alone, so idle clusters do not churn. Pulsar's
	// loadBalancerBundleUnloadMinThroughputThreshold in messages rather than bytes.
	MinUnloadMsgRate float64
	// CPUWeight, MemoryWeight, BandwidthInWeight and BandwidthOutWeight scale each resource
	// in a broker's usage (loadBalancerCPUResourceWeight, loadBalancerMemoryResourceWeight,
	// loadBalancerBandwithInResourceWeight, loadBalancerBandwithOutResourceWeight).
	CPUWeight, MemoryWeight, BandwidthInWeight, BandwidthOutWeight float64

	// AutoSplitEnabled turns automatic bundle splits on (loadBalancerAutoBundleSplitEnabled).
	AutoSplitEnabled bool
	// A bundle over any of these is split (loadBalancerNamespaceBundleMaxTopics,
	// loadBalancerNamespaceBundleMaxSessions, loadBalancerNamespaceBundleMaxMsgRate,
	// loadBalancerNamespaceBundleMaxBandwidthMbytes — here in bytes/s), unless its namespace
	// has MaxBundles bundles (loadBalancerNamespaceMaximumBundles). Zero: no limit.
	MaxBundleTopics, MaxBundleSessions   int
	MaxBundleMsgRate, MaxBundleBandwidth float64
	MaxBundles                           int

	// AssignmentTTL is how long a bundle assigned by SelectBroker or moved by an unload counts
	// on its destination whatever the reports say (Pulsar's preallocated bundles; cover the
	// brokers' stats window), and how long a split bundle is left out before its owner's
	// report drops it.
	// Default in DefaultThresholds: 1 min.
	AssignmentTTL time.Duration
}

// DefaultThresholds are Pulsar's defaults (broker.conf).
func DefaultThresholds() Thresholds {
	return Thresholds{
		SheddingEnabled:    true,
		GracePeriod:        30 * time.Minute,
		ThresholdPercent:   10,
		OverloadedPercent:  85,
		MinUnloadMsgRate:   100,
		CPUWeight:          1,
		MemoryWeight:       1,
		BandwidthInWeight:  1,
		BandwidthOutWeight: 1,
		AutoSplitEnabled:   true,
		MaxBundleTopics:    1000,
		MaxBundleSessions:  1000,
		MaxBundleMsgRate:   30000,
		MaxBundleBandwidth: 100 << 20,
		MaxBundles:         128,
		AssignmentTTL:      time.Minute,
	}
}

// sheddingMargin is how far below the average a shedding broker aims (Pulsar's
// ThresholdShedder ADDITIONAL_THRESHOLD_PERCENT_MARGIN).
const sheddingMargin = 0.05

// ActionKind tells the actions of a plan apart.
type ActionKind uint8

// Action kinds.
const (
	// ActionUnload moves Bundle from its owner From to To (admin unload with
	// destinationBroker).
	ActionUnload ActionKind = iota + 1
	// ActionSplit splits Bundle on its owner From in two halves of its range.
	ActionSplit
)

func (k ActionKind) String() string {
	switch k {
	case ActionUnload:
		return "unload"
	case ActionSplit:
		return "split"
	}
	return "unknown"
}

// Action is one decision of the leader, to execute on the bundle's owner.
type Action struct {
	Kind   ActionKind
	Bundle string
	From   string // the owner
	To     string // ActionUnload: the destination broker
	// MsgRate is the bundle's message rate when decided (for logs and metrics).
	MsgRate float64
}

// Candidate is a live broker as a Placement sees it: its load including the bundles assigned
// or moved to it that its report does not show yet. A moved bundle counts with the load it had
// when moved; an assigned one with at least assignedBundleEstimate.
type Candidate struct {
	ID         string
	MsgRate    float64 // msg/s in+out over its bundles
	Throughput float64 // bytes/s in+out over its bundles
	Bundles    int
	// MaxUsage is the largest weighted resource fraction (CPU, memory, bandwidth), 0..1+.
	MaxUsage float64
}

// Placement picks the broker for a bundle. Implementations are pure and deterministic.
type Placement interface {
	// Choose returns the index in candidates (non-empty, sorted by ID) of the broker that
	// gets bundle.
	Choose(bundle string, candidates []Candidate) int
}

// LeastLongTermMessageRate is Pulsar's default placement: the broker with the least message
// rate among those not overloaded (all of them if every broker is). Ties go to the broker
// with fewer bundles, then to the smaller ID, so every broker decides alike.
type LeastLongTermMessageRate struct {
	// OverloadedPercent: see Thresholds.OverloadedPercent.
	OverloadedPercent float64
}

// Choose implements Placement.
func (p LeastLongTermMessageRate) Choose(_ string, cs []Candidate) int {
	over := func(c Candidate) bool { return 100*c.MaxUsage > p.OverloadedPercent }
	allOver := !slices.ContainsFunc(cs, func(c Candidate) bool { return !over(c) })
	best := -1
	for i, c := range cs {
		if over(c) && !allOver {
			continue
		}
		if best < 0 || lessLoaded(c, cs[best]) {
			best = i
		}
	}
	return best
}

func lessLoaded(a, b Candidate) bool {
	if a.MsgRate != b.MsgRate {
		return a.MsgRate < b.MsgRate
	}
	if a.Bundles != b.Bundles {
		return a.Bundles < b.Bundles
	}
	return a.ID < b.ID
}

// assignedBundleEstimate is the least load a bundle assigned by SelectBroker counts with in
// placement for AssignmentTTL, whatever its broker reports for it meanwhile: Pulsar's estimate
// for a bundle it has no data of (ModularLoadManagerImpl's DEFAULT_MESSAGE_RATE, 50 msg/s,
// and DEFAULT_MESSAGE_THROUGHPUT, 50,000 bytes/s, each way), which its
// LeastLongTermMessageRate adds for every preallocated bundle and which stays in a new
// bundle's long-term average for a while after its broker reports it. With no load, a burst
// of assignments would all go to the broker whose reported rate is the least, however small
// the difference; dropping the estimate as soon as a report lists the bundle (its rate still
// ramping up) would send the rest of a burst to the broker that reported first. Shedding
// does not see the estimate: it moves real load.
var assignedBundleEstimate = BundleLoad{MsgRateIn: 50, MsgRateOut: 50, MsgThroughputIn: 50_000, MsgThroughputOut: 50_000}

// pendingMove is a bundle the leader moved or SelectBroker assigned recently.
type pendingMove struct {
	to       string
	at       time.Time
	load     BundleLoad
	assigned bool // by SelectBroker (load is zero): counts at least assignedBundleEstimate in placement
}

// mutation deliberately breaks the core, to prove the simulation's checkers catch it. Only
// tests set it.
type mutation struct {
	// weightlessAssignments: an assigned bundle counts in placement with no load until
	// reported, so a burst goes to the broker with the least reported rate.
	weightlessAssignments bool
	// dropReportedEstimate: an assigned bundle's estimate stops counting once its broker's
	// report lists it, however little load it shows, so the rest of a burst goes to the
	// broker that reported first.
	dropReportedEstimate bool
}

// State is the load manager's sans-I/O core: the live brokers, their last reports and the
// decisions not yet visible in them. All its methods are pure over the state and the time
// passed in; it does no I/O and reads no clock. Not safe for concurrent use: one goroutine
// (the Manager's) owns it.
type State struct {
	th        Thresholds
	placement Placement
	mut       mutation

	live    map[string]bool    // brokers registered under metadata.PrefixBrokers
	reports map[string]*Report // last report of each broker, by id
	// moves are the bundles moved by the leader or assigned by SelectBroker in the last
	// AssignmentTTL. A moved bundle counts on its destination with the larger of the load it
	// had when moved and the load the destination reports for it, so the destination's rates,
	// which ramp up over its stats window, do not make it look idle. Invariant: a move is
	// dropped when its destination is no longer live or it is older than AssignmentTTL.
	moves map[string]pendingMove
	// splitting are the bundles being split, left out of every view until their owner's
	// report no longer lists them (or AssignmentTTL passed).
	splitting map[string]pendingMove
	// movedAt is when each bundle was last moved by shedding or split; a bundle is not moved
	// again within GracePeriod (Pulsar's recentlyUnloadedBundles).
	movedAt map[string]time.Time
	// moveQ is the moves in the order they were made, to expire them without a scan (an entry
	// whose time differs from the move's is stale).
	moveQ []queuedMove

	// cache is the last views, valid while cached; where indexes its bundles. Everything
	// that changes the views but SelectBroker (which updates them) clears cached.
	cache  []*brokerView
	where  map[string]*brokerView
	cached bool
}

type queuedMove struct {
	bundle string
	at     time.Time
}

func (s *State) setMove(b string, m pendingMove) {
	s.moves[b] = m
	s.moveQ = append(s.moveQ, queuedMove{b, m.at})
}

// NewState returns an empty core with the thresholds; placement nil means
// LeastLongTermMessageRate.
func NewState(th Thresholds, placement Placement) *State {
	if placement == nil {
		placement = LeastLongTermMessageRate{OverloadedPercent: th.OverloadedPercent}
	}
	return &State{th: th, placement: placement, live: map[string]bool{}, reports: map[string]*Report{},
		moves: map[string]pendingMove{}, splitting: map[string]pendingMove{}, movedAt: map[string]time.Time{}}
}

// SetLive records whether broker id is registered (alive).
func (s *State) SetLive(id string, live bool) {
	s.cached = false
	if live {
		s.live[id] = true
		return
	}
	delete(s.live, id)
	for b, m := range s.moves {
		if m.to == id {
			delete(s.moves, b)
		}
	}
}

// Observe records broker id's report (nil: its report is gone). A split is done when the
// owner's report no longer lists the bundle.
func (s *State) Observe(id string, r *Report) {
	s.cached = false
	if r == nil {
		delete(s.reports, id)
		return
	}
	s.reports[id] = r
	for b, m := range s.splitting {
		if _, ok := r.Bundles[b]; !ok && m.to == id {
			delete(s.splitting, b)
		}
	}
}

// Live returns the live brokers, sorted.
func (s *State) Live() []string {
	ids := make([]string, 0, len(s.live))
	for id := range s.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Report returns broker id's last report (nil if none). The caller must not modify it.
func (s *State) Report(id string) *Report { return s.reports[id] }

// brokerView is a live broker's projected load. Candidate's rates are the real load (what
// shedding balances); candidates adds est.
type brokerView struct {
	Candidate
	bundles map[string]BundleLoad
	report  *Report
	// est is what assignedBundleEstimate adds, over the bundles SelectBroker assigned to the
	// broker in the last AssignmentTTL (Pulsar's preallocated bundles), to the loads counted
	// for them: for each, the estimate less its counted load, if positive.
	estRate, estThroughput float64
}

// expire drops the moves and splits older than AssignmentTTL.
func (s *State) expire(now time.Time) {
	for len(s.moveQ) > 0 && now.Sub(s.moveQ[0].at) > s.th.AssignmentTTL {
		q := s.moveQ[0]
		s.moveQ = s.moveQ[1:]
		if m, ok := s.moves[q.bundle]; ok && m.at.Equal(q.at) {
			delete(s.moves, q.bundle)
			s.cached = false
		}
	}
	for b, m := range s.splitting {
		if now.Sub(m.at) > s.th.AssignmentTTL {
			delete(s.splitting, b)
			s.cached = false
		}
	}
}

// expireGrace forgets the bundles whose grace period is over.
func (s *State) expireGrace(now time.Time) {
	for b, t := range s.movedAt {
		if now.Sub(t) >= s.th.GracePeriod {
			delete(s.movedAt, b)
		}
	}
}

// views returns the live brokers' projected loads, sorted by ID: each bundle counts on its
// pending move's destination, otherwise on the live broker whose report lists it (the
// newest report if several do, as after a move). The views are the cache: callers that
// change them clear s.cached.
func (s *State) views(now time.Time) []*brokerView {
	s.expire(now)
	if s.cached {
		return s.cache
	}
	ids := s.Live()
	vs := make([]*brokerView, len(ids))
	byID := make(map[string]*brokerView, len(ids))
	for i, id := range ids {
		v := &brokerView{Candidate: Candidate{ID: id}, bundles: map[string]BundleLoad{}, report: s.reports[id]}
		if r := v.report; r != nil {
			v.MaxUsage = maxUsage(r, s.th)
		}
		vs[i], byID[id] = v, v
	}
	owner := map[string]*Report{}
	for _, id := range ids {
		r := s.reports[id]
		if r == nil {
			continue
		}
		for b := range r.Bundles {
			if o, ok := owner[b]; !ok || r.LastUpdate > o.LastUpdate || (r.LastUpdate == o.LastUpdate && r.BrokerID < o.BrokerID) {
				owner[b] = r
			}
		}
	}
	for b, r := range owner {
		_, moving := s.moves[b]
		_, splitting := s.splitting[b]
		if !moving && !splitting {
			byID[r.BrokerID].bundles[b] = r.Bundles[b]
		}
	}
	for b, m := range s.moves {
		v := byID[m.to]
		if v == nil {
			continue
		}
		l := m.load
		listed := false
		if r := v.report; r != nil {
			var rl BundleLoad
			if rl, listed = r.Bundles[b]; listed && rl.MsgRate() >= l.MsgRate() {
				l = rl
			}
		}
		if m.assigned && !(listed && s.mut.dropReportedEstimate) {
			v.estRate += max(0, assignedBundleEstimate.MsgRate()-l.MsgRate())
			v.estThroughput += max(0, assignedBundleEstimate.Throughput()-l.Throughput())
		}
		v.bundles[b] = l
	}
	s.where = map[string]*brokerView{}
	for _, v := range vs {
		v.recount()
		for b := range v.bundles {
			s.where[b] = v
		}
	}
	s.cache, s.cached = vs, true
	return vs
}

func (v *brokerView) recount() {
	v.MsgRate, v.Throughput, v.Bundles = 0, 0, len(v.bundles)
	for _, l := range v.bundles {
		v.MsgRate += l.MsgRate()
		v.Throughput += l.Throughput()
	}
}

// maxUsage is the largest weighted resource fraction of a report (Pulsar's
// LocalBrokerData.getMaxResourceUsageWithWeight).
func maxUsage(r *Report, th Thresholds) float64 {
	return max(th.CPUWeight*r.CPU.Fraction(), th.MemoryWeight*r.Memory.Fraction(),
		th.BandwidthInWeight*r.BandwidthIn.Fraction(), th.BandwidthOutWeight*r.BandwidthOut.Fraction())
}

// SelectBroker picks the live broker for an unowned bundle and counts the bundle on it for
// AssignmentTTL, so a burst of lookups spreads. A bundle moved or assigned in the last
// AssignmentTTL goes to the same broker again (the destination of an unload; a retried
// lookup). It returns "" when no broker is live.
func (s *State) SelectBroker(bundle string, now time.Time) string {
	vs := s.views(now)
	if len(vs) == 0 {
		return ""
	}
	if m, ok := s.moves[bundle]; ok {
		return m.to // views dropped the moves to brokers no longer live
	}
	i := s.placement.Choose(bundle, s.candidates(vs))
	if i < 0 {
		return ""
	}
	v := vs[i]
	s.setMove(bundle, pendingMove{to: v.ID, at: now, assigned: true})
	if _, counted := s.where[bundle]; counted {
		s.cached = false // it moves from another view: rebuild
	} else {
		v.bundles[bundle] = BundleLoad{}
		v.Bundles++
		v.estRate += assignedBundleEstimate.MsgRate()
		v.estThroughput += assignedBundleEstimate.Throughput()
		s.where[bundle] = v
	}
	return v.ID
}

// candidates returns the views as a Placement sees them: each broker's load, its recent
// assignments counted at least as assignedBundleEstimate.
func (s *State) candidates(vs []*brokerView) []Candidate {
	cs := make([]Candidate, len(vs))
	for i, v := range vs {
		cs[i] = v.Candidate
		if !s.mut.weightlessAssignments {
			cs[i].MsgRate += v.estRate
			cs[i].Throughput += v.estThroughput
		}
	}
	return cs
}

// usages returns each broker's usage for the threshold shedder: the larger of its weighted
// resource usage and its share of the cluster's message rate. With N brokers the mean share
// is 1/N, so a broker sheds once it carries more than 1/N + ThresholdPercent/100 of the
// traffic.
func usages(vs []*brokerView) []float64 {
	var total float64
	for _, v := range vs {
		total += v.MsgRate
	}
	us := make([]float64, len(vs))
	for i, v := range vs {
		us[i] = v.MaxUsage
		if total > 0 {
			us[i] = max(us[i], v.MsgRate/total)
		}
	}
	return us
}

// Plan returns the leader's decisions at now: the splits of hot bundles, then the unloads of
// the threshold shedder, each to the broker the placement picks over the loads projected
// after the earlier moves. It records every decision as done; call Failed for those that
// could not be executed.
func (s *State) Plan(now time.Time) []Action {
	s.expireGrace(now)
	vs := s.views(now)
	defer func() { s.cached = false }() // the plan projected its moves on the views
	var acts []Action
	if s.th.AutoSplitEnabled {
		acts = s.planSplits(vs, now)
	}
	if s.th.SheddingEnabled && len(vs) > 1 {
		acts = append(acts, s.planShedding(vs, now)...)
	}
	return acts
}

func (s *State) inGrace(bundle string, now time.Time) bool {
	t, ok := s.movedAt[bundle]
	return ok && now.Sub(t) < s.th.GracePeriod
}

func (s *State) planSplits(vs []*brokerView, now time.Time) []Action {
	perNS := map[string]int{}
	for _, v := range vs {
		for b := range v.bundles {
			perNS[BundleNamespace(b)]++
		}
	}
	for b := range s.splitting {
		perNS[BundleNamespace(b)] += 2 // its halves, not yet reported
	}
	var acts []Action
	for _, v := range vs {
		for _, b := range sortedKeys(v.bundles) {
			l := v.bundles[b]
			if s.inGrace(b, now) || !s.overSplitLimit(l) {
				continue
			}
			ns := BundleNamespace(b)
			if ns == "" || (s.th.MaxBundles > 0 && perNS[ns] >= s.th.MaxBundles) {
				continue
			}
			perNS[ns]++
			s.movedAt[b] = now
			s.splitting[b] = pendingMove{to: v.ID, at: now, load: l}
			delete(v.bundles, b)
			acts = append(acts, Action{Kind: ActionSplit, Bundle: b, From: v.ID, MsgRate: l.MsgRate()})
		}
	}
	return acts
}

func (s *State) overSplitLimit(l BundleLoad) bool {
	th := s.th
	return (th.MaxBundleTopics > 0 && l.Topics > th.MaxBundleTopics) ||
		(th.MaxBundleSessions > 0 && l.Producers+l.Consumers > th.MaxBundleSessions) ||
		(th.MaxBundleMsgRate > 0 && l.MsgRate() > th.MaxBundleMsgRate) ||
		(th.MaxBundleBandwidth > 0 && l.Throughput() > th.MaxBundleBandwidth)
}

// planShedding is the threshold shedder: a broker whose usage exceeds the average by more
// than ThresholdPercent sheds its busiest bundles not in their grace period until it is
// projected sheddingMargin below the average. Each bundle goes to the placement's choice
// among the other brokers, only if that leaves the destination below the source.
func (s *State) planShedding(vs []*brokerView, now time.Time) []Action {
	us := usages(vs)
	var avg float64
	for _, u := range us {
		avg += u
	}
	avg /= float64(len(us))
	thr := s.th.ThresholdPercent / 100
	order := make([]int, len(vs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(us[b], us[a]) })
	var acts []Action
	for _, i := range order {
		src, u := vs[i], us[i]
		if u <= avg+thr || u == 0 || len(src.bundles) < 2 {
			continue
		}
		need := src.MsgRate * (u - avg + sheddingMargin) / u
		if need < s.th.MinUnloadMsgRate {
			continue
		}
		type bundleRate struct {
			name string
			load BundleLoad
			rate float64
		}
		bs := make([]bundleRate, 0, len(src.bundles))
		for b, l := range src.bundles {
			if r := l.MsgRate(); r > 0 && !s.inGrace(b, now) {
				bs = append(bs, bundleRate{b, l, r})
			}
		}
		slices.SortFunc(bs, func(a, b bundleRate) int {
			if c := cmp.Compare(b.rate, a.rate); c != 0 {
				return c
			}
			return strings.Compare(a.name, b.name)
		})
		others := make([]*brokerView, 0, len(vs)-1)
		for _, v := range vs {
			if v != src {
				others = append(others, v)
			}
		}
		var marked float64
		for _, br := range bs {
			if marked >= need || src.Bundles < 2 {
				break
			}
			b, l, r := br.name, br.load, br.rate
			// Past the target, stop short rather than overshoot further than we fall short.
			if marked > 0 && marked+r-need > need-marked {
				continue
			}
			j := s.placement.Choose(b, s.candidates(others))
			if j < 0 {
				break
			}
			dst := others[j]
			if dst.MsgRate+r >= src.MsgRate {
				continue
			}
			delete(src.bundles, b)
			dst.bundles[b] = l
			src.MsgRate, src.Throughput, src.Bundles = src.MsgRate-r, src.Throughput-l.Throughput(), src.Bundles-1
			dst.MsgRate, dst.Throughput, dst.Bundles = dst.MsgRate+r, dst.Throughput+l.Throughput(), dst.Bundles+1
			marked += r
			s.setMove(b, pendingMove{to: dst.ID, at: now, load: l})
			s.movedAt[b] = now
			acts = append(acts, Action{Kind: ActionUnload, Bundle: b, From: src.ID, To: dst.ID, MsgRate: r})
		}
	}
	return acts
}

// Failed undoes the record of an action that could not be executed, so a later plan may
// decide it again.
func (s *State) Failed(a Action) {
	s.cached = false
	delete(s.movedAt, a.Bundle)
	switch a.Kind {
	case ActionUnload:
		if m, ok := s.moves[a.Bundle]; ok && m.to == a.To {
			delete(s.moves, a.Bundle)
		}
	case ActionSplit:
		delete(s.splitting, a.Bundle)
	}
}

// Owner returns the broker a bundle counts on now ("" if none): its pending move's
// destination, else the newest report listing it.
func (s *State) Owner(bundle string, now time.Time) string {
	for _, v := range s.views(now) {
		if _, ok := v.bundles[bundle]; ok {
			return v.ID
		}
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// meanAndMax returns the mean and the largest message rate over brokers (for tests and
// metrics).
func meanAndMax(rates []float64) (mean, maxRate float64) {
	if len(rates) == 0 {
		return 0, 0
	}
	maxRate = math.Inf(-1)
	for _, r := range rates {
		mean += r
		maxRate = max(maxRate, r)
	}
	return mean / float64(len(rates)), maxRate
}

// reportIDs returns the brokers with a report.
func (s *State) reportIDs() []string { return sortedKeys(s.reports) }

// rates returns each live broker's projected message rate.
func (s *State) rates(now time.Time) []float64 {
	vs := s.views(now)
	rs := make([]float64, len(vs))
	for i, v := range vs {
		rs[i] = v.MsgRate
	}
	return rs
}
