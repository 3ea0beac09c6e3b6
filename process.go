package bunqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/bunqueue/bunqueue/internal/histsql"
	"github.com/bunqueue/bunqueue/internal/limit"
	"github.com/bunqueue/bunqueue/internal/procsql"
)

// HeartbeatIntervalDefault is how often a started client refreshes its
// row of the process registry when Config.HeartbeatInterval is zero.
const HeartbeatIntervalDefault = 5 * time.Second

// ProcessStaleBeats is how many of its heartbeats a process may miss
// before the others show it as stale: a process killed without Stop
// leaves the live list within ProcessStaleBeats × its HeartbeatInterval
// (15 s by default). Its row is deleted ProcessForgetAfter later.
const ProcessStaleBeats = procsql.StaleBeats

// ProcessForgetAfter is how long a stale process stays in the registry,
// shown as stale, before another process's heartbeat deletes its row.
const ProcessForgetAfter = procsql.ForgetAfter

// upkeepEvery is how many heartbeats pass between a process's turns at
// the fleet's upkeep (a minute at the default interval): each process
// then claims or renews the upkeep's lease, one statement, and the one
// that holds it deletes the forgotten processes, samples the depths and
// rolls the history up.
const upkeepEvery = 12

// Process is a started client as the process registry shows it: every
// client that runs on the database (in the client's Tables), in any app
// server, records itself in the registry at Start, refreshes its row
// every HeartbeatInterval and deletes it at Stop.
type Process struct {
	// ID is the client's random id, new at each Start.
	ID string `json:"id"`
	// Name is Config.ProcessName, by default "host:pid".
	Name string `json:"name"`
	// Host is the machine's host name and PID the process's id on it.
	Host string `json:"host"`
	PID  int64  `json:"pid"`
	// Version is the version of bunqueue the process runs: its module's
	// version, or "(devel)" in a build from a checkout.
	Version string `json:"version"`
	// StartedAt is when the client started, and HeartbeatAt when it last
	// refreshed its row, both by the database clock, in UTC.
	StartedAt   time.Time `json:"started_at"`
	HeartbeatAt time.Time `json:"heartbeat_at"`
	// Stale says that the process missed ProcessStaleBeats heartbeats: it
	// was killed, hangs, or cannot reach the database. Its queues are as
	// it last wrote them.
	Stale bool `json:"stale"`
	// This says that the process is the one of the client asked.
	This bool `json:"this"`
	// Queues are the process's queues, as of its last heartbeat.
	Queues []ProcessQueue `json:"queues"`
}

// ProcessQueue is one queue of a process, as of its last heartbeat.
type ProcessQueue struct {
	Name string    `json:"name"`
	Kind QueueKind `json:"kind"`
	// Mode is "lock" or "lease" (jobs queues in lease mode; table queues
	// run in lock mode).
	Mode string `json:"mode"`
	// Workers is the queue's worker goroutines in the process, and
	// InFlight the rows or jobs they held.
	Workers  int `json:"workers"`
	InFlight int `json:"in_flight"`
	// Paused says that the process saw the queue paused (PauseQueue).
	Paused bool `json:"paused"`
	// GlobalLimit, KeyLimit, RateLimit and KeyRate are the queue's limits
	// in the process (zero: none).
	GlobalLimit int  `json:"global_limit"`
	KeyLimit    int  `json:"key_limit"`
	RateLimit   Rate `json:"rate_limit"`
	KeyRate     Rate `json:"key_rate"`
}

// Processes returns the process registry: every started client of the
// database's tables (Config.Tables), live ones and stale ones marked, by
// name. It needs the processes table of schema version 10 (Migrate): its
// error wraps ErrNotMigrated without it.
func (c *Client) Processes(ctx context.Context) ([]Process, error) {
	var rows []procsql.Row
	if err := c.procSQL().List(ctx, c.db, &rows); err != nil {
		return nil, fmt.Errorf("bunqueue: list the processes: %w", c.notMigrated(err))
	}
	id := c.processID()
	out := make([]Process, len(rows))
	for i, r := range rows {
		p := Process{ID: r.ID, Name: r.Name, Host: r.Host, PID: r.PID, Version: r.Version,
			StartedAt: r.StartedAt.UTC(), HeartbeatAt: r.HeartbeatAt.UTC(), Stale: r.Stale, This: r.ID == id}
		if err := json.Unmarshal([]byte(r.Queues), &p.Queues); err != nil {
			return nil, fmt.Errorf("bunqueue: process %s (%s): its queues: %w", r.Name, r.ID, err)
		}
		out[i] = p
	}
	return out, nil
}

func (c *Client) procSQL() procsql.SQL { return procsql.New(c.dialect, c.tables) }

// processID is the id the started client registered under; "" before
// Start.
func (c *Client) processID() string {
	c.procMu.Lock()
	defer c.procMu.Unlock()
	return c.proc.ID
}

// newProcess returns the registry's row of the client, starting now.
func (c *Client) newProcess() procsql.Row {
	host, _ := os.Hostname()
	pid := os.Getpid()
	name := c.cfg.ProcessName
	if name == "" {
		name = host + ":" + strconv.Itoa(pid)
	}
	return procsql.Row{ID: limit.NewToken(), Name: name, Host: host, PID: int64(pid), Version: moduleVersion()}
}

// moduleVersion is the version of bunqueue's module in the binary:
// "(devel)" when it is built from a checkout (its own module, or a
// workspace's), which the build info lists as no dependency.
func moduleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if info.Main.Path == modulePath {
		return info.Main.Version
	}
	for _, m := range info.Deps {
		if m.Path == modulePath {
			if m.Replace != nil {
				return m.Version + " (replaced)"
			}
			return m.Version
		}
	}
	return "(devel)"
}

// modulePath is bunqueue's module path.
const modulePath = "github.com/bunqueue/bunqueue"

// processQueues returns the client's queues as its heartbeat writes them.
func (c *Client) processQueues() string {
	now := time.Now()
	p := c.pauses.Load()
	var out []ProcessQueue
	for _, s := range c.statsSources() {
		st := s.stats
		c.counts.read(&st, now)
		out = append(out, ProcessQueue{Name: st.Name, Kind: st.Kind, Mode: s.mode.String(), Workers: st.Workers, InFlight: st.InFlight,
			Paused: p != nil && p.Seen(st.Name), GlobalLimit: st.GlobalLimit, KeyLimit: st.KeyLimit, RateLimit: st.RateLimit, KeyRate: st.KeyRate})
	}
	b, _ := json.Marshal(out) // plain values: it cannot fail
	return string(b)
}

// register records the started client in the registry. A missing table
// turns the registry off, with a line in the log: a client whose database
// predates version 10 runs as before.
func (c *Client) register(ctx context.Context) bool {
	row := c.newProcess()
	row.Queues = c.processQueues()
	err := c.procSQL().Insert(ctx, c.db, row, c.cfg.HeartbeatInterval)
	switch {
	case err != nil && c.dialect.MissingTable(err):
		c.cfg.Logger.InfoContext(ctx, "bunqueue: this client is not in the process registry: the "+c.procSQL().Table()+
			" table is missing (run "+c.migrateHint()+", then start the client again)")
		return false
	case err != nil:
		c.cfg.Logger.WarnContext(ctx, "bunqueue: register this process (its heartbeat retries)", "error", err)
	}
	c.procMu.Lock()
	c.proc = row
	c.procMu.Unlock()
	return true
}

// unregister deletes the client's row at Stop, once it added what it
// counted since its last heartbeat to the fleet's history and gave up
// the upkeep's lease if it held it.
func (c *Client) unregister() {
	id := c.processID()
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.flushHistory(ctx)
	if err := c.histSQL().Release(ctx, c.db, histsql.UpkeepLease, id); err != nil && !c.dialect.MissingTable(err) {
		c.cfg.Logger.WarnContext(ctx, "bunqueue: give up the history's lease (it expires instead)", "error", err)
	}
	if err := c.procSQL().Delete(ctx, c.db, id); err != nil {
		c.cfg.Logger.WarnContext(ctx, "bunqueue: remove this process from the registry (it goes stale instead)", "error", err)
	}
}
