package bunqueue_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/bunqueue/bunqueue"
	"github.com/bunqueue/bunqueue/tests/dbtest"
)

type benchItem struct {
	bun.BaseModel `bun:"table:bq_bench_tracing"`
	ID            int64 `bun:",pk,autoincrement"`
	Status        string
}

// BenchmarkProcessTracing measures the throughput of an any-table queue
// (8 workers, one row per transaction) with tracing and metrics off (noop
// providers) and on (the SDK, every span sampled, batched to an exporter
// that discards them). Each run pre-inserts b.N rows and times from Start
// until the queue is drained and the client stopped.
func BenchmarkProcessTracing(b *testing.B) {
	db := dbtest.Open(b, 0)
	for _, tc := range []struct {
		name  string
		setup func(b *testing.B, cfg *bunqueue.Config)
	}{
		{"tracing=off", func(b *testing.B, cfg *bunqueue.Config) {
			cfg.TracerProvider = tracenoop.NewTracerProvider()
			cfg.MeterProvider = metricnoop.NewMeterProvider()
		}},
		{"tracing=on", func(b *testing.B, cfg *bunqueue.Config) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sdktrace.AlwaysSample()))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() {
				_ = tp.Shutdown(context.Background())
				_ = mp.Shutdown(context.Background())
			})
			cfg.TracerProvider, cfg.MeterProvider = tp, mp
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.StopTimer()
			dbtest.Exec(b, db, "DROP TABLE IF EXISTS bq_bench_tracing",
				"CREATE TABLE bq_bench_tracing (id BIGINT AUTO_INCREMENT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'waiting', INDEX (status, id)) ENGINE=InnoDB")
			b.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS bq_bench_tracing") })
			for left := b.N; left > 0; left -= 1000 {
				n := min(left, 1000)
				_, err := db.Exec("INSERT INTO bq_bench_tracing (status) VALUES " + strings.TrimSuffix(strings.Repeat("('waiting'),", n), ","))
				require.NoError(b, err)
			}

			var done atomic.Int64
			drained := make(chan struct{})
			q := bunqueue.NewQueue("bench",
				func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("status = 'waiting'").Order("id") },
				func(ctx context.Context, tx bun.Tx, item *benchItem) error {
					_, err := tx.NewUpdate().Model(item).Set("status = 'done'").WherePK().Exec(ctx)
					if err == nil && done.Add(1) == int64(b.N) {
						close(drained)
					}
					return err
				}, &bunqueue.QueueConfig[benchItem]{Workers: 8})
			cfg := bunqueue.Config{PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
			tc.setup(b, &cfg)
			c, err := bunqueue.NewClient(db, &cfg)
			require.NoError(b, err)
			require.NoError(b, c.Add(q))

			b.StartTimer()
			began := time.Now()
			require.NoError(b, c.Start(context.Background()))
			select {
			case <-drained:
			case <-time.After(5 * time.Minute):
				b.Fatal("the queue did not drain")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			require.NoError(b, c.Stop(ctx)) // the last items commit
			elapsed := time.Since(began)
			b.StopTimer()

			var left int
			require.NoError(b, db.NewRaw("SELECT COUNT(*) FROM bq_bench_tracing WHERE status = 'waiting'").Scan(context.Background(), &left))
			require.Zero(b, left, "rows left in the queue")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "items/s")
		})
	}
}
