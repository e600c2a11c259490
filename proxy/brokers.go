package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/metadata"
)

// maxLearned bounds the broker addresses remembered from lookup answers.
const maxLearned = 4096

// brokers finds the brokers: their binary addresses (host:port) and admin base URLs. A
// list read from the store is cached for the refresh period; invalidate drops it after a
// broker failed. Methods are safe for concurrent use.
type brokers struct {
	store      metadata.Store
	staticBin  []string // host:port of Config.BrokerServiceURLs
	staticWeb  []string // base URLs of Config.BrokerWebServiceURLs
	refresh    time.Duration
	rr         atomic.Uint64 // round-robin position
	readListMu sync.Mutex    // one store read at a time

	mu struct {
		sync.Mutex // guards the fields below
		bin, web   []string
		at         time.Time // when bin and web were read; zero: read again
		// learned are the addresses brokers named in lookup answers: with static URLs
		// only, the other brokers of the cluster are known this way.
		learned map[string]struct{}
	}
}

func newBrokers(store metadata.Store, serviceURLs, webURLs []string, refresh time.Duration) (*brokers, error) {
	b := &brokers{store: store, refresh: refresh}
	b.mu.learned = make(map[string]struct{})
	for _, u := range serviceURLs {
		hs, err := ServiceHosts(u)
		if err != nil {
			return nil, err
		}
		b.staticBin = append(b.staticBin, hs...)
	}
	for _, u := range webURLs {
		ws, err := webBases(u)
		if err != nil {
			return nil, err
		}
		b.staticWeb = append(b.staticWeb, ws...)
	}
	return b, nil
}

// ServiceHosts splits a pulsar://host:port[,host:port...] URL into its host:port parts.
func ServiceHosts(u string) ([]string, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(u), "pulsar://")
	if !ok {
		return nil, fmt.Errorf("broker service URL %q: want pulsar://host:port[,host:port...]", u)
	}
	rest = strings.TrimSuffix(rest, "/")
	var out []string
	for _, h := range strings.Split(rest, ",") {
		if _, _, err := net.SplitHostPort(h); err != nil {
			return nil, fmt.Errorf("broker service URL %q: %w", u, err)
		}
		out = append(out, h)
	}
	return out, nil
}

// webBases splits an http(s)://host:port[,host:port...] URL into one base URL per host.
func webBases(u string) ([]string, error) {
	u = strings.TrimSpace(u)
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok || (scheme != "http" && scheme != "https") {
		return nil, fmt.Errorf("broker web service URL %q: want http://host:port[,host:port...]", u)
	}
	rest = strings.TrimSuffix(rest, "/")
	var out []string
	for _, h := range strings.Split(rest, ",") {
		if _, _, err := net.SplitHostPort(h); err != nil {
			return nil, fmt.Errorf("broker web service URL %q: %w", u, err)
		}
		out = append(out, scheme+"://"+h)
	}
	return out, nil
}

// hostOf returns the host:port of a pulsar:// (or pulsar+ssl://) URL ("" if it has none).
func hostOf(serviceURL string) string {
	u, err := url.Parse(serviceURL)
	if err != nil {
		return ""
	}
	return u.Host
}

// read returns the current lists, reading the store if the cached ones are stale.
func (b *brokers) read(ctx context.Context) (bin, web []string, err error) {
	if b.store == nil {
		return b.staticBin, b.staticWeb, nil
	}
	b.mu.Lock()
	if !b.mu.at.IsZero() && time.Since(b.mu.at) < b.refresh {
		bin, web = b.mu.bin, b.mu.web
		b.mu.Unlock()
		return bin, web, nil
	}
	b.mu.Unlock()
	b.readListMu.Lock()
	defer b.readListMu.Unlock()
	kvs, _, err := b.store.List(ctx, metadata.PrefixBrokers)
	if err != nil {
		b.mu.Lock()
		bin, web = b.mu.bin, b.mu.web
		b.mu.Unlock()
		if len(bin)+len(web) > 0 {
			return bin, web, nil // the last list known beats none while the store is away
		}
		return b.staticBin, b.staticWeb, fmt.Errorf("proxy: listing brokers: %w", err)
	}
	for _, kv := range kvs {
		var in api.BrokerInfo
		if json.Unmarshal(kv.Value, &in) != nil {
			continue
		}
		if h := hostOf(in.ServiceURL); h != "" {
			bin = append(bin, h)
		}
		if in.HTTPURL != "" {
			web = append(web, strings.TrimSuffix(in.HTTPURL, "/"))
		}
	}
	slices.Sort(bin)
	slices.Sort(web)
	b.mu.Lock()
	b.mu.bin, b.mu.web, b.mu.at = bin, web, time.Now()
	b.mu.Unlock()
	if len(bin) == 0 {
		bin = b.staticBin
	}
	if len(web) == 0 {
		web = b.staticWeb
	}
	return bin, web, nil
}

// invalidate makes the next read go to the store (a broker failed).
func (b *brokers) invalidate() {
	b.mu.Lock()
	b.mu.at = time.Time{}
	b.mu.Unlock()
}

// rotate returns a copy of l starting at the next round-robin position.
func (b *brokers) rotate(l []string) []string {
	if len(l) == 0 {
		return nil
	}
	i := int(b.rr.Add(1) % uint64(len(l)))
	return append(slices.Clone(l[i:]), l[:i]...)
}

// binary returns the brokers' binary addresses in the order to try them.
func (b *brokers) binary(ctx context.Context) ([]string, error) {
	bin, _, err := b.read(ctx)
	if len(bin) == 0 {
		if err == nil {
			err = errNoBroker
		}
		return nil, err
	}
	return b.rotate(bin), nil
}

// webs returns the brokers' admin base URLs in the order to try them.
func (b *brokers) webs(ctx context.Context) ([]string, error) {
	_, web, err := b.read(ctx)
	if len(web) == 0 {
		if err == nil {
			err = errNoBroker
		}
		return nil, err
	}
	return b.rotate(web), nil
}

// learn remembers a broker address a lookup answer named.
func (b *brokers) learn(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.mu.learned) >= maxLearned {
		clear(b.mu.learned)
	}
	b.mu.learned[addr] = struct{}{}
}

// allowed reports whether addr is a broker the proxy may connect a client to: one listed
// (store or URLs) or named by a broker's lookup answer. The proxy never relays to other
// addresses.
func (b *brokers) allowed(ctx context.Context, addr string) bool {
	if slices.Contains(b.staticBin, addr) {
		return true
	}
	b.mu.Lock()
	_, ok := b.mu.learned[addr]
	b.mu.Unlock()
	if ok {
		return true
	}
	bin, _, _ := b.read(ctx)
	if slices.Contains(bin, addr) {
		return true
	}
	b.invalidate() // a broker that just registered
	bin, _, _ = b.read(ctx)
	return slices.Contains(bin, addr)
}

// knownWeb reports whether base (scheme://host:port) is a broker's admin URL.
func (b *brokers) knownWeb(ctx context.Context, base string) bool {
	if slices.Contains(b.staticWeb, base) {
		return true
	}
	_, web, _ := b.read(ctx)
	return slices.Contains(web, base)
}
