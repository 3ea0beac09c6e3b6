package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
)

// This file counts the server's transactions, for the tx/item column:
// the transactions the server ended (committed or rolled back) during a
// window, read from the server's own counters through a connection of the
// bench's own, never through the forwarder. docs/bench.md says what each
// server counts and how exact it is.

// innodbTxMetrics are the InnoDB counters of transactions ended: every
// InnoDB transaction counts once in one of them when it ends, whether it
// committed or rolled back (trx_rollbacks counts the rolled-back ones a
// second time, and is left out). They are off by default.
var innodbTxMetrics = []string{"trx_rw_commits", "trx_ro_commits", "trx_nl_ro_commits"}

// pgStatsFlush is how often, at most, a PostgreSQL backend (15 and
// later) flushes its counts to the shared statistics
// (PGSTAT_MIN_INTERVAL), while it works.
const pgStatsFlush = time.Second

// pgSampleEvery is how often the bench reads pg_stat_database while it
// averages it over pgStatsFlush.
const pgSampleEvery = 20 * time.Millisecond

// txCounter reads the count of the server's transactions.
type txCounter struct {
	db    *bun.DB
	query string
	args  []any
	// what says what is counted, for the report.
	what string
	// spread, if positive, is how long each mark reads the count for, at
	// every pgSampleEvery: the mark is the mean. PostgreSQL's backends
	// publish their counts at most once per pgStatsFlush, so a single
	// read misses up to that much of each busy backend's transactions;
	// the mean of the reads over one such period is, for a backend that
	// works at a steady rate, exactly its count at the period's start.
	spread time.Duration
	// restore undoes what opening the counter changed on the server.
	restore func(ctx context.Context)
}

// openTxCounter returns the counter of the bench's server, or an error
// that says why there is none.
func (b *bench) openTxCounter(ctx context.Context) (*txCounter, error) {
	switch b.sql.(type) {
	case postgresBench:
		return b.openPGTxCounter(ctx)
	case mysqlBench:
		return b.openInnoDBTxCounter(ctx)
	}
	return nil, errors.New("no transaction counter for this server")
}

// openInnoDBTxCounter counts InnoDB's transactions (innodbTxMetrics),
// enabling the counters that are off; close disables those again. The
// counters are the server's, all databases' and all clients' together.
func (b *bench) openInnoDBTxCounter(ctx context.Context) (*txCounter, error) {
	db, err := b.open(ctx, 1)
	if err != nil {
		return nil, err
	}
	off, err := innodbMetricsOff(ctx, db)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	c := &txCounter{db: db, restore: func(context.Context) {}}
	for i, name := range off {
		if _, err := db.ExecContext(ctx, "SET GLOBAL innodb_monitor_enable = ?", name); err != nil {
			c.restore = disableMetrics(db, off[:i])
			c.close(ctx)
			return nil, fmt.Errorf("enable InnoDB's counter %s (SET GLOBAL innodb_monitor_enable): %w", name, err)
		}
	}
	c.restore = disableMetrics(db, off)
	c.query = "SELECT CAST(COALESCE(SUM(`count`), 0) AS SIGNED) FROM information_schema.innodb_metrics WHERE name IN (?)"
	c.args = []any{bun.In(innodbTxMetrics)}
	c.what = "InnoDB's " + strings.Join(innodbTxMetrics, " + ") + " (the whole server's)"
	if len(off) > 0 {
		c.what += "; the bench turned " + strings.Join(off, ", ") + " on for the run"
	}
	return c, nil
}

// innodbMetricsOff returns which of innodbTxMetrics are off. MariaDB
// says so in the column enabled, MySQL 8 in status.
func innodbMetricsOff(ctx context.Context, db *bun.DB) ([]string, error) {
	var off []string
	err := db.NewRaw("SELECT name FROM information_schema.innodb_metrics WHERE name IN (?) AND enabled = 0", bun.In(innodbTxMetrics)).Scan(ctx, &off)
	if err != nil {
		off = nil
		err = db.NewRaw("SELECT name FROM information_schema.innodb_metrics WHERE name IN (?) AND status <> 'enabled'", bun.In(innodbTxMetrics)).Scan(ctx, &off)
	}
	if err != nil {
		return nil, fmt.Errorf("read which InnoDB counters are on (information_schema.innodb_metrics): %w", err)
	}
	return off, nil
}

// disableMetrics returns a function that turns the InnoDB counters names
// off.
func disableMetrics(db *bun.DB, names []string) func(ctx context.Context) {
	return func(ctx context.Context) {
		for _, name := range names {
			_, _ = db.ExecContext(ctx, "SET GLOBAL innodb_monitor_disable = ?", name)
		}
	}
}

// openPGTxCounter counts xact_commit + xact_rollback of pg_stat_database
// for the DSN's database, read from another database (postgres) when it
// can, so that the bench's own reads are not counted.
func (b *bench) openPGTxCounter(ctx context.Context) (*txCounter, error) {
	cfg, err := pgx.ParseConfig(b.dsn)
	if err != nil {
		return nil, fmt.Errorf("the DSN: %w", err)
	}
	name := cfg.Database
	if name == "" {
		name = cfg.User
	}
	c := &txCounter{
		query:   "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = ?",
		args:    []any{name},
		spread:  pgStatsFlush,
		restore: func(context.Context) {},
		what: fmt.Sprintf("pg_stat_database's xact_commit + xact_rollback of %q, each mark the mean of its reads over %s "+
			"(a backend publishes its counts at most once a %s)", name, pgStatsFlush, pgStatsFlush),
	}
	if name != "postgres" {
		other := cfg.Copy()
		other.Database = "postgres"
		if c.db, err = pingPG(ctx, other); err == nil {
			return c, nil
		}
	}
	if c.db, err = pingPG(ctx, cfg); err != nil {
		return nil, err
	}
	c.what += "; read from the same database: the bench's reads, about 50 a mark, count too"
	return c, nil
}

// pingPG opens a pool of two connections to cfg's database, one for each
// of a window's marks (which overlap when the window is shorter than
// their spread), and checks that it answers.
func pingPG(ctx context.Context, cfg *pgx.ConnConfig) (*bun.DB, error) {
	sqldb := stdlib.OpenDB(*cfg)
	sqldb.SetMaxOpenConns(2)
	pingCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := sqldb.PingContext(pingCtx); err != nil {
		_ = sqldb.Close()
		return nil, fmt.Errorf("connect to the database %q to read its statistics: %w", cfg.Database, err)
	}
	return bun.NewDB(sqldb, postgresBench{}.bunDialect()), nil
}

// read returns the count now.
func (c *txCounter) read(ctx context.Context) (int64, error) {
	var n int64
	if err := c.db.NewRaw(c.query, c.args...).Scan(ctx, &n); err != nil {
		return 0, fmt.Errorf("read the server's count of transactions: %w", err)
	}
	return n, nil
}

// close restores the server's settings and closes the connection.
func (c *txCounter) close(ctx context.Context) {
	c.restore(ctx)
	_ = c.db.Close()
}

// txMark is the count of transactions at one moment, read (or being
// read) by mark.
type txMark struct {
	done chan struct{}
	n    float64
	err  error
}

// mark starts reading the count as of now: at once, or, with a spread,
// over the spread that starts now. value waits for it.
func (c *txCounter) mark(ctx context.Context) *txMark {
	m := &txMark{done: make(chan struct{})}
	if c.spread <= 0 {
		n, err := c.read(ctx)
		m.n, m.err = float64(n), err
		close(m.done)
		return m
	}
	go func() {
		defer close(m.done)
		m.n, m.err = c.mean(ctx)
	}()
	return m
}

// mean reads the count about every pgSampleEvery for c.spread, and
// returns its mean over the spread, each read standing until the next.
func (c *txCounter) mean(ctx context.Context) (float64, error) {
	at := time.Now()
	end := at.Add(c.spread)
	n, err := c.read(ctx)
	var area float64 // the count × seconds
	for err == nil {
		if err := sleep(ctx, pgSampleEvery); err != nil {
			return 0, err
		}
		next := time.Now()
		if !next.Before(end) {
			area += float64(n) * end.Sub(at).Seconds()
			return area / c.spread.Seconds(), nil
		}
		area += float64(n) * next.Sub(at).Seconds()
		at = next
		n, err = c.read(ctx)
	}
	return 0, err
}

// value waits for the mark and returns the count.
func (m *txMark) value() (float64, error) {
	<-m.done
	return m.n, m.err
}
