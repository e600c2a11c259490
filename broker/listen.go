package broker

import (
	"net"

	"github.com/magnetar-io/magnetar/broker/advertise"
	"github.com/magnetar-io/magnetar/broker/server"
)

// listen binds the plain and TLS listeners the configuration asks for (server.Listen) and
// fills the broker record's URLs with the advertised addresses (package broker/advertise);
// it returns the
// advertised address the broker id defaults to. The protocol server serves the listeners
// once Start is done (server.Serve).
func (s *Service) listen() (string, error) {
	cfg := s.cfg
	acfg := advertise.Config{Advertise: cfg.Advertise, AdvertiseTLS: cfg.AdvertiseTLS, AdvertisedAddress: cfg.AdvertisedAddress,
		HTTPURL: cfg.HTTPURL, HTTPURLTLS: cfg.HTTPURLTLS, Listeners: cfg.AdvertisedListeners,
		InternalListenerName: cfg.InternalListenerName}
	if err := acfg.Check(); err != nil {
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
	var plain, tlsAddr string
	if ls.Plain != nil {
		plain = ls.Plain.Addr().String()
	}
	if ls.TLS != nil {
		tlsAddr = ls.TLS.Addr().String()
	}
	info, adv := acfg.Record(plain, ls.Advertise, tlsAddr, ls.AdvertiseTLS)
	s.info.ServiceURL, s.info.ServiceURLTLS = info.ServiceURL, info.ServiceURLTLS
	s.info.HTTPURL, s.info.HTTPURLTLS, s.info.Listeners = info.HTTPURL, info.HTTPURLTLS, info.Listeners
	return adv, nil
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

// Listener is one of Pulsar's named advertised listeners (advertise.Listener).
type Listener = advertise.Listener

// ParseAdvertisedListeners parses Pulsar's advertisedListeners value (advertise.Parse).
func ParseAdvertisedListeners(s string) ([]Listener, error) { return advertise.Parse(s) }

// DefaultAdvertisedHost is the host advertised for a listener bound to a wildcard address
// when no advertised address is configured (advertise.DefaultHost).
func DefaultAdvertisedHost() string { return advertise.DefaultHost() }
