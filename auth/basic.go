package auth

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// BasicProvider authenticates user names and passwords (method "basic") against an
// htpasswd file: apr1-MD5 ($apr1$), bcrypt ($2a$, $2b$, $2y$), SHA-1 ({SHA}) and the
// system crypt(3) forms (DES, $1$ MD5, $5$ SHA-256, $6$ SHA-512). The role is the user name.
// It is safe for concurrent use.
type BasicProvider struct {
	users map[string]string // user → hash
}

// MaxHtpasswdSize bounds an htpasswd file.
const MaxHtpasswdSize = 16 << 20

// NewBasicProvider reads the htpasswd file named by conf (Pulsar's basicAuthConf): a path,
// a file: or data: URL, or the file's content in base64.
func NewBasicProvider(conf string) (*BasicProvider, error) {
	if conf == "" {
		return nil, errors.New("auth: the basic provider needs basicAuthConf (an htpasswd file)")
	}
	var (
		b   []byte
		err error
	)
	if _, serr := os.Stat(conf); serr == nil {
		b, err = os.ReadFile(conf)
	} else {
		b, err = ReadKey(conf)
	}
	if err != nil {
		return nil, fmt.Errorf("auth: basicAuthConf: %w", err)
	}
	users, err := ParseHtpasswd(b)
	if err != nil {
		return nil, fmt.Errorf("auth: basicAuthConf: %w", err)
	}
	return &BasicProvider{users: users}, nil
}

// ParseHtpasswd parses htpasswd text: user:hash lines; blank lines and lines starting with
// # are skipped. A line without a colon, with an empty user, or a user given twice is an
// error naming its line (never its content).
func ParseHtpasswd(b []byte) (map[string]string, error) {
	if len(b) > MaxHtpasswdSize {
		return nil, errors.New("htpasswd file too large")
	}
	users := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, MaxHtpasswdSize)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' {
			continue
		}
		u, h, ok := strings.Cut(l, ":")
		if !ok || u == "" || h == "" {
			return nil, fmt.Errorf("line %d: want user:hash", n)
		}
		if _, dup := users[u]; dup {
			return nil, fmt.Errorf("line %d: user given twice", n)
		}
		users[u] = h
	}
	return users, sc.Err()
}

// Method is "basic".
func (p *BasicProvider) Method() string { return MethodBasic }

// errBadUser is the one answer for an unknown user and a wrong password.
var errBadUser = fmt.Errorf("%w: unknown user or wrong password", ErrAuthentication)

// Authenticate verifies "user:password".
func (p *BasicProvider) Authenticate(c Credentials) (Principal, error) {
	user, pw, ok := strings.Cut(string(c.Data), ":")
	if !ok || user == "" {
		return Principal{}, fmt.Errorf("%w: basic credentials are user:password", ErrAuthentication)
	}
	h, known := p.users[user]
	if !known {
		// Spend the time a known user costs, so that timing does not tell users apart.
		VerifyPassword("$apr1$saltsalt$0000000000000000000000", pw)
		return Principal{}, errBadUser
	}
	if !VerifyPassword(h, pw) {
		return Principal{}, errBadUser
	}
	return Principal{Role: user, Method: MethodBasic}, nil
}

// VerifyPassword reports whether pw matches an htpasswd hash. Comparisons are
// constant-time.
func VerifyPassword(hash, pw string) bool {
	switch {
	case strings.HasPrefix(hash, "$apr1$"):
		return equal(md5Crypt(pw, hash, "$apr1$"), hash)
	case strings.HasPrefix(hash, "$2a$"), strings.HasPrefix(hash, "$2b$"), strings.HasPrefix(hash, "$2y$"):
		return bcrypt.CompareHashAndPassword([]byte(hash), []byte(pw)) == nil
	case strings.HasPrefix(hash, "{SHA}"):
		sum := sha1.Sum([]byte(pw))
		return equal("{SHA}"+base64.StdEncoding.EncodeToString(sum[:]), hash)
	}
	got, err := systemCrypt(pw, hash)
	return err == nil && equal(got, hash)
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// itoa64 is crypt(3)'s base-64 alphabet.
const itoa64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// md5Crypt computes the MD5-crypt hash of pw with the salt of setting (magic "$1$" or
// "$apr1$": the algorithm is the same, the magic string is part of the input).
func md5Crypt(pw, setting, magic string) string {
	salt := strings.TrimPrefix(setting, magic)
	if i := strings.IndexByte(salt, '$'); i >= 0 {
		salt = salt[:i]
	}
	if len(salt) > 8 {
		salt = salt[:8]
	}
	alt := md5.Sum([]byte(pw + salt + pw))
	h := md5.New()
	h.Write([]byte(pw + magic + salt))
	for n := len(pw); n > 0; n -= 16 {
		h.Write(alt[:min(n, 16)])
	}
	for n := len(pw); n != 0; n >>= 1 {
		if n&1 != 0 {
			h.Write([]byte{0})
		} else {
			h.Write([]byte(pw[:1]))
		}
	}
	final := h.Sum(nil)
	for i := range 1000 {
		r := md5.New()
		if i&1 != 0 {
			r.Write([]byte(pw))
		} else {
			r.Write(final)
		}
		if i%3 != 0 {
			r.Write([]byte(salt))
		}
		if i%7 != 0 {
			r.Write([]byte(pw))
		}
		if i&1 != 0 {
			r.Write(final)
		} else {
			r.Write([]byte(pw))
		}
		final = r.Sum(nil)
	}
	var b strings.Builder
	b.WriteString(magic + salt + "$")
	enc := func(v uint32, n int) {
		for ; n > 0; n-- {
			b.WriteByte(itoa64[v&0x3f])
			v >>= 6
		}
	}
	for _, g := range [][3]int{{0, 6, 12}, {1, 7, 13}, {2, 8, 14}, {3, 9, 15}, {4, 10, 5}} {
		enc(uint32(final[g[0]])<<16|uint32(final[g[1]])<<8|uint32(final[g[2]]), 4)
	}
	enc(uint32(final[11]), 2)
	return b.String()
}
