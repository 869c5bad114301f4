package integration

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
)

func TestBadInputSendsNothing(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, newDB(t), nil)
	fn := func(context.Context, pgx.Tx) error { t.Error("fn ran"); return nil }
	tests := []struct {
		name string
		err  error
	}{
		{"zero isolation", pgtx.Transaction(ctx, pool, 0, fn)},
		{"unknown isolation", pgtx.Transaction(ctx, pool, pgtx.Isolation(17), fn)},
		{"nil pool", pgtx.Transaction(ctx, nil, pgtx.Serializable, fn)},
		{"nil fn", pgtx.Transaction(ctx, pool, pgtx.Serializable, nil)},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, pgtx.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", tt.name, tt.err)
		}
	}
	if n := pool.Stats().Pool.TotalConns(); n != 0 {
		t.Errorf("%d connections opened for bad input", n)
	}
}

func TestPanicRollsBackReleasesAndRepanics(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	pool := newPool(t, dsn, func(c *pgtx.Config) { c.MaxConns = 1 })
	mustExec(t, ctx, pool, "create table t (id int primary key)")
	type boom struct{ n int }
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_ = pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "insert into t values (1)"); err != nil {
				return err
			}
			panic(boom{n: 42})
		})
	}()
	if b, ok := recovered.(boom); !ok || b.n != 42 {
		t.Fatalf("recovered %#v, want the original panic value", recovered)
	}
	if n := queryInt(t, ctx, directConn(t, dsn), "select count(*) from t"); n != 0 {
		t.Errorf("rows = %d, want 0: a panic rolls back", n)
	}
	if s := pool.Stats().Pool; s.AcquiredConns() != 0 {
		t.Errorf("acquired = %d: the connection was not released", s.AcquiredConns())
	}
	// The only connection is usable again: the pool is not stuck.
	if err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "insert into t values (2)")
		return err
	}); err != nil {
		t.Fatalf("after the panic: %v", err)
	}
}

func TestAcquireTimeout(t *testing.T) {
	ctx := testCtx(t)
	acquires := &acquireRecorder{}
	pool := newPool(t, newDB(t), func(c *pgtx.Config) {
		c.MaxConns = 1
		c.AcquireTimeout = 200 * time.Millisecond
		c.ConnConfig.Tracer = acquires
	})
	held, err := pool.Pgxpool().Acquire(ctx) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}
	fn := func(context.Context, pgx.Tx) error { t.Error("fn ran without a connection"); return nil }

	// Every kind of caller's context, each bounded by the acquire timeout
	// in its own way (see acquireBounded).
	contexts := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"deadline later than the acquire timeout", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.WithValue(ctx, acquireKey{}, "deadline"), time.Minute)
		}},
		{"cancellable, no deadline", func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.WithValue(context.Background(), acquireKey{}, "cancellable"))
		}},
		{"cannot be cancelled", func() (context.Context, context.CancelFunc) {
			return context.WithValue(context.Background(), acquireKey{}, "background"), func() {}
		}},
	}
	for _, c := range contexts {
		t.Run("acquire timeout fires: "+c.name, func(t *testing.T) {
			cctx, cancel := c.ctx()
			defer cancel()
			before := pool.Stats().Pool.CanceledAcquireCount()
			start := time.Now()
			err := pgtx.Transaction(cctx, pool, pgtx.ReadCommitted, fn)
			if !errors.Is(err, pgtx.ErrAcquireTimeout) {
				t.Fatalf("err = %v, want ErrAcquireTimeout", err)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v must not claim the caller's deadline passed", err)
			}
			if time.Since(start) < 200*time.Millisecond {
				t.Errorf("returned before the acquire timeout")
			}
			if n := pool.Stats().Pool.CanceledAcquireCount() - before; n != 1 {
				t.Errorf("acquire attempts = %d, want 1: an acquire timeout is not retried", n)
			}
			if got := acquires.last(); got.value != cctx.Value(acquireKey{}) || !got.hasDeadline {
				t.Errorf("the pool's acquire tracer saw value %v, deadline %v; want the caller's value and the acquire's deadline", got.value, got.hasDeadline)
			}
		})
	}
	t.Run("caller's deadline first: the context error wins", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		err := pgtx.Transaction(cctx, pool, pgtx.ReadCommitted, fn)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, pgtx.ErrAcquireTimeout) {
			t.Fatalf("err = %v, want context.DeadlineExceeded and not ErrAcquireTimeout", err)
		}
	})
	t.Run("caller cancels during the wait: the context error wins", func(t *testing.T) {
		cctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		waiting := make(chan struct{})
		acquires.callOnStart(func() { close(waiting) })
		go func() { <-waiting; cancel() }()
		err := pgtx.Transaction(cctx, pool, pgtx.ReadCommitted, fn)
		if !errors.Is(err, context.Canceled) || errors.Is(err, pgtx.ErrAcquireTimeout) {
			t.Fatalf("err = %v, want context.Canceled and not ErrAcquireTimeout", err)
		}
	})
	// The contexts the timeouts above ended are never used again: with the
	// connection free, every kind of context acquires at once, repeatedly.
	held.Release()
	for _, c := range contexts {
		t.Run("acquires once free: "+c.name, func(t *testing.T) {
			for range 20 {
				cctx, cancel := c.ctx()
				err := pgtx.Transaction(cctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "select 1")
					return err
				})
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

type acquireKey struct{}

// acquireRecorder is a pgx tracer that is also a pgxpool.AcquireTracer: it
// records what the context of the pool's last acquire carried, and can call
// a function once when an acquire starts.
type acquireRecorder struct {
	mu        sync.Mutex
	seen      acquireSeen
	startHook func()
}

type acquireSeen struct {
	value       any
	hasDeadline bool
}

func (r *acquireRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (r *acquireRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *acquireRecorder) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	_, ok := ctx.Deadline()
	r.mu.Lock()
	r.seen = acquireSeen{value: ctx.Value(acquireKey{}), hasDeadline: ok}
	f := r.startHook
	r.startHook = nil
	r.mu.Unlock()
	if f != nil {
		f()
	}
	return ctx
}

func (r *acquireRecorder) TraceAcquireEnd(context.Context, *pgxpool.Pool, pgxpool.TraceAcquireEndData) {
}

func (r *acquireRecorder) last() acquireSeen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen
}

func (r *acquireRecorder) callOnStart(f func()) {
	r.mu.Lock()
	r.startHook = f
	r.mu.Unlock()
}

// TestContextEndedCallMatchesCtxErr: when the caller's context ends the call
// mid-statement, errors.Is(err, ctx.Err()) holds and it is not retried.
func TestContextEndedCallMatchesCtxErr(t *testing.T) {
	pool := newPool(t, newDB(t), nil)
	// The connection is made first: on a loaded machine a connect can
	// outlast the 200ms the calls below have, and fn would never run.
	if err := pool.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(testCtx(t), 200*time.Millisecond)
		}, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(testCtx(t))
			time.AfterFunc(200*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			var attempts counter
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				attempts.inc()
				_, err := tx.Exec(ctx, "select pg_sleep(3)")
				return err
			})
			if !errors.Is(err, tt.want) || !errors.Is(err, ctx.Err()) {
				t.Fatalf("err = %v, want errors.Is(err, %v)", err, tt.want)
			}
			if attempts.get() != 1 {
				t.Errorf("attempts = %d, want 1", attempts.get())
			}
		})
	}
}

// TestRollbackSurvivesCancelledContext: fn fails after the caller's context
// was cancelled; the rollback still runs (on a context the cancellation
// cannot interrupt) and the connection goes back to the pool, not closed.
// The caller's error keeps its identity and class: the cancellation did not
// end the call, fn's error did.
func TestRollbackSurvivesCancelledContext(t *testing.T) {
	dsn := newDB(t)
	pool := newPool(t, dsn, func(c *pgtx.Config) { c.MaxConns = 1 })
	mustExec(t, testCtx(t), pool, "create table t (id int primary key)")
	if err := pool.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	errGaveUp := errors.New("caller gave up")
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "insert into t values (1)"); err != nil {
			return err
		}
		cancel()
		return errGaveUp
	})
	if !errors.Is(err, errGaveUp) || errors.Is(err, context.Canceled) || pgtx.Classify(err) != pgtx.ClassPermanent {
		t.Fatalf("err = %v, want the caller's own (permanent) error, not context.Canceled", err)
	}
	if n := queryInt(t, testCtx(t), directConn(t, dsn), "select count(*) from t"); n != 0 {
		t.Errorf("rows = %d, want 0", n)
	}
	s := pool.Stats().Pool
	if s.TotalConns() != 1 || s.NewConnsCount() != 1 || s.AcquiredConns() != 0 {
		t.Errorf("total = %d, new = %d, acquired = %d: the connection must survive the dead context", s.TotalConns(), s.NewConnsCount(), s.AcquiredConns())
	}
}

func TestTransactionModes(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, newDB(t), nil)
	mustExec(t, ctx, pool, "create table t (id int primary key)")
	tests := []struct {
		name                          string
		iso                           pgtx.Isolation
		opts                          pgtx.Options
		wantIso, wantRO, wantDeferred string
	}{
		{"read committed", pgtx.ReadCommitted, pgtx.Options{}, "read committed", "off", "off"},
		{"repeatable read", pgtx.RepeatableRead, pgtx.Options{}, "repeatable read", "off", "off"},
		{"serializable", pgtx.Serializable, pgtx.Options{}, "serializable", "off", "off"},
		{"serializable read only deferrable", pgtx.Serializable, pgtx.Options{ReadOnly: true, Deferrable: true}, "serializable", "on", "on"},
		{"repeatable read read only with timeout", pgtx.RepeatableRead, pgtx.Options{ReadOnly: true, StatementTimeout: time.Second}, "repeatable read", "on", "off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := pgtx.TransactionWithOptions(ctx, pool, tt.iso, tt.opts, func(ctx context.Context, tx pgx.Tx) error {
				var iso, ro, def string
				err := tx.QueryRow(ctx, "select current_setting('transaction_isolation'), current_setting('transaction_read_only'), current_setting('transaction_deferrable')").Scan(&iso, &ro, &def)
				if err != nil {
					return err
				}
				if iso != tt.wantIso || ro != tt.wantRO || def != tt.wantDeferred {
					t.Errorf("got %s/%s/%s, want %s/%s/%s", iso, ro, def, tt.wantIso, tt.wantRO, tt.wantDeferred)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("read-only write fails with 25006, not retried", func(t *testing.T) {
		var attempts counter
		err := pgtx.TransactionWithOptions(ctx, pool, pgtx.ReadCommitted, pgtx.Options{ReadOnly: true}, func(ctx context.Context, tx pgx.Tx) error {
			attempts.inc()
			_, err := tx.Exec(ctx, "insert into t values (1)")
			return err
		})
		if sqlState(err) != "25006" || attempts.get() != 1 {
			t.Errorf("err = %v, attempts = %d; want 25006 once", err, attempts.get())
		}
	})
	t.Run("per-call MaxRetries", func(t *testing.T) {
		var attempts counter
		err := pgtx.TransactionWithOptions(ctx, pool, pgtx.Serializable, pgtx.Options{MaxRetries: 2, Label: "capped"}, func(ctx context.Context, tx pgx.Tx) error {
			attempts.inc()
			_, err := tx.Exec(ctx, raise("40P01"))
			return err
		})
		if sqlState(err) != "40P01" || attempts.get() != 3 {
			t.Errorf("err = %v, attempts = %d; want 40P01 after 3 attempts", err, attempts.get())
		}
	})
}

// TestLostIdleConnectionRetried: the server ends the pool's idle connection
// (pg_terminate_backend, as a restart or failover would); the next
// Transaction finds it dead at BEGIN and runs on a fresh connection.
func TestLostIdleConnectionRetried(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	pool := newPool(t, dsn, func(c *pgtx.Config) { c.MaxConns = 1 })
	mustExec(t, ctx, pool, "create table t (id int primary key)")
	var pid int
	if err := pool.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	admin := directConn(t, dsn)
	if _, err := admin.Exec(ctx, "select pg_terminate_backend($1, 5000)", pid); err != nil {
		t.Fatal(err)
	}
	var attempts counter
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		attempts.inc()
		_, err := tx.Exec(ctx, "insert into t values (1)")
		return err
	})
	if err != nil {
		t.Fatalf("err = %v: a connection lost before COMMIT must be retried", err)
	}
	if n := queryInt(t, ctx, admin, "select count(*) from t"); n != 1 {
		t.Errorf("rows = %d, want 1", n)
	}
}

// TestPoolCloseAfterAcquiresThatConnected: an acquire hands its context to
// the connect when it opens a connection, and to the caller's hooks; a
// context derived from it there (by an AfterConnect, say) lives on after the
// acquire has returned, and when Close ends the pool's own context the
// context package's goroutine for it asks the acquire's context for its
// cause. Reusing that context for a later acquire, or clearing it, would
// show such a goroutine another call's context, or none at all.
func TestPoolCloseAfterAcquiresThatConnected(t *testing.T) {
	dsn := newDB(t)
	work := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "select 1")
		return err
	}
	var (
		mu      sync.Mutex
		derived []context.CancelFunc
	)
	keep := func(ctx context.Context) { // derives a context kept until the test ends
		_, cancel := context.WithCancel(ctx)
		mu.Lock()
		derived = append(derived, cancel)
		mu.Unlock()
	}
	t.Cleanup(func() {
		for _, cancel := range derived {
			cancel()
		}
	})
	hooks := []struct {
		name string
		set  func(*pgtx.Config)
	}{
		{"AfterConnect", func(c *pgtx.Config) {
			c.AfterConnect = func(ctx context.Context, _ *pgx.Conn) error { keep(ctx); return nil }
		}},
		{"PrepareConn", func(c *pgtx.Config) {
			c.PrepareConn = func(ctx context.Context, _ *pgx.Conn) (bool, error) { keep(ctx); return true, nil }
		}},
		{"ShouldPing", func(c *pgtx.Config) {
			c.ShouldPing = func(ctx context.Context, _ pgxpool.ShouldPingParams) bool { keep(ctx); return false }
		}},
		{"AcquireTracer", func(c *pgtx.Config) { c.ConnConfig.Tracer = &keepingTracer{keep: keep} }},
	}
	for _, h := range hooks {
		t.Run(h.name, func(t *testing.T) {
			for range 10 {
				pool := newPool(t, dsn, func(c *pgtx.Config) {
					c.MaxConns = 2
					h.set(c)
				})
				var wg sync.WaitGroup
				for range 2 {
					wg.Go(func() {
						// A cancellable context with a deadline later than the
						// acquire timeout: the acquire gets a context of pgtx's own.
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						defer cancel()
						for range 3 {
							if err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, work); err != nil {
								t.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				pool.Close()
			}
		})
	}
}

// keepingTracer is a pgxpool.AcquireTracer that keeps a context derived from
// every acquire's.
type keepingTracer struct{ keep func(context.Context) }

func (k *keepingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (k *keepingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (k *keepingTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	k.keep(ctx)
	return ctx
}
func (k *keepingTracer) TraceAcquireEnd(context.Context, *pgxpool.Pool, pgxpool.TraceAcquireEndData) {
}
