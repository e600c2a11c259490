//go:build cgo && linux

package auth

/*
#cgo LDFLAGS: -lcrypt
#include <crypt.h>
#include <stdlib.h>
#include <string.h>

static char *magnetar_crypt(const char *pw, const char *setting, struct crypt_data *cd) {
	memset(cd, 0, sizeof(*cd));
	return crypt_r(pw, setting, cd);
}
*/
import "C"

import (
	"errors"
	"unsafe"
)

// systemCrypt hashes pw with the system's crypt(3) (libxcrypt: DES, $1$, $5$, $6$, ...)
// using the salt of setting. crypt_r is reentrant: the state lives in a buffer per call.
func systemCrypt(pw, setting string) (string, error) {
	if len(setting) < 2 {
		return "", errors.New("auth: unknown password hash")
	}
	cpw, cset := C.CString(pw), C.CString(setting)
	defer C.free(unsafe.Pointer(cpw))
	defer C.free(unsafe.Pointer(cset))
	cd := (*C.struct_crypt_data)(C.malloc(C.size_t(unsafe.Sizeof(C.struct_crypt_data{}))))
	defer C.free(unsafe.Pointer(cd))
	out := C.magnetar_crypt(cpw, cset, cd)
	if out == nil {
		return "", errors.New("auth: unknown password hash")
	}
	s := C.GoString(out)
	if s == "" || s[0] == '*' { // libxcrypt's failure token
		return "", errors.New("auth: unknown password hash")
	}
	return s, nil
}
