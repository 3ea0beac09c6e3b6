package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/mail"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
)

// The app's own tables. bunqueue does not need them: they are what a real
// app would already have. Deleting a user deletes the record of its
// welcome email.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS example_signup_user (
	id         BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	email      VARCHAR(255) NOT NULL,
	name       VARCHAR(255) NOT NULL,
	created_at DATETIME(6) NOT NULL,
	UNIQUE KEY example_signup_user_email (email)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	`CREATE TABLE IF NOT EXISTS example_signup_sent (
	user_id BIGINT NOT NULL PRIMARY KEY,
	sent_at DATETIME(6) NOT NULL,
	FOREIGN KEY (user_id) REFERENCES example_signup_user (id) ON DELETE CASCADE
) ENGINE=InnoDB`,
}

// createTables creates the app's tables if they are missing.
func createTables(ctx context.Context, db bun.IDB) error {
	for _, s := range schema {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// User is a row of example_signup_user.
type User struct {
	bun.BaseModel `bun:"table:example_signup_user"`

	ID        int64     `bun:",pk,autoincrement" json:"id"`
	Email     string    `json:"email"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// WelcomeSent is a row of example_signup_sent: the welcome email of the
// user was sent at SentAt.
type WelcomeSent struct {
	bun.BaseModel `bun:"table:example_signup_sent"`

	UserID int64 `bun:",pk"`
	SentAt time.Time
}

// WelcomeEmail is the job that a signup enqueues. Its fields are stored as
// JSON in bunqueue_jobs; its Kind says which worker runs it.
type WelcomeEmail struct {
	UserID int64 `json:"user_id"`
}

// Kind implements bunqueue.JobArgs.
func (WelcomeEmail) Kind() string { return "welcome_email" }

// welcomeWorker returns the worker of WelcomeEmail jobs. It "sends" the
// email (it logs it) and records it in example_signup_sent.
//
// db is the job's transaction (the client runs its queues in lock mode
// by default): the record commits together with the job's completion, or,
// if anything fails, neither does and the job is retried. So the record
// is written exactly once. The email itself is at-least-once: if the
// commit failed after the send, the retry would send it again.
func welcomeWorker(logger *slog.Logger) bunqueue.WorkerFunc[WelcomeEmail] {
	return func(ctx context.Context, db bun.IDB, job *bunqueue.Job[WelcomeEmail]) error {
		var u User
		err := db.NewSelect().Model(&u).Where("id = ?", job.Args.UserID).Scan(ctx)
		if errors.Is(err, sql.ErrNoRows) {
			// The job and the user were committed together, so the user
			// was deleted since. Retrying will not help: give up now.
			return bunqueue.Cancel(fmt.Errorf("user %d no longer exists", job.Args.UserID))
		}
		if err != nil {
			return err // retried with backoff
		}

		logger.InfoContext(ctx, "sending welcome email",
			"to", u.Email, "user_id", u.ID, "job_id", job.ID, "attempt", job.Attempt)

		_, err = db.NewInsert().Model(&WelcomeSent{UserID: u.ID}).
			Value("sent_at", "UTC_TIMESTAMP(6)"). // the database's clock
			Exec(ctx)
		return err
	}
}

// server is the HTTP side of the app.
type server struct {
	db     *bun.DB
	client *bunqueue.Client
	queue  string // the jobs queue welcome emails go to
}

// newServer returns the app's HTTP handler:
//
//	POST /signup  creates a user and enqueues its welcome email
//	GET  /users   lists the newest users and whether their email was sent
//
// Welcome emails go to the jobs queue named queue, which must be one of
// the client's Config.JobQueues: main uses bunqueue.QueueDefault, the
// tests a queue of their own.
func newServer(db *bun.DB, client *bunqueue.Client, queue string) http.Handler {
	s := &server{db: db, client: client, queue: queue}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /signup", s.signup)
	mux.HandleFunc("GET /users", s.users)
	return mux
}

// errFailRequested is what the signup transaction returns when the
// request asked it to fail, to show the rollback.
var errFailRequested = errors.New("failed on purpose (fail=1)")

// signupResponse is the body of a successful POST /signup.
type signupResponse struct {
	User
	WelcomeJobID int64 `json:"welcome_job_id"`
}

// signup handles POST /signup. The body is a form or JSON with email and
// name. With fail=1 (in the query or the form) or the header "X-Fail: 1",
// it fails after the user was inserted and the job enqueued: the
// transaction rolls back and leaves neither.
func (s *server) signup(w http.ResponseWriter, r *http.Request) {
	in, err := readSignup(w, r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	fail := r.FormValue("fail") == "1" || r.Header.Get("X-Fail") == "1"

	user := &User{Email: in.Email, Name: in.Name, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	var job bunqueue.EnqueueResult

	// One transaction for the user and its job: the job exists if and only
	// if the user does. RunInTx commits if the function returns nil and
	// rolls back otherwise.
	err = s.db.RunInTx(r.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(user).Exec(ctx); err != nil {
			return err // a duplicate email fails here, before any job
		}
		var err error
		job, err = s.client.Enqueue(ctx, tx, WelcomeEmail{UserID: user.ID}, &bunqueue.EnqueueOpts{Queue: s.queue})
		if err != nil {
			return err
		}
		if fail {
			return errFailRequested
		}
		return nil
	})

	var myErr *mysql.MySQLError
	switch {
	case errors.As(err, &myErr) && myErr.Number == 1062: // ER_DUP_ENTRY
		writeError(w, http.StatusConflict, fmt.Sprintf("a user with email %q already exists", in.Email))
	case errors.Is(err, errFailRequested):
		// Say what was undone: the ids were real inside the transaction,
		// and are now nowhere (the server does not hand them out again).
		writeJSON(w, http.StatusInternalServerError, map[string]any{
			"error": fmt.Sprintf("%v after inserting user %d and enqueueing job %d: the transaction was rolled back",
				err, user.ID, job.ID),
			"rolled_back_user_id": user.ID,
			"rolled_back_job_id":  job.ID,
		})
	case err != nil:
		slog.ErrorContext(r.Context(), "signup failed", "email", in.Email, "error", err)
		writeError(w, http.StatusInternalServerError, "signup failed")
	default:
		writeJSON(w, http.StatusCreated, signupResponse{User: *user, WelcomeJobID: job.ID})
	}
}

type signupRequest struct {
	Email string `json:"email"`
	Name  string `json:"name"`
}

// readSignup reads and checks a signup from a JSON body or a form.
func readSignup(w http.ResponseWriter, r *http.Request) (signupRequest, error) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	var in signupRequest
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/json" {
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			return in, fmt.Errorf("bad JSON body: %v", err)
		}
	} else {
		in.Email, in.Name = r.PostFormValue("email"), r.PostFormValue("name")
	}
	in.Email, in.Name = strings.TrimSpace(in.Email), strings.TrimSpace(in.Name)
	if addr, err := mail.ParseAddress(in.Email); err != nil || addr.Address != in.Email {
		return in, fmt.Errorf("email: %q is not an email address", in.Email)
	}
	if len(in.Email) > 255 || len(in.Name) > 255 {
		return in, errors.New("email and name must have at most 255 bytes")
	}
	return in, nil
}

// userStatus is one user of GET /users.
type userStatus struct {
	ID            int64      `json:"id"`
	Email         string     `json:"email"`
	Name          string     `json:"name"`
	CreatedAt     time.Time  `json:"created_at"`
	WelcomeSent   bool       `json:"welcome_sent"`
	WelcomeSentAt *time.Time `json:"welcome_sent_at,omitempty" bun:"sent_at"`
}

// users handles GET /users: the 100 newest users, newest first, and
// whether their welcome email was sent.
func (s *server) users(w http.ResponseWriter, r *http.Request) {
	users := []userStatus{}
	err := s.db.NewRaw(`SELECT u.id, u.email, u.name, u.created_at, s.sent_at
FROM example_signup_user AS u
LEFT JOIN example_signup_sent AS s ON s.user_id = u.id
ORDER BY u.id DESC
LIMIT 100`).Scan(r.Context(), &users)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		slog.ErrorContext(r.Context(), "list users", "error", err)
		writeError(w, http.StatusInternalServerError, "could not list users")
		return
	}
	for i := range users {
		users[i].WelcomeSent = users[i].WelcomeSentAt != nil
	}
	writeJSON(w, http.StatusOK, users)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
