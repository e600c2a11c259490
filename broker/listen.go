package broker

import (
	"net"

	"github.com/magnetar-io/magnetar/broker/server"
)

// listen binds the plain and TLS listeners the configuration asks for (server.Listen) and
// fills the broker record's URLs; it returns the advertised address the broker id defaults
// to. The protocol server serves the listeners once Start is done (server.Serve).
func (s *Service) listen() (string, error) {
	cfg := s.cfg
	ls, err := server.Listen(server.ListenConfig{Listen: cfg.Listen, DisablePlain: cfg.DisablePlain,
		ListenTLS: cfg.ListenTLS, TLS: cfg.TLS, Advertise: cfg.Advertise, AdvertiseTLS: cfg.AdvertiseTLS})
	if err != nil {
		return "", err
	}
	s.ln, s.lnTLS = ls.Plain, ls.TLS
	for _, l := range s.listeners() {
		s.closers = append(s.closers, func() { l.Close() })
	}
	if ls.Plain != nil {
		s.info.ServiceURL = "pulsar://" + ls.Advertise
	}
	if ls.TLS != nil {
		s.info.ServiceURLTLS = "pulsar+ssl://" + ls.AdvertiseTLS
	}
	s.info.HTTPURL, s.info.HTTPURLTLS = cfg.HTTPURL, cfg.HTTPURLTLS
	adv := ls.Advertise
	if adv == "" {
		adv = ls.AdvertiseTLS
	}
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
