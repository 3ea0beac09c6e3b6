// Package periodic computes the ticks of periodic jobs: the times, from
// a cron expression or a fixed interval, at which a schedule enqueues a
// job. Times are microseconds since the Unix epoch, as the periodic
// table stores them, so that every process computes the same ticks from
// the same record, whatever its own clock or time zone.
package periodic

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Never is the tick after the last one: a schedule that has no more.
const Never = math.MaxInt64

// NoTick is Record.Last of a schedule that never enqueued a tick.
const NoTick = math.MinInt64

// Schedule is the ticks of a periodic job.
type Schedule interface {
	// Next returns the first tick after t, or Never.
	Next(t int64) int64
	// From returns the first tick at or after cutoff of the ticks that
	// follow t (t itself if cutoff is not after it), without visiting the
	// ticks in between: a schedule down for a week skips its missed
	// ticks at once.
	From(t, cutoff int64) int64
	// String describes the schedule; it is stored with the schedule's
	// record, so that a process sees when the schedule was changed.
	String() string
}

// parser reads the five fields of standard cron (minute, hour, day of
// month, month, day of week), an optional sixth one first for seconds,
// and the descriptors (@hourly, @daily, ...).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Cron returns the schedule of a cron expression in the time zone loc
// (UTC if nil). The zone is given by loc only: an expression that sets
// its own (CRON_TZ=, TZ=) is refused, as is @every, a fixed interval
// (see Every), and an expression that never matches.
func Cron(expr string, loc *time.Location) (s Schedule, err error) {
	if loc == nil {
		loc = time.UTC
	}
	trimmed := strings.TrimSpace(expr)
	switch {
	case trimmed == "":
		return nil, errors.New("is empty")
	case strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ="):
		return nil, fmt.Errorf("sets a time zone (%q): give it as the Location instead", trimmed)
	case strings.HasPrefix(trimmed, "@every"):
		return nil, fmt.Errorf("is a fixed interval (%q): set Every instead", trimmed)
	}
	defer func() {
		if r := recover(); r != nil { // the parser panics on some malformed input
			s, err = nil, fmt.Errorf("%q is not a cron expression: %v", expr, r)
		}
	}()
	parsed, err := parser.Parse(trimmed)
	if err != nil {
		return nil, fmt.Errorf("%q is not a cron expression: %w", expr, err)
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("%q is not a cron expression", expr)
	}
	spec.Location = loc // the parser's default is time.Local
	c := cronSchedule{spec: spec, text: "cron " + trimmed + " " + loc.String()}
	if c.Next(time.Now().UnixMicro()) == Never {
		return nil, fmt.Errorf("%q never matches", expr)
	}
	return c, nil
}

type cronSchedule struct {
	spec *cron.SpecSchedule
	text string
}

func (c cronSchedule) Next(t int64) int64 {
	n := c.spec.Next(time.UnixMicro(t))
	if n.IsZero() { // none in the next five years
		return Never
	}
	return n.UnixMicro()
}

func (c cronSchedule) From(t, cutoff int64) int64 {
	if cutoff <= t {
		return t
	}
	// Cron ticks are whole seconds: the first one after a nanosecond
	// before cutoff is the first at or after it.
	n := c.spec.Next(time.UnixMicro(cutoff).Add(-time.Nanosecond))
	if n.IsZero() {
		return Never
	}
	return n.UnixMicro()
}

func (c cronSchedule) String() string { return c.text }

// Every returns the schedule of a fixed interval d, a positive number of
// microseconds: each tick is d after the one before, the first d after
// the schedule was first recorded.
func Every(d time.Duration) Schedule { return every(d.Microseconds()) }

type every int64 // microseconds

func (e every) Next(t int64) int64 {
	if t > Never-int64(e) {
		return Never
	}
	return t + int64(e)
}

func (e every) From(t, cutoff int64) int64 {
	if cutoff <= t {
		return t
	}
	steps := (cutoff - t + int64(e) - 1) / int64(e)
	if steps > (Never-t)/int64(e) {
		return Never
	}
	return t + steps*int64(e)
}

func (e every) String() string { return "every " + (time.Duration(e) * time.Microsecond).String() }

// Record is what the periodic table keeps of a schedule.
type Record struct {
	// Next is the first tick not yet enqueued or skipped: every tick
	// before it was handled once, by one process.
	Next int64
	// Last is the latest tick enqueued, or NoTick for none. A
	// tick is enqueued only after it, so that a changed schedule never
	// enqueues a time twice.
	Last int64
}

// Due returns the ticks of s that are due at now, at most most of them,
// and the record's next tick once they are enqueued. Ticks older than
// now minus catchUp are skipped. If every due tick was skipped and
// runMissed is set, one tick is due in their place: now.
func Due(s Schedule, r Record, now int64, catchUp time.Duration, runMissed bool, most int) (ticks []int64, next int64) {
	t := r.Next
	skipped := false
	if cutoff := now - catchUp.Microseconds(); t < cutoff {
		t, skipped = s.From(t, cutoff), true
	}
	for t <= now && len(ticks) < most {
		if t > r.Last {
			ticks = append(ticks, t)
		}
		n := s.Next(t)
		if n <= t { // a schedule must move on; stop rather than loop
			n = Never
		}
		t = n
	}
	if skipped && len(ticks) == 0 && runMissed && now > r.Last {
		ticks = append(ticks, now)
	}
	return ticks, t
}
