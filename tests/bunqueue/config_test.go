package bunqueue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// configModel is a valid model; no test here reaches its table.
type configModel struct {
	bun.BaseModel `bun:"table:bq_test_config"`
	ID            int64 `bun:",pk"`
	Done          bool
}

// configNoPK is a model without a primary key.
type configNoPK struct {
	bun.BaseModel `bun:"table:bq_test_config_nopk"`
	Name          string
	Done          bool
}

func configQuery(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("done = FALSE") }

func configHandler[T any](context.Context, bun.Tx, *T) error { return nil }

func TestConfigErrorsNameTheProblem(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)

	// newConfigClient returns a client over db with default settings.
	newConfigClient := func(t *testing.T) *bunqueue.Client {
		t.Helper()
		c, err := bunqueue.NewClient(db, nil)
		require.NoError(t, err)
		return c
	}
	addOne := func(cfg *bunqueue.QueueConfig[configModel]) func(t *testing.T) error {
		return func(t *testing.T) error {
			return newConfigClient(t).Add(bunqueue.NewQueue("cfg", configQuery, configHandler[configModel], cfg))
		}
	}

	tests := []struct {
		name string
		run  func(t *testing.T) error
		want string // a part of the message that names the problem
		is   error  // a sentinel the error must wrap, if any
	}{
		{
			name: "empty queue name",
			run: func(t *testing.T) error {
				return newConfigClient(t).Add(bunqueue.NewQueue("", configQuery, configHandler[configModel], nil))
			},
			want: "queue name must not be empty",
		},
		{
			name: "nil query func",
			run: func(t *testing.T) error {
				return newConfigClient(t).Add(bunqueue.NewQueue("cfg", nil, configHandler[configModel], nil))
			},
			want: `queue "cfg": the query function must not be nil`,
		},
		{
			name: "nil handler",
			run: func(t *testing.T) error {
				return newConfigClient(t).Add(bunqueue.NewQueue[configModel]("cfg", configQuery, nil, nil))
			},
			want: `queue "cfg": the handler must not be nil`,
		},
		{
			name: "negative Workers",
			run:  addOne(&bunqueue.QueueConfig[configModel]{Workers: -1}),
			want: "QueueConfig.Workers must not be negative, got -1",
		},
		{
			name: "negative BatchSize",
			run:  addOne(&bunqueue.QueueConfig[configModel]{BatchSize: -2}),
			want: "QueueConfig.BatchSize must not be negative, got -2",
		},
		{
			name: "negative PollInterval",
			run:  addOne(&bunqueue.QueueConfig[configModel]{PollInterval: -time.Second}),
			want: "QueueConfig.PollInterval must not be negative, got -1s",
		},
		{
			name: "negative Cooldown",
			run:  addOne(&bunqueue.QueueConfig[configModel]{Cooldown: -time.Millisecond}),
			want: "QueueConfig.Cooldown must not be negative, got -1ms",
		},
		{
			name: "negative Timeout",
			run:  addOne(&bunqueue.QueueConfig[configModel]{Timeout: -time.Second}),
			want: "QueueConfig.Timeout must not be negative, got -1s",
		},
		{
			name: "duplicate queue name on one client",
			run: func(t *testing.T) error {
				c := newConfigClient(t)
				require.NoError(t, c.Add(bunqueue.NewQueue("twice", configQuery, configHandler[configModel], nil)))
				return c.Add(bunqueue.NewQueue("twice", configQuery, configHandler[configModel], nil))
			},
			want: `queue "twice": a queue with this name was already added`,
		},
		{
			name: "nil queue to Add",
			run:  func(t *testing.T) error { return newConfigClient(t).Add(nil) },
			want: "queue must not be nil",
		},
		{
			name: "the same queue added to two clients",
			run: func(t *testing.T) error {
				q := bunqueue.NewQueue("shared", configQuery, configHandler[configModel], nil)
				require.NoError(t, newConfigClient(t).Add(q))
				return newConfigClient(t).Add(q)
			},
			want: `queue "shared" is already added to a Client`,
		},
		{
			name: "Add after Start",
			run: func(t *testing.T) error {
				c := newConfigClient(t)
				require.NoError(t, c.Start(t.Context()))
				t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
				return c.Add(bunqueue.NewQueue("late", configQuery, configHandler[configModel], nil))
			},
			want: "already started",
			is:   bunqueue.ErrStarted,
		},
		{
			name: "NewClient with a nil db",
			run: func(t *testing.T) error {
				c, err := bunqueue.NewClient(nil, nil)
				require.Nil(t, c)
				return err
			},
			want: "db must not be nil",
		},
		{
			name: "negative Config.PollInterval",
			run: func(t *testing.T) error {
				c, err := bunqueue.NewClient(db, &bunqueue.Config{PollInterval: -time.Second})
				require.Nil(t, c)
				return err
			},
			want: "Config.PollInterval must not be negative, got -1s",
		},
		{
			name: "negative Config.OutputRetention",
			run: func(t *testing.T) error {
				_, err := bunqueue.NewClient(db, &bunqueue.Config{OutputRetention: -time.Second})
				return err
			},
			want: "Config.OutputRetention must not be negative, got -1s",
		},
		{
			name: "negative JobQueueConfig.Retention",
			run: func(t *testing.T) error {
				_, err := bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{"q": {Retention: -time.Minute}}})
				return err
			},
			want: `Config.JobQueues["q"].Retention must not be negative, got -1m0s`,
		},
		{
			name: "negative JobQueueConfig.OutputRetention",
			run: func(t *testing.T) error {
				_, err := bunqueue.NewClient(db, &bunqueue.Config{JobQueues: map[string]bunqueue.JobQueueConfig{"q": {OutputRetention: -time.Minute}}})
				return err
			},
			want: `Config.JobQueues["q"].OutputRetention must not be negative, got -1m0s`,
		},
		{
			name: "negative Config.Retention, inherited by a queue",
			run: func(t *testing.T) error {
				_, err := bunqueue.NewClient(db, &bunqueue.Config{Retention: -time.Second, JobQueues: map[string]bunqueue.JobQueueConfig{"q": {}}})
				return err
			},
			want: "Config.Retention must not be negative, got -1s",
		},
		{
			name: "a model without a primary key",
			run: func(t *testing.T) error {
				return newConfigClient(t).Add(bunqueue.NewQueue("nopk", configQuery, configHandler[configNoPK], nil))
			},
			want: `queue "nopk": model bunqueue_test.configNoPK has no primary key`,
		},
		{
			name: "a non-struct model",
			run: func(t *testing.T) error {
				return newConfigClient(t).Add(bunqueue.NewQueue("ints", configQuery, configHandler[int], nil))
			},
			want: `queue "ints": the model must be a struct type, got int`,
		},
		{
			name: "a pointer model",
			run: func(t *testing.T) error {
				return newConfigClient(t).Add(bunqueue.NewQueue("ptrs", configQuery, configHandler[*configModel], nil))
			},
			want: `queue "ptrs": the model must be a struct type, got *bunqueue_test.configModel`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.run(t)
			require.ErrorContains(t, err, tt.want)
			require.ErrorContains(t, err, "bunqueue: ", "errors carry the package prefix")
			if tt.is != nil {
				require.True(t, errors.Is(err, tt.is), "want errors.Is(err, %v), got %v", tt.is, err)
			}
		})
	}
}

// TestConfigRejectedQueueCanBeFixedAndAdded checks that a refused Add
// leaves neither the client nor the queue half-attached: the name is still
// free, and a valid queue can be added after it.
func TestConfigRejectedQueueCanBeFixedAndAdded(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, 0)
	c, err := bunqueue.NewClient(db, nil)
	require.NoError(t, err)

	bad := bunqueue.NewQueue("fixable", configQuery, configHandler[configModel], &bunqueue.QueueConfig[configModel]{Workers: -1})
	require.ErrorContains(t, c.Add(bad), "QueueConfig.Workers")
	good := bunqueue.NewQueue("fixable", configQuery, configHandler[configModel], &bunqueue.QueueConfig[configModel]{Workers: 2})
	require.NoError(t, c.Add(good), "the refused queue must not have taken the name")

	_, err = bad.ProcessNext(t.Context())
	require.True(t, errors.Is(err, bunqueue.ErrNotAdded), "the refused queue is not attached: %v", err)
	_, err = bad.Count(t.Context(), 1)
	require.True(t, errors.Is(err, bunqueue.ErrNotAdded), "the refused queue is not attached: %v", err)
}
