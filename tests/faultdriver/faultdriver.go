// Package faultdriver is a database/sql connector for tests only. It wraps
// github.com/go-sql-driver/mysql (MySQL, MariaDB) or pgx's database/sql
// driver, github.com/jackc/pgx/v5/stdlib (PostgreSQL), and, by rules the
// test sets, makes a statement fail the way a real server or network
// would: a deadlock (MySQL 1213, PostgreSQL 40P01), a lock wait timeout
// (1205, 55P03), a connection found dead before the statement was sent,
// or a connection cut after the statement was sent, before its reply was
// read (for a COMMIT: the outcome is unknown to the client, but the server
// did commit).
//
// It also keeps a registry of its live connections with their server
// session ids (CONNECTION_ID(), pg_backend_pid(); for tests that kill them
// on the server), and can run a session statement on every connection
// (SET time_zone = …, SET TimeZone = …) when the test changes it.
//
// The DSN picks the driver: a postgres:// or postgresql:// URL opens
// PostgreSQL through pgx, anything else is a MySQL DSN. Open a *sql.DB
// over it with sql.OpenDB(connector); bun opens a *bun.DB over that with
// bun.NewDB(sqldb, mysqldialect.New()) or pgdialect.New().
package faultdriver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// Fault is what an injection does.
type Fault int

const (
	// Deadlock returns error 1213 instead of running the statement. Inside
	// a transaction the transaction is rolled back on the server first, as
	// InnoDB does with a deadlock victim. On PostgreSQL the server itself
	// raises 40P01 (deadlock_detected) in place of the statement, which
	// aborts the open transaction, as any error there does.
	Deadlock Fault = iota + 1
	// LockWaitTimeout returns error 1205 instead of running the statement.
	// InnoDB rolls back only the statement (innodb_rollback_on_timeout is
	// off by default): the transaction stays open. On PostgreSQL the
	// server raises 55P03 (lock_not_available, as lock_timeout does), which
	// aborts the open transaction.
	LockWaitTimeout
	// DropBefore closes the connection's socket before the statement is
	// sent and returns driver.ErrBadConn, as the driver does for a
	// connection it finds dead: the server never sees the statement, and
	// rolls back the connection's open transaction.
	DropBefore
	// DropAfter sends the statement, then cuts the connection before its
	// reply is read: the server runs it (and, for a COMMIT, commits), the
	// client gets an error (the MySQL driver's "invalid connection"; pgx's
	// own: the failed read's, or "conn closed") and cannot know the
	// outcome. A statement of an open transaction is then rolled back with
	// it by the server. On PostgreSQL the cut comes after the write that
	// executes the statement (pgx may first prepare it in a round trip of
	// its own). Note that pgx (v5.12) reports a cut Exec without
	// arguments (the simple protocol) as driver.ErrBadConn, so that
	// database/sql runs it again on another connection, outside a
	// transaction: that is pgx's doing, as it would be on a real network.
	DropAfter
)

// AllFaults lists every fault.
var AllFaults = []Fault{Deadlock, LockWaitTimeout, DropBefore, DropAfter}

// String names the fault (by its MySQL error; PostgreSQL's are 40P01 and
// 55P03).
func (f Fault) String() string {
	switch f {
	case Deadlock:
		return "deadlock 1213"
	case LockWaitTimeout:
		return "lock wait timeout 1205"
	case DropBefore:
		return "connection dropped before sending"
	case DropAfter:
		return "connection cut after sending"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Op is what the driver was asked to do.
type Op int

const (
	// OpBegin starts a transaction.
	OpBegin Op = iota + 1
	// OpExec runs a statement that returns no rows.
	OpExec
	// OpQuery runs a statement that returns rows.
	OpQuery
	// OpCommit commits a transaction.
	OpCommit
)

// String names the op.
func (o Op) String() string {
	switch o {
	case OpBegin:
		return "BEGIN"
	case OpExec:
		return "exec"
	case OpQuery:
		return "query"
	case OpCommit:
		return "COMMIT"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Stmt is what a rule matches: the op, its SQL ("BEGIN" and "COMMIT" for
// those ops) and whether the connection is in a transaction.
type Stmt struct {
	Op   Op
	SQL  string
	InTx bool
}

// Rule injects faults into the statements it matches.
type Rule struct {
	// Step names the rule in the counts ("claim", "commit", …).
	Step string
	// Match selects the statements the rule applies to.
	Match func(s Stmt) bool
	// Faults are injected in turn, one per injection.
	Faults []Fault
	// Every injects into every Every-th matching statement. If zero,
	// Probability is used instead.
	Every int
	// Probability is the chance that a matching statement gets a fault.
	Probability float64
	// Limit caps the number of injections (0: no cap).
	Limit int
}

// Injection is one fault that was injected.
type Injection struct {
	Step  string
	Fault Fault
	Stmt  Stmt
	// Conn is the server's id of the connection (see ConnInfo.ID); At is
	// when the fault was decided, in Unix nanoseconds: a drop or a cut
	// ends the connection's transaction on the server from then on.
	Conn int64
	At   int64
	// TxStmts are the statements the connection's transaction ran before
	// the injection, when the injector keeps them (KeepTxStatements).
	TxStmts []string
}

// Injector holds the rules and the counts of one or more connectors.
type Injector struct {
	enabled atomic.Bool
	keepTx  atomic.Bool

	mu      sync.Mutex
	rules   []*ruleState
	rng     *rand.Rand
	counts  map[string]map[Fault]int
	log     []Injection
	conns   map[*conn]struct{}
	session string // run on each connection whose generation is behind
	gen     atomic.Int64
}

type ruleState struct {
	Rule
	seen, injected int
}

// NewInjector returns an injector with no rules, enabled. seed makes the
// random choices repeatable.
func NewInjector(seed uint64) *Injector {
	in := &Injector{
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		counts: map[string]map[Fault]int{},
		conns:  map[*conn]struct{}{},
	}
	in.enabled.Store(true)
	return in
}

// Add adds rules. The first rule that matches a statement decides whether
// it gets a fault.
func (in *Injector) Add(rules ...Rule) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, r := range rules {
		if len(r.Faults) == 0 {
			panic("faultdriver: a rule needs at least one fault")
		}
		in.rules = append(in.rules, &ruleState{Rule: r})
	}
}

// Enable turns injection on or off (the rules and counts are kept).
func (in *Injector) Enable(on bool) { in.enabled.Store(on) }

// KeepTxStatements makes each Injection carry the statements its
// transaction ran before it.
func (in *Injector) KeepTxStatements(on bool) { in.keepTx.Store(on) }

// SetSession makes every connection run stmt (such as "SET time_zone =
// '-05:00'") before its next statement, and every new connection after it
// connects: all sessions change at once, as they do when the server's
// own time zone changes its offset.
func (in *Injector) SetSession(stmt string) {
	in.mu.Lock()
	in.session = stmt
	in.mu.Unlock()
	in.gen.Add(1)
}

// Counts returns how many faults were injected, by step and fault.
func (in *Injector) Counts() map[string]map[Fault]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[string]map[Fault]int{}
	for s, m := range in.counts {
		out[s] = map[Fault]int{}
		for f, n := range m {
			out[s][f] = n
		}
	}
	return out
}

// Total returns how many faults were injected.
func (in *Injector) Total() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.log)
}

// Log returns the injections, in order.
func (in *Injector) Log() []Injection {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Injection(nil), in.log...)
}

// Matched returns how many statements each step's rule matched.
func (in *Injector) Matched() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[string]int{}
	for _, r := range in.rules {
		out[r.Step] += r.seen
	}
	return out
}

// ConnInfo describes a live connection.
type ConnInfo struct {
	// ID is the server's id for the connection (CONNECTION_ID(); on
	// PostgreSQL its backend's pid, pg_backend_pid()).
	ID int64
	// InTx reports whether a transaction is open on it.
	InTx bool
}

// Conns returns the live connections, by server id.
func (in *Injector) Conns() []ConnInfo {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]ConnInfo, 0, len(in.conns))
	for c := range in.conns {
		out = append(out, ConnInfo{ID: c.id, InTx: c.inTx.Load()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// decide returns the fault to inject into s, if any, and records it.
func (in *Injector) decide(s Stmt, conn int64, txStmts []string) (Fault, bool) {
	if !in.enabled.Load() {
		return 0, false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, r := range in.rules {
		if !r.Match(s) {
			continue
		}
		r.seen++
		if r.Limit > 0 && r.injected >= r.Limit {
			return 0, false
		}
		hit := false
		if r.Every > 0 {
			hit = r.seen%r.Every == 0
		} else {
			hit = in.rng.Float64() < r.Probability
		}
		if !hit {
			return 0, false
		}
		f := r.Faults[r.injected%len(r.Faults)]
		r.injected++
		if in.counts[r.Step] == nil {
			in.counts[r.Step] = map[Fault]int{}
		}
		in.counts[r.Step][f]++
		inj := Injection{Step: r.Step, Fault: f, Stmt: s, Conn: conn, At: time.Now().UnixNano()}
		if in.keepTx.Load() {
			inj.TxStmts = append([]string(nil), txStmts...)
		}
		in.log = append(in.log, inj)
		return f, true
	}
	return 0, false
}

// IsPostgresDSN reports whether dsn is a PostgreSQL URL (postgres:// or
// postgresql://), which Connector opens through pgx.
func IsPostgresDSN(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// Connector returns a connector over the DSN whose connections obey in's
// rules: a PostgreSQL URL (see IsPostgresDSN) through pgx, else a MySQL
// DSN through the MySQL driver.
func (in *Injector) Connector(dsn string) (driver.Connector, error) {
	if IsPostgresDSN(dsn) {
		return in.pgConnector(dsn)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg.Logger = &mysql.NopLogger{} // cut connections are expected: no "[mysql] invalid connection" noise
	base := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		var err error
		if base != nil {
			c, err = base(ctx, network, addr)
		} else {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
		}
		if err != nil {
			return nil, err
		}
		nc := &netConn{Conn: c}
		if h, ok := ctx.Value(holderKey{}).(*holder); ok {
			h.nc = nc
		}
		return nc, nil
	}
	inner, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return &connector{in: in, inner: inner}, nil
}

// pgConnector is Connector for PostgreSQL. The socket is wrapped after TLS
// (AfterNetConnect), so that the wrapper sees the protocol's messages.
func (in *Injector) pgConnector(dsn string) (driver.Connector, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	// pgx, when a read fails, sends the server a cancel request for the
	// statement under way, on a new connection to the address of the
	// failed one. A cut connection's address (see netConn.RemoteAddr)
	// cannot be reached: the cut is of the network, the cancel cannot get
	// through either, and the statement runs on, as it does on MySQL,
	// whose driver sends no cancel.
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if network == cutNetwork {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errCut}
		}
		return dial(ctx, network, addr)
	}
	base := cfg.AfterNetConnect
	cfg.AfterNetConnect = func(ctx context.Context, pc *pgconn.Config, c net.Conn) (net.Conn, error) {
		if base != nil {
			var err error
			if c, err = base(ctx, pc, c); err != nil {
				return nil, err
			}
		}
		nc := &netConn{Conn: c, pg: true}
		if h, ok := ctx.Value(holderKey{}).(*holder); ok {
			h.nc = nc
		}
		return nc, nil
	}
	return &connector{in: in, inner: stdlib.GetConnector(*cfg), pg: true}, nil
}

// Open returns a *sql.DB over the DSN (see Connector) whose connections
// obey in's rules.
func (in *Injector) Open(dsn string) (*sql.DB, error) {
	c, err := in.Connector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

type holderKey struct{}

// holder receives, from the dial function, the socket of the connection
// being made.
type holder struct{ nc *netConn }

type connector struct {
	in    *Injector
	inner driver.Connector
	pg    bool // pgx's driver, PostgreSQL
}

func (c *connector) Driver() driver.Driver { return drv{} }

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	h := &holder{}
	ic, err := c.inner.Connect(context.WithValue(ctx, holderKey{}, h))
	if err != nil {
		return nil, err
	}
	cn := &conn{in: c.in, inner: ic, nc: h.nc, pg: c.pg}
	var id int64
	if c.pg {
		sc, ok := ic.(*stdlib.Conn)
		if !ok {
			_ = ic.Close()
			return nil, fmt.Errorf("faultdriver: unexpected pgx connection %T", ic)
		}
		id = int64(sc.Conn().PgConn().PID()) // pg_backend_pid()
	} else if err := cn.scalar(ctx, "SELECT CONNECTION_ID()", &id); err != nil {
		_ = ic.Close()
		return nil, err
	}
	cn.id = id
	if err := cn.syncSession(ctx); err != nil {
		_ = ic.Close()
		return nil, err
	}
	c.in.mu.Lock()
	c.in.conns[cn] = struct{}{}
	c.in.mu.Unlock()
	return cn, nil
}

// drv is the connector's Driver; Open by name is not supported.
type drv struct{}

func (drv) Open(string) (driver.Conn, error) {
	return nil, errors.New("faultdriver: open through Injector.Connector or Injector.Open")
}

// netConn is a connection's socket. After cut, a write that is under way
// completes, and every later read and write fails; the socket itself is
// closed a moment later, so that the server reads the statement before it
// sees the connection end.
type netConn struct {
	net.Conn
	pg      bool        // PostgreSQL's protocol: cut after the write that executes
	cutNext atomic.Bool // cut right after the next write (PostgreSQL: that executes)
	cut     atomic.Bool
	closed  sync.Once
}

// ErrCut is the error of reads and writes on a connection cut by
// DropAfter.
var ErrCut = errors.New("faultdriver: connection cut")

var errCut = ErrCut

// pgExecutes reports whether b, frontend messages of PostgreSQL's
// protocol, has one that runs a statement: Query ('Q') or Execute ('E').
// Bytes it cannot frame count as one.
func pgExecutes(b []byte) bool {
	for len(b) > 0 {
		if len(b) < 5 {
			return true
		}
		if b[0] == 'Q' || b[0] == 'E' {
			return true
		}
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if n < 4 || 1+n > len(b) {
			return true
		}
		b = b[1+n:]
	}
	return false
}

func (c *netConn) Write(b []byte) (int, error) {
	if c.cut.Load() {
		return 0, errCut
	}
	n, err := c.Conn.Write(b)
	if c.pg && c.cutNext.Load() && !pgExecutes(b[:n]) {
		return n, err // a Parse of its own: the statement is not sent yet
	}
	if c.cutNext.Swap(false) {
		c.cut.Store(true)
		time.AfterFunc(50*time.Millisecond, func() { c.closeNow() })
	}
	return n, err
}

// cutNetwork is the network of a cut connection's address.
const cutNetwork = "faultdriver-cut"

type cutAddr struct{ net.Addr }

func (cutAddr) Network() string { return cutNetwork }

// RemoteAddr is the server's address, or, once a PostgreSQL connection is
// cut, one that cannot be dialled (see pgConnector).
func (c *netConn) RemoteAddr() net.Addr {
	if c.pg && c.cut.Load() {
		return cutAddr{c.Conn.RemoteAddr()}
	}
	return c.Conn.RemoteAddr()
}

func (c *netConn) Read(b []byte) (int, error) {
	if c.cut.Load() {
		return 0, errCut
	}
	return c.Conn.Read(b)
}

func (c *netConn) Close() error {
	if c.cut.Load() {
		return nil // closed by the timer
	}
	c.closeNow()
	return nil
}

func (c *netConn) closeNow() { c.closed.Do(func() { _ = c.Conn.Close() }) }

// SyscallConn lets the driver check an idle connection's liveness, as it
// does on a plain TCP connection.
func (c *netConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.New("faultdriver: not a syscall.Conn")
}

// conn wraps a driver connection.
type conn struct {
	in    *Injector
	inner driver.Conn
	nc    *netConn
	pg    bool // pgx's driver, PostgreSQL
	id    int64
	gen   int64

	inTx    atomic.Bool
	dead    atomic.Bool
	txStmts []string
}

var (
	_ driver.Conn               = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
)

func (c *conn) scalar(ctx context.Context, query string, dest *int64) error {
	rows, err := c.inner.(driver.QueryerContext).QueryContext(ctx, query, nil)
	if err != nil {
		return err
	}
	defer rows.Close()
	vals := make([]driver.Value, len(rows.Columns()))
	if err := rows.Next(vals); err != nil {
		return err
	}
	switch v := vals[0].(type) {
	case int64:
		*dest = v
	case []byte:
		_, err = fmt.Sscan(string(v), dest)
	default:
		err = fmt.Errorf("faultdriver: unexpected %T", v)
	}
	return err
}

// syncSession runs the injector's session statement if this connection
// has not run its latest one.
func (c *conn) syncSession(ctx context.Context) error {
	gen := c.in.gen.Load()
	if gen == c.gen {
		return nil
	}
	c.in.mu.Lock()
	stmt := c.in.session
	c.in.mu.Unlock()
	if stmt != "" {
		if _, err := c.inner.(driver.ExecerContext).ExecContext(ctx, stmt, nil); err != nil {
			return err
		}
	}
	c.gen = gen
	return nil
}

// before decides the fault of s and acts out the part of it that comes
// before the statement. It returns the error to return instead of running
// the statement, or whether the socket must be cut after sending it.
func (c *conn) before(ctx context.Context, s Stmt) (error, bool) {
	if c.dead.Load() {
		return driver.ErrBadConn, false
	}
	if err := c.syncSession(ctx); err != nil {
		return err, false
	}
	s.InTx = c.inTx.Load()
	f, ok := c.in.decide(s, c.id, c.txStmts)
	if !ok {
		return nil, false
	}
	switch f {
	case Deadlock, LockWaitTimeout:
		if c.pg {
			return c.pgRaise(ctx, f), false
		}
	}
	switch f {
	case Deadlock:
		if s.InTx {
			// The server rolls back a deadlock victim's transaction.
			if _, err := c.inner.(driver.ExecerContext).ExecContext(ctx, "ROLLBACK", nil); err != nil {
				return err, false
			}
		}
		return &mysql.MySQLError{Number: 1213, SQLState: [5]byte{'4', '0', '0', '0', '1'},
			Message: "Deadlock found when trying to get lock; try restarting transaction (injected by faultdriver)"}, false
	case LockWaitTimeout:
		return &mysql.MySQLError{Number: 1205, SQLState: [5]byte{'H', 'Y', '0', '0', '0'},
			Message: "Lock wait timeout exceeded; try restarting transaction (injected by faultdriver)"}, false
	case DropBefore:
		c.kill()
		return driver.ErrBadConn, false
	case DropAfter:
		return nil, true
	}
	return nil, false
}

// pgRaise makes the PostgreSQL server raise the error of f (40P01 or
// 55P03) in place of the statement: the server aborts the open
// transaction, as it does at any error, and the driver returns the
// server's *pgconn.PgError.
func (c *conn) pgRaise(ctx context.Context, f Fault) error {
	code, msg := "40P01", "deadlock detected (injected by faultdriver)"
	if f == LockWaitTimeout {
		code, msg = "55P03", "canceling statement due to lock timeout (injected by faultdriver)"
	}
	q := fmt.Sprintf("DO $faultdriver$ BEGIN RAISE EXCEPTION USING ERRCODE = '%s', MESSAGE = '%s'; END $faultdriver$", code, msg)
	_, err := c.inner.(driver.ExecerContext).ExecContext(ctx, q, nil)
	if err == nil { // cannot happen: RAISE EXCEPTION fails
		err = &pgconn.PgError{Severity: "ERROR", Code: code, Message: msg}
	}
	return err
}

// kill closes the socket under the driver connection, as a network
// failure would.
func (c *conn) kill() {
	c.dead.Store(true)
	if c.nc != nil {
		c.nc.closeNow()
	}
}

func (c *conn) cutAfterSend() {
	if c.nc != nil {
		c.nc.cutNext.Store(true)
	}
}

// skipped undoes a pending cut: the driver sent nothing.
func (c *conn) skipped() {
	if c.nc != nil {
		c.nc.cutNext.Store(false)
	}
}

// after notes the outcome of a statement.
func (c *conn) after(query string, err error, cut bool) error {
	if cut {
		c.dead.Store(true)
		if c.nc != nil {
			c.nc.cutNext.Store(false)
		}
		if err == nil {
			// The reply had been read before the cut could bite; it did
			// not happen as asked.
			err = mysql.ErrInvalidConn
			if c.pg {
				err = ErrCut
			}
		}
	}
	if err == nil && c.inTx.Load() && c.in.keepTx.Load() {
		c.txStmts = append(c.txStmts, query)
	}
	return err
}

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if c.dead.Load() {
		return nil, driver.ErrBadConn
	}
	var st driver.Stmt
	var err error
	if pc, ok := c.inner.(driver.ConnPrepareContext); ok {
		st, err = pc.PrepareContext(ctx, query)
	} else {
		st, err = c.inner.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	return &stmt{c: c, inner: st, query: query}, nil
}

func (c *conn) Close() error {
	c.in.mu.Lock()
	delete(c.in.conns, c)
	c.in.mu.Unlock()
	return c.inner.Close()
}

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	ferr, cut := c.before(ctx, Stmt{Op: OpBegin, SQL: "BEGIN"})
	if ferr != nil {
		return nil, ferr
	}
	if cut {
		c.cutAfterSend()
	}
	tx, err := c.inner.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err = c.after("BEGIN", err, cut); err != nil {
		return nil, err
	}
	c.inTx.Store(true)
	c.txStmts = c.txStmts[:0]
	return &wtx{c: c, inner: tx}, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ferr, cut := c.before(ctx, Stmt{Op: OpExec, SQL: query})
	if ferr != nil {
		return nil, ferr
	}
	if cut {
		c.cutAfterSend()
	}
	r, err := c.inner.(driver.ExecerContext).ExecContext(ctx, query, args)
	if errors.Is(err, driver.ErrSkip) {
		c.skipped()
		return nil, err // nothing was sent: database/sql prepares it instead
	}
	if err = c.after(query, err, cut); err != nil {
		return nil, err
	}
	return r, nil
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	ferr, cut := c.before(ctx, Stmt{Op: OpQuery, SQL: query})
	if ferr != nil {
		return nil, ferr
	}
	if cut {
		c.cutAfterSend()
	}
	r, err := c.inner.(driver.QueryerContext).QueryContext(ctx, query, args)
	if errors.Is(err, driver.ErrSkip) {
		c.skipped()
		return nil, err
	}
	if err = c.after(query, err, cut); err != nil {
		if r != nil {
			_ = r.Close()
		}
		return nil, err
	}
	return r, nil
}

func (c *conn) Ping(ctx context.Context) error {
	if c.dead.Load() {
		return driver.ErrBadConn
	}
	return c.inner.(driver.Pinger).Ping(ctx)
}

func (c *conn) ResetSession(ctx context.Context) error {
	if c.dead.Load() {
		return driver.ErrBadConn
	}
	return c.inner.(driver.SessionResetter).ResetSession(ctx)
}

func (c *conn) IsValid() bool {
	if c.dead.Load() {
		return false
	}
	if v, ok := c.inner.(driver.Validator); ok { // pgx's has none
		return v.IsValid()
	}
	return true
}

func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.inner.(driver.NamedValueChecker).CheckNamedValue(nv)
}

// wtx wraps a transaction: Commit is a step faults can be injected into.
type wtx struct {
	c     *conn
	inner driver.Tx
}

func (t *wtx) Commit() error {
	c := t.c
	defer c.inTx.Store(false)
	ctx := context.Background()
	ferr, cut := c.before(ctx, Stmt{Op: OpCommit, SQL: "COMMIT"})
	if ferr != nil {
		var me *mysql.MySQLError
		var pe *pgconn.PgError
		if errors.As(ferr, &me) && me.Number == 1205 || errors.As(ferr, &pe) {
			// A lock wait timeout leaves the transaction open (on
			// PostgreSQL, any error leaves it open and aborted);
			// database/sql ends it with this call, so end it on the
			// server too, as a COMMIT that fails does.
			_, _ = c.inner.(driver.ExecerContext).ExecContext(ctx, "ROLLBACK", nil)
		}
		return ferr
	}
	if cut {
		c.cutAfterSend()
	}
	return c.after("COMMIT", t.inner.Commit(), cut)
}

func (t *wtx) Rollback() error {
	defer t.c.inTx.Store(false)
	if t.c.dead.Load() {
		return driver.ErrBadConn
	}
	return t.inner.Rollback()
}

// stmt wraps a prepared statement.
type stmt struct {
	c     *conn
	inner driver.Stmt
	query string
}

func (s *stmt) Close() error  { return s.inner.Close() }
func (s *stmt) NumInput() int { return s.inner.NumInput() }

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	return nil, errors.New("faultdriver: Stmt.Exec without context is not supported")
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	return nil, errors.New("faultdriver: Stmt.Query without context is not supported")
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	ferr, cut := s.c.before(ctx, Stmt{Op: OpExec, SQL: s.query})
	if ferr != nil {
		return nil, ferr
	}
	if cut {
		s.c.cutAfterSend()
	}
	r, err := s.inner.(driver.StmtExecContext).ExecContext(ctx, args)
	if err = s.c.after(s.query, err, cut); err != nil {
		return nil, err
	}
	return r, nil
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	ferr, cut := s.c.before(ctx, Stmt{Op: OpQuery, SQL: s.query})
	if ferr != nil {
		return nil, ferr
	}
	if cut {
		s.c.cutAfterSend()
	}
	r, err := s.inner.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err = s.c.after(s.query, err, cut); err != nil {
		if r != nil {
			_ = r.Close()
		}
		return nil, err
	}
	return r, nil
}

func (s *stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if nc, ok := s.inner.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(nv)
	}
	return s.c.CheckNamedValue(nv)
}

// Contains returns a Match that selects statements of the ops (any op if
// none) whose SQL contains every one of the substrings.
func Contains(ops []Op, subs ...string) func(Stmt) bool {
	return func(s Stmt) bool {
		if len(ops) > 0 {
			found := false
			for _, o := range ops {
				found = found || o == s.Op
			}
			if !found {
				return false
			}
		}
		for _, sub := range subs {
			if !strings.Contains(s.SQL, sub) {
				return false
			}
		}
		return true
	}
}
