package main

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
)

// The loops, by the names -loops knows them by, in the order of the table.
const (
	keyNaive = "naive"
	keyBegin = "begintx"
	keyPgtx  = "pgtx"
)

// allLoops is -loops' default: every loop, side by side.
const allLoops = keyNaive + "," + keyBegin + "," + keyPgtx

// naiveAttempts is how many times the naive loop runs a transfer.
const naiveAttempts = 3

// txFunc is the work of one attempt: the same transfer for every loop.
type txFunc func(ctx context.Context, tx pgx.Tx) error

// loop is one way of running a transfer, on a pool of its own.
type loop struct {
	key, name string
	// does says in a line or two what the loop does with an error.
	does string
	// run runs fn in a SERIALIZABLE transaction as the loop does. told is
	// what the loop tells its caller (nil: the transfer is done); gaveUp
	// the error the loop gave up on, nil when its last attempt committed.
	run func(ctx context.Context, fn txFunc) (told, gaveUp error)
	// pgtx is pgtx's pool, for its statistics, and retries what its tracer
	// counted; nil for the other loops.
	pgtx    *pgtx.Pool
	retries *retryCounter
	close   func()
}

// newLoop opens the pool of the loop named key: workers connections to the
// server of dsn, through the fault proxy at proxyAddr unless it is "", with
// application_name app and schema as the search_path, so that the
// transfer's SQL finds the loop's own tables.
func newLoop(ctx context.Context, key, dsn, proxyAddr, app, schema string, workers int) (*loop, error) {
	edit := func(cc *pgconn.Config) error {
		cc.RuntimeParams["application_name"] = app
		cc.RuntimeParams["search_path"] = schema
		if proxyAddr == "" {
			return nil
		}
		return viaProxy(cc, proxyAddr)
	}
	if key == keyPgtx {
		return newPgtxLoop(ctx, dsn, workers, edit)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(workers)
	if err := edit(&cfg.ConnConfig.Config); err != nil {
		return nil, err
	}
	// The server-side net pgtx's pools have by default: no statement
	// waits for ever, whatever the loop.
	if _, set := cfg.ConnConfig.RuntimeParams["statement_timeout"]; !set {
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = "5s"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	opts := pgx.TxOptions{IsoLevel: pgx.Serializable}
	once := func(ctx context.Context, fn txFunc) error {
		return pgx.BeginTxFunc(ctx, pool, opts, func(tx pgx.Tx) error { return fn(ctx, tx) })
	}
	l := &loop{key: key, close: pool.Close}
	switch key {
	case keyNaive:
		l.name = "naive retry loop"
		l.does = fmt.Sprintf("pgx.BeginTxFunc, again at once after any error (at COMMIT too), %d runs in all;\n"+
			"then the error is swallowed (only logged), and the transfer reported done", naiveAttempts)
		l.run = func(ctx context.Context, fn txFunc) (error, error) {
			var err error
			for range naiveAttempts {
				if err = once(ctx, fn); err == nil {
					return nil, nil
				}
			}
			return nil, err // swallowed: such a loop only logs it (the demo counts it instead)
		}
	case keyBegin:
		l.name = "pgx.BeginTxFunc"
		l.does = "pgx.BeginTxFunc once, no retry: an error is reported as a failed transfer"
		l.run = func(ctx context.Context, fn txFunc) (error, error) {
			err := once(ctx, fn)
			return err, err
		}
	default:
		pool.Close()
		return nil, fmt.Errorf("no loop %q (want %s)", key, allLoops)
	}
	return l, nil
}

// newPgtxLoop opens the pgtx loop's pool; edit changes its connection
// configuration first.
func newPgtxLoop(ctx context.Context, dsn string, workers int, edit func(*pgconn.Config) error) (*loop, error) {
	cfg, err := pgtx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(workers)
	if err := edit(&cfg.ConnConfig.Config); err != nil {
		return nil, err
	}
	retries := &retryCounter{}
	cfg.Tracer = retries
	pool, err := pgtx.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	opts := pgtx.Options{Label: "transfer"}
	return &loop{
		key:  keyPgtx,
		name: "pgtx",
		does: "pgtx.Transaction: the whole transaction again after 40001/40P01, paced; cancelled on the\n" +
			"server at the deadline; a COMMIT whose answer was lost is asked about, never run again",
		run: func(ctx context.Context, fn txFunc) (error, error) {
			err := pgtx.TransactionWithOptions(ctx, pool, pgtx.Serializable, opts, fn)
			return err, err
		},
		pgtx:    pool,
		retries: retries,
		close:   pool.Close,
	}, nil
}

// retryCounter counts pgtx's retries by class; it is the pgtx pool's
// [pgtx.TransactionTracer].
type retryCounter struct {
	byClass [pgtx.ClassPermanent + 1]atomic.Int64
}

func (r *retryCounter) TraceTransactionStart(ctx context.Context, _ pgtx.TraceTransactionStartData) context.Context {
	return ctx
}

func (r *retryCounter) TraceTransactionEnd(context.Context, pgtx.TraceTransactionEndData) {}

func (r *retryCounter) TraceAttemptStart(ctx context.Context, _ pgtx.TraceAttemptStartData) context.Context {
	return ctx
}

func (r *retryCounter) TraceAttemptEnd(_ context.Context, d pgtx.TraceAttemptEndData) {
	if d.Retry && d.Class >= 0 && int(d.Class) < len(r.byClass) {
		r.byClass[d.Class].Add(1)
	}
}
