package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	crdbpgx "github.com/cockroachdb/cockroach-go/v2/crdb/crdbpgxv5"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
)

// The names of the contenders, as they appear in the tables and the JSON.
const (
	namePgtx   = "pgtx"
	nameBegin  = "pgx.BeginTxFunc"
	nameNaive  = "naive retry loop"
	nameJitter = "full-jitter loop"
	nameCrdb   = "crdbpgxv5.ExecuteTx"
)

// Parameters of the hand-written retry loops. MaxRetries matches pgtx's
// default RetryConfig.MaxRetries (10) so that every retrying contender gives up after the same
// number of attempts.
const (
	loopMaxRetries  = 10
	jitterBase      = 5 * time.Millisecond
	jitterCap       = 500 * time.Millisecond
	callSafetyLimit = 10 * time.Second // no benchmark call should get near it
)

// txFunc is the work of one transaction attempt. Every contender runs the
// same txFunc, so the only difference measured is how the transaction is
// begun, retried and committed.
type txFunc func(ctx context.Context, tx pgx.Tx) error

// contender is one way of running a transaction: pgtx, or one of the
// alternatives a user would write by hand.
type contender struct {
	name string
	// call runs fn in a transaction of isolation level iso, retrying as
	// the contender does, and returns the final error.
	call func(ctx context.Context, iso pgtx.Isolation, fn txFunc) error
}

// run runs fn through c and also returns how many times fn ran: the
// attempts, counted the same way for every contender (an attempt that
// failed before fn, at BEGIN, is not counted by anyone).
func (c contender) run(ctx context.Context, iso pgtx.Isolation, fn txFunc) (attempts int, err error) {
	err = c.call(ctx, iso, func(ctx context.Context, tx pgx.Tx) error {
		attempts++
		return fn(ctx, tx)
	})
	return attempts, err
}

// pgtxContender runs the transaction with pgtx.Transaction on p.
func pgtxContender(name string, p *pgtx.Pool) contender {
	return contender{name: name, call: func(ctx context.Context, iso pgtx.Isolation, fn txFunc) error {
		return pgtx.Transaction(ctx, p, iso, fn)
	}}
}

// labelledPgtxContender runs the transaction with
// pgtx.TransactionWithOptions on p, with label as its Options.Label.
func labelledPgtxContender(name string, p *pgtx.Pool, label string) contender {
	opts := pgtx.Options{Label: label}
	return contender{name: name, call: func(ctx context.Context, iso pgtx.Isolation, fn txFunc) error {
		return pgtx.TransactionWithOptions(ctx, p, iso, opts, fn)
	}}
}

// beginContender runs the transaction once with pgx.BeginTxFunc: no retry.
func beginContender(name string, p *pgxpool.Pool) contender {
	return contender{name: name, call: func(ctx context.Context, iso pgtx.Isolation, fn txFunc) error {
		return beginTxFunc(ctx, p, iso, fn)
	}}
}

// naiveContender is the loop most code bases start with: run the whole
// transaction again at once after a retryable error, up to maxRetries times.
func naiveContender(name string, p *pgxpool.Pool, maxRetries int) contender {
	return contender{name: name, call: func(ctx context.Context, iso pgtx.Isolation, fn txFunc) error {
		return retryLoop(ctx, p, iso, fn, maxRetries, func(int) time.Duration { return 0 })
	}}
}

// jitterContender is the same loop with full-jitter exponential backoff:
// before retry n (from 0) it sleeps rand × min(jitterCap, jitterBase × 2^n).
func jitterContender(name string, p *pgxpool.Pool, maxRetries int) contender {
	return contender{name: name, call: func(ctx context.Context, iso pgtx.Isolation, fn txFunc) error {
		return retryLoop(ctx, p, iso, fn, maxRetries, fullJitter)
	}}
}

// crdbContender runs the transaction with cockroach-go's crdbpgxv5.ExecuteTx,
// which retries 40001 by rolling back to a savepoint inside the same
// transaction (CockroachDB's protocol). On PostgreSQL the retry keeps the old
// snapshot, and ExecuteTx ignores the error of the final COMMIT.
func crdbContender(name string, p *pgxpool.Pool) contender {
	return contender{name: name, call: func(ctx context.Context, iso pgtx.Isolation, fn txFunc) error {
		return crdbpgx.ExecuteTx(ctx, p, pgx.TxOptions{IsoLevel: pgxIso(iso)}, func(tx pgx.Tx) error {
			return fn(ctx, tx)
		})
	}}
}

// beginTxFunc is one attempt with pgx.BeginTxFunc.
func beginTxFunc(ctx context.Context, p *pgxpool.Pool, iso pgtx.Isolation, fn txFunc) error {
	return pgx.BeginTxFunc(ctx, p, pgx.TxOptions{IsoLevel: pgxIso(iso)}, func(tx pgx.Tx) error {
		return fn(ctx, tx)
	})
}

// retryLoop is the hand-written whole-transaction retry loop: BeginTxFunc,
// and on 40001, 40P01 or 53300 sleep backoff(n) and run it all again, at most
// maxRetries times.
func retryLoop(ctx context.Context, p *pgxpool.Pool, iso pgtx.Isolation, fn txFunc, maxRetries int, backoff func(n int) time.Duration) error {
	for n := 0; ; n++ {
		err := beginTxFunc(ctx, p, iso, fn)
		if err == nil || n >= maxRetries || !loopRetryable(err) {
			return err
		}
		if d := backoff(n); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return errors.Join(err, ctx.Err())
			case <-t.C:
			}
		}
	}
}

// fullJitter is the pause before retry n (from 0) of the full-jitter loop.
func fullJitter(n int) time.Duration {
	ceiling := jitterCap
	if n < 16 && jitterBase<<n < jitterCap {
		ceiling = jitterBase << n
	}
	return time.Duration(rand.Float64() * float64(ceiling))
}

// loopRetryable is what the hand-written loops retry: serialization
// failures, deadlocks and the server's too_many_connections.
func loopRetryable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected, pgerrcode.TooManyConnections:
		return true
	}
	return false
}

// pgxIso is pgx's name for a pgtx isolation level.
func pgxIso(iso pgtx.Isolation) pgx.TxIsoLevel {
	switch iso {
	case pgtx.Serializable:
		return pgx.Serializable
	case pgtx.RepeatableRead:
		return pgx.RepeatableRead
	default:
		return pgx.ReadCommitted
	}
}

// newPgtxPool opens a pgtx pool of maxConns connections; edit, when not nil,
// changes its Config first.
func newPgtxPool(ctx context.Context, dsn string, maxConns int, edit func(*pgtx.Config)) (*pgtx.Pool, error) {
	cfg, err := pgtx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(maxConns)
	if edit != nil {
		edit(cfg)
	}
	return pgtx.NewWithConfig(ctx, cfg)
}

// newPgxPool opens a plain pgxpool of maxConns connections, as a user of the
// alternatives would have; edit, when not nil, changes its Config first.
func newPgxPool(ctx context.Context, dsn string, maxConns int, edit func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(maxConns)
	if edit != nil {
		edit(cfg)
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}
