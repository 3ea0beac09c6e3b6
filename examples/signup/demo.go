package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/uptrace/bun"
)

// demoDomain is the email domain of the demo's users. Each run first
// deletes the users a previous run left, so it can sign them up again.
const demoDomain = "demo.example"

// demoEmails are the demo's users' emails. A run deletes them by the
// unique index on email: a DELETE by a LIKE on the domain would read, and
// on MySQL lock, every user of the table, and deadlock with the workers
// and signups of other app servers on the database.
var demoEmails = []string{"ada@" + demoDomain, "grace@" + demoDomain, "eve@" + demoDomain}

// runDemo plays the whole story against the server at baseURL, through
// HTTP like any client would: two signups that succeed, one that fails on
// purpose, then the welcome emails. It checks each step in the database
// and returns an error if something is not as it should be.
func runDemo(ctx context.Context, db *bun.DB, baseURL string) error {
	began := time.Now()
	if _, err := db.NewDelete().Model((*User)(nil)).Where("email IN (?)", bun.In(demoEmails)).Exec(ctx); err != nil {
		return err
	}
	fmt.Printf("signup demo: server at %s, welcome-email worker running\n\n", baseURL)

	// Two signups, one as a form and one as JSON.
	ada, err := demoSignup(ctx, baseURL, "/signup", "application/x-www-form-urlencoded",
		url.Values{"email": {"ada@" + demoDomain}, "name": {"Ada Lovelace"}}.Encode())
	if err != nil {
		return err
	}
	grace, err := demoSignup(ctx, baseURL, "/signup", "application/json",
		`{"email": "grace@`+demoDomain+`", "name": "Grace Hopper"}`)
	if err != nil {
		return err
	}
	// And one that fails after its user is inserted and its job enqueued.
	eve, err := demoSignup(ctx, baseURL, "/signup?fail=1", "application/x-www-form-urlencoded",
		url.Values{"email": {"eve@" + demoDomain}, "name": {"Eve"}}.Encode())
	if err != nil {
		return err
	}
	switch {
	case ada.status != http.StatusCreated || grace.status != http.StatusCreated:
		return fmt.Errorf("demo: the first two signups should have made users")
	case eve.status != http.StatusInternalServerError:
		return fmt.Errorf("demo: the signup with fail=1 should have failed")
	}

	// The worker picks the jobs up on its own; watch GET /users until both
	// welcome emails are sent.
	fmt.Println("\nwaiting for the worker to send the welcome emails...")
	mine, err := demoWaitSent(ctx, baseURL, 2, 15*time.Second)
	if err != nil {
		return err
	}

	fmt.Println("\nGET /users (this demo's users):")
	for _, u := range mine {
		fmt.Printf("  user %-5d %-22s %-14s welcome email sent at %s\n",
			u.ID, u.Email, u.Name, u.WelcomeSentAt.Format("15:04:05.000"))
	}

	// Check the rest in the database.
	fmt.Println("\nin the database:")
	var sentRows, jobsLeft int
	if err := db.NewSelect().Model((*WelcomeSent)(nil)).
		Where("user_id IN (?)", bun.List([]int64{ada.userID, grace.userID})).
		ColumnExpr("COUNT(*)").Scan(ctx, &sentRows); err != nil {
		return err
	}
	if err := db.NewRaw("SELECT COUNT(*) FROM bunqueue_jobs WHERE id IN (?)",
		bun.List([]int64{ada.jobID, grace.jobID})).Scan(ctx, &jobsLeft); err != nil {
		return err
	}
	fmt.Printf("  example_signup_sent: %d rows, for users %d and %d\n", sentRows, ada.userID, grace.userID)
	fmt.Printf("  bunqueue_jobs: jobs %d and %d completed (deleted with the commit that recorded the email): %d left\n",
		ada.jobID, grace.jobID, jobsLeft)

	var eveUsers, eveJobs int
	if err := db.NewSelect().Model((*User)(nil)).
		Where("id = ? OR email = ?", eve.userID, "eve@"+demoDomain).
		ColumnExpr("COUNT(*)").Scan(ctx, &eveUsers); err != nil {
		return err
	}
	if err := db.NewRaw(`SELECT
	(SELECT COUNT(*) FROM bunqueue_jobs WHERE id = ?) +
	(SELECT COUNT(*) FROM bunqueue_failed_jobs WHERE job_id = ?)`,
		eve.jobID, eve.jobID).Scan(ctx, &eveJobs); err != nil {
		return err
	}
	forEve, err := welcomeJobsFor(ctx, db, eve.userID)
	if err != nil {
		return err
	}
	eveJobs += forEve
	fmt.Printf("  failed signup of eve@%s: %d users (id %d or that email), %d jobs (id %d, or for user %d)\n",
		demoDomain, eveUsers, eve.userID, eveJobs, eve.jobID, eve.userID)

	if sentRows != 2 || jobsLeft != 0 || eveUsers != 0 || eveJobs != 0 {
		return fmt.Errorf("demo: the database is not as it should be")
	}
	fmt.Printf("\nthe user and its job committed together, or (eve) rolled back together. done in %s\n",
		time.Since(began).Round(time.Millisecond))
	return nil
}

// demoResult is what one demo signup got back.
type demoResult struct {
	status int
	userID int64 // the user's id, or the rolled-back one's
	jobID  int64 // the welcome job's id, or the rolled-back one's
}

// demoSignup posts a signup, prints the request and the answer, and
// returns the ids the answer names.
func demoSignup(ctx context.Context, baseURL, path, contentType, body string) (demoResult, error) {
	var res demoResult
	fmt.Printf("POST %s  %s\n", path, body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+path, strings.NewReader(body))
	if err != nil {
		return res, err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return res, err
	}
	var answer struct {
		ID               int64  `json:"id"`
		WelcomeJobID     int64  `json:"welcome_job_id"`
		Error            string `json:"error"`
		RolledBackUserID int64  `json:"rolled_back_user_id"`
		RolledBackJobID  int64  `json:"rolled_back_job_id"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		return res, fmt.Errorf("demo: %s: %w", raw, err)
	}
	res.status = resp.StatusCode
	if resp.StatusCode == http.StatusCreated {
		res.userID, res.jobID = answer.ID, answer.WelcomeJobID
		fmt.Printf("  -> %s: user %d, and welcome_email job %d enqueued in the same transaction\n",
			resp.Status, res.userID, res.jobID)
	} else {
		res.userID, res.jobID = answer.RolledBackUserID, answer.RolledBackJobID
		fmt.Printf("  -> %s: %s\n", resp.Status, answer.Error)
	}
	return res, nil
}

// demoWaitSent polls GET /users until n of the demo's users have their
// welcome email sent, and returns the demo's users, oldest first.
func demoWaitSent(ctx context.Context, baseURL string, n int, timeout time.Duration) ([]userStatus, error) {
	deadline := time.Now().Add(timeout)
	for {
		users, err := demoUsers(ctx, baseURL+"/users")
		if err != nil {
			return nil, err
		}
		var mine []userStatus
		sent := 0
		for i := len(users) - 1; i >= 0; i-- { // GET /users lists the newest first
			if u := users[i]; strings.HasSuffix(u.Email, "@"+demoDomain) {
				mine = append(mine, u)
				if u.WelcomeSent {
					sent++
				}
			}
		}
		if sent >= n {
			return mine, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("demo: after %s, %d of %d welcome emails were sent", timeout, sent, n)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// demoUsers gets GET /users.
func demoUsers(ctx context.Context, url string) ([]userStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var users []userStatus
	if err := json.NewDecoder(resp.Body).Decode(&users); err != nil {
		return nil, fmt.Errorf("demo: GET /users: %w", err)
	}
	return users, nil
}

// welcomeJobsFor counts the welcome_email jobs for the user userID, in
// every queue, by the user_id in their args. The args are JSON in a
// binary column (LONGBLOB, BYTEA or BLOB, whichever the server), which
// each server's SQL reads its own way: they are decoded here instead.
func welcomeJobsFor(ctx context.Context, db bun.IDB, userID int64) (int, error) {
	rows, err := db.QueryContext(ctx, "SELECT args FROM bunqueue_jobs WHERE kind = ?", WelcomeEmail{}.Kind())
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var args [][]byte
	for rows.Next() {
		var a []byte
		if err := rows.Scan(&a); err != nil {
			return 0, err
		}
		args = append(args, a)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	n := 0
	for _, a := range args {
		var w WelcomeEmail
		if err := json.Unmarshal(a, &w); err == nil && w.UserID == userID {
			n++
		}
	}
	return n, nil
}
