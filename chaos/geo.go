package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Across clusters (Options.Clusters = 2 or 3): sites a, b (and c), each a Pulsar cluster
// of its own — one etcd member, two bookies (E/WQ/AQ 2/2/2), two brokers started with
// --cluster NAME — on the one bridge, so that faults can cut the links between them. Each
// site's setup client writes, through its own cluster's admin REST API, every cluster's
// record (brokerServiceUrl: the first broker of that cluster, behind its proxy), the tenant
// geo allowed in every cluster, the namespace geo/ns replicated to every cluster and the
// partitioned topic geo/ns/chaos (the operator's part when each cluster has its own
// configuration store). Producers with dedup publish in every cluster; a Failover consumer
// in every cluster acknowledges what it gets; after the heal, a reader in every cluster
// reads every partition. The checker wants every message acknowledged in any cluster
// stored exactly once and in per-producer order in every cluster, and delivered to every
// cluster's subscription.

// geoTopic is the replicated topic of a run across clusters.
const geoTopic = "persistent://geo/ns/chaos"

// geoCatchUp bounds how long, after the producers finished, the subscriptions of every
// cluster may take to hold every acknowledged message before the run is called stuck.
const geoCatchUp = 3 * time.Minute

// geoTopologies names the nodes of n sites: a-e0, a-k0, a-k1, a-b0, a-b1, a-p0.., a-c0
// (and a-r0 for the setup, the reader and the stats), then b-…, c-….
func geoTopologies(n, producers int) []Topology {
	var out []Topology
	for i := range min(n, 3) {
		name := string(rune('a' + i))
		p := func(s string) string { return name + "-" + s }
		t := Topology{Cluster: name, Etcd: []string{p("e0")}, Bookies: []string{p("k0"), p("k1")},
			Brokers: []string{p("b0"), p("b1")}, Consumers: []string{p("c0")}}
		for j := range max(producers, 0) {
			t.Producers = append(t.Producers, p(fmt.Sprintf("p%d", j)))
		}
		out = append(out, t)
	}
	return out
}

// GeoTopologies is the nodes of a run across n clusters with the default options, for
// printing schedules.
func GeoTopologies(n int) []Topology { return geoTopologies(n, 2) }

func mergeTopology(a, b Topology) Topology {
	return Topology{Etcd: concat(a.Etcd, b.Etcd), Bookies: concat(a.Bookies, b.Bookies), Brokers: concat(a.Brokers, b.Brokers),
		Producers: concat(a.Producers, b.Producers), Consumers: concat(a.Consumers, b.Consumers)}
}

// PlannedFaults is the schedule a run of seed with options o draws (Options.Faults aside).
func PlannedFaults(seed uint64, o Options) []Fault {
	o.defaults()
	if o.Clusters > 1 {
		return ScheduleGeo(seed, geoTopologies(o.Clusters, o.Producers), o.Duration, o.SessionTTL, o.MinFaults, o.MaxFaults)
	}
	return Schedule(seed, topology(o.Producers, o.Txn), o.Duration, o.SessionTTL, o.MinFaults, o.MaxFaults)
}

// geoFaultWeights: the faults between clusters weigh most; in-cluster faults are there too.
var geoFaultWeights = []faultWeight{
	{FaultGeoCut, 5}, {FaultGeoOneWay, 2}, {FaultGeoLoss, 2}, {FaultKillOwner, 5}, {FaultEtcdPause, 2},
	{FaultKill, 3}, {FaultPause, 1}, {FaultDelay, 1}, {FaultLoss, 1}, {FaultStall, 1}, {FaultReset, 1},
	{FaultBookieCut, 1}, {FaultEtcdCut, 1}, {FaultDiskFull, 1},
}

// ScheduleGeo draws the faults of a run across the clusters of sites from its seed, as
// Schedule does for one cluster: between minFaults and maxFaults, each starting in
// [2 s, d−3 s].
func ScheduleGeo(seed uint64, sites []Topology, d, ttl time.Duration, minFaults, maxFaults int) []Fault {
	dr := newFaultDraw(seed, geoFaultWeights, d, minFaults, maxFaults)
	rng, pick, secs := dr.rng, dr.pick, dr.secs
	var out []Fault
	for range dr.n {
		f := dr.next()
		perm := rng.Perm(len(sites))
		s, peer := sites[perm[0]], sites[perm[1]]
		switch f.Kind {
		case FaultGeoCut:
			f.Target, f.Peer = s.Cluster, peer.Cluster
			f.For = secs(3, 20)
		case FaultGeoOneWay:
			f.Target, f.Peer = s.Cluster, peer.Cluster
			f.For = secs(2, 12)
		case FaultGeoLoss:
			f.Target, f.Peer = s.Cluster, peer.Cluster
			f.Loss = 0.1 + rng.Float64()*0.4
			f.For = secs(3, 12)
		case FaultKillOwner:
			f.Target = s.Cluster
			f.Partition = rng.IntN(2)
			f.For = secs(0.5, 8)
		case FaultEtcdPause:
			f.Target = pick(s.Etcd)
			f.For = ttl + secs(1, 6)
		case FaultKill:
			if rng.IntN(3) == 0 {
				f.Target = pick(concat(s.Producers, s.Consumers))
			} else {
				f.Target = pick(s.servers())
			}
			f.For = secs(0.5, 8)
		case FaultPause:
			f.Target = pick(concat(s.Bookies, s.Brokers))
			f.For = ttl + secs(1, 4)
		case FaultDelay:
			f.Target = pick(s.servers())
			f.Delay = time.Duration(20+rng.IntN(280)) * time.Millisecond
			f.For = secs(3, 10)
		case FaultLoss:
			f.Target = pick(s.servers())
			f.Loss = 0.05 + rng.Float64()*0.25
			f.For = secs(3, 10)
		case FaultStall:
			f.Target = pick(s.servers())
			f.Dir = Direction(rng.IntN(2))
			f.For = secs(2, 10)
		case FaultReset:
			f.Target = pick(s.servers())
		case FaultBookieCut:
			f.Target = pick(s.Bookies)
			f.For = secs(2, 12)
		case FaultEtcdCut:
			f.Target = pick(s.Brokers)
			f.For = secs(2, 12)
		case FaultDiskFull:
			f.Target = pick(s.Bookies)
			f.For = secs(4, 10)
		}
		out = append(out, f)
	}
	slices.SortStableFunc(out, func(a, b Fault) int { return cmp.Compare(a.At, b.At) })
	return out
}

func (c *cluster) siteNamed(name string) *site {
	for _, s := range c.sites {
		if s.name == name {
			return s
		}
	}
	return nil
}

// applyGeo starts a fault between clusters and returns what heals it.
func (c *cluster) applyGeo(f Fault) (func(), error) {
	from, to := c.siteNamed(f.Target), c.siteNamed(f.Peer)
	if from == nil && f.Kind != FaultEtcdPause {
		return nil, fmt.Errorf("unknown cluster %q", f.Target)
	}
	block := func(pairs [][2]*Node) func() {
		for _, p := range pairs {
			c.net.Block(p[0], p[1])
		}
		return func() {
			for _, p := range pairs {
				c.net.Unblock(p[0], p[1])
			}
		}
	}
	brokerPairs := func(a, b *site) [][2]*Node {
		var out [][2]*Node
		for _, x := range a.topo.Brokers {
			for _, y := range b.topo.Brokers {
				out = append(out, [2]*Node{c.nodes[x], c.nodes[y]})
			}
		}
		return out
	}
	switch f.Kind {
	case FaultGeoCut, FaultGeoOneWay, FaultGeoLoss:
		if to == nil {
			return nil, fmt.Errorf("unknown cluster %q", f.Peer)
		}
	}
	switch f.Kind {
	case FaultGeoCut:
		return block(slices.Concat(brokerPairs(from, to), brokerPairs(to, from))), nil
	case FaultGeoOneWay:
		return block(brokerPairs(from, to)), nil
	case FaultGeoLoss:
		// Bytes from `from` to `to`: what from's brokers send on connections into to's
		// brokers (In at to's proxies) and what they answer on connections from to's
		// brokers (Out at from's proxies).
		ips := func(s *site) []string {
			var out []string
			for _, b := range s.topo.Brokers {
				out = append(out, c.nodes[b].IP)
			}
			return out
		}
		type ruleAt struct {
			px *Proxy
			id int
		}
		var rules []ruleAt
		for _, b := range to.topo.Brokers {
			px := c.members[b].proxy
			rules = append(rules, ruleAt{px, px.AddRule(Rule{Peers: ips(from), Loss: [2]float64{In: f.Loss}})})
		}
		for _, b := range from.topo.Brokers {
			px := c.members[b].proxy
			rules = append(rules, ruleAt{px, px.AddRule(Rule{Peers: ips(to), Loss: [2]float64{Out: f.Loss}})})
		}
		return func() {
			for _, r := range rules {
				r.px.RemoveRule(r.id)
			}
		}, nil
	case FaultKillOwner:
		owner, err := c.lookupOwner(from, fmt.Sprintf("%s-partition-%d", c.topic, f.Partition))
		if err != nil {
			return nil, err
		}
		c.log("kill-owner: %s owns partition %d of cluster %s", owner, f.Partition, from.name)
		return c.apply(Fault{Kind: FaultKill, Target: owner, For: f.For})
	case FaultEtcdPause:
		return c.apply(Fault{Kind: FaultPause, Target: f.Target})
	}
	return nil, fmt.Errorf("unknown fault %q", f.Kind)
}

// lookupOwner asks the site's brokers (Pulsar's HTTP lookup, from the site's r0 node)
// which of them owns topic, and returns its node name.
func (c *cluster) lookupOwner(s *site, topic string) (string, error) {
	nd := c.nodes[s.prefix+"r0"]
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return nd.Dial(ctx, addr) }}}
	defer hc.CloseIdleConnections()
	var errs []error
	for _, u := range c.adminURLs(s) {
		resp, err := hc.Get(u + "/lookup/v2/topic/" + strings.Replace(topic, "://", "/", 1))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var ld struct {
			BrokerURL string `json:"brokerUrl"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &ld) != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %s", u, resp.Status, b))
			continue
		}
		pu, err := url.Parse(ld.BrokerURL)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, b := range s.topo.Brokers {
			if c.nodes[b].IP == pu.Hostname() {
				return b, nil
			}
		}
		errs = append(errs, fmt.Errorf("lookup of %s answered %s, not a broker of cluster %s", topic, ld.BrokerURL, s.name))
	}
	return "", fmt.Errorf("lookup %s: %w", topic, errors.Join(errs...))
}

// clusterRecords are the cluster records every site's setup writes: each cluster reached at
// its first broker (with Options.AllBrokersInRecords, at every broker), through the brokers'
// proxies (so the faults between clusters apply).
func (c *cluster) clusterRecords() []ClusterRecord {
	var out []ClusterRecord
	for _, s := range c.sites {
		ip := c.nodes[s.topo.Brokers[0]].IP
		broker := fmt.Sprintf("pulsar://%s:%d", ip, brokerPort)
		if c.o.AllBrokersInRecords {
			broker = c.serviceURL(s) // pulsar://b0:6650,b1:6650
		}
		out = append(out, ClusterRecord{Name: s.name, ServiceURL: fmt.Sprintf("http://%s:%d", ip, brokerHTTP),
			BrokerServiceURL: broker})
	}
	return out
}

// geoWorkload sets every cluster up, runs producers and consumers in every cluster through
// the faults, heals, waits until every cluster's subscription has every acknowledged
// message (or geoCatchUp passed), reads every cluster's topic and checks.
func (c *cluster) geoWorkload(ctx context.Context, faults []Fault) (Verdict, []string, error) {
	recs := c.clusterRecords()
	var mu sync.Mutex
	var setupErr []error
	var wg sync.WaitGroup
	for _, s := range c.sites {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.runClientOnce(ctx, s.prefix+"setup", ClientSpec{Role: roleGeoSetup, Cluster: s.name, Clusters: recs}, 150*time.Second)
			mu.Lock()
			setupErr = append(setupErr, err)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := errors.Join(setupErr...); err != nil {
		return Verdict{}, nil, err
	}
	for _, s := range c.sites { // the hold subscriptions, once every cluster has the topic
		if _, err := c.runClientOnce(ctx, s.prefix+"setup", ClientSpec{Role: roleSetup}, 120*time.Second); err != nil {
			return Verdict{}, nil, err
		}
	}
	c.log("clusters set up")
	goFile := filepath.Join(c.dir, "go")
	files := make([]SiteFiles, len(c.sites))
	var producers []string
	for i, s := range c.sites {
		files[i] = SiteFiles{Cluster: s.name, Consumer: filepath.Join(c.dir, s.prefix+"c0.rec"), Reader: filepath.Join(c.dir, s.prefix+"r0.rec")}
		for j, p := range s.topo.Producers {
			proc, err := c.client(p, ClientSpec{Role: roleProducer, Name: p, Rate: c.o.Rate, GoFile: goFile, Batching: j == 0, Rewind: 20, Seed: c.seed})
			if err != nil {
				return Verdict{}, nil, err
			}
			c.clients[p] = proc
			producers = append(producers, p)
			files[i].Producers = append(files[i].Producers, filepath.Join(c.dir, p+".rec"))
		}
		cons, err := c.client(s.prefix+"c0", ClientSpec{Role: roleConsumer})
		if err != nil {
			return Verdict{}, nil, err
		}
		c.clients[s.prefix+"c0"] = cons
	}
	// The replicated subscription rs: its consumer in the first cluster until a time in the
	// produce window, then, once every subscription caught up, in the second.
	rsBefore, rsAfter := c.sites[0].prefix+"s0", c.sites[1].prefix+"s0"
	rs, err := c.client(rsBefore, ClientSpec{Role: roleConsumer, Subscription: "rs", ReplicateState: true})
	if err != nil {
		return Verdict{}, nil, err
	}
	c.clients[rsBefore] = rs
	rsStop := c.o.Duration * time.Duration(30+newRand(c.seed).IntN(41)) / 100
	for _, p := range c.clients {
		if err := p.Start(); err != nil {
			return Verdict{}, nil, err
		}
	}
	ready := time.Now().Add(2 * time.Minute)
	for _, f := range files {
		for _, pf := range f.Producers {
			for lastReady(pf) == 0 && time.Now().Before(ready) {
				select {
				case <-ctx.Done():
					return Verdict{}, nil, ctx.Err()
				case <-time.After(100 * time.Millisecond): // poll interval of the producers' records
				}
			}
		}
	}
	start := time.Now()
	if err := writeFileAtomic(goFile, fmt.Sprint(start.Add(c.o.Duration).UnixMilli())); err != nil {
		return Verdict{}, nil, err
	}
	c.log("workload started")
	for _, f := range faults {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.inject(ctx, start, f)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-time.After(time.Until(start.Add(rsStop))):
			rs.Term(10 * time.Second)
			c.log("the replicated subscription's consumer in %s stopped", c.sites[0].name)
		case <-ctx.Done():
		}
	}()
	wg.Wait()
	c.healAll()
	c.log("faults over, healed")
	var stuck []string
	deadline := start.Add(c.o.Duration + 90*time.Second)
	for _, p := range producers {
		proc := c.clients[p]
		select {
		case <-proc.Done():
		case <-time.After(time.Until(deadline)):
			stuck = append(stuck, p)
			proc.Kill()
		case <-ctx.Done():
			return Verdict{}, stuck, ctx.Err()
		}
	}
	c.log("producers done")
	// Every cluster's subscription catches up with every acknowledged message (replication
	// included), or we give up after geoCatchUp.
	t0 := time.Now()
	asRead := make([]SiteFiles, len(files))
	for i, f := range files {
		asRead[i] = f
		asRead[i].Reader = f.Consumer
	}
	c.catchUp = -1
	for {
		v, err := CheckGeo(asRead, 0)
		if err == nil && v.Lost == 0 {
			c.catchUp = time.Since(t0)
			c.log("every subscription caught up in %.1fs", c.catchUp.Seconds())
			break
		}
		if time.Since(t0) > geoCatchUp {
			for _, s := range c.sites {
				stuck = append(stuck, s.prefix+"c0")
				statsFile := filepath.Join(c.dir, s.prefix+"stats.txt")
				if _, err := c.runClientOnce(ctx, s.prefix+"stats", ClientSpec{Role: roleStats, Out: statsFile}, 90*time.Second); err != nil {
					c.note("stats of %s: %v", s.name, err)
				}
			}
			c.note("the subscriptions did not catch up within %v (the brokers' logs end with their goroutines): %v", geoCatchUp, v.Examples)
			c.dumpBrokers = true
			break
		}
		select {
		case <-ctx.Done():
			return Verdict{}, stuck, ctx.Err()
		case <-time.After(500 * time.Millisecond): // poll interval of the consumers' records
		}
	}
	for _, s := range c.sites {
		c.clients[s.prefix+"c0"].Term(10 * time.Second)
	}
	c.log("consumers done")
	// The replicated subscription moves: its consumer in the second cluster runs until it
	// got every message that cluster's subscription got and the first consumer did not.
	rsFiles := [2]string{filepath.Join(c.dir, rsBefore+".rec"), filepath.Join(c.dir, rsAfter+".rec")}
	rs2, err := c.client(rsAfter, ClientSpec{Role: roleConsumer, Subscription: "rs", ReplicateState: true})
	if err != nil {
		return Verdict{}, stuck, err
	}
	c.clients[rsAfter] = rs2
	if err := rs2.Start(); err != nil {
		return Verdict{}, stuck, err
	}
	t1 := time.Now()
	for {
		n, err := missingFrom(files[1].Consumer, rsFiles[0], rsFiles[1])
		if err == nil && n == 0 {
			c.log("the replicated subscription's consumer in %s got every message in %.1fs", c.sites[1].name, time.Since(t1).Seconds())
			break
		}
		if time.Since(t1) > 90*time.Second {
			c.note("the replicated subscription's consumer in %s lacks %d messages after 90 s (%v)", c.sites[1].name, n, err)
			break
		}
		select {
		case <-ctx.Done():
			return Verdict{}, stuck, ctx.Err()
		case <-time.After(500 * time.Millisecond): // poll interval of the consumer's record
		}
	}
	rs2.Term(10 * time.Second)
	for _, s := range c.sites {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := s.prefix + "r0"
			_, err := c.runClientOnce(ctx, name, ClientSpec{Role: roleReader, Out: filepath.Join(c.dir, name+".rec"), IdleEnd: c.o.ReaderIdleEnd}, 120*time.Second)
			if err != nil && !errors.Is(err, context.Canceled) {
				mu.Lock()
				stuck = append(stuck, name)
				mu.Unlock()
				c.note("reader %s: %v", name, err)
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return Verdict{}, stuck, ctx.Err()
	}
	v, err := CheckGeo(files, c.o.Partitions)
	if err == nil {
		err = CheckReplSub(rsFiles[0], rsFiles[1], files[1].Reader, &v)
	}
	if v.Unverified > 0 && len(stuck) == 0 {
		stuck = append(stuck, "readers")
	}
	return v, stuck, err
}
