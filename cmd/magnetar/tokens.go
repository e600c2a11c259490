package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/auth"
)

func init() { register(newTokensCmd) }

// newTokensCmd is `magnetar tokens`, the jobs of `pulsar tokens`: keys and tokens made by
// either tool work with the other (secret keys are raw bytes; key pairs are DER, PKCS#8
// private and X.509 public).
func newTokensCmd() *cobra.Command {
	c := &cobra.Command{Use: "tokens", Short: "Create and inspect JWT authentication tokens and their keys (like pulsar tokens)"}
	c.AddCommand(newTokensSecretKeyCmd(), newTokensKeyPairCmd(), newTokensCreateCmd(), newTokensShowCmd(), newTokensValidateCmd())
	return c
}

func newTokensSecretKeyCmd() *cobra.Command {
	var (
		alg, out string
		b64      bool
	)
	c := &cobra.Command{
		Use:   "create-secret-key",
		Short: "Create a secret key for HS256/HS384/HS512 tokens (raw bytes; --base64 for text)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n := map[string]int{"HS256": 32, "HS384": 48, "HS512": 64}[alg]
			if n == 0 {
				return usageError{fmt.Errorf("--signature-algorithm: want HS256, HS384 or HS512, not %q", alg)}
			}
			key := make([]byte, n)
			if _, err := rand.Read(key); err != nil {
				return err
			}
			if b64 {
				key = []byte(base64.StdEncoding.EncodeToString(key) + "\n")
			}
			return writeOut(cmd, out, key)
		},
	}
	c.Flags().StringVarP(&alg, "signature-algorithm", "a", "HS256", "HS256, HS384 or HS512")
	c.Flags().StringVarP(&out, "output", "o", "", "write the key to this file (default: standard output)")
	c.Flags().BoolVarP(&b64, "base64", "b", false, "write the key base64-encoded")
	return c
}

func newTokensKeyPairCmd() *cobra.Command {
	var alg, privOut, pubOut string
	c := &cobra.Command{
		Use:   "create-key-pair",
		Short: "Create a key pair for RS256 or ES256 tokens (DER: PKCS#8 private, X.509 public)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if privOut == "" || pubOut == "" {
				return usageError{errors.New("--output-private-key and --output-public-key are required")}
			}
			var (
				priv crypto.Signer
				err  error
			)
			switch alg {
			case "RS256", "RS384", "RS512":
				priv, err = rsa.GenerateKey(rand.Reader, map[string]int{"RS256": 2048, "RS384": 3072, "RS512": 4096}[alg])
			case "ES256":
				priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			case "ES384":
				priv, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
			case "ES512":
				priv, err = ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
			default:
				return usageError{fmt.Errorf("--signature-algorithm: want RS256, RS384, RS512, ES256, ES384 or ES512, not %q", alg)}
			}
			if err != nil {
				return err
			}
			pk8, err := x509.MarshalPKCS8PrivateKey(priv)
			if err != nil {
				return err
			}
			pub, err := x509.MarshalPKIXPublicKey(priv.Public())
			if err != nil {
				return err
			}
			if err := os.WriteFile(privOut, pk8, 0o600); err != nil {
				return err
			}
			return os.WriteFile(pubOut, pub, 0o644)
		},
	}
	c.Flags().StringVarP(&alg, "signature-algorithm", "a", "RS256", "RS256, RS384, RS512, ES256, ES384 or ES512")
	c.Flags().StringVar(&privOut, "output-private-key", "", "file for the private key")
	c.Flags().StringVar(&pubOut, "output-public-key", "", "file for the public key")
	return c
}

func newTokensCreateCmd() *cobra.Command {
	var (
		subject, expiry, secretKey, privateKey string
		headers                                []string
	)
	c := &cobra.Command{
		Use:   "create",
		Short: "Create a token for a subject (the role), signed with a secret key or a private key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if subject == "" {
				return usageError{errors.New("--subject is required")}
			}
			if (secretKey == "") == (privateKey == "") {
				return usageError{errors.New("give exactly one of --secret-key and --private-key")}
			}
			var exp time.Time
			if expiry != "" {
				d, err := parseRelativeTime(expiry)
				if err != nil {
					return usageError{fmt.Errorf("--expiry-time: %w", err)}
				}
				exp = time.Now().Add(d)
			}
			extra := map[string]any{}
			for _, h := range headers {
				k, v, ok := strings.Cut(h, "=")
				if !ok || k == "" {
					return usageError{fmt.Errorf("--headers %q: want key=value", h)}
				}
				extra[k] = v
			}
			m, key, err := signingKey(secretKey, privateKey)
			if err != nil {
				return err
			}
			t := jwt.New(m)
			for k, v := range extra {
				t.Header[k] = v
			}
			claims := jwt.MapClaims{"sub": subject}
			if !exp.IsZero() {
				claims["exp"] = exp.Unix()
			}
			t.Claims = claims
			s, err := t.SignedString(key)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), s)
			return err
		},
	}
	c.Flags().StringVarP(&subject, "subject", "s", "", "the token's subject (the role it authenticates as)")
	c.Flags().StringVarP(&expiry, "expiry-time", "e", "", "lifetime, e.g. 30s, 10m, 12h, 7d, 2w, 1y (default: never expires)")
	c.Flags().StringVar(&secretKey, "secret-key", "", "secret key: file:///path, data:;base64,... or base64")
	c.Flags().StringVar(&privateKey, "private-key", "", "private key: file:///path, data:;base64,... or base64 (DER or PEM)")
	c.Flags().StringArrayVar(&headers, "headers", nil, "extra JWT header key=value (repeatable)")
	return c
}

// signingKey reads a secret or private key and picks the algorithm from it, as pulsar
// tokens does: HS256/384/512 by secret length, RS256/384/512 by modulus size, ES256/384/512
// by curve.
func signingKey(secretKey, privateKey string) (jwt.SigningMethod, any, error) {
	if secretKey != "" {
		k, err := auth.ReadKey(secretKey)
		if err != nil || len(k) == 0 {
			return nil, nil, usageError{fmt.Errorf("--secret-key: %v", orEmpty(err))}
		}
		switch {
		case len(k) >= 64:
			return jwt.SigningMethodHS512, k, nil
		case len(k) >= 48:
			return jwt.SigningMethodHS384, k, nil
		}
		return jwt.SigningMethodHS256, k, nil
	}
	b, err := auth.ReadKey(privateKey)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("--private-key: %w", err)}
	}
	k, err := auth.ParsePrivateKey(b)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("--private-key: %w", err)}
	}
	switch k := k.(type) {
	case *rsa.PrivateKey:
		switch bits := k.N.BitLen(); {
		case bits >= 4096:
			return jwt.SigningMethodRS512, k, nil
		case bits >= 3072:
			return jwt.SigningMethodRS384, k, nil
		}
		return jwt.SigningMethodRS256, k, nil
	case *ecdsa.PrivateKey:
		switch k.Curve {
		case elliptic.P384():
			return jwt.SigningMethodES384, k, nil
		case elliptic.P521():
			return jwt.SigningMethodES512, k, nil
		}
		return jwt.SigningMethodES256, k, nil
	}
	return nil, nil, usageError{fmt.Errorf("--private-key: unsupported key type %T", k)}
}

func orEmpty(err error) error {
	if err == nil {
		return errors.New("empty key")
	}
	return err
}

// parseRelativeTime parses pulsar's relative times: a number and a unit (s, m, h, d, w, y).
func parseRelativeTime(s string) (time.Duration, error) {
	units := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour,
		'w': 7 * 24 * time.Hour, 'y': 365 * 24 * time.Hour}
	if s == "" {
		return 0, errors.New("empty")
	}
	unit, ok := units[s[len(s)-1]]
	num := s[:len(s)-1]
	if !ok {
		unit, num = time.Second, s
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > int64(1<<62)/int64(unit) {
		return 0, fmt.Errorf("%q: want a positive number and a unit (s, m, h, d, w, y)", s)
	}
	return time.Duration(n) * unit, nil
}

// tokenInput reads the token of show and validate: the argument, --token-file, or --stdin.
func tokenInput(args []string, file string, stdin bool) (string, error) {
	n := len(args)
	if file != "" {
		n++
	}
	if stdin {
		n++
	}
	if n != 1 {
		return "", usageError{errors.New("give the token as an argument, with --token-file or with --stdin")}
	}
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		return strings.TrimSpace(string(b)), err
	case stdin:
		b, err := io.ReadAll(os.Stdin)
		return strings.TrimSpace(string(b)), err
	}
	return strings.TrimSpace(args[0]), nil
}

func newTokensShowCmd() *cobra.Command {
	var (
		file  string
		stdin bool
	)
	c := &cobra.Command{
		Use:   "show [TOKEN]",
		Short: "Print a token's header and claims (without verifying it)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, err := tokenInput(args, file, stdin)
			if err != nil {
				return err
			}
			t, _, err := jwt.NewParser().ParseUnverified(tok, jwt.MapClaims{})
			if err != nil {
				return fmt.Errorf("not a JWT: %w", err)
			}
			h, _ := json.Marshal(t.Header)
			b, _ := json.Marshal(t.Claims)
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n---\n%s\n", h, b)
			return err
		},
	}
	c.Flags().StringVarP(&file, "token-file", "f", "", "read the token from this file")
	c.Flags().BoolVarP(&stdin, "stdin", "i", false, "read the token from standard input")
	return c
}

func newTokensValidateCmd() *cobra.Command {
	var (
		file, secretKey, publicKey string
		stdin                      bool
	)
	c := &cobra.Command{
		Use:   "validate [TOKEN]",
		Short: "Verify a token's signature and expiry with a secret or public key, and print its claims",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, err := tokenInput(args, file, stdin)
			if err != nil {
				return err
			}
			if (secretKey == "") == (publicKey == "") {
				return usageError{errors.New("give exactly one of --secret-key and --public-key")}
			}
			p, err := auth.NewTokenProvider(auth.TokenConfig{SecretKey: secretKey, PublicKey: publicKey}, nil)
			if err != nil {
				return usageError{err}
			}
			claims, err := p.Verify(tok)
			if err != nil {
				return err
			}
			b, _ := json.Marshal(claims)
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
			return err
		},
	}
	c.Flags().StringVarP(&file, "token-file", "f", "", "read the token from this file")
	c.Flags().BoolVarP(&stdin, "stdin", "i", false, "read the token from standard input")
	c.Flags().StringVar(&secretKey, "secret-key", "", "secret key: file:///path, data:;base64,... or base64")
	c.Flags().StringVar(&publicKey, "public-key", "", "public key: file:///path, data:;base64,... or base64 (DER or PEM)")
	return c
}

// writeOut writes b to the file out, or to standard output if out is empty.
func writeOut(cmd *cobra.Command, out string, b []byte) error {
	if out == "" {
		_, err := cmd.OutOrStdout().Write(b)
		return err
	}
	return os.WriteFile(out, b, 0o600)
}
