// Package dashboard serves a web page that shows the queues of a
// bunqueue Client and its failed jobs, for an app to mount on its own
// HTTP server:
//
//	mux.Handle("/bunqueue/", http.StripPrefix("/bunqueue", dashboard.New(client, nil)))
//
// The page shows each queue of the client (its table or the jobs table,
// depth, rows in flight, rows processed and failed in the last minute and
// hour, workers, the limits in force, paused or not), charts of each queue's last hour (processed and failed
// per minute, the whole fleet's from Client.FleetHistory, or with
// ?scope=process this process's from Client.History, and the depth,
// drawn as inline SVG by the server), the failed jobs, newest
// first, a page at a time, with their payload, error, attempts and time,
// and the latest failures in this process, grouped by queue and error,
// ten groups a page. With Options.Clients it
// lists the queues of several clients, each row naming its client. It
// refreshes itself every Options.RefreshInterval
// without reloading. GET data.json returns the same data as JSON.
//
// GET processes lists the processes that run queues on the client's
// tables, live ones first, then the stale ones, each with its queues
// (Client.Processes).
//
// GET jobs is the job browser: the jobs of one state (or all), of a
// queue and kind, or of an id, newest first, a page at a time
// (Client.JobList, Client.JobGet). GET job?id=… is a job's page: its
// args, metadata and output indented, its times, attempts and last
// error (Client.JobGet). GET queue?name=… is a table queue's page: its
// figures and last hour, the rows failing in this process by their own
// primary key, and, with Options.FailedRows, the rows the app's table
// says failed for good, each with a Retry button when the app gives
// Options.RetryRow, refreshing itself as the overview does. With
// Options.Clients, the query parameter client (a client's name) chooses
// whose jobs or queue these pages show, and whose jobs an action acts
// on; New's client's by default. The pages call the public API of
// package bunqueue, as an app does, and no SQL of their own.
//
// The handler has no authentication of its own: put the app's in front
// of it. With Options.AllowActions, each failed job gets Retry and Delete
// buttons, each queue Pause or Resume, and the jobs of the job browser
// and the job page Retry, Cancel, Delete and Run now, on one job or a
// selection (POST requests that need the page's CSRF token); they are
// off by default. Options.Authorize decides, per request, what may be
// read and done.
//
// Scripts use the same addresses: GET data.json, and the actions' POST
// requests with the header "Accept: application/json", which answer
// ActionResult, QueueResult, JobActionResult or RowActionResult. With
// Options.APIToken, a request with "Authorization: Bearer " and that
// token needs no CSRF token (ViaAPIToken tells Authorize about it).
// docs/dashboard.md lists every address, field and answer, with curl
// examples that a test runs.
//
// Everything shown is escaped: payloads and errors are untrusted. The
// page loads nothing from other hosts, and its Content-Security-Policy
// allows only its own script and style.
package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/bunqueue/bunqueue"
)

// Defaults of Options.
const (
	// RefreshIntervalDefault is how often the page refreshes its data.
	RefreshIntervalDefault = 5 * time.Second
	// PageSizeDefault is how many failed jobs one page lists.
	PageSizeDefault = 25
)

// Options configure the dashboard. A nil *Options, and its zero value,
// mean defaults.
type Options struct {
	// AllowActions shows the buttons of the actions and accepts them:
	// Retry and Delete on failed jobs, Pause or Resume on each of the
	// client's queues, Retry, Cancel, Delete and Run now on jobs, one or
	// a selection, in the job browser and on the job page, and Retry on a
	// table's failed rows (RetryRow) on the queue's page. They are
	// POST requests that carry the page's CSRF token (a signed token, in
	// a SameSite=Strict cookie and in the form, that must match), or a
	// script's APIToken, and that the browser does not mark as
	// cross-origin. Defaults to false: the dashboard only reads, and
	// answers every action 403.
	AllowActions bool
	// Title is the page's title. Defaults to "bunqueue".
	Title string
	// RefreshInterval is how often the page fetches fresh data. Defaults
	// to RefreshIntervalDefault; at least one second.
	RefreshInterval time.Duration
	// PageSize is how many failed jobs, or jobs of the job browser, one
	// page lists, 1 to 1000.
	// Defaults to PageSizeDefault.
	PageSize int
	// Authorize, when set, is asked before each request is served, with
	// the request and what it does: ActionView for the pages and
	// data.json, the action's name (ActionRetry, ActionCancel, …) for an
	// action. A request it refuses is answered 403, saying so, and the
	// pages hide the buttons of the actions it refuses. It cannot allow
	// what AllowActions does not. ViaAPIToken(r) tells it a script's
	// request, which carried APIToken. Defaults to allowing every
	// request.
	Authorize func(r *http.Request, action string) bool
	// TraceURL, when set, returns the address of the trace traceID (32
	// hexadecimal digits) in the app's tracing UI, for example
	// "https://jaeger.example.com/trace/" + traceID: the job page links a
	// failed job to the trace it was enqueued in. Defaults to no link.
	TraceURL func(traceID string) string
	// FailedRows, when set, reads the rows of a table queue that failed
	// for good from the app's own table, by queue name: the queue's page
	// lists the first FailedRowsShown rows it returns. It is called on
	// each view of the page and each of its refreshes (every
	// RefreshInterval while it is open), with the request's context; an
	// error (or a panic) is shown instead of the rows. The name is that
	// of a queue of any of the dashboard's clients. Defaults to none: the
	// page shows only the failures this process saw.
	FailedRows map[string]func(ctx context.Context) ([]FailedRow, error)
	// RetryRow, when set, retries a row of a table queue that failed for
	// good, by queue name: the queue's page gives each row that its
	// FailedRows function lists a Retry button (POST retry-row), which
	// calls this function with the row's FailedRow.Key and the request's
	// context. It should put the row back in its queue (for example,
	// clear the columns that mark it failed, in the app's table) and
	// return nil, or an error that says why not; a panic is an error. The
	// dashboard calls it only for a key that the queue's FailedRows
	// function returns at that moment, so a key a form made up, or a row
	// retried already, is refused; and only with AllowActions and unless
	// Authorize refuses ActionRetryRow. Every queue in it must have a
	// FailedRows function. Defaults to none: the rows cannot be retried
	// from the page.
	RetryRow map[string]func(ctx context.Context, key string) error
	// CSRFKey signs the CSRF tokens. Defaults to a random key made by
	// New: set the same key (32 random bytes) on every instance of the app
	// behind one load balancer, so that a token from one is good at the
	// others.
	CSRFKey []byte
	// Clients are more clients whose queues the overview lists, after
	// those of New's client, each row naming its client (New's is named
	// ClientName); pausing or resuming a queue goes to its own client.
	// The job browser, the job page, the job actions and a table queue's
	// page are those of the client their parameter client names (New's
	// when it is absent; an unknown name is a 400); the overview's failed
	// jobs are those of New's client's jobs tables. Defaults to none.
	Clients []Client
	// ClientName names New's client when there are Clients. Defaults
	// to ClientNameDefault.
	ClientName string
	// APIToken, when set, lets scripts act without a browser session: a
	// request whose Authorization header is "Bearer " and this token
	// needs no CSRF token (a browser never sends such a header of its
	// own accord, so no other site can make it send one), and
	// ViaAPIToken reports true for it, in Authorize. It still needs
	// AllowActions to act, and Authorize is asked as for any request. A
	// request with another Bearer token is answered 401, whatever it
	// asks. The token is compared in constant time, and the dashboard
	// never shows or logs it. It must be at least APITokenMinLength
	// characters of the RFC 6750 token alphabet (letters, digits,
	// "-._~+/", then "=" at the end): for example 32 random bytes,
	// hex-encoded. Defaults to none: every action needs the page's CSRF
	// token, and an Authorization header is left to the app.
	APIToken string
}

// validate reports the first option out of range, naming its field; it
// never quotes APIToken.
func (o *Options) validate() error {
	switch {
	case o.RefreshInterval < time.Second:
		return errors.New("dashboard: Options.RefreshInterval must be at least one second")
	case o.PageSize < 1 || o.PageSize > 1000:
		return errors.New("dashboard: Options.PageSize must be within 1..1000")
	}
	for _, queue := range slices.Sorted(maps.Keys(o.RetryRow)) {
		switch {
		case o.RetryRow[queue] == nil:
			return fmt.Errorf("dashboard: Options.RetryRow[%q] is nil", queue)
		case o.FailedRows[queue] == nil:
			return fmt.Errorf("dashboard: Options.RetryRow[%q] needs Options.FailedRows[%q]: only the rows it lists can be retried", queue, queue)
		}
	}
	return validAPIToken(o.APIToken)
}

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed assets
var assetFiles embed.FS

// handler is the dashboard of one client, or several.
type handler struct {
	client  *bunqueue.Client // New's: its jobs tables are the pages'
	clients []Client         // New's first, then Options.Clients
	opts    Options
	key     []byte
	token   *[sha256.Size]byte // the hash of Options.APIToken, or nil
	pages   *template.Template
	assets  http.Handler
	origins *http.CrossOriginProtection

	mu     sync.Mutex
	cached []bunqueue.QueueStats // the last Stats, to spare the database when many pages refresh
	owners []int                 // the index in clients of each cached queue's client
	cerr   error
	when   time.Time
	depths depths // the depths the stats read, for the charts
}

// New returns the dashboard of client as an http.Handler that serves its
// pages at "/" and below: mount it with http.StripPrefix. opts may be nil
// for defaults. It panics if client is nil or opts are out of range.
func New(client *bunqueue.Client, opts *Options) http.Handler {
	if client == nil {
		panic("dashboard: New: client must not be nil")
	}
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Title == "" {
		o.Title = "bunqueue"
	}
	if o.RefreshInterval == 0 {
		o.RefreshInterval = RefreshIntervalDefault
	}
	if o.PageSize == 0 {
		o.PageSize = PageSizeDefault
	}
	if err := o.validate(); err != nil {
		panic(err.Error())
	}
	key := o.CSRFKey
	if len(key) == 0 {
		key = make([]byte, 32)
		_, _ = rand.Read(key)
	}
	assets, err := fs.Sub(assetFiles, "assets")
	if err != nil {
		panic(err)
	}
	token := apiTokenSum(o.APIToken)
	o.APIToken = "" // only its hash is kept
	return &handler{
		token:   token,
		client:  client,
		clients: clientsOf(client, o),
		opts:    o,
		key:     key,
		pages:   template.Must(template.New("").Funcs(funcs).ParseFS(templateFiles, "templates/*.html")),
		assets:  http.StripPrefix("/assets/", http.FileServerFS(assets)),
		origins: http.NewCrossOriginProtection(),
		depths:  depths{},
	}
}

// ServeHTTP implements http.Handler.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "+
		"img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "same-origin")
	path := r.URL.Path
	r = h.authenticate(r)
	if tokenOf(r) == tokenRefused {
		hdr.Set("WWW-Authenticate", wwwAuthenticate)
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		switch {
		case tokenOf(r) == tokenRefused:
			h.refuseRead(w, r, http.StatusUnauthorized, tokenRefusal)
			return
		case !h.allowed(r, ActionView):
			h.refuseRead(w, r, http.StatusForbidden, h.refusal(ActionView))
			return
		}
	}
	switch {
	case path == "/" || path == "":
		h.get(w, r, h.page)
	case path == "/fragment":
		h.get(w, r, h.fragment)
	case path == "/data.json":
		h.get(w, r, h.json)
	case path == "/jobs":
		h.get(w, r, h.ofClient(h.jobs))
	case path == "/queue":
		h.get(w, r, h.ofClient(h.queue))
	case path == "/queue-live":
		h.get(w, r, h.ofClient(h.queueLive))
	case path == "/job":
		h.get(w, r, h.ofClient(h.job))
	case path == "/processes":
		h.get(w, r, h.ofClient(h.processes))
	case path == "/job-action":
		h.jobAction(w, r)
	case path == "/retry" || path == "/delete":
		h.failedAction(w, r, path[1:])
	case path == "/pause" || path == "/resume":
		h.queueAction(w, r, path[1:])
	case path == "/retry-row":
		h.rowAction(w, r)
	case len(path) > len("/assets/") && path[:len("/assets/")] == "/assets/":
		h.get(w, r, h.assets.ServeHTTP)
	default:
		h.problem(w, r, http.StatusNotFound, "The dashboard has no page at this address.")
	}
}

// get serves r with serve if it is a GET or HEAD.
func (h *handler) get(w http.ResponseWriter, r *http.Request, serve http.HandlerFunc) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.refuseRead(w, r, http.StatusMethodNotAllowed, "use GET")
		return
	}
	serve(w, r)
}

// ErrorResult is the JSON answer to a request of data.json that is
// refused: 401 (a Bearer token that is not Options.APIToken), 403
// (Options.Authorize refused it) or 405 (not a GET or HEAD).
type ErrorResult struct {
	// Error says why, in words.
	Error string `json:"error"`
}

// refuseRead answers a refused read of r with status and msg: an
// ErrorResult for data.json, else text.
func (h *handler) refuseRead(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if r.URL.Path == "/data.json" {
		writeJSON(w, status, ErrorResult{Error: msg})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	fmt.Fprintf(w, "bunqueue dashboard: %s\n", msg)
}

// stats returns the stats of every client, read at most once a second,
// and the index in h.clients of each queue's client.
func (h *handler) stats(r *http.Request) ([]bunqueue.QueueStats, []int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.when) < time.Second {
		return h.cached, h.owners, h.cerr
	}
	h.cached, h.owners, h.cerr = h.readStats(r)
	h.when = time.Now()
	h.depths.record(h.cached, h.owners, h.when)
	return h.cached, h.owners, h.cerr
}
