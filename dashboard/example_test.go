package dashboard_test

import (
	"net/http"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/dashboard"
)

// requireAdmin stands for the app's own authentication.
func requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); !ok || user != "admin" || pass != "secret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="bunqueue"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// The dashboard mounted under /bunqueue/ of the app's server, behind the
// app's authentication, with the Retry and Delete buttons on.
func Example() {
	var db *bun.DB // the app's
	client, err := bunqueue.NewClient(db, nil)
	if err != nil {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/bunqueue/", requireAdmin(http.StripPrefix("/bunqueue",
		dashboard.New(client, &dashboard.Options{AllowActions: true}))))
	_ = http.ListenAndServe("127.0.0.1:8080", mux)
}
