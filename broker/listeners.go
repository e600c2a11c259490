package broker

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/magnetar-io/magnetar/broker/api"
)

// Listener is one of Pulsar's named advertised listeners: the URLs a client naming it (a
// lookup's listenerName) is given.
type Listener struct {
	Name string
	URLs api.ListenerURLs
}

// ParseAdvertisedListeners parses Pulsar's advertisedListeners value,
// "name:scheme://host:port,…" (e.g. "internal:pulsar://10.0.0.1:6650,
// external:pulsar+ssl://broker.example.com:6651"), keeping the listeners' first-seen order
// (the first is the default internal listener). As Pulsar's MultipleListenerValidator, it
// refuses an entry without a name or with a scheme other than pulsar, pulsar+ssl, http and
// https, two URLs of one scheme in a listener, a listener without a pulsar or pulsar+ssl
// URL, and one host:port in two listeners.
func ParseAdvertisedListeners(s string) ([]Listener, error) {
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
