package bunqueue_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
	"github.com/bunqueue/bunqueue/tests/faultdriver"
)

// Scenario 2: KILL <connection id> on the server, of random connections of
// the workers (most of them in a transaction), during a run.

// TestReliabilityServerKill is scenario 2: KILL <connection id> of random
// worker connections, mostly ones in a transaction (quick: 70+ per mode,
// 210+ in all; long: 200+ per mode).
func TestReliabilityServerKill(t *testing.T) {
	relParallel(t)
	admin := migrated(t, 0)
	for _, mode := range []string{"table", "lock", "lease"} {
		t.Run(mode, func(t *testing.T) {
			relServerKill(t, admin, mode)
		})
	}
}

func relServerKill(t *testing.T, admin *bun.DB, mode string) {
	items := relSize(400, 5000)
	target := relSize(70, 200)
	interval := 20 * time.Millisecond
	in := faultdriver.NewInjector(rand.Uint64())
	w := newRelWorkload(t, admin, mode)
	w.work = 4 * time.Millisecond
	w.connOf = mode != "lease"
	// The clients' connections, with their server session ids, are the
	// injector's.
	for _, batch := range []int{1, 5} {
		w.addClient(relFaultDB(t, in, 0), 4, batch, bunqueue.Config{}, nil)
	}
	clientConns := in.Conns
	rep := &relReport{Scenario: "server-side KILL of worker connections", Mode: w.modeName()}
	began := time.Now()
	w.start()

	killedAt := map[int64]int64{} // connection id → when KILL was sent
	inTx := 0
	produced := w.produceOver(items, time.Duration(target)*interval)
	producing := true
	deadline := time.Now().Add(relSize(2*time.Minute, 10*time.Minute))
	for producing || rep.Kills < target {
		require.False(t, time.Now().After(deadline), "the run did not end in time (%d kills)", rep.Kills)
		if producing {
			select {
			case err := <-produced:
				require.NoError(t, err)
				producing = false
			default:
			}
		}
		time.Sleep(interval/2 + rand.N(interval))
		conns := clientConns()
		var busy []faultdriver.ConnInfo
		for _, c := range conns {
			if c.InTx && killedAt[c.ID] == 0 {
				busy = append(busy, c)
			}
		}
		pick := conns
		if len(busy) > 0 && rand.N(5) > 0 {
			pick = busy
		}
		if len(pick) == 0 {
			continue
		}
		c := pick[rand.N(len(pick))]
		if killedAt[c.ID] != 0 {
			continue
		}
		sent := time.Now().UnixNano()
		if dbtest.IsPostgres() {
			var ended bool
			if err := admin.NewRaw("SELECT pg_terminate_backend(?)", c.ID).Scan(t.Context(), &ended); err != nil || !ended {
				continue // gone already
			}
		} else if _, err := admin.Exec(fmt.Sprintf("KILL CONNECTION %d", c.ID)); err != nil {
			continue // gone already (1094 unknown thread id)
		}
		killedAt[c.ID] = sent
		if c.InTx {
			inTx++
		}
		rep.Kills++
	}
	drained := relWaitFor(relSize(time.Minute, 5*time.Minute), func() bool { return w.remaining() == 0 })
	w.stop()
	rep.Duration = time.Since(began)
	require.True(t, drained, "the queue drained (%d items left)", w.remaining())
	rep.note("%d of the kills hit a connection in a transaction", inTx)

	// A lock-mode run holds its item through its transaction's
	// connection: once that is killed the server has rolled the
	// transaction back and released the row, though the handler may still
	// be running (its writes can no longer commit). Lease mode holds it
	// by the lease, whatever happens to connections.
	var held func(relRun) int64
	if mode != "lease" {
		held = func(r relRun) int64 {
			if k := killedAt[r.Conn]; k != 0 && k < r.End {
				return max(k, r.Start)
			}
			return r.End
		}
		if n, _ := relOverlaps(w.rec.all(), nil); n > 0 {
			rep.note("%d handler runs went on after their connection was killed while another worker already had the item (their writes were rolled back)", n)
		}
	}
	w.check(rep, items, held)
	require.GreaterOrEqual(t, rep.Kills, target)
}
