package broker

import (
	"crypto/tls"
	"fmt"
	"net"
)

// listen binds the plain and TLS listeners the configuration asks for and fills the
// broker record's URLs; it returns the advertised address the broker id defaults to.
func (s *Service) listen() (string, error) {
	cfg := s.cfg
	if cfg.DisablePlain && cfg.ListenTLS == "" {
		return "", fmt.Errorf("%w: the plain listener is off and there is no TLS listener", ErrInvalidArgument)
	}
	if cfg.ListenTLS != "" && cfg.TLS == nil {
		return "", fmt.Errorf("%w: ListenTLS needs a TLS configuration", ErrInvalidArgument)
	}
	var adv, advTLS string
	if !cfg.DisablePlain {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return "", fmt.Errorf("broker: listen %s: %w", cfg.Listen, err)
		}
		s.ln = ln
		s.closers = append(s.closers, func() { ln.Close() })
		adv = cfg.Advertise
		if adv == "" {
			adv = ln.Addr().String()
		}
		s.info.ServiceURL = "pulsar://" + adv
	}
	if cfg.ListenTLS != "" {
		ln, err := net.Listen("tcp", cfg.ListenTLS)
		if err != nil {
			return "", fmt.Errorf("broker: listen %s: %w", cfg.ListenTLS, err)
		}
		s.lnTLS = tls.NewListener(ln, cfg.TLS)
		s.closers = append(s.closers, func() { ln.Close() })
		advTLS = cfg.AdvertiseTLS
		if advTLS == "" {
			host := cfg.Advertise
			if host == "" {
				host = ln.Addr().String()
			}
			h, _, err := net.SplitHostPort(host)
			if err != nil {
				return "", fmt.Errorf("%w: Advertise %q: %v", ErrInvalidArgument, cfg.Advertise, err)
			}
			_, p, _ := net.SplitHostPort(ln.Addr().String())
			advTLS = net.JoinHostPort(h, p)
		}
		s.info.ServiceURLTLS = "pulsar+ssl://" + advTLS
	}
	s.info.HTTPURL, s.info.HTTPURLTLS = cfg.HTTPURL, cfg.HTTPURLTLS
	if adv == "" {
		adv = advTLS
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
