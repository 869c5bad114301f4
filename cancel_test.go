package pgtx

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
)

// TestCancelNeverSignalsAStranger: the cancel query is aimed at a live
// backend's pid with a backend_start that is not its own (what a recycled pid
// looks like). Nothing is signalled and that backend's statement runs to its
// end; with the right backend_start the same call cancels it.
func TestCancelNeverSignalsAStranger(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := serverDSN(t)
	pool, err := New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	stranger, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stranger.Close(context.Background()) })
	var pid uint32
	var start time.Time
	if err := stranger.QueryRow(ctx, "select pid, backend_start from pg_stat_activity where pid = pg_backend_pid()").Scan(&pid, &start); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name         string
		backendStart time.Time
		wantCanceled bool
	}{
		{"recycled pid: backend_start differs", start.Add(-time.Second), false},
		{"the same backend", start, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			running := make(chan error, 1)
			go func() {
				_, err := stranger.Exec(ctx, "select pg_sleep(0.5)")
				running <- err
			}()
			waitActive(t, ctx, pool, pid)
			before := pool.Stats().Cancels
			res := pool.cancel.viaPool(ctx, pid, tt.backendStart.UnixMicro())
			if want := map[bool]poolResult{true: poolSignalled, false: poolNotFound}[tt.wantCanceled]; res != want {
				t.Fatalf("viaPool: %v, want %v", res, want)
			}
			err = <-running
			if canceled := sqlState(err) == pgerrcode.QueryCanceled; canceled != tt.wantCanceled {
				t.Errorf("stranger's statement: err = %v, want canceled %v", err, tt.wantCanceled)
			}
			after := pool.Stats().Cancels
			if tt.wantCanceled && after.SignalledCount != before.SignalledCount+1 {
				t.Errorf("Signalled %d -> %d, want +1", before.SignalledCount, after.SignalledCount)
			}
			if !tt.wantCanceled && (after.NotFoundCount != before.NotFoundCount+1 || after.SignalledCount != before.SignalledCount) {
				t.Errorf("NotFound %d -> %d, Signalled %d -> %d; want NotFound +1 and no signal", before.NotFoundCount, after.NotFoundCount, before.SignalledCount, after.SignalledCount)
			}
		})
	}
}

// waitActive polls (bounded) until the backend pid runs a statement.
func waitActive(t *testing.T, ctx context.Context, pool *Pool, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var state string
		err := pool.QueryRow(ctx, "select state from pg_stat_activity where pid = $1", pid).Scan(&state)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if state == "active" {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("backend %d never became active", pid)
}

// TestCancelWithoutIdentityCloses: a connection not yet set up (cancelled
// while connecting, before its identity is known) is closed, never
// cancelled by pid alone.
func TestCancelWithoutIdentityCloses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := New(ctx, serverDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	conn, err := pool.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	h := conn.Conn().PgConn().CustomData()[customDataKey].(*cancelHandler)
	if h.backendStart.Load() == 0 || !h.direct.Load() || !h.ready.Load() {
		t.Fatal("identity was not captured at connect")
	}
	h.ready.Store(false) // as while the connection is being set up
	qctx, qcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer qcancel()
	_, err = conn.Exec(qctx, "select pg_sleep(5)")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the deadline", err)
	}
	if !conn.Conn().IsClosed() {
		t.Errorf("the connection must be closed, not cancelled by pid alone")
	}
	if s := pool.Stats().Cancels; s.SentCount != 0 || s.ClosedCount != 1 {
		t.Errorf("cancels = %+v, want none sent and one close", s)
	}
}
