// Package advertise decides the addresses a broker hands out — in lookups, redirects and
// its broker record — for the addresses it is bound to: never a wildcard address (a
// listener bound to 0.0.0.0 or [::] advertises the configured advertisedAddress, else the
// host's name), and, with Pulsar's named advertisedListeners, the URLs of the listener a
// client names. Pure functions; the broker root calls Config.Check and Config.Record.
package advertise

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/magnetar-io/magnetar/broker/api"
)

// Listener is one of Pulsar's named advertised listeners: the URLs a client naming it (a
// lookup's listenerName) is given.
type Listener struct {
	Name string
	URLs api.ListenerURLs
}

// Parse parses Pulsar's advertisedListeners value,
// "name:scheme://host:port,…" (e.g. "internal:pulsar://10.0.0.1:6650,
// external:pulsar+ssl://broker.example.com:6651"), keeping the listeners' first-seen order
// (the first is the default internal listener). As Pulsar's MultipleListenerValidator, it
// refuses an entry without a name or with a scheme other than pulsar, pulsar+ssl, http and
// https, two URLs of one scheme in a listener, a listener without a pulsar or pulsar+ssl
// URL, and one host:port in two listeners.
func Parse(s string) ([]Listener, error) {
	var out []Listener
	idx := map[string]int{}
	owner := map[string]string{} // host:port → listener
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		name, raw, ok := strings.Cut(e, ":")
		name, raw = strings.TrimSpace(name), strings.TrimSpace(raw)
		if !ok || name == "" || raw == "" {
			return nil, fmt.Errorf("%w: advertisedListeners entry %q: want name:scheme://host:port", api.ErrInvalidArgument, e)
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || u.Port() == "" {
			return nil, fmt.Errorf("%w: advertisedListeners entry %q: want name:scheme://host:port", api.ErrInvalidArgument, e)
		}
		i, seen := idx[name]
		if !seen {
			i = len(out)
			idx[name] = i
			out = append(out, Listener{Name: name})
		}
		l := &out[i].URLs
		var slot *string
		switch u.Scheme {
		case "pulsar":
			slot = &l.ServiceURL
		case "pulsar+ssl":
			slot = &l.ServiceURLTLS
		case "http":
			slot = &l.HTTPURL
		case "https":
			slot = &l.HTTPURLTLS
		default:
			return nil, fmt.Errorf("%w: advertisedListeners entry %q: unknown scheme %q (want pulsar, pulsar+ssl, http or https)",
				api.ErrInvalidArgument, e, u.Scheme)
		}
		if *slot != "" {
			return nil, fmt.Errorf("%w: advertisedListeners: listener %s has redundant %s addresses", api.ErrInvalidArgument, name, u.Scheme)
		}
		hp := net.JoinHostPort(u.Hostname(), u.Port())
		if o, taken := owner[hp]; taken && o != name {
			return nil, fmt.Errorf("%w: advertisedListeners: listeners %s and %s must not use the same host:port %s",
				api.ErrInvalidArgument, o, name, hp)
		}
		owner[hp] = name
		*slot = u.Scheme + "://" + hp
	}
	for _, l := range out {
		if l.URLs.ServiceURL == "" && l.URLs.ServiceURLTLS == "" {
			return nil, fmt.Errorf("%w: advertisedListeners: listener %s has no pulsar:// or pulsar+ssl:// address", api.ErrInvalidArgument, l.Name)
		}
	}
	return out, nil
}

// Config is what the broker's configuration says of advertised addresses (broker.Config's
// fields of the same names).
type Config struct {
	Advertise, AdvertiseTLS string // host:port given to the protocol server, "" if none
	AdvertisedAddress       string // Pulsar's advertisedAddress: the host for every URL
	HTTPURL, HTTPURLTLS     string // the admin API's base URLs as bound
	Listeners               []Listener
	InternalListenerName    string
}

// Record computes the URLs the broker hands out (lookups, redirects, its record) for its
// bound listeners (their addresses, "" if off, and the host:port the server advertises for
// each, from Config.Advertise*), and the advertised host:port its id defaults to. No URL names a
// wildcard address: a listener bound to one advertises cfg.AdvertisedAddress or, if that
// is empty, DefaultAdvertisedHost (Pulsar's ServiceConfigurationUtils
// .getDefaultOrConfiguredAddress). With named listeners the record's URLs are the internal
// listener's, as Pulsar's brokerServiceUrl is.
func (cfg Config) Record(boundPlain, advertisePlain, boundTLS, advertiseTLS string) (api.BrokerInfo, string) {
	var in api.BrokerInfo
	plain, tlsAddr := "", ""
	if boundPlain != "" {
		plain = advertisePlain
		if cfg.Advertise == "" {
			plain = advertisedHostPort(cfg.AdvertisedAddress, boundPlain)
		}
		in.ServiceURL = "pulsar://" + plain
	}
	if boundTLS != "" {
		tlsAddr = advertiseTLS
		if cfg.AdvertiseTLS == "" && cfg.Advertise == "" {
			tlsAddr = advertisedHostPort(cfg.AdvertisedAddress, boundTLS)
		}
		in.ServiceURLTLS = "pulsar+ssl://" + tlsAddr
	}
	in.HTTPURL, in.HTTPURLTLS = advertisedURL(cfg.AdvertisedAddress, cfg.HTTPURL), advertisedURL(cfg.AdvertisedAddress, cfg.HTTPURLTLS)
	if len(cfg.Listeners) > 0 {
		internal := cfg.InternalListenerName
		if internal == "" {
			internal = cfg.Listeners[0].Name
		}
		in.Listeners = map[string]api.ListenerURLs{}
		for _, l := range cfg.Listeners {
			in.Listeners[l.Name] = l.URLs
			if l.Name != internal {
				continue
			}
			in.ServiceURL, in.ServiceURLTLS = l.URLs.ServiceURL, l.URLs.ServiceURLTLS
			if l.URLs.HTTPURL != "" || l.URLs.HTTPURLTLS != "" {
				in.HTTPURL, in.HTTPURLTLS = l.URLs.HTTPURL, l.URLs.HTTPURLTLS
			}
			plain, tlsAddr = hostPortOf(l.URLs.ServiceURL), hostPortOf(l.URLs.ServiceURLTLS)
		}
	}
	if plain == "" {
		plain = tlsAddr
	}
	return in, plain
}

// DefaultHost is the host advertised for a listener bound to a wildcard address
// when no advertised address is configured: the host's name, as Pulsar's default
// advertisedAddress (InetAddress.getLocalHost's canonical name); "localhost" if the host
// has no name.
func DefaultHost() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return h
}

// advertisedHost is the host advertised for a listener bound to bound (a host):
// configured if set, else bound unless it is a wildcard, else DefaultHost.
func advertisedHost(configured, bound string) string {
	if configured != "" {
		return configured
	}
	if ip := net.ParseIP(bound); bound == "" || ip != nil && ip.IsUnspecified() {
		return DefaultHost()
	}
	return bound
}

// advertisedHostPort is advertisedHost of boundAddr's host, with boundAddr's port.
func advertisedHostPort(configured, boundAddr string) string {
	h, p, err := net.SplitHostPort(boundAddr)
	if err != nil {
		return boundAddr
	}
	return net.JoinHostPort(advertisedHost(configured, h), p)
}

// advertisedURL is u (an http:// or https:// base URL naming the bound address) with its
// host advertised as advertisedHost says; "" stays "".
func advertisedURL(configured, u string) string {
	if u == "" {
		return ""
	}
	pu, err := url.Parse(u)
	if err != nil || pu.Host == "" {
		return u
	}
	if p := pu.Port(); p != "" {
		pu.Host = net.JoinHostPort(advertisedHost(configured, pu.Hostname()), p)
	} else {
		pu.Host = advertisedHost(configured, pu.Hostname())
	}
	return pu.String()
}

// hostPortOf is the host:port of a pulsar:// or pulsar+ssl:// URL ("" if none).
func hostPortOf(u string) string {
	_, hp, ok := strings.Cut(u, "://")
	if !ok {
		return ""
	}
	hp, _, _ = strings.Cut(hp, "/")
	return hp
}

// Check refuses what Pulsar's MultipleListenerValidator refuses: named listeners beside an
// advertised address, an internal listener name that names none of them.
func (cfg Config) Check() error {
	if len(cfg.Listeners) == 0 {
		if cfg.InternalListenerName != "" {
			return fmt.Errorf("%w: internalListenerName %q needs advertisedListeners", api.ErrInvalidArgument, cfg.InternalListenerName)
		}
		return nil
	}
	if cfg.AdvertisedAddress != "" || cfg.Advertise != "" || cfg.AdvertiseTLS != "" {
		return fmt.Errorf("%w: advertisedListeners and advertisedAddress must not appear together", api.ErrInvalidArgument)
	}
	if n := cfg.InternalListenerName; n != "" {
		for _, l := range cfg.Listeners {
			if l.Name == n {
				return nil
			}
		}
		return fmt.Errorf("%w: the advertisedListeners configuration does not contain the internalListenerName %q",
			api.ErrInvalidArgument, n)
	}
	return nil
}
