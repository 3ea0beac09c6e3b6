package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/sqldialect"
)

// This file is the bench's SQL that differs between servers, beyond what
// sqldialect.Dialect (clock, lock clauses, named locks) already covers:
// how to open the server, the bench's tables, and what stands for
// InnoDB's purge. It is chosen once, from the DSN (benchSQLFor).

// connectTimeout bounds the first connection to the server.
const connectTimeout = 10 * time.Second

// examplePGDSN is the form of a PostgreSQL DSN, for messages.
const examplePGDSN = "postgres://user:password@127.0.0.1:5432/test?sslmode=disable"

// benchSQL is what the bench does differently on one kind of server.
type benchSQL interface {
	// dialect is the engine's SQL for the server.
	dialect() sqldialect.Dialect
	// open opens, without connecting, the server of dsn, and says where it
	// is, for messages.
	open(dsn string) (sqldb *sql.DB, where string, err error)
	// serverAddr returns the host:port dsn connects to, for the
	// forwarder, or an error if it connects otherwise (a Unix socket).
	serverAddr(dsn string) (string, error)
	// withAddr returns dsn with addr (host:port) in place of the server's
	// address: the forwarder's.
	withAddr(dsn, addr string) (string, error)
	// bunDialect is bun's dialect of the server, made once it answers.
	bunDialect() schema.Dialect
	// version is a query of the server's name and version.
	version() string
	// counterTable creates table (id BIGINT PRIMARY KEY, n BIGINT), the
	// commit ceiling's.
	counterTable(table string) []string
	// queueTable creates table (id, an auto-incremented BIGINT primary
	// key; status VARCHAR(16); retry_at, a nullable time to the
	// microsecond) with the index named index over columns.
	queueTable(table, index, columns string) []string
	// deleteChunk deletes at most n rows of the jobs table t of queue, and
	// returns how many it deleted: a million at once would hold too many
	// row locks.
	deleteChunk(ctx context.Context, db bun.IDB, t, queue string, n int) (int64, error)
	// garbage returns how much the server has yet to clean up after the
	// rows of table that were changed or deleted (InnoDB: the history list
	// length of the whole server), with the words for it; ok is false
	// where the server does not report it.
	garbage(ctx context.Context, db bun.IDB, table string) (n int64, ok bool)
	// garbageNote describes how garbage went from h0 to h1 during a
	// window, for table; ok is false if either was not reported.
	garbageNote(table string, h0, h1 int64, ok bool) string
	// snapshot is what starts a transaction that holds a consistent
	// snapshot from its start, as a long report or a backup does.
	snapshot() []string
	// cleaner names what removes the garbage ("purge"), and heldBy what
	// holds it back (an open read view).
	cleaner() string
	heldBy() string
	// analyze refreshes the planner's statistics of table after the bench
	// filled it, where the server needs that to be told.
	analyze(table string) []string
	// vacuum removes the dead row versions of table, where nothing may
	// have yet, and refreshes its statistics.
	vacuum(table string) []string
}

// benchSQLFor returns the benchSQL of the server dsn names.
func benchSQLFor(dsn string) benchSQL {
	if isPostgresDSN(dsn) {
		return postgresBench{}
	}
	return mysqlBench{}
}

// mysqlBench is benchSQL for MySQL 8 and MariaDB.
type mysqlBench struct{}

func (mysqlBench) dialect() sqldialect.Dialect { return sqldialect.MySQL{} }

func (mysqlBench) open(dsn string) (*sql.DB, string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, "", fmt.Errorf("the DSN is not valid (--dsn or BUNQUEUE_MYSQL_DSN): %w", err)
	}
	if !cfg.ParseTime {
		return nil, "", errors.New("the DSN must contain parseTime=true (and loc=UTC), as bunqueue needs")
	}
	sqldb, err := sql.Open("mysql", dsn)
	return sqldb, fmt.Sprintf("the database %s at %s as %s", cfg.DBName, cfg.Addr, cfg.User), err
}

func (mysqlBench) serverAddr(dsn string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("the DSN is not valid: %w", err)
	}
	if cfg.Net != "tcp" {
		return "", fmt.Errorf("the DSN connects over %q, not tcp: the forwarder needs a host and port", cfg.Net)
	}
	return cfg.Addr, nil
}

func (mysqlBench) withAddr(dsn, addr string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("the DSN is not valid: %w", err)
	}
	cfg.Net, cfg.Addr = "tcp", addr
	return cfg.FormatDSN(), nil
}

// bunDialect implements benchSQL: mysqldialect.New logs its own complaint
// when the server does not answer.
func (mysqlBench) bunDialect() schema.Dialect { return mysqldialect.New() }

func (mysqlBench) version() string { return "SELECT VERSION()" }

func (mysqlBench) counterTable(table string) []string {
	return []string{"CREATE TABLE " + table + " (id BIGINT NOT NULL PRIMARY KEY, n BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB"}
}

func (mysqlBench) queueTable(table, index, columns string) []string {
	return []string{`CREATE TABLE ` + table + ` (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	status VARCHAR(16) NOT NULL,
	retry_at DATETIME(6) NULL,
	grp BIGINT NULL,
	INDEX ` + index + ` (` + columns + `)
) ENGINE=InnoDB`}
}

func (mysqlBench) deleteChunk(ctx context.Context, db bun.IDB, t, queue string, n int) (int64, error) {
	res, err := db.NewRaw("DELETE FROM ? WHERE queue = ? LIMIT ?", bun.Ident(t), queue, n).Exec(ctx)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// garbage implements benchSQL: InnoDB's history list length, the undo log
// records purge has yet to process, among them the delete-marked index
// entries of the rows the queues processed.
func (mysqlBench) garbage(ctx context.Context, db bun.IDB, _ string) (n int64, ok bool) {
	err := db.NewRaw("SELECT `count` FROM information_schema.innodb_metrics WHERE name = 'trx_rseg_history_len'").Scan(ctx, &n)
	return n, err == nil
}

func (mysqlBench) garbageNote(_ string, h0, h1 int64, ok bool) string {
	if !ok {
		return "history list length not available"
	}
	return fmt.Sprintf("InnoDB history list length (undo logs not yet purged) %d as the window began, %d at its end", h0, h1)
}

// analyze implements benchSQL: none, InnoDB recalculates a table's
// statistics itself once a tenth of its rows changed.
func (mysqlBench) analyze(string) []string { return nil }

// vacuum implements benchSQL: none, purge runs on its own.
func (mysqlBench) vacuum(string) []string { return nil }

func (mysqlBench) snapshot() []string { return []string{"START TRANSACTION WITH CONSISTENT SNAPSHOT"} }

func (mysqlBench) cleaner() string { return "purge" }

func (mysqlBench) heldBy() string { return "an open read view (as of a long report or backup)" }

// postgresBench is benchSQL for PostgreSQL.
type postgresBench struct{}

func (postgresBench) dialect() sqldialect.Dialect { return sqldialect.Postgres{} }

// open implements benchSQL, through pgx's database/sql driver.
func (postgresBench) open(dsn string) (*sql.DB, string, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's message shows the DSN with its password redacted.
		return nil, "", fmt.Errorf("the DSN (from --dsn or BUNQUEUE_MYSQL_DSN) is not valid: %w; "+
			"set it with --dsn or BUNQUEUE_MYSQL_DSN, such as %s", err, examplePGDSN)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	name := cfg.Database
	if name == "" {
		name = cfg.User // the server's default database is the user's name
	}
	where := fmt.Sprintf("the PostgreSQL database %q at %s as %q", name,
		net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), cfg.User)
	if strings.HasPrefix(cfg.Host, "/") { // a Unix socket's directory
		where = fmt.Sprintf("the PostgreSQL database %q at %s (port %d) as %q", name, cfg.Host, cfg.Port, cfg.User)
	}
	return stdlib.OpenDB(*cfg), where, nil
}

// serverAddr implements benchSQL: the URL's host and port (5432 if it
// gives none). A host or port in the query (host=, port=), several hosts,
// or none, are refused: the forwarder stands for one TCP server.
func (postgresBench) serverAddr(dsn string) (string, error) {
	u, err := pgURL(dsn)
	if err != nil {
		return "", err
	}
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

func (postgresBench) withAddr(dsn, addr string) (string, error) {
	u, err := pgURL(dsn)
	if err != nil {
		return "", err
	}
	u.Host = addr
	return u.String(), nil
}

// pgURL parses a PostgreSQL URL that names one server by host (and port)
// in its authority.
func pgURL(dsn string) (*url.URL, error) {
	u, err := url.Parse(dsn)
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		err = ue.Err // not its URL, which may hold a password
	}
	if err != nil {
		return nil, fmt.Errorf("the DSN is not a valid URL: %w", err)
	}
	q := u.Query()
	switch {
	case q.Has("host") || q.Has("port"):
		return nil, errors.New("the URL gives its host or port as a parameter: give them as postgres://user@host:port/db for the forwarder")
	case u.Hostname() == "" || strings.Contains(u.Host, ","):
		return nil, fmt.Errorf("the URL names no host, or several: the forwarder needs one host and port, as in %s", examplePGDSN)
	}
	return u, nil
}

func (postgresBench) bunDialect() schema.Dialect { return pgdialect.New() }

// version implements benchSQL. It says when autovacuum is off: then
// nothing removes the dead row versions the scenarios leave, and each run
// starts with those of the runs (and tests) before it.
func (postgresBench) version() string {
	return "SELECT 'PostgreSQL ' || current_setting('server_version') || " +
		"CASE WHEN current_setting('autovacuum') = 'off' THEN ' (autovacuum off)' ELSE '' END"
}

func (postgresBench) counterTable(table string) []string {
	return []string{"CREATE TABLE " + table + " (id BIGINT NOT NULL PRIMARY KEY, n BIGINT NOT NULL DEFAULT 0)"}
}

func (postgresBench) queueTable(table, index, columns string) []string {
	return []string{`CREATE TABLE ` + table + ` (
	id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
	status VARCHAR(16) NOT NULL,
	retry_at TIMESTAMPTZ NULL,
	grp BIGINT NULL
)`, "CREATE INDEX " + index + " ON " + table + " (" + columns + ")"}
}

// deleteChunk implements benchSQL: PostgreSQL's DELETE has no LIMIT.
func (postgresBench) deleteChunk(ctx context.Context, db bun.IDB, t, queue string, n int) (int64, error) {
	res, err := db.NewRaw("DELETE FROM ? WHERE id IN (SELECT id FROM ? WHERE queue = ? LIMIT ?)",
		bun.Ident(t), bun.Ident(t), queue, n).Exec(ctx)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// garbage implements benchSQL: the dead row versions of table that vacuum
// has yet to remove, as the statistics last reported them (each backend
// reports at most once a second).
func (postgresBench) garbage(ctx context.Context, db bun.IDB, table string) (n int64, ok bool) {
	err := db.NewRaw("SELECT COALESCE(SUM(n_dead_tup), 0) FROM pg_stat_user_tables WHERE relname = ? AND schemaname = current_schema()",
		table).Scan(ctx, &n)
	return n, err == nil
}

func (postgresBench) garbageNote(table string, h0, h1 int64, ok bool) string {
	if !ok {
		return "dead row versions (n_dead_tup) not available"
	}
	return fmt.Sprintf("dead row versions of %s not yet vacuumed (n_dead_tup) %d as the window began, %d at its end", table, h0, h1)
}

// snapshot implements benchSQL: a REPEATABLE READ transaction takes its
// snapshot at its first statement, and holds back vacuum from then on.
func (postgresBench) snapshot() []string {
	return []string{"BEGIN ISOLATION LEVEL REPEATABLE READ", "SELECT 1"}
}

// analyze implements benchSQL: ANALYZE, which autovacuum runs within a
// minute of a bulk fill on a server with its default settings. Without
// it (autovacuum is off on the machine the README's figures come from)
// the planner took a freshly filled 1,000,000-row queue for a dozen rows:
// each read of the feed scanned and sorted all of them, 1.3 s a read.
func (postgresBench) analyze(table string) []string { return []string{"ANALYZE " + table} }

// vacuum implements benchSQL: VACUUM ANALYZE, which autovacuum would
// run, unless it is off (as on the machine the README's figures come
// from), in which case the scenarios before leave their dead row versions.
func (postgresBench) vacuum(table string) []string { return []string{"VACUUM ANALYZE " + table} }

func (postgresBench) cleaner() string { return "vacuum" }

func (postgresBench) heldBy() string {
	return "an open REPEATABLE READ snapshot (as of a long report or pg_dump)"
}
