package interop

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/adminclient"
	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/loadmgr"
	"github.com/magnetar-io/magnetar/itest"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/scalable/layout"
	"github.com/magnetar-io/magnetar/tlsconf"
)

// secureMB is a three-broker cluster with security on: TLS-only listeners (pulsar+ssl://
// and https://), token authentication and authorization, the brokers' own token (role
// "broker", a superuser) in their peer client (broker.Config.PeerHTTP, Pulsar's
// brokerClientAuthentication* and brokerClientTls*), an "admin" superuser and an "app" role
// granted produce and consume on public/default.
type secureMB struct {
	*multiBroker
	pki                *tlsPKI
	adminTok, appTok   string
	roots              *x509.CertPool
	appAuth, adminAuth pulsar.Authentication
}

func newSecureMB(t *testing.T) *secureMB {
	t.Helper()
	s := &secureMB{pki: newTLSPKI(t), adminTok: secToken(t, "admin", time.Hour), appTok: secToken(t, "app", time.Hour)}
	ts, err := tlsconf.NewServer(tlsconf.ServerOptions{CertFile: s.pki.server.Cert, KeyFile: s.pki.server.Key}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	authn, err := auth.New(auth.Config{Enabled: true, Providers: []string{"token"},
		Token: auth.TokenConfig{SecretKey: "data:;base64," + base64.StdEncoding.EncodeToString(secKey)}})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(s.pki.caFile)
	if err != nil {
		t.Fatal(err)
	}
	s.roots = x509.NewCertPool()
	s.roots.AppendCertsFromPEM(ca)
	brokerTok := secToken(t, "broker", time.Hour)
	peerHTTP := adminclient.HTTPClient(adminclient.Options{TLS: &tls.Config{RootCAs: s.roots},
		Auth: adminclient.TokenAuth(func() ([]byte, error) { return []byte(brokerTok), nil })})
	peerHTTP.Timeout = time.Minute
	s.multiBroker = newMultiBroker(t, 3, mbOpts{txn: true, secure: &mbSecure{tls: ts.Config(), auth: authn},
		tweak: func(cfg *broker.Config) {
			cfg.Auth, cfg.Authz, cfg.PeerHTTP = authn, auth.NewAuthorizer(true, []string{"broker", "admin"}), peerHTTP
			// The leader's executor splits a bundle with more than 12 producers and consumers
			// (the last step); no other step puts as many on one bundle.
			fastLoadManager(cfg, func(th *loadmgr.Thresholds) {
				th.AutoSplitEnabled, th.MaxBundleSessions, th.GracePeriod = true, 12, 0
			})
		}})
	s.appAuth, s.adminAuth = pulsar.NewAuthenticationToken(s.appTok), pulsar.NewAuthenticationToken(s.adminTok)
	err = s.admin(t, 0, s.adminTok).GrantNamespacePermission(ctxT(t, 30*time.Second), "public/default", "app",
		[]auth.Action{auth.ActionProduce, auth.ActionConsume})
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	return s
}

// admin is an admin client of node i with token tok (redirects followed with it).
func (s *secureMB) admin(t *testing.T, i int, tok string) *adminclient.Client {
	t.Helper()
	c, err := adminclient.New(adminclient.Options{URLs: []string{s.nodes[i].httpURL}, TLS: &tls.Config{RootCAs: s.roots},
		Auth: adminclient.TokenAuth(func() ([]byte, error) { return []byte(tok), nil }), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// client is a Pulsar client of node i only (pulsar+ssl://, the CA verified).
func (s *secureMB) client(t *testing.T, i int, a pulsar.Authentication, txn bool) pulsar.Client {
	t.Helper()
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: s.nodes[i].url, TLSTrustCertsFilePath: s.pki.caFile,
		TLSValidateHostname: true, Authentication: a, EnableTransaction: txn, OperationTimeout: 30 * time.Second,
		ConnectionTimeout: 5 * time.Second, Logger: clientLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// raw sends one admin request to url with token tok without following redirects: the
// status and the Location (a 307) or the body.
func (s *secureMB) raw(t *testing.T, method, url, tok string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 30*time.Second), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.roots}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusTemporaryRedirect {
		return resp.StatusCode, resp.Header.Get("Location")
	}
	return resp.StatusCode, string(b)
}

// ownerOf is the node owning topic's bundle (nil: none yet, or a name the brokers do not
// map to a bundle).
func (s *secureMB) ownerOf(t *testing.T, topic string) *mbNode {
	t.Helper()
	r, err := s.nodes[0].svc.Load().TopicBundle(ctxT(t, 10*time.Second), topic)
	if err != nil {
		t.Logf("bundle of %s: %v", topic, err)
		return nil
	}
	rest := topic[strings.Index(topic, "://")+3:]
	parts := strings.SplitN(rest, "/", 3)
	b := parts[0] + "/" + parts[1] + "/" + r
	for _, nd := range s.nodes {
		if _, ok := nd.svc.Load().OwnedNamespaces(context.Background())[b]; ok {
			return nd
		}
	}
	return nil
}

func (s *secureMB) index(nd *mbNode) int {
	for i, n := range s.nodes {
		if n == nd {
			return i
		}
	}
	return -1
}

// TestSecureMultiBroker: three brokers with TLS-only listeners, token authentication and
// authorization exercise every call one broker makes to another, or sends a client to: a
// lookup redirected to the owner, admin requests answered 307 and followed with the
// client's token, a bundle transfer, partitioned stats gathered from the partitions' owners,
// a scalable topic whose segments are created on other brokers and split, merged and
// sought through a broker that is not the controller's leader, transactions whose
// coordinators are on other brokers than their topics, and the load manager leader's split
// of a bundle on its owner and its unload of a bundle from an overloaded broker.
func TestSecureMultiBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("three brokers: skipped with -short")
	}
	s := newSecureMB(t)
	ctx := ctxT(t, 5*time.Minute)
	a := s.nodes[0]
	appA := s.client(t, 0, s.appAuth, false)

	// A topic owned by another broker than A: the client, connected to A only, is sent to
	// its owner by the lookup and produces and consumes there.
	var remote string
	var owner *mbNode
	base := topicName(t)
	for i := 0; i < 30 && remote == ""; i++ {
		tp := fmt.Sprintf("%s-lookup-%d", base, i)
		if err := roundTripOn(t, appA, tp); err != nil {
			t.Fatalf("round trip on %s through %s: %v", tp, a.id, err)
		}
		if nd := s.ownerOf(t, tp); nd != nil && nd != a {
			remote, owner = tp, nd
		}
	}
	if remote == "" {
		t.Fatal("no topic of 30 landed on another broker than A")
	}
	t.Logf("lookup: %s owned by %s, served to a client of %s", remote, owner.id, a.id)
	if nobody := s.client(t, 0, pulsar.NewAuthenticationToken(secToken(t, "nobody", time.Hour)), false); roundTripOn(t, nobody, remote) == nil {
		t.Error("a role without a grant produced through A")
	}

	t.Run("admin307", func(t *testing.T) {
		// A asked for the remote topic's stats answers 307 to the owner's https:// URL; the
		// admin client follows it with its token.
		path := "/admin/v2/persistent/public/default/" + remote[strings.LastIndex(remote, "/")+1:] + "/stats"
		code, loc := s.raw(t, "GET", a.httpURL+path, s.appTok)
		if code != http.StatusTemporaryRedirect || !strings.HasPrefix(loc, owner.httpURL+"/") {
			t.Fatalf("stats of %s through %s: %d %s, want 307 to %s", remote, a.id, code, loc, owner.httpURL)
		}
		if code, _ := s.raw(t, "GET", loc, ""); code != http.StatusUnauthorized {
			t.Errorf("the owner answered %d without credentials, want 401", code)
		}
		var st api.TopicStats
		if err := s.admin(t, 0, s.appTok).TopicStats(ctx, remote, &st); err != nil {
			t.Fatalf("stats through %s: %v", a.id, err)
		}
		if st.MsgInCounter < 1 {
			t.Errorf("stats of %s: %d messages in, want 1", remote, st.MsgInCounter)
		}
	})

	t.Run("partitionedStats", func(t *testing.T) {
		tp := base + "-partitioned"
		if err := s.admin(t, 0, s.adminTok).CreatePartitionedTopic(ctx, tp, 6); err != nil {
			t.Fatal(err)
		}
		p, err := appA.CreateProducer(pulsar.ProducerOptions{Topic: tp})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		owners := map[string]bool{}
		for i := 0; i < 6; i++ {
			if nd := s.ownerOf(t, fmt.Sprintf("%s-partition-%d", tp, i)); nd != nil {
				owners[nd.id] = true
			}
		}
		if len(owners) < 2 {
			t.Fatalf("the 6 partitions are on %v: the aggregate would not need another broker", owners)
		}
		for i, nd := range s.nodes {
			var st struct {
				Publishers []json.RawMessage `json:"publishers"`
				Partitions map[string]json.RawMessage
			}
			if err := s.admin(t, i, s.appTok).PartitionedTopicStats(ctx, tp, true, &st); err != nil {
				t.Fatalf("partitioned stats through %s: %v", nd.id, err)
			}
			if len(st.Partitions) != 6 {
				t.Errorf("partitioned stats through %s: %d partitions, want 6", nd.id, len(st.Partitions))
			}
		}
	})

	t.Run("bundleTransfer", func(t *testing.T) {
		// The remote topic's bundle is handed to the third broker by a request to A, which
		// the owner carries out.
		var dest *mbNode
		for _, nd := range s.nodes {
			if nd != a && nd != owner {
				dest = nd
			}
		}
		r, err := a.svc.Load().TopicBundle(ctx, remote)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.admin(t, 0, s.adminTok).UnloadBundle(ctx, "public/default", r, dest.id); err != nil {
			t.Fatalf("transfer of %s to %s through %s: %v", r, dest.id, a.id, err)
		}
		waitFor(t, 30*time.Second, "the new owner", func() bool { return s.ownerOf(t, remote) == dest })
		if err := roundTripOn(t, appA, remote); err != nil {
			t.Fatalf("round trip after the transfer: %v", err)
		}
		owner = dest
	})

	scalableTopic := "topic://public/default/" + sanitize(t.Name()) + "-scalable"
	t.Run("scalable", func(t *testing.T) {
		// Every bundle of public/default owned first (the lookups place them), so that the
		// segments' bundles are on several brokers when A creates them.
		bundleOwners := map[string]bool{}
		for _, tp := range topicsPerBundle(t, a.svc.Load(), 4, 1) {
			if err := roundTripOn(t, appA, tp); err != nil {
				t.Fatal(err)
			}
			if nd := s.ownerOf(t, tp); nd != nil {
				bundleOwners[nd.id] = true
			}
		}
		if len(bundleOwners) < 2 {
			t.Fatalf("the bundles are on %v only", bundleOwners)
		}
		st := scalableTopic
		adm := s.admin(t, 0, s.adminTok)
		if err := adm.CreateScalableTopic(ctx, st, 6); err != nil {
			t.Fatalf("create through %s: %v", a.id, err)
		}
		lay := func() layout.Layout {
			var raw json.RawMessage
			if err := adm.ScalableLayout(ctx, st, &raw); err != nil {
				t.Fatal(err)
			}
			l, err := layout.Unmarshal(raw)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		// The subscription is created on the controller's leader, once one is elected (503
		// until then).
		var subErr error
		pollFor(t, 30*time.Second, "the subscription", func() bool {
			subErr = adm.CreateScalableSubscription(ctx, st, "sub")
			return adminclient.StatusOf(subErr) != http.StatusServiceUnavailable
		})
		if subErr != nil {
			t.Fatalf("subscription through %s: %v", a.id, subErr)
		}
		kv, err := s.store.Get(ctx, metadata.ScalableControllerKey("public", "default", sanitize(t.Name())))
		if err != nil {
			t.Fatalf("controller leader: %v", err)
		}
		leader := string(kv.Value)
		var via *adminclient.Client // a broker that is not the controller's leader
		for i, nd := range s.nodes {
			if nd.id != leader {
				via = s.admin(t, i, s.adminTok)
				t.Logf("controller leader %s; split, merge and seek through %s", leader, nd.id)
				break
			}
		}
		var stats api.ScalableStats
		if err := via.ScalableStats(ctx, st, &stats); err != nil {
			t.Fatalf("stats: %v", err)
		}
		if stats.Active != 6 || len(stats.Segments) != 6 {
			t.Errorf("stats: %d active, %d segments' stats, want 6", stats.Active, len(stats.Segments))
		}
		// The segments the leader does not serve are operated on their owners (created
		// there, sealed by the split below). If the leader serves them all, the first one's
		// bundle is handed to another broker first.
		owners := map[string]string{}
		var firstName string
		first := lay().Active()[0].ID
		for name := range stats.Segments {
			if nd := s.ownerOf(t, name); nd != nil {
				owners[name] = nd.id
			}
			if strings.HasSuffix(name, fmt.Sprintf("-%d", uint64(first))) {
				firstName = name
			}
		}
		t.Logf("segments' owners %v", owners)
		if firstName == "" {
			t.Fatalf("segment %d is not among %v", first, owners)
		}
		if owners[firstName] == leader {
			var dest *mbNode
			for _, nd := range s.nodes {
				if nd.id != leader {
					dest = nd
				}
			}
			r, err := a.svc.Load().TopicBundle(ctx, firstName)
			if err != nil {
				t.Fatal(err)
			}
			if err := adm.UnloadBundle(ctx, "public/default", r, dest.id); err != nil {
				t.Fatalf("transfer of %s to %s: %v", r, dest.id, err)
			}
			waitFor(t, 30*time.Second, firstName+" on "+dest.id, func() bool { return s.ownerOf(t, firstName) == dest })
		}
		if err := via.SplitSegment(ctx, st, uint64(first), ""); err != nil {
			t.Fatalf("split: %v", err)
		}
		waitFor(t, 30*time.Second, "the split to complete", func() bool {
			l := lay()
			sg, _ := l.Segment(first)
			return l.Pending == nil && sg.State == layout.StateSealed
		})
		act := lay().Active()
		if len(act) != 7 {
			t.Fatalf("%d active segments after the split, want 7", len(act))
		}
		if err := via.MergeSegments(ctx, st, uint64(act[0].ID), uint64(act[1].ID)); err != nil {
			t.Fatalf("merge: %v", err)
		}
		waitFor(t, 30*time.Second, "the merge to complete", func() bool {
			l := lay()
			return l.Pending == nil && len(l.Active()) == 6
		})
		subs, err := via.ScalableSubscriptions(ctx, st)
		if err != nil || len(subs) != 1 {
			t.Fatalf("subscriptions: %v %v", subs, err)
		}
		if err := via.SeekScalableSubscription(ctx, st, "sub", uint64(lay().Active()[0].ID), nil); err != nil {
			t.Fatalf("seek: %v", err)
		}
	})

	t.Run("cli", func(t *testing.T) {
		// magnetar produce and consume on the scalable topic as the app role, over TLS:
		// the consumer's subscription and session requests carry the token.
		common := []string{"--url", a.url, "--admin-url", a.httpURL, "--auth-plugin", "token",
			"--auth-params", "token:" + s.appTok, "--tls-trust-certs-file", s.pki.caFile}
		bin := itest.Binary(t)
		run := func(args ...string) string {
			cmd := exec.CommandContext(ctxT(t, 2*time.Minute), bin, append(args, common...)...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("magnetar %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return string(out)
		}
		run("produce", scalableTopic, "-m", "from-cli", "-n", "5")
		out := run("consume", scalableTopic, "-s", "cli", "-p", "Earliest", "-n", "5", "--timeout", "60s")
		if got := strings.Count(out, "from-cli"); got != 5 {
			t.Errorf("consume printed %d messages, want 5:\n%s", got, out)
		}
	})

	t.Run("transactions", func(t *testing.T) {
		// Four coordinators over three brokers; the producer's topic is on one of them.
		coords := map[string]bool{}
		for i := 0; i < 4; i++ {
			if nd := s.ownerOf(t, fmt.Sprintf("persistent://pulsar/system/transaction_coordinator_assign-partition-%d", i)); nd != nil {
				coords[nd.id] = true
			}
		}
		if o := s.ownerOf(t, remote); o == nil || len(coords) == 0 {
			t.Fatalf("topic owner %v, coordinators on %v", o, coords)
		} else if len(coords) == 1 && coords[o.id] { // the topic goes where no coordinator is
			var dest *mbNode
			for _, nd := range s.nodes {
				if !coords[nd.id] {
					dest = nd
				}
			}
			r, err := a.svc.Load().TopicBundle(ctx, remote)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.admin(t, 0, s.adminTok).UnloadBundle(ctx, "public/default", r, dest.id); err != nil {
				t.Fatalf("transfer of %s to %s: %v", r, dest.id, err)
			}
			waitFor(t, 30*time.Second, remote+" on "+dest.id, func() bool { return s.ownerOf(t, remote) == dest })
		}
		// As in Pulsar (apache/pulsar#18716), a client finds the coordinators by a lookup of
		// their assignment topic, which needs a grant there.
		err := s.admin(t, 0, s.adminTok).GrantTopicPermission(ctx, "persistent://pulsar/system/transaction_coordinator_assign",
			"app", []auth.Action{auth.ActionConsume})
		if err != nil {
			t.Fatalf("grant on the coordinators' topic: %v", err)
		}
		cl := s.client(t, 0, s.appAuth, true)
		cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: remote, SubscriptionName: "txn",
			SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: remote, SendTimeout: 0})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		// The client takes coordinators in turn: eight transactions use every one.
		for i := 0; i < 8; i++ {
			tx, err := cl.NewTransaction(time.Minute)
			if err != nil {
				t.Fatalf("transaction %d: %v", i, err)
			}
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("tx-%d", i)), Transaction: tx}); err != nil {
				t.Fatalf("send in transaction %d: %v", i, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("commit %d: %v", i, err)
			}
			m, err := cons.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(m.Payload()); got != fmt.Sprintf("tx-%d", i) {
				t.Fatalf("received %q after commit %d", got, i)
			}
			cons.Ack(m) //nolint:errcheck // the next receive shows the order
		}
		t.Logf("coordinators on %v, topic on %s", coords, s.ownerOf(t, remote).id)
		if len(coords) < 2 && coords[s.ownerOf(t, remote).id] {
			t.Errorf("every coordinator is on the topic's broker %v", coords)
		}
	})

	t.Run("namespaceUnload", func(t *testing.T) {
		// A unloads the bundles it owns and asks the owners of the others, with its own
		// credentials.
		if o := s.ownerOf(t, remote); o == nil || o == a {
			t.Fatalf("%s is owned by %v, want another broker than A", remote, o)
		}
		if err := s.admin(t, 0, s.adminTok).UnloadNamespace(ctx, "public/default"); err != nil {
			t.Fatalf("namespace unload through %s: %v", a.id, err)
		}
		if o := s.ownerOf(t, remote); o != nil {
			t.Errorf("%s still owned by %s after the namespace unload", remote, o.id)
		}
		if err := roundTripOn(t, appA, remote); err != nil {
			t.Fatalf("round trip after the unload: %v", err)
		}
		owner = s.ownerOf(t, remote)
	})

	t.Run("loadManagerSplit", func(t *testing.T) {
		// 13 producers on topics of one bundle owned by another broker than the load
		// manager's leader: the leader's executor asks the owner to split it.
		ld, err := a.svc.Load().LeaderBroker(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var hot string
		var topics []string
		for i := 0; len(topics) < 13; i++ {
			if i > 2000 {
				t.Fatalf("no bundle of another broker than the leader %s", ld.ID)
			}
			tp := fmt.Sprintf("%s-hot-%d", base, i)
			b, err := a.svc.Load().TopicBundle(ctx, tp)
			if err != nil {
				t.Fatal(err)
			}
			if hot == "" {
				nd := s.ownerOf(t, tp)
				if nd == nil || nd.id == ld.ID {
					continue
				}
				hot = b
				t.Logf("bundle %s on %s, load manager leader %s", b, nd.id, ld.ID)
			}
			if b == hot {
				topics = append(topics, tp)
			}
		}
		for _, tp := range topics {
			p, err := appA.CreateProducer(pulsar.ProducerOptions{Topic: tp})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
		}
		pollFor(t, 60*time.Second, "the leader's split of "+hot, func() bool {
			b, err := a.svc.Load().TopicBundle(ctx, topics[0])
			return err == nil && b != hot && counterSum(t, s.multiBroker, "magnetar_loadbalance_splits_total", "done") > 0
		})
		if got := counterSum(t, s.multiBroker, "magnetar_loadbalance_splits_total", "failed"); got != 0 {
			t.Errorf("%v splits failed", got)
		}
	})

	t.Run("loadManagerUnload", func(t *testing.T) {
		// Two bundles on one broker other than the leader, loaded while the others are
		// idle: the leader's executor asks that broker to unload one (shedding).
		ld, err := a.svc.Load().LeaderBroker(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var hot *mbNode
		for _, nd := range s.nodes {
			if nd.id != ld.ID {
				hot = nd
			}
		}
		var topics []string
		seen := map[string]bool{}
		for i := 0; len(topics) < 2; i++ {
			tp := fmt.Sprintf("%s-shed-%d", base, i)
			b, err := a.svc.Load().TopicBundle(ctx, tp)
			if err != nil {
				t.Fatal(err)
			}
			if seen[b] {
				continue
			}
			seen[b] = true
			if err := roundTripOn(t, appA, tp); err != nil { // the bundle owned
				t.Fatal(err)
			}
			if s.ownerOf(t, tp) != hot {
				if err := s.admin(t, 0, s.adminTok).UnloadBundle(ctx, "public/default", b, hot.id); err != nil {
					t.Fatalf("transfer of %s to %s: %v", b, hot.id, err)
				}
				waitFor(t, 30*time.Second, tp+" on "+hot.id, func() bool { return s.ownerOf(t, tp) == hot })
			}
			topics = append(topics, tp)
		}
		before := counterSum(t, s.multiBroker, "magnetar_loadbalance_unloads_total", "done")
		lctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer func() { stop(); wg.Wait() }()
		for _, tp := range topics {
			p, err := appA.CreateProducer(pulsar.ProducerOptions{Topic: tp, BatchingMaxPublishDelay: 5 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			wg.Add(1)
			go func() { defer wg.Done(); newPubStats().run(lctx, p, 300, "shed") }()
		}
		pollFor(t, 90*time.Second, "the leader's unload of a bundle of "+hot.id, func() bool {
			return counterSum(t, s.multiBroker, "magnetar_loadbalance_unloads_total", "done") > before
		})
		if got := counterSum(t, s.multiBroker, "magnetar_loadbalance_unloads_total", "failed"); got != 0 {
			t.Errorf("%v unloads failed", got)
		}
		var after []string
		for _, tp := range topics {
			if nd := s.ownerOf(t, tp); nd != nil {
				after = append(after, nd.id)
			}
		}
		t.Logf("the loaded bundles' owners after shedding: %v (both were on %s)", after, hot.id)
	})
}

var rtSeq atomic.Int64

// roundTripOn produces one message on topic and consumes it on a new subscription.
func roundTripOn(t *testing.T, cl pulsar.Client, topic string) error {
	t.Helper()
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: fmt.Sprintf("rt-%d", rtSeq.Add(1)),
		SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest})
	if err != nil {
		return err
	}
	defer cons.Close()
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		return err
	}
	defer p.Close()
	if _, err := p.Send(ctxT(t, 30*time.Second), &pulsar.ProducerMessage{Payload: []byte("hello")}); err != nil {
		return err
	}
	m, err := cons.Receive(ctxT(t, 30*time.Second))
	if err != nil {
		return err
	}
	if string(m.Payload()) != "hello" {
		return fmt.Errorf("got %q", m.Payload())
	}
	return cons.Ack(m)
}
