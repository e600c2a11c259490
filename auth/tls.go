package auth

import "fmt"

// TLSProvider authenticates a client by its TLS certificate (method "tls"): the role is the
// certificate's subject CN. The TLS layer has already verified the certificate against the
// trusted CA.
type TLSProvider struct{}

// Method is "tls".
func (TLSProvider) Method() string { return MethodTLS }

// Authenticate returns the CN of the verified client certificate.
func (TLSProvider) Authenticate(c Credentials) (Principal, error) {
	if c.TLS == nil || len(c.TLS.PeerCertificates) == 0 {
		return Principal{}, fmt.Errorf("%w: no client certificate", ErrAuthentication)
	}
	if len(c.TLS.VerifiedChains) == 0 {
		return Principal{}, fmt.Errorf("%w: the client certificate was not verified against a trusted CA", ErrAuthentication)
	}
	cert := c.TLS.PeerCertificates[0]
	if cert.Subject.CommonName == "" {
		return Principal{}, fmt.Errorf("%w: the client certificate has no CN", ErrAuthentication)
	}
	return Principal{Role: cert.Subject.CommonName, Method: MethodTLS}, nil
}
