package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
)

// csrfCookie holds the browser's CSRF token; the page's forms carry the
// same token in the field csrfField.
const (
	csrfCookie = "bunqueue_csrf"
	csrfField  = "csrf"
)

// sign returns the token of nonce: nonce.HMAC(key, nonce).
func (h *handler) sign(nonce string) string {
	mac := hmac.New(sha256.New, h.key)
	mac.Write([]byte("bunqueue dashboard csrf\x00" + nonce))
	return nonce + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// valid reports whether token was signed with the handler's key.
func (h *handler) valid(token string) bool {
	nonce, _, ok := strings.Cut(token, ".")
	return ok && nonce != "" && hmac.Equal([]byte(h.sign(nonce)), []byte(token))
}

// csrfToken returns the browser's CSRF token, setting the cookie that
// holds it when the browser has none (or one this key did not sign).
func (h *handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && h.valid(c.Value) {
		return c.Value
	}
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	token := h.sign(base64.RawURLEncoding.EncodeToString(b))
	// No Path: the cookie belongs to the directory the dashboard is
	// mounted at, whatever its prefix.
	http.SetCookie(w, &http.Cookie{
		Name: csrfCookie, Value: token,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	return token
}

// checkCSRF reports whether r carries, in its form, the token of its
// cookie, signed with the handler's key.
func (h *handler) checkCSRF(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || !h.valid(c.Value) {
		return false
	}
	form := r.PostFormValue(csrfField)
	return subtle.ConstantTimeCompare([]byte(form), []byte(c.Value)) == 1
}
