package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The cancel round: a statement that would run cancelSleep, holding a row
// lock, ended by a deadline of cancelDeadline.
const (
	cancelDeadline = 50 * time.Millisecond
	cancelSleep    = 2 * time.Second
)

// cancelQuerier is what the cancel scenario needs of a pool: a
// pgxpool.Pool has it. pgtx's is its Pool.Pgxpool: a transaction begun on
// it is not pgtx's, but its connections are watched by pgtx's cancel handler
// (CancelModePool), which is what the scenario measures.
type cancelQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Begin(ctx context.Context) (pgx.Tx, error)
	Stat() *pgxpool.Stat
}

// cancelRow is one way of cancelling.
type cancelRow struct {
	Contender     string  `json:"contender"`
	Cancels       int     `json:"cancels"`
	ReturnP50ms   float64 `json:"deadline_to_return_p50_ms"`
	ReturnP99ms   float64 `json:"deadline_to_return_p99_ms"`
	ReleaseP50ms  float64 `json:"deadline_to_lock_release_p50_ms"`
	ReleaseP99ms  float64 `json:"deadline_to_lock_release_p99_ms"`
	ReconnectsPer float64 `json:"reconnects_per_100_cancels"`
}

// cancelBench ports integration/cancel_bench_test.go: a deadline ends a
// statement that holds a row lock, and we measure deadline→return,
// deadline→lock release (as seen by a session waiting for the row) and
// reconnects per 100 cancels, for pgtx (CancelModePool) and pgx's two
// context watcher handlers, one cancel of each in turn.
func cancelBench(ctx context.Context, e *env) (result, error) {
	if _, err := e.admin.Exec(ctx, `drop table if exists bench_hot;
		create table bench_hot (id int primary key, n int not null); insert into bench_hot values (1, 0)`); err != nil {
		return result{}, err
	}
	tp, err := newPgtxPool(ctx, e.dsn, 1, nil)
	if err != nil {
		return result{}, err
	}
	defer tp.Close()
	plain, err := newPgxPool(ctx, e.dsn, 1, nil)
	if err != nil {
		return result{}, err
	}
	defer plain.Close()
	withRequest, err := newPgxPool(ctx, e.dsn, 1, func(c *pgxpool.Config) {
		c.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 5 * time.Second}
		}
	})
	if err != nil {
		return result{}, err
	}
	defer withRequest.Close()
	waiter, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return result{}, err
	}
	defer waiter.Close(context.WithoutCancel(ctx))

	contenders := []struct {
		name string
		pool cancelQuerier
	}{
		{"pgtx (CancelModePool)", tp.Pgxpool()},
		{"pgx default handler", plain},
		{"pgx CancelRequestContextWatcherHandler", withRequest},
	}
	toReturn := make([][]time.Duration, len(contenders))
	toRelease := make([][]time.Duration, len(contenders))
	conns0 := make([]int64, len(contenders))
	for i, c := range contenders {
		if _, err := c.pool.Exec(ctx, "select 1"); err != nil { // warm
			return result{}, err
		}
		conns0[i] = c.pool.Stat().NewConnsCount()
	}
	err = interleave(ctx, len(contenders), e.opts.cancels, func(ctx context.Context, _, i int) error {
		r, l, err := cancelRound(ctx, contenders[i].pool, waiter)
		if err != nil {
			return fmt.Errorf("%s: %w", contenders[i].name, err)
		}
		toReturn[i], toRelease[i] = append(toReturn[i], r), append(toRelease[i], l)
		return nil
	})
	if err != nil {
		return result{}, err
	}
	rows := make([]cancelRow, len(contenders))
	t := table{
		Title: "Cancel: a 50ms deadline ends `select pg_sleep(2)` in a transaction holding a row lock",
		Note: fmt.Sprintf("%d cancels per contender, one of each in turn. Lock released = when a session waiting "+
			"for the row gets it. Reconnects are new connections of the pool (size 1). "+
			"Ported from integration/cancel_bench_test.go.", e.opts.cancels),
		Header: []string{"contender", "deadline→return p50 ms", "p99 ms", "deadline→lock released p50 ms", "p99 ms", "reconnects per 100 cancels"},
	}
	for i, c := range contenders {
		n := len(toReturn[i])
		rows[i] = cancelRow{
			Contender: c.name, Cancels: n,
			ReturnP50ms: msf(percentile(toReturn[i], .5)), ReturnP99ms: msf(percentile(toReturn[i], .99)),
			ReleaseP50ms: msf(percentile(toRelease[i], .5)), ReleaseP99ms: msf(percentile(toRelease[i], .99)),
			ReconnectsPer: ratio(float64(c.pool.Stat().NewConnsCount()-conns0[i])*100, float64(n)),
		}
		r := rows[i]
		t.Rows = append(t.Rows, []string{r.Contender, fmtf(r.ReturnP50ms, 1), fmtf(r.ReturnP99ms, 1),
			fmtf(r.ReleaseP50ms, 1), fmtf(r.ReleaseP99ms, 1), fmtf(r.ReconnectsPer, 0)})
	}
	return result{Tables: []table{t}, Data: rows}, nil
}

// cancelRound locks the hot row, runs a 2s statement under a 50ms deadline
// while waiter waits for the row, and returns deadline→return and
// deadline→lock release. The waiter's goroutine is joined before it returns.
func cancelRound(ctx context.Context, pool cancelQuerier, waiter *pgx.Conn) (toReturn, toRelease time.Duration, err error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, 0, err
	}
	if _, err := tx.Exec(ctx, "select * from bench_hot where id = 1 for update"); err != nil {
		_ = tx.Rollback(ctx)
		return 0, 0, err
	}
	type release struct {
		at  time.Time
		err error
	}
	released := make(chan release, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, cancelSleep+5*time.Second)
		defer cancel()
		_, err := waiter.Exec(wctx, "update bench_hot set n = n + 1 where id = 1")
		released <- release{time.Now(), err}
	}()
	cctx, cancel := context.WithTimeout(ctx, cancelDeadline)
	deadline, _ := cctx.Deadline()
	_, err = tx.Exec(cctx, "select pg_sleep($1)", cancelSleep.Seconds())
	returned := time.Now()
	cancel()
	_ = tx.Rollback(ctx) // frees the lock if the connection survived; a closed one freed it already
	rel := <-released
	switch {
	case !errors.Is(err, context.DeadlineExceeded) && !pgconn.Timeout(err) && sqlState(err) != pgerrcode.QueryCanceled:
		return 0, 0, fmt.Errorf("the statement was not cancelled: %v", err)
	case rel.err != nil:
		return 0, 0, fmt.Errorf("waiter: %w", rel.err)
	}
	return returned.Sub(deadline), rel.at.Sub(deadline), nil
}

// sqlState returns the SQLSTATE of the last *pgconn.PgError in err's chain,
// or "" when there is none.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
