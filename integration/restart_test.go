package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest"
)

// TestServerRestartRetried: the server restarts (fast shutdown: sessions end
// with 57P01; new connections are refused, then answered with 57P03 while it
// starts) under a pool with an idle connection. A Transaction started while
// the server is down runs again on fresh connections until it is back, and
// commits once; the retries are classified and reported to the tracer.
func TestServerRestartRetried(t *testing.T) {
	ctx := testCtx(t)
	srv := pgtxtest.Dedicated(t, pgtxtest.Options{})
	dsn := srv.DSN("")
	tr := &attemptTracer{}
	pool := newPool(t, dsn, func(c *pgtx.Config) {
		c.Tracer = tr
		// A restart takes longer than the default two overload retries
		// (0.3s of backoff on average) cover; give it up to ~3s.
		c.Retry.MaxAdaptiveRetries = 5
	})
	mustExec(t, ctx, pool, "create table t (id int primary key)")

	restarted := make(chan error, 1)
	go func() { restarted <- srv.Restart(ctx, 300*time.Millisecond) }()
	// Wait until the server is down, so the call starts against a dead
	// server and a dead idle connection.
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			break
		}
		_ = c.Close(ctx)
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
		// The dead idle connection is lost; a refused connect is a server
		// unavailable; one that reaches a starting server is its 57P03.
		if c != pgtx.ClassConnectionLost && c != pgtx.ClassUnavailable && c != pgtx.ClassOverload {
			t.Errorf("retried after %v; want connection_lost, unavailable or overload", c)
		}
	}
	if n := queryInt(t, ctx, directConn(t, dsn), "select count(*) from t"); n != 1 {
		t.Errorf("rows = %d, want 1", n)
	}
}
