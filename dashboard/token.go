package dashboard

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
)

// APITokenMinLength is the fewest characters Options.APIToken may have.
const APITokenMinLength = 32

// tokenState is what the dashboard found of Options.APIToken in a
// request's Authorization header, kept in the request's context.
type tokenState int

const (
	tokenNone    tokenState = iota // no Bearer token, or no APIToken set
	tokenGood                      // the APIToken
	tokenRefused                   // another Bearer token
)

type tokenKey struct{}

// tokenOf returns the tokenState of r, as authenticate marked it.
func tokenOf(r *http.Request) tokenState {
	s, _ := r.Context().Value(tokenKey{}).(tokenState)
	return s
}

// ViaAPIToken reports whether r carried the dashboard's Options.APIToken
// in its Authorization header ("Bearer " and the token), as the dashboard
// checked it: Options.Authorize can tell a script's request from a
// browser's by it. It is false outside the dashboard's handler.
func ViaAPIToken(r *http.Request) bool { return tokenOf(r) == tokenGood }

// tokenRefusal is the message of the 401 answered to a request whose
// Bearer token is not Options.APIToken. It does not quote the token.
const tokenRefusal = "the Authorization header's Bearer token is not this dashboard's Options.APIToken"

// wwwAuthenticate is the challenge of that 401 (RFC 6750).
const wwwAuthenticate = `Bearer realm="bunqueue dashboard", error="invalid_token"`

// authenticate returns r with its tokenState in its context: tokenNone
// unless the app set Options.APIToken and r has an Authorization header
// of the Bearer scheme (another scheme, such as the Basic of the app's
// own login, is the app's and left alone).
func (h *handler) authenticate(r *http.Request) *http.Request {
	if h.token == nil {
		return r
	}
	token, ok := bearer(r)
	if !ok {
		return r
	}
	state := tokenRefused
	sum := sha256.Sum256([]byte(token)) // equal lengths: no length leaks through the comparison's time
	if subtle.ConstantTimeCompare(sum[:], h.token[:]) == 1 {
		state = tokenGood
	}
	return r.WithContext(context.WithValue(r.Context(), tokenKey{}, state))
}

// bearer returns the token of r's Authorization header if its scheme is
// Bearer (in any case, RFC 9110); "" for the scheme alone.
func bearer(r *http.Request) (string, bool) {
	scheme, token, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// apiTokenSum returns the hash of token that the handler keeps, or nil
// for none.
func apiTokenSum(token string) *[sha256.Size]byte {
	if token == "" {
		return nil
	}
	sum := sha256.Sum256([]byte(token))
	return &sum
}

// validAPIToken reports why token cannot be Options.APIToken, or nil: it
// is empty (none), or at least APITokenMinLength characters of RFC
// 6750's b64token (token68) alphabet. The error never quotes the token.
func validAPIToken(token string) error {
	if token == "" {
		return nil
	}
	if len(token) < APITokenMinLength {
		return fmt.Errorf("dashboard: Options.APIToken must be at least %d characters (it has %d): for example 32 random bytes, hex-encoded", APITokenMinLength, len(token))
	}
	body := strings.TrimRight(token, "=")
	if body == "" {
		return fmt.Errorf("dashboard: Options.APIToken must not be only '=' characters")
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~+/", c) >= 0) {
			return fmt.Errorf("dashboard: Options.APIToken may hold only letters, digits and -._~+/ (then '=' at the end, RFC 6750); the character at index %d is not one", i)
		}
	}
	return nil
}
