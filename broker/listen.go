package broker

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/server"
)

// listen binds the plain and TLS listeners the configuration asks for (server.Listen) and
// fills the broker record's URLs with the advertised addresses (advertise); it returns the
// advertised address the broker id defaults to. The protocol server serves the listeners
// once Start is done (server.Serve).
func (s *Service) listen() (string, error) {
	cfg := s.cfg
	if err := checkListeners(cfg); err != nil {
		return "", err
	}
	ls, err := server.Listen(server.ListenConfig{Listen: cfg.Listen, DisablePlain: cfg.DisablePlain,
		ListenTLS: cfg.ListenTLS, TLS: cfg.TLS, Advertise: cfg.Advertise, AdvertiseTLS: cfg.AdvertiseTLS})
	if err != nil {
		return "", err
	}
	s.ln, s.lnTLS = ls.Plain, ls.TLS
	for _, l := range s.listeners() {
		s.closers = append(s.closers, func() { l.Close() })
	}
	info, adv := advertise(cfg, ls)
	s.info.ServiceURL, s.info.ServiceURLTLS = info.ServiceURL, info.ServiceURLTLS
	s.info.HTTPURL, s.info.HTTPURLTLS, s.info.Listeners = info.HTTPURL, info.HTTPURLTLS, info.Listeners
	return adv, nil
}

// advertise computes the URLs the broker hands out (lookups, redirects, its record) for the
// bound listeners ls, and the advertised host:port its id defaults to. No URL names a
// wildcard address: a listener bound to one advertises cfg.AdvertisedAddress or, if that
// is empty, DefaultAdvertisedHost (Pulsar's ServiceConfigurationUtils
// .getDefaultOrConfiguredAddress). With named listeners the record's URLs are the internal
// listener's, as Pulsar's brokerServiceUrl is.
func advertise(cfg Config, ls server.Listeners) (api.BrokerInfo, string) {
	var in api.BrokerInfo
	plain, tlsAddr := "", ""
	if ls.Plain != nil {
		plain = ls.Advertise
		if cfg.Advertise == "" {
			plain = advertisedHostPort(cfg.AdvertisedAddress, ls.Plain.Addr().String())
		}
		in.ServiceURL = "pulsar://" + plain
	}
	if ls.TLS != nil {
		tlsAddr = ls.AdvertiseTLS
		if cfg.AdvertiseTLS == "" && cfg.Advertise == "" {
			tlsAddr = advertisedHostPort(cfg.AdvertisedAddress, ls.TLS.Addr().String())
		}
		in.ServiceURLTLS = "pulsar+ssl://" + tlsAddr
	}
	in.HTTPURL, in.HTTPURLTLS = advertisedURL(cfg.AdvertisedAddress, cfg.HTTPURL), advertisedURL(cfg.AdvertisedAddress, cfg.HTTPURLTLS)
	if len(cfg.AdvertisedListeners) > 0 {
		internal := cfg.InternalListenerName
		if internal == "" {
			internal = cfg.AdvertisedListeners[0].Name
		}
		in.Listeners = map[string]api.ListenerURLs{}
		for _, l := range cfg.AdvertisedListeners {
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

// DefaultAdvertisedHost is the host advertised for a listener bound to a wildcard address
// when no advertised address is configured: the host's name, as Pulsar's default
// advertisedAddress (InetAddress.getLocalHost's canonical name); "localhost" if the host
// has no name.
func DefaultAdvertisedHost() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return h
}

// advertisedHost is the host advertised for a listener bound to bound (a host):
// configured if set, else bound unless it is a wildcard, else DefaultAdvertisedHost.
func advertisedHost(configured, bound string) string {
	if configured != "" {
		return configured
	}
	if ip := net.ParseIP(bound); bound == "" || ip != nil && ip.IsUnspecified() {
		return DefaultAdvertisedHost()
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

// checkListeners refuses what Pulsar's MultipleListenerValidator refuses: named listeners
// beside an advertised address, an internal listener name that names none of them.
func checkListeners(cfg Config) error {
	if len(cfg.AdvertisedListeners) == 0 {
		if cfg.InternalListenerName != "" {
			return fmt.Errorf("%w: internalListenerName %q needs advertisedListeners", api.ErrInvalidArgument, cfg.InternalListenerName)
		}
		return nil
	}
	if cfg.AdvertisedAddress != "" || cfg.Advertise != "" || cfg.AdvertiseTLS != "" {
		return fmt.Errorf("%w: advertisedListeners and advertisedAddress must not appear together", api.ErrInvalidArgument)
	}
	if n := cfg.InternalListenerName; n != "" {
		for _, l := range cfg.AdvertisedListeners {
			if l.Name == n {
				return nil
			}
		}
		return fmt.Errorf("%w: the advertisedListeners configuration does not contain the internalListenerName %q",
			api.ErrInvalidArgument, n)
	}
	return nil
}

// listeners returns the bound listeners.
func (s *Service) listeners() []net.Listener {
	var ls []net.Listener
	for _, l := range []net.Listener{s.ln, s.lnTLS} {
		if l != nil {
			ls = append(ls, l)
		}
	}
	return ls
}

// Addr returns the address the plain protocol listener is bound to (the TLS one's if the
// plain listener is off).
func (s *Service) Addr() net.Addr {
	if s.ln != nil {
		return s.ln.Addr()
	}
	return s.lnTLS.Addr()
}

// AddrTLS returns the address the TLS protocol listener is bound to; nil if none.
func (s *Service) AddrTLS() net.Addr {
	if s.lnTLS == nil {
		return nil
	}
	return s.lnTLS.Addr()
}
