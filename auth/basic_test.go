package auth

import (
	"encoding/base64"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// Vectors from `openssl passwd -apr1 -salt abcdefgh secret`, `openssl passwd -1 -salt
// abcdefgh secret` and crypt("secret", "ab").
const (
	apr1Secret = "$apr1$abcdefgh$h9FWgUz3n9YxylKLlR5SQ/"
	md5Secret  = "$1$abcdefgh$cHJi5PXp/ki/ktXzqlk6I1"
	desSecret  = "abNANd1rDfiNc"
)

func TestMD5Crypt(t *testing.T) {
	if got := md5Crypt("secret", apr1Secret, "$apr1$"); got != apr1Secret {
		t.Errorf("apr1: %s", got)
	}
	if got := md5Crypt("secret", md5Secret, "$1$"); got != md5Secret {
		t.Errorf("md5-crypt: %s", got)
	}
	// Long passwords (more than 16 bytes) and short salts take the other branches.
	long := strings.Repeat("p4ss", 9)
	if sys, err := systemCrypt(long, "$1$ab$"); err == nil && md5Crypt(long, "$1$ab$", "$1$") != sys {
		t.Errorf("md5-crypt of a long password: %s, crypt(3) %s", md5Crypt(long, "$1$ab$", "$1$"), sys)
	}
}

func TestVerifyPassword(t *testing.T) {
	bc, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	bcy := "$2y$" + string(bc[4:]) // htpasswd -B writes $2y$
	hashes := map[string]string{"apr1": apr1Secret, "bcrypt": string(bc), "bcrypt-2y": bcy,
		"sha": "{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=", "md5": md5Secret, "des": desSecret}
	for name, h := range hashes {
		if !VerifyPassword(h, "secret") {
			t.Errorf("%s: the right password refused", name)
		}
		if VerifyPassword(h, "Secret") || VerifyPassword(h, "") {
			t.Errorf("%s: a wrong password accepted", name)
		}
	}
	if VerifyPassword("plaintext", "plaintext") || VerifyPassword("", "") || VerifyPassword("$9$x", "x") {
		t.Error("unknown hash forms accepted")
	}
}

func TestBasicProvider(t *testing.T) {
	file := "# users\n\nalice:" + apr1Secret + "\nbob:" + desSecret + "\n"
	for name, conf := range map[string]string{
		"path":   writeFile(t, ".htpasswd", []byte(file)),
		"base64": base64.StdEncoding.EncodeToString([]byte(file)),
		"data":   "data:;base64," + base64.StdEncoding.EncodeToString([]byte(file)),
	} {
		p, err := NewBasicProvider(conf)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, tc := range []struct {
			data, role string
		}{{"alice:secret", "alice"}, {"bob:secret", "bob"}, {"alice:wrong", ""}, {"carol:secret", ""}, {"alice", ""}, {":secret", ""}} {
			pr, err := p.Authenticate(Credentials{Data: []byte(tc.data)})
			if tc.role == "" {
				if !errors.Is(err, ErrAuthentication) || strings.Contains(err.Error(), "secret") {
					t.Errorf("%s %q: %+v %v", name, tc.data, pr, err)
				}
			} else if err != nil || pr.Role != tc.role || pr.Method != MethodBasic {
				t.Errorf("%s %q: %+v %v", name, tc.data, pr, err)
			}
		}
	}
	// Unknown user and wrong password answer alike.
	p, _ := NewBasicProvider(base64.StdEncoding.EncodeToString([]byte(file)))
	_, e1 := p.Authenticate(Credentials{Data: []byte("alice:wrong")})
	_, e2 := p.Authenticate(Credentials{Data: []byte("nobody:wrong")})
	if e1.Error() != e2.Error() {
		t.Errorf("%v vs %v", e1, e2)
	}
	for _, bad := range []string{"alice\n", ":x\n", "a:x\na:y\n", "a:\n"} {
		if _, err := ParseHtpasswd([]byte(bad)); err == nil || !strings.HasPrefix(err.Error(), "line ") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, err := NewBasicProvider(""); err == nil {
		t.Error("no conf accepted")
	}
}

// TestAuthenticateHTTP: Bearer, Basic and client-certificate requests reach their providers.
func TestAuthenticateHTTP(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	s, err := New(Config{Enabled: true, Providers: []string{"token", "basic"},
		Token:     TokenConfig{SecretKey: base64.StdEncoding.EncodeToString(secret)},
		BasicFile: base64.StdEncoding.EncodeToString([]byte("alice:" + apr1Secret + "\n"))})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := CreateToken(signingHS256(), secret, "svc", t0.AddDate(100, 0, 0), nil)
	for _, tc := range []struct {
		header, role string
	}{
		{"Bearer " + tok, "svc"},
		{"Bearer  " + tok + " ", "svc"},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("alice:secret")), "alice"},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("alice:nope")), ""},
		{"Basic !!!", ""},
		{"Digest x", ""},
		{"", ""},
	} {
		r := httptest.NewRequest("GET", "/admin/v2/tenants", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		p, err := s.AuthenticateHTTP(r)
		if tc.role == "" {
			if !errors.Is(err, ErrAuthentication) {
				t.Errorf("%q: %+v %v", tc.header, p, err)
			}
		} else if err != nil || p.Role != tc.role {
			t.Errorf("%q: %+v %v", tc.header, p, err)
		}
	}
}

// FuzzHtpasswd: any file parses or fails cleanly, and no entry verifies an empty password
// unless its hash is one of an empty password.
func FuzzHtpasswd(f *testing.F) {
	for _, s := range []string{"alice:" + apr1Secret + "\n", "# c\n\nbob:" + desSecret, "x:{SHA}abc", "a:b:c", ":", "u:$2y$04$xx", "u:$apr1$$"} {
		f.Add(s, "secret")
	}
	f.Fuzz(func(t *testing.T, file, pw string) {
		users, err := ParseHtpasswd([]byte(file))
		if err != nil {
			return
		}
		for u, h := range users {
			if u == "" || h == "" || strings.ContainsAny(u, ":\n") {
				t.Fatalf("bad entry %q:%q", u, h)
			}
			if len(h) < 200 { // bcrypt of long input is slow; the others are cheap
				VerifyPassword(h, pw)
			}
		}
	})
}

// FuzzBasicHeader: any Authorization header is refused or names a configured role.
func FuzzBasicHeader(f *testing.F) {
	for _, s := range []string{"Basic " + base64.StdEncoding.EncodeToString([]byte("alice:secret")), "Basic", "Basic ", "basic YTo=", "Bearer x", "Basic YWxpY2U6"} {
		f.Add(s)
	}
	s, err := New(Config{Enabled: true, Providers: []string{"basic"},
		BasicFile: base64.StdEncoding.EncodeToString([]byte("alice:" + apr1Secret + "\n"))})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["Authorization"] = []string{h}
		p, err := s.AuthenticateHTTP(r)
		if err == nil && p.Role != "alice" {
			t.Fatalf("%q authenticated as %+v", h, p)
		}
		if err != nil && !errors.Is(err, ErrAuthentication) {
			t.Fatalf("%q: %v", h, err)
		}
	})
}
