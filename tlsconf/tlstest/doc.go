// Package tlstest makes certificate authorities and certificates for tests: a CA, server
// certificates for given names (DNS names or IP addresses), and client certificates with a
// CN, as PEM (keys PKCS#8 ECDSA or PKCS#1 RSA), written to files when asked.
//
//	ca, _ := tlstest.NewCA("test-ca")
//	caFile, _ := ca.WriteCA(dir, "ca")
//	srv, _ := ca.IssueFiles(dir, "server", "broker", []string{"127.0.0.1"}, tlstest.PKCS1)
//
// Goroutines: none; a CA is safe for concurrent use (serial numbers are atomic).
package tlstest
