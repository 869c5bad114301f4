package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
)

// querier is what the cancel benchmark needs of a pool.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Begin(ctx context.Context) (pgx.Tx, error)
	Stat() *pgxpool.Stat
}

// BenchmarkCancel measures, side by side on one server, what happens when a
// deadline ends a statement that holds a row lock: deadline→return,
// deadline→lock release (as seen by a session waiting for the row), and
// reconnects per 100 cancels, for pgtx (pool mode) and pgx's two handlers.
// The statement sleeps 2s: an abandoned one holds its lock that long.
//
//	go test ./integration -run '^$' -bench Cancel -benchtime 50x
func BenchmarkCancel(b *testing.B) {
	ctx := context.Background()
	dsn := newDB(b)
	setup, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer setup.Close(ctx)
	if _, err := setup.Exec(ctx, "create table hot (id int primary key, n int not null); insert into hot values (1, 0)"); err != nil {
		b.Fatal(err)
	}

	pgxPool := func(b *testing.B, handler func(*pgconn.PgConn) ctxwatch.Handler) querier {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			b.Fatal(err)
		}
		cfg.MaxConns = 1
		if handler != nil {
			cfg.ConnConfig.BuildContextWatcherHandler = handler
		}
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(p.Close)
		return p
	}
	contenders := []struct {
		name string
		pool func(b *testing.B) querier
	}{
		{"pgtx-pool-mode", func(b *testing.B) querier {
			cfg, err := pgtx.ParseConfig(dsn)
			if err != nil {
				b.Fatal(err)
			}
			cfg.MaxConns = 1
			p, err := pgtx.NewWithConfig(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(p.Close)
			// The escape hatch: a transaction begun on the pgxpool.Pool, whose
			// connections pgtx's cancel handler (pool mode) still watches.
			return p.Pgxpool()
		}},
		{"pgx-default", func(b *testing.B) querier { return pgxPool(b, nil) }},
		{"pgx-cancel-request", func(b *testing.B) querier {
			return pgxPool(b, func(c *pgconn.PgConn) ctxwatch.Handler {
				return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 5 * time.Second}
			})
		}},
	}
	for _, c := range contenders {
		b.Run(c.name, func(b *testing.B) {
			pool := c.pool(b)
			waiter, err := pgx.Connect(ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer waiter.Close(ctx)
			if _, err := pool.Exec(ctx, "select 1"); err != nil { // warm
				b.Fatal(err)
			}
			conns0 := pool.Stat().NewConnsCount()
			var toReturn, toRelease []time.Duration
			b.ResetTimer()
			for b.Loop() {
				r, l := cancelRound(b, ctx, pool, waiter)
				toReturn, toRelease = append(toReturn, r), append(toRelease, l)
			}
			b.StopTimer()
			n := float64(len(toReturn))
			b.ReportMetric(ms(percentile(toReturn, .5)), "return-p50-ms")
			b.ReportMetric(ms(percentile(toReturn, .99)), "return-p99-ms")
			b.ReportMetric(ms(percentile(toRelease, .5)), "release-p50-ms")
			b.ReportMetric(ms(percentile(toRelease, .99)), "release-p99-ms")
			b.ReportMetric(float64(pool.Stat().NewConnsCount()-conns0)*100/n, "reconnects/100")
		})
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cancelRound locks the hot row, runs a 2s statement under a 50ms deadline,
// and returns deadline→return and deadline→lock release.
func cancelRound(b *testing.B, ctx context.Context, pool querier, waiter *pgx.Conn) (toReturn, toRelease time.Duration) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "select * from hot where id = 1 for update"); err != nil {
		b.Fatal(err)
	}
	released := make(chan time.Time, 1)
	go func() {
		_, err := waiter.Exec(ctx, "update hot set n = n + 1 where id = 1")
		if err != nil {
			b.Error(err)
		}
		released <- time.Now()
	}()
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	deadline, _ := cctx.Deadline()
	_, err = tx.Exec(cctx, "select pg_sleep(2)")
	returned := time.Now()
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) && !pgconn.Timeout(err) && sqlState(err) != pgerrcode.QueryCanceled {
		b.Fatalf("unexpected: %v", err)
	}
	_ = tx.Rollback(ctx) // frees the lock if the connection survived; a dead one freed it already
	rel := <-released
	return returned.Sub(deadline), rel.Sub(deadline)
}
