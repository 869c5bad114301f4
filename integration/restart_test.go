package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/integration/internal/itest"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// TestServerRestartRetried: the server restarts (fast shutdown: sessions end
// with 57P01; new connections are refused, then answered with 57P03 while it
// starts) under a pool with an idle connection and the default retry
// policy. A Transaction started while the server is down runs again on fresh
// connections until it is back (an unavailable server is retried until the
// deadline, not MaxAdaptiveRetries times), and commits once; the retries are
// classified and reported to the tracer.
func TestServerRestartRetried(t *testing.T) {
	ctx := testCtx(t)
	srv := server.New(t, nil)
	dsn := srv.DSN("")
	tr := &attemptTracer{}
	pool := newPool(t, dsn, func(c *pgtx.Config) { c.Tracer = tr })
	mustExec(t, ctx, pool, "create table t (id int primary key)")

	restarted := make(chan error, 1)
	go func() { restarted <- srv.Restart(ctx, 300*time.Millisecond) }()
	// Wait until the server is down (it refuses connections; while it
	// shuts down it answers 57P03), so the call starts against
	// a dead server and a dead idle connection.
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := pgx.Connect(ctx, dsn)
		if errors.Is(err, syscall.ECONNREFUSED) {
			break
		}
		if err == nil {
			_ = c.Close(ctx)
		}
		if time.Now().After(deadline) {
			t.Fatal("the server never went down")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var runs counter
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		runs.inc()
		_, err := tx.Exec(ctx, "insert into t values (1)")
		return err
	})
	if rerr := <-restarted; rerr != nil {
		t.Fatalf("restart: %v", rerr)
	}
	if err != nil {
		t.Fatalf("err = %v: a call during a restart must be retried until the server is back", err)
	}
	tr.mu.Lock()
	classes := append([]pgtx.Class(nil), tr.classes...)
	tr.mu.Unlock()
	t.Logf("attempts %d, classes %v", tr.attempts.Load(), classes)
	if len(classes) < 2 {
		t.Errorf("attempts %v: the call must have been retried", classes)
	}
	for _, c := range classes[:len(classes)-1] {
		// The dead idle connection is lost; a refused connect, and one
		// that reaches a starting server (57P03), is a server unavailable.
		if c != pgtx.ClassConnectionLost && c != pgtx.ClassUnavailable {
			t.Errorf("retried after %v; want connection_lost or unavailable", c)
		}
	}
	if n := queryInt(t, ctx, directConn(t, dsn), "select count(*) from t"); n != 1 {
		t.Errorf("rows = %d, want 1", n)
	}
}

// TestCrashRestartRiddenOut: eight workers insert unique ids, each call
// under a 10s deadline and the default retry policy, while the server
// crashes (immediate shutdown: no checkpoint, crash recovery at start) and
// comes back in place 2.5s later. No call fails because the server was
// unreachable: each commits, or (when the crash took a COMMIT's answer and
// its outcome could not be proved) matches ErrCommitUnknown; every success
// is in the table exactly once.
func TestCrashRestartRiddenOut(t *testing.T) {
	if testing.Short() {
		t.Skip("crashes and restarts a server")
	}
	const (
		workers  = 8
		downtime = 2500 * time.Millisecond
	)
	ctx := testCtx(t)
	// The harness turns synchronous_commit off for speed; a crash would
	// then lose commits already acknowledged.
	srv := server.New(t, &server.Config{Settings: map[string]string{"synchronous_commit": "on"}})
	dsn := srv.DSN("")
	pool := newPool(t, dsn, func(c *pgtx.Config) { c.MaxConns = workers })
	mustExec(t, ctx, pool, "create table ledger (id text primary key)")

	stop := make(chan struct{})
	results := make([][]ledgerCall, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { results[w] = ledgerWriter(ctx, pool, "", w, stop) })
	}
	time.Sleep(500 * time.Millisecond)
	crashErr := srv.Crash(ctx)
	if crashErr == nil {
		time.Sleep(downtime)
		crashErr = srv.Start(ctx)
	}
	if crashErr == nil {
		time.Sleep(time.Second)
	}
	close(stop)
	wg.Wait()
	if crashErr != nil {
		t.Fatal(crashErr)
	}

	calls := slices.Concat(results...)
	ok, unknown, sentLost, startingUp := 0, 0, 0, 0
	for _, r := range calls {
		switch {
		case r.err == nil:
			ok++
		case errors.Is(r.err, pgtx.ErrCommitUnknown):
			unknown++
		case r.plain && pgtx.Classify(r.err) == pgtx.ClassConnectionLost:
			// A plain statement sent when the crash came: it may have been
			// applied, and is not sent again.
			sentLost++
		default:
			// 57P03 ("the database system is starting up" while crash
			// recovery runs) is the server's lifecycle, ridden out as a
			// refusal is: it ends no call before its deadline.
			if sqlState(r.err) == "57P03" {
				startingUp++
			}
			t.Errorf("%s: %v (class %v): a call during a crash restart must ride it out", r.id, r.err, pgtx.Classify(r.err))
		}
	}
	present := ledgerIDs(t, ctx, directConn(t, dsn))
	for _, r := range calls {
		if r.err == nil && present[r.id] != 1 {
			t.Errorf("%s succeeded but is in the table %d times", r.id, present[r.id])
		}
	}
	t.Logf("%d calls: %d committed, %d with an unknown outcome, %d plain statements lost after they were sent, %d failed on 57P03 while the server started up",
		len(calls), ok, unknown, sentLost, startingUp)
}

// TestPlainStatementsAfterARestart: the server restarts under a pool whose
// connections are idle, and is back before the next statements. Each idle
// connection holds the FATAL the shutdown sent it (57P01) and its close;
// the pool sees that before it sends anything and connects anew, so each
// query method (Exec, Query, QueryRow, SendBatch, CopyFrom) succeeds, and
// a Transaction runs fn once.
func TestPlainStatementsAfterARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a server of its own")
	}
	const conns = 4
	ctx := testCtx(t)
	srv := server.New(t, nil)
	dsn := srv.DSN("")
	pool := newPool(t, dsn, func(c *pgtx.Config) { c.MaxConns = conns })
	mustExec(t, ctx, pool, "create table sink (v int)")
	methods := append(poolMethods(pool), namedCall{
		"Transaction", func(ctx context.Context) error {
			runs := 0
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				runs++
				_, err := tx.Exec(ctx, "insert into sink values (6)")
				return err
			})
			if err == nil && runs != 1 {
				return fmt.Errorf("fn ran %d times, want once", runs)
			}
			return err
		}})
	for _, m := range methods {
		t.Run(m.name, func(t *testing.T) {
			itest.FillIdle(t, ctx, pool, conns)
			if err := srv.Restart(ctx, 0); err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := m.run(cctx); err != nil {
				t.Errorf("%s after the restart: %v", m.name, err)
			}
		})
	}
	if n := queryInt(t, ctx, directConn(t, dsn), "select count(*) from sink"); n != len(methods) {
		t.Errorf("rows = %d, want %d: each statement ran once", n, len(methods))
	}
}
