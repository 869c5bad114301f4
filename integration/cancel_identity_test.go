package integration

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/internal/cancelquery"
	"github.com/pgtx-go/pgtx/pgtxtest"
)

// TestCancelQueryNeverSignalsAStranger: the statement pgtx's cancel pool
// sends, aimed at a live backend's pid with a backend_start that is not its
// own (what a recycled pid looks like), signals nothing, and that backend's
// statement runs to its end; with the right backend_start the same
// statement cancels it. Its variant for Pgpool-II signals an idle backend
// not at all.
func TestCancelQueryNeverSignalsAStranger(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := pgtxtest.NewDatabase(t)
	stranger, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stranger.Close(context.Background()) })
	canceller, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = canceller.Close(context.Background()) })
	var pid uint32
	var start int64 // unix microseconds, as pgtx's probe reads it
	if err := stranger.QueryRow(ctx, "select pid, round(extract(epoch from backend_start) * 1000000)::int8 from pg_stat_get_activity(pg_backend_pid())",
		pgx.QueryExecModeSimpleProtocol).Scan(&pid, &start); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name         string
		backendStart int64
		wantCanceled bool
	}{
		{"recycled pid: backend_start differs", start - int64(time.Second/time.Microsecond), false},
		{"the same backend", start, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			running := make(chan error, 1)
			go func() {
				_, err := stranger.Exec(ctx, "select pg_sleep(0.5)")
				running <- err
			}()
			waitBackendActive(t, ctx, canceller, pid)
			var visible, ours, signalled bool
			if err := canceller.QueryRow(ctx, cancelquery.Cancel, pgx.QueryExecModeExec, int64(pid), tt.backendStart).Scan(&visible, &ours, &signalled); err != nil {
				t.Fatal(err)
			}
			if !visible || ours != tt.wantCanceled || signalled != tt.wantCanceled {
				t.Errorf("visible %v, ours %v, signalled %v; want visible, ours and signalled %v", visible, ours, signalled, tt.wantCanceled)
			}
			err := <-running
			var pgErr *pgconn.PgError
			if canceled := errors.As(err, &pgErr) && pgErr.Code == pgerrcode.QueryCanceled; canceled != tt.wantCanceled {
				t.Errorf("stranger's statement: err = %v, want canceled %v", err, tt.wantCanceled)
			}
		})
	}
	// Behind Pgpool-II the primary's backend is signalled only while it
	// runs a statement: an idle one is ours, and not signalled.
	var visible, ours, signalled bool
	if err := canceller.QueryRow(ctx, cancelquery.CancelActive, pgx.QueryExecModeExec, int64(pid), start).Scan(&visible, &ours, &signalled); err != nil {
		t.Fatal(err)
	}
	if !visible || !ours || signalled {
		t.Errorf("an idle backend: visible %v, ours %v, signalled %v; want visible, ours, not signalled", visible, ours, signalled)
	}
	err = canceller.QueryRow(ctx, cancelquery.Cancel, pgx.QueryExecModeExec, int64(1<<22+7), start).Scan(&visible, &ours, &signalled)
	if !errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("no backend with the pid: err = %v, want no row", err)
	}
}

// waitBackendActive polls (bounded) until the backend pid runs a statement.
func waitBackendActive(t *testing.T, ctx context.Context, conn *pgx.Conn, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var state string
		err := conn.QueryRow(ctx, "select state from pg_stat_activity where pid = $1", pid).Scan(&state)
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

// TestCancelWhileConnectingCloses: a connection whose connect is cancelled
// while it is being set up, before pgtx knows its backend's identity, is
// closed, never cancelled by pid alone. The connection is held in a hook of
// the caller's (pgconn's AfterConnect, which runs before pgtx's) by a
// statement that would run for 5s; pgxpool connects on a context of its own,
// which Close cancels.
func TestCancelWhileConnectingCloses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := pgtxtest.NewDatabase(t)
	cfg, err := pgtx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// The cancel pool's connections run the hook too (it is part of the
	// connection's config); only the main pool's, named by their
	// application_name, are held.
	cfg.ConnConfig.RuntimeParams["application_name"] = "held"
	var hold atomic.Bool
	cfg.ConnConfig.AfterConnect = func(ctx context.Context, c *pgconn.PgConn) error {
		if !hold.Load() || c.ParameterStatus("application_name") != "held" {
			return nil
		}
		_, err := c.Exec(ctx, "select pg_sleep(5) /* held while connecting */").ReadAll()
		return err
	}
	pool, err := pgtx.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			pool.Close()
		}
	})
	check, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close(context.Background())
	held := func() int {
		t.Helper()
		var n int
		if err := check.QueryRow(ctx, "select count(*) from pg_stat_activity where query like '%held while connecting%' and pid <> pg_backend_pid() and state = 'active'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	hold.Store(true)
	qctx, qcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer qcancel()
	if _, err := pool.Exec(qctx, "select 1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the deadline", err)
	}
	for deadline := time.Now().Add(5 * time.Second); held() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the connect never reached the held statement")
		}
		time.Sleep(5 * time.Millisecond)
	}
	began := time.Now()
	pool.Close() // cancels the connect
	closed = true
	if took := time.Since(began); took > time.Second {
		t.Errorf("Close took %v: the statement held in the connect must not be waited for", took)
	}
	if s := pool.Stats().Cancels; s.SentCount != 0 || s.ClosedCount != 1 {
		t.Errorf("cancels = %+v, want none sent and one connection closed", s)
	}
	// The server ends the backend once its client is gone; nothing of it
	// keeps running.
	for deadline := time.Now().Add(10 * time.Second); held() != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the held statement still runs 10s after its connection was closed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
