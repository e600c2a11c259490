package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TokenConfig configures the token provider with Pulsar's keys.
type TokenConfig struct {
	// SecretKey (tokenSecretKey) is the HS256/384/512 key: "file:///path" (the file's bytes
	// are the key), "data:;base64,..." or base64 text.
	SecretKey string
	// PublicKey (tokenPublicKey) is the RSA or EC public key, in the same forms, DER
	// (X.509 SubjectPublicKeyInfo, what `pulsar tokens create-key-pair` writes) or PEM.
	PublicKey string
	// AuthClaim (tokenAuthClaim) is the claim holding the role. Default "sub".
	AuthClaim string
	// AudienceClaim (tokenAudienceClaim) is the audience claim. Default "aud".
	AudienceClaim string
	// Audience (tokenAudience), when set, must be in the token's audience claim.
	Audience string
	// ClockSkew (tokenAllowedClockSkewSeconds) is the leeway on exp and nbf.
	ClockSkew time.Duration
}

// TokenProvider verifies JWTs (method "token"). It is safe for concurrent use.
type TokenProvider struct {
	key     any
	methods []string
	cfg     TokenConfig
	now     func() time.Time
}

// NewTokenProvider reads the provider's key. now is the clock (nil: time.Now).
func NewTokenProvider(cfg TokenConfig, now func() time.Time) (*TokenProvider, error) {
	if now == nil {
		now = time.Now
	}
	if cfg.AuthClaim == "" {
		cfg.AuthClaim = "sub"
	}
	if cfg.AudienceClaim == "" {
		cfg.AudienceClaim = "aud"
	}
	p := &TokenProvider{cfg: cfg, now: now}
	switch {
	case cfg.SecretKey != "" && cfg.PublicKey != "":
		return nil, errors.New("auth: set one of tokenSecretKey and tokenPublicKey")
	case cfg.SecretKey != "":
		k, err := ReadKey(cfg.SecretKey)
		if err != nil {
			return nil, fmt.Errorf("auth: tokenSecretKey: %w", err)
		}
		if len(k) == 0 {
			return nil, errors.New("auth: tokenSecretKey: empty key")
		}
		p.key, p.methods = k, []string{"HS256", "HS384", "HS512"}
	case cfg.PublicKey != "":
		b, err := ReadKey(cfg.PublicKey)
		if err != nil {
			return nil, fmt.Errorf("auth: tokenPublicKey: %w", err)
		}
		k, err := ParsePublicKey(b)
		if err != nil {
			return nil, fmt.Errorf("auth: tokenPublicKey: %w", err)
		}
		p.key = k
		switch k.(type) {
		case *rsa.PublicKey:
			p.methods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
		case *ecdsa.PublicKey:
			p.methods = []string{"ES256", "ES384", "ES512"}
		default:
			return nil, fmt.Errorf("auth: tokenPublicKey: unsupported key type %T", k)
		}
	default:
		return nil, errors.New("auth: the token provider needs tokenSecretKey or tokenPublicKey")
	}
	return p, nil
}

// Method is "token".
func (p *TokenProvider) Method() string { return MethodToken }

// Authenticate verifies a JWT (surrounding whitespace ignored: token files end in a
// newline) and returns its role claim and expiry.
func (p *TokenProvider) Authenticate(c Credentials) (Principal, error) {
	claims, err := p.Verify(strings.TrimSpace(string(c.Data)))
	if err != nil {
		return Principal{}, err
	}
	role, err := roleClaim(claims, p.cfg.AuthClaim)
	if err != nil {
		return Principal{}, err
	}
	pr := Principal{Role: role, Method: MethodToken}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		pr.Expires = exp.Time
	}
	return pr, nil
}

// Verify checks a token's signature, expiry, not-before and audience, and returns its
// claims.
func (p *TokenProvider) Verify(token string) (jwt.MapClaims, error) {
	if token == "" {
		return nil, fmt.Errorf("%w: empty token", ErrAuthentication)
	}
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(token, claims, func(*jwt.Token) (any, error) { return p.key, nil },
		jwt.WithValidMethods(p.methods), jwt.WithTimeFunc(p.now), jwt.WithLeeway(p.cfg.ClockSkew))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrAuthentication, err)
	}
	if p.cfg.Audience != "" && !hasAudience(claims[p.cfg.AudienceClaim], p.cfg.Audience) {
		return nil, fmt.Errorf("%w: the token's %s claim does not contain the broker's audience", ErrAuthentication, p.cfg.AudienceClaim)
	}
	return claims, nil
}

func hasAudience(v any, want string) bool {
	switch a := v.(type) {
	case string:
		return a == want
	case []any:
		for _, x := range a {
			if s, ok := x.(string); ok && s == want {
				return true
			}
		}
	}
	return false
}

// roleClaim reads the role: a string, or the first of a list of strings (as Pulsar does).
func roleClaim(claims jwt.MapClaims, name string) (string, error) {
	switch v := claims[name].(type) {
	case string:
		if v != "" {
			return v, nil
		}
	case []any:
		if len(v) > 0 {
			if s, ok := v[0].(string); ok && s != "" {
				return s, nil
			}
		}
	}
	return "", fmt.Errorf("%w: the token has no %s claim", ErrAuthentication, name)
}

// ReadKey reads key material in Pulsar's forms: "file:///path" or "file:path" (the file's
// bytes), "data:[type][;base64],..." (a data URL), or else base64 text.
func ReadKey(s string) ([]byte, error) {
	switch {
	case strings.HasPrefix(s, "file:"):
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("bad file URL: %w", err)
		}
		path := u.Path
		if path == "" {
			path = u.Opaque
		}
		return os.ReadFile(path)
	case strings.HasPrefix(s, "data:"):
		meta, data, ok := strings.Cut(s[len("data:"):], ",")
		if !ok {
			return nil, errors.New("bad data URL: no comma")
		}
		if strings.HasSuffix(meta, ";base64") {
			return decodeBase64(data)
		}
		d, err := url.PathUnescape(data)
		if err != nil {
			return nil, errors.New("bad data URL: bad escape")
		}
		return []byte(d), nil
	default:
		return decodeBase64(s)
	}
}

func decodeBase64(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not a file: or data: URL nor base64")
}

// ParsePublicKey parses an RSA or EC public key: DER or PEM, SubjectPublicKeyInfo or PKCS#1.
func ParsePublicKey(b []byte) (crypto.PublicKey, error) {
	if blk, _ := pem.Decode(b); blk != nil {
		b = blk.Bytes
	}
	if k, err := x509.ParsePKIXPublicKey(b); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PublicKey(b); err == nil {
		return k, nil
	}
	return nil, errors.New("not an RSA or EC public key (DER or PEM)")
}

// ParsePrivateKey parses an RSA or EC private key: DER or PEM, PKCS#8, PKCS#1 or SEC 1.
func ParsePrivateKey(b []byte) (crypto.Signer, error) {
	if blk, _ := pem.Decode(b); blk != nil {
		b = blk.Bytes
	}
	if k, err := x509.ParsePKCS8PrivateKey(b); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
	}
	if k, err := x509.ParsePKCS1PrivateKey(b); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(b); err == nil {
		return k, nil
	}
	return nil, errors.New("not an RSA or EC private key (DER or PEM; PKCS#8, PKCS#1 or SEC 1)")
}

// SigningMethod returns the JWT algorithm for alg ("HS256", "RS256", "ES256", ...).
func SigningMethod(alg string) (jwt.SigningMethod, error) {
	m := jwt.GetSigningMethod(alg)
	if m == nil || alg == "none" {
		return nil, fmt.Errorf("unknown signature algorithm %q", alg)
	}
	return m, nil
}

// CreateToken signs a token for subject (claim "sub"), expiring at exp unless exp is zero,
// with extra claims added (they may not replace sub or exp).
func CreateToken(m jwt.SigningMethod, key any, subject string, exp time.Time, extra map[string]any) (string, error) {
	claims := jwt.MapClaims{}
	for k, v := range extra {
		claims[k] = v
	}
	claims["sub"] = subject
	if !exp.IsZero() {
		claims["exp"] = exp.Unix()
	}
	return jwt.NewWithClaims(m, claims).SignedString(key)
}
