package sqldialect

import (
	"context"
	"database/sql"
	"errors"

	"github.com/go-sql-driver/mysql"
	"github.com/uptrace/bun"
)

// TxOptions implements Sessions: nil. MySQL's START TRANSACTION cannot
// carry an isolation level: the driver sends SET TRANSACTION ISOLATION
// LEVEL before it, a second round trip per transaction. A worker's own
// connection sets the level once instead (SessionSetup) and is never
// handed back to the pool with it. Through ProxySQL, the one pooler that
// multiplexes MySQL connections, that stays right: ProxySQL tracks SET
// SESSION and applies it to whichever backend connection runs the
// client's next transaction.
func (MySQL) TxOptions() *sql.TxOptions { return nil }

// TxSession implements Sessions: CONNECTION_ID(), read inside the
// transaction, as on PostgreSQL, rather than once per connection: a
// multiplexing pooler may run a client connection's transactions on
// several backend connections, and a worker reads it only when a Timeout
// may need it. MySQL tells no transaction of a session from the next
// (INNODB_TRX lists a transaction once it touches InnoDB, with the time
// of that), so Began stays zero and EndTxSession ends the session by its
// id: the transaction bunqueue ends has lost its client connection, and a
// pooler hands no other client a backend connection in a transaction.
func (d MySQL) TxSession(ctx context.Context, tx bun.IDB) (TxSession, error) {
	id, err := d.SessionID(ctx, tx)
	return TxSession{ID: id}, err
}

// EndTxSession implements Sessions: KILL CONNECTION. Ending a session
// that is already gone is not an error.
func (MySQL) EndTxSession(ctx context.Context, db bun.IDB, s TxSession) error {
	if !s.Known() {
		return nil
	}
	_, err := db.ExecContext(ctx, "KILL CONNECTION ?", s.ID)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1094 { // ER_NO_SUCH_THREAD
		return nil
	}
	return err
}

// CheckEndTxSession implements Sessions: KILL needs only the id.
func (MySQL) CheckEndTxSession(context.Context, *bun.DB) error { return nil }

// StatementLost implements Sessions: 1243 ER_UNKNOWN_STMT_HANDLER, a
// statement handle the session does not have.
func (MySQL) StatementLost(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1243
}

// PreparedKept implements Sessions: true, without a probe. The driver
// prepares by the binary protocol, and ProxySQL, which multiplexes,
// keeps its own map of a client's statements and prepares them again on
// whichever backend connection runs them.
func (MySQL) PreparedKept(context.Context, *bun.DB) (bool, error) { return true, nil }

// Advise implements Sessions: the driver keeps no statements of its own.
func (MySQL) Advise(err error) error { return err }
