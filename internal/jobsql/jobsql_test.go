package jobsql_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/schema"

	"github.com/bunqueue/bunqueue/internal/jobsql"
	"github.com/bunqueue/bunqueue/internal/sqldialect"
	"github.com/bunqueue/bunqueue/internal/tables"
)

// A VALUES tuple holds the job's values in the INSERT's column order:
// NULL for what it has not, the database clock for a time not given.
func TestValues(t *testing.T) {
	t.Parallel()
	s, gen := jobsql.New(sqldialect.MySQL{}, tables.Default), schema.NewQueryGen(mysqldialect.New())
	require.Equal(t, "('q', 'k', X'7b7d', NULL, -1, 3, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, NULL, NULL)",
		s.Values(gen, jobsql.NewJob{Queue: "q", Kind: "k", Args: []byte("{}"), Priority: -1, MaxAttempts: 3}))
	key, tenant := "it's", "tenant"
	require.Equal(t, "('q', 'k', X'7b7d', X'01', 0, 1, UTC_TIMESTAMP(6) + INTERVAL 1500000 MICROSECOND, UTC_TIMESTAMP(6), 'it''s', 'tenant', X'02')",
		s.Values(gen, jobsql.NewJob{Queue: "q", Kind: "k", Args: []byte("{}"), Metadata: []byte{1}, MaxAttempts: 1,
			Delay: 1500 * time.Millisecond, UniqueKey: &key, LimitKey: &tenant, TraceContext: []byte{2}}))
	at := time.Date(2026, 12, 2, 10, 0, 0, 1000, time.FixedZone("X", 3600))
	require.Equal(t, "('q', 'k', X'', NULL, 0, 1, '2026-12-02 09:00:00.000001', '2026-12-02 09:00:00.000001', NULL, NULL, NULL)",
		s.Values(gen, jobsql.NewJob{Queue: "q", Kind: "k", Args: []byte{}, MaxAttempts: 1, RunAt: at, CreatedAt: at}))
}

// The completion of one job, as text for bun or prepared on the server.
func TestCompleteOne(t *testing.T) {
	t.Parallel()
	require.Equal(t, "DELETE FROM bunqueue_jobs WHERE id = ?", jobsql.New(sqldialect.MySQL{}, tables.Default).CompleteOne(false, "?"))
	require.Equal(t, "UPDATE bunqueue_jobs SET state = 1, completed_at = statement_timestamp(), unique_key = NULL, lease_token = NULL, last_error = NULL, attempts = attempts + 1 WHERE id = $1",
		jobsql.New(sqldialect.Postgres{}, tables.Default).CompleteOne(true, "$1"))
}
