package bunqueue

import (
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"time"

	"github.com/bunqueue/bunqueue/internal/jobsql"
)

// AttemptErrorsKept is the most failed attempts a job keeps in its
// Errors: each failure past it drops the oldest one, so that a job of
// many attempts keeps a row of bounded size.
const AttemptErrorsKept = jobsql.AttemptsKept

// AttemptErrorBytes is the most bytes of an attempt's error that its
// AttemptError keeps, cut at a character's boundary. The error of the
// last attempt is kept longer (up to 60,000 bytes) in JobRecord.LastError
// and FailedJob.Error.
const AttemptErrorBytes = jobsql.AttemptErrorBytes

// AttemptError is one failed attempt of a job: a returned error, a panic
// (with its stack), a timeout, a Cancel. Snoozes are not failures and
// are not listed.
type AttemptError struct {
	// Attempt is the attempt's number, from 1.
	Attempt int
	// At is when the failure was recorded, by the database clock, in UTC.
	At time.Time
	// Error is the attempt's error, at most AttemptErrorBytes of it.
	Error string
}

// AttemptErrors are the failed attempts of a job, oldest first: the
// newest AttemptErrorsKept of them. The jobs tables keep them as a JSON
// array of {"attempt": n, "at_us": microseconds since the Unix epoch,
// "error": text}; a row written before schema version 8, or of a job
// that never failed, has none.
type AttemptErrors []AttemptError

// storedAttempt is an AttemptError as the jobs tables keep it.
type storedAttempt struct {
	Attempt int    `json:"attempt"`
	AtUS    int64  `json:"at_us"`
	Error   string `json:"error"`
}

// Scan implements sql.Scanner, reading the JSON of the jobs tables'
// attempt_errors column; NULL reads as none.
func (a *AttemptErrors) Scan(src any) error {
	var b []byte
	switch v := src.(type) {
	case nil:
		*a = nil
		return nil
	case []byte:
		b = v
	case string:
		b = []byte(v)
	default:
		return fmt.Errorf("bunqueue: attempt errors: cannot read %T", src)
	}
	var stored []storedAttempt
	if err := json.Unmarshal(b, &stored); err != nil {
		return fmt.Errorf("bunqueue: attempt errors: %w", err)
	}
	out := make(AttemptErrors, len(stored))
	for i, s := range stored {
		out[i] = AttemptError{Attempt: s.Attempt, At: time.UnixMicro(s.AtUS).UTC(), Error: s.Error}
	}
	*a = out
	return nil
}

// Value implements driver.Valuer, writing the JSON that Scan reads; none
// is NULL.
func (a AttemptErrors) Value() (driver.Value, error) {
	if len(a) == 0 {
		return nil, nil
	}
	stored := make([]storedAttempt, len(a))
	for i, e := range a {
		stored[i] = storedAttempt{Attempt: e.Attempt, AtUS: e.At.UnixMicro(), Error: e.Error}
	}
	b, err := json.Marshal(stored)
	return string(b), err
}
