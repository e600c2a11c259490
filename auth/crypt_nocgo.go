//go:build !cgo || !linux

package auth

import "errors"

// systemCrypt needs the system's crypt(3), which a binary built without cgo lacks: DES and
// $1$/$5$/$6$ entries then never verify (apr1, bcrypt and {SHA} do).
func systemCrypt(pw, setting string) (string, error) {
	return "", errors.New("auth: crypt(3) hashes need a cgo build")
}
