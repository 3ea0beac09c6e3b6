package bunqueue_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// Scenario 4: the database server is restarted in the middle of a run:
// MariaDB (start-stop-daemon), or, when the tests run on PostgreSQL, the
// local PostgreSQL cluster of the DSN's port (pg_ctlcluster; MariaDB is
// left alone then). It stops the server for everyone who uses it, so it
// runs only in the long part (BUNQUEUE_RELIABILITY_LONG=1), and it makes
// sure the server is up again when it ends, pass or fail.

const relMariadbd = "/usr/sbin/mariadbd"

// relServerAnswers reports whether the server answers a query, through
// the mariadb client on the local socket.
func relServerAnswers() bool {
	return exec.Command("mariadb", "-e", "SELECT 1").Run() == nil
}

// relStartServer starts the server if it does not answer, and waits (up
// to a minute) until it does.
func relStartServer(t *testing.T) bool {
	if relServerAnswers() {
		return true
	}
	out, err := exec.Command("start-stop-daemon", "--start", "--oknodo", "--background", "--exec", relMariadbd).CombinedOutput()
	if err != nil {
		t.Logf("start-stop-daemon --start: %v: %s", err, out)
	}
	return relWaitFor(time.Minute, relServerAnswers)
}

// relServer is the server the restart scenario stops and starts.
type relServer struct {
	name string
	// stop stops the server and returns when it is down; start starts it
	// if it does not answer and waits (up to a minute) until it does.
	stop  func() error
	start func(t *testing.T) bool
}

// relPGAnswers reports whether PostgreSQL at the tests' DSN answers a
// query.
func relPGAnswers() bool {
	db, err := sql.Open("pgx", dbtest.PGDSN())
	if err != nil {
		return false
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var one int
	return db.QueryRowContext(ctx, "SELECT 1").Scan(&one) == nil
}

// relPGCluster finds the local cluster (version and name, for
// pg_ctlcluster) that listens on the port of the tests' DSN.
func relPGCluster(t *testing.T) (version, name string) {
	t.Helper()
	if _, err := exec.LookPath("pg_ctlcluster"); err != nil {
		t.Skip("pg_ctlcluster is not available")
	}
	u, err := url.Parse(dbtest.PGDSN())
	require.NoError(t, err)
	if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
		t.Skipf("PostgreSQL at %s is not local", h)
	}
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	out, err := exec.Command("pg_lsclusters", "-h").Output()
	require.NoError(t, err, "pg_lsclusters")
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[2] == port && f[3] == "online" {
			return f[0], f[1]
		}
	}
	t.Skipf("no online local cluster on port %s (pg_lsclusters: %s)", port, out)
	return "", ""
}

// relRestartable returns the server the tests run on, to restart, or
// skips the test.
func relRestartable(t *testing.T) relServer {
	if !dbtest.IsPostgres() {
		if _, err := exec.LookPath("start-stop-daemon"); err != nil {
			t.Skip("start-stop-daemon is not available")
		}
		return relServer{
			name: "MariaDB",
			stop: func() error {
				out, err := exec.Command("start-stop-daemon", "--stop", "--exec", relMariadbd, "--retry", "60").CombinedOutput()
				if err != nil {
					return fmt.Errorf("start-stop-daemon --stop: %w: %s", err, out)
				}
				return nil
			},
			start: relStartServer,
		}
	}
	version, cluster := relPGCluster(t)
	ctl := func(action string) error {
		out, err := exec.Command("pg_ctlcluster", version, cluster, action).CombinedOutput()
		if err != nil {
			return fmt.Errorf("pg_ctlcluster %s %s %s: %w: %s", version, cluster, action, err, out)
		}
		return nil
	}
	return relServer{
		name: "PostgreSQL",
		// pg_ctlcluster stops in fast mode: open transactions are rolled
		// back, sessions ended, then a clean shutdown.
		stop: func() error { return ctl("stop") },
		start: func(t *testing.T) bool {
			if relPGAnswers() {
				return true
			}
			if err := ctl("start"); err != nil {
				t.Log(err)
			}
			return relWaitFor(time.Minute, relPGAnswers)
		},
	}
}

func TestReliabilityServerRestart(t *testing.T) {
	if !relLong() {
		t.Skipf("long part only (%s=1): it restarts the database server that every test and engineer here uses", relLongEnv)
	}
	srv := relRestartable(t)
	// Registered first, so it runs last: the server is up again however
	// the test ends.
	t.Cleanup(func() {
		if !srv.start(t) {
			t.Errorf("the %s server does not answer after the test", srv.name)
		}
	})
	admin := migrated(t, 0)
	items := 4000
	var ws []*relWorkload
	for _, mode := range []string{"table", "lock", "lease"} {
		w := newRelWorkload(t, admin, mode)
		w.work = 2 * time.Millisecond
		for _, batch := range []int{1, 5} {
			w.addClient(dbtest.Open(t, 0), 4, batch, bunqueue.Config{PollInterval: 100 * time.Millisecond}, nil)
		}
		require.NoError(t, w.produce(0, items))
		ws = append(ws, w)
	}
	began := time.Now()
	for _, w := range ws {
		w.start()
	}
	require.True(t, relWaitFor(5*time.Minute, func() bool {
		for _, w := range ws {
			if w.remaining() > items*3/4 {
				return false
			}
		}
		return true
	}), "a quarter of each queue done")

	// Restart: a clean shutdown (MariaDB: SIGTERM; PostgreSQL: fast
	// mode), wait for the server to end, start it again, wait until it
	// answers.
	stopAt := time.Now()
	require.NoError(t, srv.stop())
	downAt := time.Now()
	require.True(t, srv.start(t), "the server is up again")
	upAt := time.Now()

	// How long after it answers again each queue makes progress: the
	// first handler run that started after that (its claim succeeded).
	left := make([]int, len(ws))
	for i, w := range ws {
		left[i] = w.remaining()
	}
	recovered := make([]time.Duration, len(ws))
	require.True(t, relWaitFor(2*time.Minute, func() bool {
		all := true
		for i, w := range ws {
			if recovered[i] != 0 {
				continue
			}
			var first int64
			for _, r := range w.rec.all() {
				if r.Start >= upAt.UnixNano() && (first == 0 || r.Start < first) {
					first = r.Start
				}
			}
			if first == 0 {
				all = false
			} else {
				recovered[i] = max(time.Duration(first-upAt.UnixNano()), time.Nanosecond)
			}
		}
		return all
	}), "every queue makes progress after the restart")
	require.True(t, relWaitFor(5*time.Minute, func() bool {
		for _, w := range ws {
			if w.remaining() > 0 {
				return false
			}
		}
		return true
	}), "every queue drains")
	for i, w := range ws {
		w.stop()
		rep := &relReport{Scenario: srv.name + " restarted mid-run", Mode: w.modeName(), Duration: time.Since(began)}
		rep.note("server stopped in %s and answered again %s later; this queue claimed again %s after that",
			downAt.Sub(stopAt).Round(10*time.Millisecond), upAt.Sub(downAt).Round(10*time.Millisecond), recovered[i].Round(time.Millisecond))
		rep.note("%d of %d items were left at the restart", left[i], items)
		w.check(rep, items, nil)
	}
	var sb strings.Builder
	for i, w := range ws {
		sb.WriteString(w.modeName() + ": " + recovered[i].Round(time.Millisecond).String() + "; ")
	}
	t.Logf("time to recover after the server answered: %s", sb.String())
}
