package bunqueue

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/bunqueue/bunqueue/internal/periodic"
)

// PeriodicJob is a job that clients enqueue on a schedule: a cron
// expression or a fixed interval. List it in Config.PeriodicJobs of every
// process that should keep the schedule: each tick is enqueued once,
// however many clients run it, with no leader. The schedule's record in
// the bunqueue_periodic table (schema version 5, see Migrate) holds the
// first tick not yet enqueued; the client that moves it on, with a
// compare-and-set, enqueues the ticks it passed in the same transaction,
// and the others find it moved. A tick's job has the tick as its RunAt,
// so Job.RunAt tells a worker which tick it runs.
//
// Ticks are due by the database clock, read with every look at the
// records, not by the process's: the processes agree on when a tick is
// due whatever their clocks say, and a tick is enqueued once whichever
// process comes first. See docs/periodic.md.
type PeriodicJob struct {
	// Name identifies the schedule in the database, across processes and
	// restarts: 1 to 128 bytes of UTF-8, unique in Config.PeriodicJobs.
	// Clients that list the same name share one schedule, and should give
	// it the same settings.
	Name string

	// Cron is a cron expression: five fields (minute, hour, day of month,
	// month, day of week), or six with seconds first, or a descriptor
	// (@yearly, @monthly, @weekly, @daily, @hourly), read in Location.
	// Set Cron or Every, not both.
	Cron string
	// Location is the time zone of Cron's fields. Defaults to UTC (not
	// time.Local); the expression itself must not name one (CRON_TZ=).
	// Ignored with Every.
	Location *time.Location

	// Every is a fixed interval, at least one second, in whole
	// microseconds: each tick is Every after the one before, the first
	// Every after the schedule's record was created.
	Every time.Duration

	// Args are the job's arguments, enqueued as they are at every tick.
	Args JobArgs
	// Opts are the job's options, as for Enqueue, but RunAt and Delay,
	// which must be zero: a tick's job runs at its tick. With a
	// UniqueKey, a tick whose previous job is still pending enqueues
	// nothing.
	Opts *EnqueueOpts

	// CatchUp is how late a tick may be enqueued. A tick that no client
	// enqueued in time (no process ran the schedule, or the database
	// could not be reached) is enqueued when a client next looks, if it
	// is at most CatchUp old, and skipped for good if it is older. Ticks
	// are normally enqueued within milliseconds; to skip missed ticks,
	// set a few seconds. At least one second. Defaults to
	// PeriodicCatchUpDefault.
	CatchUp time.Duration

	// RunOnStart makes the schedule run at once where it would otherwise
	// wait: when its record is new (the first start of the schedule on
	// the database), its first tick is the start; and when every tick
	// missed since the last enqueued one is older than CatchUp (every
	// process was down), one job is enqueued at once in their place. A
	// client that starts while the schedule kept its ticks enqueues
	// nothing: in a fleet, a job at every process's start would be one
	// per process.
	RunOnStart bool
}

// PeriodicCatchUpDefault is PeriodicJob.CatchUp's default: a tick missed
// by a restart of a minute or less is still enqueued.
const PeriodicCatchUpDefault = time.Minute

// periodicJob is a PeriodicJob checked, with its schedule parsed.
type periodicJob struct {
	name       string
	sched      periodic.Schedule
	args       JobArgs
	opts       EnqueueOpts
	catchUp    time.Duration
	runOnStart bool
}

// params returns the jobs of ticks, each due at its tick.
func (p *periodicJob) params(ticks []int64) []EnqueueParams {
	jobs := make([]EnqueueParams, len(ticks))
	for i, t := range ticks {
		o := p.opts
		o.RunAt = time.UnixMicro(t).UTC()
		jobs[i] = EnqueueParams{Args: p.args, Opts: &o}
	}
	return jobs
}

// periodicJobs checks cfg.PeriodicJobs, with cfg's defaults filled in,
// and parses their schedules. The errors name the field and wrap
// ErrInvalidJob.
func periodicJobs(cfg Config) ([]*periodicJob, error) {
	var jobs []*periodicJob
	names := map[string]bool{}
	for i, pj := range cfg.PeriodicJobs {
		field := fmt.Sprintf("Config.PeriodicJobs[%d]", i)
		if checkText("", pj.Name) == nil && pj.Name != "" {
			field = fmt.Sprintf("Config.PeriodicJobs[%d] (%q)", i, pj.Name)
		}
		j, err := pj.check(cfg.JobQueues)
		if err == nil && names[pj.Name] {
			err = errors.New("Name: another periodic job has this name")
		}
		if err != nil {
			return nil, invalidJob{fmt.Errorf("bunqueue: %s.%w", field, err)}
		}
		names[pj.Name] = true
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// check returns pj checked, or what makes it unfit, starting with the
// field's name.
func (pj PeriodicJob) check(queues map[string]JobQueueConfig) (*periodicJob, error) {
	if pj.Name == "" || len(pj.Name) > 128 {
		return nil, fmt.Errorf("Name must have 1 to 128 bytes, got %d", len(pj.Name))
	}
	if err := checkText("Name", pj.Name); err != nil {
		return nil, err
	}
	sched, err := pj.schedule()
	if err != nil {
		return nil, err
	}
	if pj.CatchUp < 0 || (pj.CatchUp > 0 && pj.CatchUp < time.Second) {
		return nil, fmt.Errorf("CatchUp must be zero (for PeriodicCatchUpDefault) or at least 1s, got %s", pj.CatchUp)
	}
	if err := checkPeriodicArgs(pj.Args); err != nil {
		return nil, err
	}
	j := &periodicJob{name: pj.Name, sched: sched, args: pj.Args, catchUp: pj.CatchUp, runOnStart: pj.RunOnStart}
	orDefault(&j.catchUp, PeriodicCatchUpDefault)
	if pj.Opts != nil {
		j.opts = *pj.Opts
	}
	switch {
	case !j.opts.RunAt.IsZero():
		return nil, errors.New("Opts.RunAt must be zero: a tick's job runs at its tick")
	case j.opts.Delay != 0:
		return nil, errors.New("Opts.Delay must be zero: a tick's job runs at its tick")
	}
	checked := j.opts
	orDefault(&checked.Queue, QueueDefault)
	if err := checked.check(queues); err != nil {
		return nil, fmt.Errorf("Opts: %w", err)
	}
	return j, nil
}

// schedule parses pj's Cron or Every.
func (pj PeriodicJob) schedule() (periodic.Schedule, error) {
	switch {
	case pj.Cron != "" && pj.Every != 0:
		return nil, errors.New("Cron and Every are both set: set one")
	case pj.Cron != "":
		s, err := periodic.Cron(pj.Cron, pj.Location)
		if err != nil {
			return nil, fmt.Errorf("Cron: %w", err)
		}
		return s, nil
	case pj.Every == 0:
		return nil, errors.New("Every: the schedule is missing: set Cron or Every")
	case pj.Every < time.Second:
		return nil, fmt.Errorf("Every must be at least 1s, got %s", pj.Every)
	case pj.Every%time.Microsecond != 0:
		return nil, fmt.Errorf("Every must be whole microseconds, got %s", pj.Every)
	}
	return periodic.Every(pj.Every), nil
}

// checkPeriodicArgs returns what makes args unfit to enqueue at every
// tick: nil, a bad Kind, no JSON.
func checkPeriodicArgs(args JobArgs) error {
	if args == nil || (reflect.ValueOf(args).Kind() == reflect.Pointer && reflect.ValueOf(args).IsNil()) {
		return errors.New("Args must not be nil")
	}
	if err := checkKind("Args.Kind()", args.Kind()); err != nil {
		return err
	}
	if _, err := json.Marshal(args); err != nil {
		return fmt.Errorf("Args: encode as JSON: %w", err)
	}
	return nil
}
