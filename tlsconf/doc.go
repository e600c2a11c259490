// Package tlsconf builds the TLS configurations of Magnetar's listeners and clients from
// Pulsar's settings: PEM certificate, key (PKCS#8, PKCS#1 or SEC 1) and trusted-CA files,
// client certificates optional (verified when presented) or required, a minimum version and
// cipher suites, and certificates reloaded when their files change.
//
// # Usage
//
//	srv, err := tlsconf.NewServer(tlsconf.ServerOptions{CertFile: "broker.pem", KeyFile: "broker.key",
//		TrustCertsFile: "ca.pem"}, logger)
//	ln = tls.NewListener(ln, srv.Config())
//
//	cfg, err := tlsconf.Client(tlsconf.ClientOptions{TrustCertsFile: "ca.pem"})
//
// # Goroutines and state
//
// The package starts no goroutine. A Server keeps the current certificate and CA pool under
// a leaf mutex; the handshake of a new connection (GetConfigForClient) re-reads the files
// when their size or modification time changed, at most once per RefreshInterval, and keeps
// the previous material if the new files do not load (logged once per change). Connections
// already established keep the certificate they were made with.
package tlsconf
