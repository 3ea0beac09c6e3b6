package bunqueue_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/internal/dbtest"
)

// Scenario 4: the MariaDB server is restarted in the middle of a run. It
// stops the server for everyone who uses it, so it runs only in the long
// part (BUNQUEUE_RELIABILITY_LONG=1), and it makes sure the server is up
// again when it ends, pass or fail.

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

func TestReliabilityServerRestart(t *testing.T) {
	dbtest.OnlyMySQL(t, "it restarts the MariaDB server")
	if !relLong() {
		t.Skipf("long part only (%s=1): it restarts the MariaDB server that every test and engineer here uses", relLongEnv)
	}
	if _, err := exec.LookPath("start-stop-daemon"); err != nil {
		t.Skip("start-stop-daemon is not available")
	}
	// Registered first, so it runs last: the server is up again however
	// the test ends.
	t.Cleanup(func() {
		if !relStartServer(t) {
			t.Errorf("the MariaDB server does not answer after the test")
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

	// Restart: SIGTERM (a clean shutdown), wait for the process to end,
	// start it again, wait until it answers.
	stopAt := time.Now()
	out, err := exec.Command("start-stop-daemon", "--stop", "--exec", relMariadbd, "--retry", "60").CombinedOutput()
	require.NoError(t, err, "start-stop-daemon --stop: %s", out)
	downAt := time.Now()
	require.True(t, relStartServer(t), "the server is up again")
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
		rep := &relReport{Scenario: "MariaDB restarted mid-run", Mode: w.modeName(), Duration: time.Since(began)}
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
