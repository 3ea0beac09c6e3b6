// Package prepared keeps statements prepared on the server for the SQL
// texts a process runs again and again, such as a queue's claim of one row
// by its key.
//
// A text is prepared the second time it is asked for, never the first:
// a query whose text changes with every call (one that embeds the time,
// say) is never prepared, and costs only a map lookup. The preparation
// runs in the background, on a connection of the pool, so that a caller
// holding a transaction never waits for another connection; until it is
// ready the caller runs its query in text. A statement is a pool-level
// *sql.Stmt: a transaction uses it through (*sql.Tx).StmtContext, which
// prepares it once on each connection and reuses it there.
//
// It also says which models' claims may be prepared (Preparable) and for
// how many keys a statement is written (KeyShape). It calls only
// database/sql, and bun's schema for the models.
package prepared

import (
	"context"
	"database/sql"
	"sync"
	"time"
)

const (
	// MaxTexts bounds the texts a Cache tracks, prepared or not.
	MaxTexts = 256
	// RetryAfter is how long a text whose preparation or execution failed
	// runs in text before it is prepared again.
	RetryAfter = 10 * time.Second
	// prepareTimeout bounds one background preparation, most of it the
	// wait for a free connection of the pool.
	prepareTimeout = 10 * time.Second
)

// Cache holds the prepared statements of one pool. It is safe for
// concurrent use.
type Cache struct {
	db     *sql.DB
	failed func(text string, err error) // told of a failed preparation
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	texts  map[string]*entry
	closed bool
	off    bool // by Off: nothing is prepared any more
}

type entry struct {
	seen  int       // how often Get was asked for the text
	stmt  *sql.Stmt // nil until prepared
	busy  bool      // being prepared
	retry time.Time // after a failure: not prepared again before
}

// New returns a Cache of statements prepared on db. failed, if not nil,
// is called with each text whose background preparation failed.
func New(db *sql.DB, failed func(text string, err error)) *Cache {
	ctx, cancel := context.WithCancel(context.Background())
	return &Cache{db: db, failed: failed, ctx: ctx, cancel: cancel, texts: map[string]*entry{}}
}

// Get returns the statement prepared for text, or nil when there is none
// yet: the caller runs text as it is. The second time it is asked for a
// text, Get starts preparing it in the background.
func (c *Cache) Get(text string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.off {
		return nil
	}
	e := c.texts[text]
	switch {
	case e == nil:
		if len(c.texts) >= MaxTexts && !c.evictLocked() {
			return nil
		}
		c.texts[text] = &entry{seen: 1}
		return nil
	case e.stmt != nil:
		return e.stmt
	}
	e.seen++
	if e.busy || e.seen < 2 || time.Now().Before(e.retry) {
		return nil
	}
	e.busy = true
	c.wg.Add(1)
	go c.prepare(text, e)
	return nil
}

// prepare prepares text on a connection of the pool, for e.
func (c *Cache) prepare(text string, e *entry) {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(c.ctx, prepareTimeout)
	st, err := c.db.PrepareContext(ctx, text)
	cancel()
	c.mu.Lock()
	e.busy = false
	switch {
	case err != nil:
		e.seen, e.retry = 0, time.Now().Add(RetryAfter)
	case c.closed || c.off || c.texts[text] != e:
		// Closed, off, or forgotten by Drop, while it was being prepared.
		defer func() { _ = st.Close() }()
	default:
		e.stmt = st
	}
	c.mu.Unlock()
	if err != nil && c.failed != nil && c.ctx.Err() == nil {
		c.failed(text, err)
	}
}

// Drop closes the statement of text, which failed as it ran; text runs as
// it is for RetryAfter, then it is prepared again if it still recurs.
// A transaction that uses the statement still finishes with it.
func (c *Cache) Drop(text string) {
	c.mu.Lock()
	e := c.texts[text]
	var st *sql.Stmt
	if e != nil {
		st = e.stmt
		c.texts[text] = &entry{retry: time.Now().Add(RetryAfter)}
	}
	c.mu.Unlock()
	if st != nil {
		_ = st.Close()
	}
}

// Off closes every statement and makes Get return nil from now on, for a
// pool whose connections do not keep their prepared statements (a pooler
// in transaction mode runs each transaction of a connection on another
// server session). It reports whether this call turned them off.
func (c *Cache) Off() bool {
	c.mu.Lock()
	if c.off || c.closed {
		c.mu.Unlock()
		return false
	}
	c.off = true
	var stmts []*sql.Stmt
	for text, e := range c.texts {
		if e.stmt != nil {
			stmts = append(stmts, e.stmt)
		}
		delete(c.texts, text)
	}
	c.mu.Unlock()
	for _, st := range stmts {
		_ = st.Close()
	}
	return true
}

// evictLocked forgets the texts that are neither prepared nor being
// prepared, and reports whether that made room for another.
func (c *Cache) evictLocked() bool {
	for text, e := range c.texts {
		if e.stmt == nil && !e.busy {
			delete(c.texts, text)
		}
	}
	return len(c.texts) < MaxTexts
}

// Prepared reports how many texts have a statement prepared.
func (c *Cache) Prepared() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.texts {
		if e.stmt != nil {
			n++
		}
	}
	return n
}

// Close stops the preparations under way, waits for them, and closes
// every statement. database/sql closes each one on a connection once the
// transactions using it there have ended. Get returns nil after Close.
func (c *Cache) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for text, e := range c.texts {
		if e.stmt != nil {
			_ = e.stmt.Close()
		}
		delete(c.texts, text)
	}
}
