package jobsql

import (
	"context"
	"unicode/utf8"

	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue/internal/migrate"
)

// AttemptErrorsColumn is the column of the jobs and the failed jobs that
// holds a job's failed attempts, as a JSON array, oldest first (schema
// version 8).
const AttemptErrorsColumn = migrate.AttemptErrorsColumn

// AttemptsKept is the most failed attempts a job keeps: each failure
// past it drops the oldest, so that a job of many attempts keeps a row
// of bounded size.
const AttemptsKept = 20

// AttemptErrorBytes is the most bytes of an attempt's error that its
// entry keeps, cut at a character's boundary: AttemptsKept entries take
// about 80 KB, where the last error (last_error, and a failed job's
// error) keeps up to 60,000 bytes of it.
const AttemptErrorBytes = 4000

// appendAttempt is the SQL of the jobs table's attempt errors with one
// more, whose number and error are its two markers.
func (s SQL) appendAttempt() string {
	return s.d.AppendAttempt(AttemptErrorsColumn, AttemptsKept)
}

// attemptText is what an attempt's entry keeps of its error text.
func attemptText(text string) string { return CutText(text, AttemptErrorBytes) }

// CutText returns the first limit bytes of text, less the end of a
// character cut in two: valid UTF-8 stays valid.
func CutText(text string, limit int) string {
	if len(text) <= limit {
		return text
	}
	text = text[:limit]
	for !utf8.ValidString(text) {
		text = text[:len(text)-1]
	}
	return text
}

// CopyAttemptErrors sets the attempt errors of the job id to those of
// the failed job failedID, for a failed job put back.
func (s SQL) CopyAttemptErrors(ctx context.Context, db bun.IDB, failedID, id int64) error {
	return exec(ctx, db, "UPDATE "+s.t.Jobs+" SET "+AttemptErrorsColumn+" = (SELECT "+AttemptErrorsColumn+" FROM "+s.t.FailedJobs+" WHERE id = ?) WHERE id = ?",
		failedID, id)
}
