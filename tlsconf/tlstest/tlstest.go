package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// CA is a test certificate authority.
type CA struct {
	Cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	CertPEM []byte
	serial  atomic.Int64
}

// NewCA creates a self-signed CA named cn.
func NewCA(cn string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Cert: cert, key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	ca.serial.Store(1)
	return ca, nil
}

// KeyForm is how a certificate's private key is encoded.
type KeyForm int

const (
	// PKCS8 is an ECDSA key as "PRIVATE KEY".
	PKCS8 KeyForm = iota
	// PKCS1 is an RSA key as "RSA PRIVATE KEY".
	PKCS1
)

// Issue signs a certificate with subject CN cn, valid for the given DNS names and IP
// addresses (a server certificate if any, also usable as a client's) and returns the
// certificate and key as PEM.
func (ca *CA) Issue(cn string, names []string, form KeyForm) (certPEM, keyPEM []byte, err error) {
	var (
		pub    any
		keyBlk *pem.Block
	)
	switch form {
	case PKCS1:
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, nil, err
		}
		pub = &k.PublicKey
		keyBlk = &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}
	default:
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		b, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return nil, nil, err
		}
		pub = &k.PublicKey
		keyBlk = &pem.Block{Type: "PRIVATE KEY", Bytes: b}
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(keyBlk), nil
}

// Files are the paths of a certificate and its key.
type Files struct{ Cert, Key string }

// IssueFiles issues a certificate (see Issue) and writes it to dir/<name>.pem and
// dir/<name>.key.
func (ca *CA) IssueFiles(dir, name, cn string, names []string, form KeyForm) (Files, error) {
	c, k, err := ca.Issue(cn, names, form)
	if err != nil {
		return Files{}, err
	}
	f := Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+".key")}
	if err := os.WriteFile(f.Cert, c, 0o644); err != nil {
		return Files{}, err
	}
	return f, os.WriteFile(f.Key, k, 0o600)
}

// WriteCA writes the CA certificate to dir/<name>.pem and returns the path.
func (ca *CA) WriteCA(dir, name string) (string, error) {
	p := filepath.Join(dir, name+".pem")
	return p, os.WriteFile(p, ca.CertPEM, 0o644)
}
