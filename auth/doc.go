// Package auth authenticates Magnetar's clients as Pulsar does, on the binary protocol's
// CONNECT (auth_method_name, auth_data) and on HTTP (Authorization: Bearer / Basic, or the
// client certificate), with the providers the configuration names, several at once:
//
//   - token: a JWT signed HS256/384/512 with tokenSecretKey, or RS256/ES256 (and the other
//     RSA/EC algorithms) with tokenPublicKey; the role is the tokenAuthClaim claim (default
//     sub; a list's first element); tokenAudience, when set, must be in the
//     tokenAudienceClaim claim; exp and nbf are enforced; whitespace around the token is
//     ignored (token files end in a newline). Keys are "file:///path" (the file's bytes),
//     "data:;base64,..." or base64 text, as Pulsar reads them; public keys DER or PEM.
//   - tls: the role is the CN of the client certificate the TLS layer verified against
//     the trusted CA (package tlsconf).
//   - basic: user:password against an htpasswd file (apr1-MD5, bcrypt, {SHA}, and crypt(3)
//     forms through the system's libcrypt in cgo builds); the role is the user name.
//   - anonymous: Config.AnonymousRole, for clients that present no credentials (off unless
//     set).
//
// # Usage
//
//	a, err := auth.New(auth.Config{Enabled: true, Providers: []string{"token", "tls"},
//		Token: auth.TokenConfig{SecretKey: "file:///etc/magnetar/secret.key"}})
//	p, err := a.AuthenticateBinary(connect.GetAuthMethodName(), connect.GetAuthData(), tlsState)
//	http.Handle("/", a.Middleware(adminHandler)) // 401 {"reason": ...}; FromContext(r.Context())
//
// Caller obligations:
//  1. A nil *Service is authentication off: Enabled reports false and Middleware passes
//     requests through.
//  2. Principal.Expires is when the credential stops being valid; the broker re-checks it
//     (Config.AuthRefreshInterval) and challenges the client for fresh credentials
//     (AUTH_CHALLENGE / AUTH_RESPONSE), which must verify to the same role.
//
// # Invariants (A1, A3)
//
//   - Every failure wraps ErrAuthentication; nothing is served on a failed authentication.
//   - No error message carries a credential (tokens, passwords, key material); an unknown
//     user and a wrong password get the same answer in about the same time; hash and MAC
//     comparisons are constant-time (crypto/subtle, bcrypt, jwt's HMAC check).
//
// # Concurrency
//
// The package starts no goroutines. A Service and its providers are immutable after New
// and safe for concurrent use.
package auth
