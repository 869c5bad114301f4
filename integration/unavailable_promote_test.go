package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// TestNoReadWriteHostUntilPromoted: the connection string names only a
// standby, with target_session_attrs=read-write, as a formation's URI does
// while its primary is gone and its standby not yet promoted. Every connect
// reaches a server and is refused for being read-only: the server is
// unavailable, not a permanent error, and a call rides it out until the
// standby is promoted, within its deadline.
func TestNoReadWriteHostUntilPromoted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	ctx := testCtx(t)
	primary, standby, dsn := serverPair(t, nil)
	mustExec(t, ctx, directConn(t, dsn), "create table ledger (id text primary key)")
	standbyDSN, err := server.DSNWithAddr(dsn, standby.Addr())
	if err != nil {
		t.Fatal(err)
	}
	waitTable(t, ctx, standbyDSN, "ledger")
	readWrite := standbyDSN + "&target_session_attrs=read-write"

	_, err = pgx.Connect(ctx, readWrite)
	if err == nil || pgtx.Classify(err) != pgtx.ClassUnavailable {
		t.Fatalf("connect to a standby for writes: err = %v, class %v; want unavailable", err, pgtx.Classify(err))
	}

	refused := make(chan struct{})
	var once sync.Once
	tr := &attemptTracer{onEnd: func(d pgtx.TraceAttemptEndData) {
		if d.Class == pgtx.ClassUnavailable && d.Retry {
			once.Do(func() { close(refused) })
		}
	}}
	pool := newPool(t, readWrite, func(c *pgtx.Config) {
		c.MaxConns = 2
		c.Tracer = tr
	})
	done := make(chan error, 1)
	var runs counter
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		done <- pgtx.Transaction(cctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			runs.inc()
			_, err := tx.Exec(ctx, "insert into ledger values ('after the promotion')")
			return err
		})
	}()
	// The call is refused, and retried, before the promotion.
	select {
	case err := <-done:
		t.Fatalf("the call ended before the promotion: %v", err)
	case <-refused:
	}
	if err := primary.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || runs.get() != 1 {
		t.Fatalf("err = %v, fn ran %d times; want the call to ride out the promotion and commit once", err, runs.get())
	}
	if n := queryInt(t, ctx, directConn(t, standbyDSN), "select count(*) from ledger"); n != 1 {
		t.Errorf("rows %d on the promoted standby, want 1", n)
	}
	if err := primary.Start(ctx); err != nil { // for the cleanup's drop of the database
		t.Errorf("start the old primary again: %v", err)
	}
}
