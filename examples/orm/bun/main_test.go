package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/examples/orm/internal/ormtest"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/uptrace/bun"
)

// TestMain checks for goroutines the tests leaked.
func TestMain(m *testing.M) { pgtxtest.Main(m) }

// newDB returns a *bun.DB on pool, closed when the test ends.
func newDB(t *testing.T, pool *pgtx.Pool) *bun.DB {
	t.Helper()
	db := openDB(pool)
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return db
}

func TestRun(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(context.Background(), pgtxtest.NewDatabase(t), &out); err != nil {
		t.Fatal(err)
	}
	if want := "balances [70 30]"; !strings.Contains(out.String(), want) {
		t.Errorf("output %q, want %q in it", out.String(), want)
	}
}

// TestTransferUnderInjected40001: the first COMMIT of every transaction
// fails with a serialization failure (40001) raised by the server. Bun's
// RunInTx runs the transfer once and returns the error: the transfer is lost
// unless the caller reruns it. runInTx reruns it, and it commits once.
func TestTransferUnderInjected40001(t *testing.T) {
	t.Parallel()
	serializable := &sql.TxOptions{Isolation: sql.LevelSerializable}
	tests := []struct {
		name     string
		runInTx  func(ctx context.Context, db *bun.DB, fn func(ctx context.Context, tx bun.Tx) error) error
		wantCode string // the error's SQLSTATE; "" for none
		wantRuns int
		want     []int64
	}{
		{
			name: "bun RunInTx",
			runInTx: func(ctx context.Context, db *bun.DB, fn func(ctx context.Context, tx bun.Tx) error) error {
				return db.RunInTx(ctx, serializable, fn)
			},
			wantCode: pgerrcode.SerializationFailure,
			wantRuns: 1,
			want:     []int64{100, 0},
		},
		{
			name: "pgtx runInTx",
			runInTx: func(ctx context.Context, db *bun.DB, fn func(ctx context.Context, tx bun.Tx) error) error {
				return runInTx(ctx, db, pgtx.Serializable, fn)
			},
			wantRuns: 2,
			want:     []int64{70, 30},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := newDB(t, pgtxtest.NewPool(t, pgtxtest.WithFailEveryCommitOnce(pgerrcode.SerializationFailure)))
			if err := createAccounts(ctx, db, 100, 0); err != nil {
				t.Fatal(err)
			}
			runs := 0
			err := tt.runInTx(ctx, db, func(ctx context.Context, tx bun.Tx) error {
				runs++
				return transfer(ctx, tx, 1, 2, 30)
			})
			if code := ormtest.SQLState(err); code != tt.wantCode {
				t.Errorf("err = %v, want SQLSTATE %q", err, tt.wantCode)
			}
			if runs != tt.wantRuns {
				t.Errorf("fn ran %d times, want %d", runs, tt.wantRuns)
			}
			got, err := balances(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("balances %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCancelOnTheServer: a context that ends a transaction during
// pg_sleep cancels the statement on the server, and the pool's one
// connection is kept: the same backend serves the next statement.
func TestCancelOnTheServer(t *testing.T) {
	t.Parallel()
	pool := pgtxtest.NewPool(t, pgtxtest.WithConfig(func(c *pgtx.Config) { c.MaxConns = 1 }))
	db := newDB(t, pool)
	var pid0 int
	if err := db.QueryRowContext(t.Context(), "select pg_backend_pid()").Scan(&pid0); err != nil {
		t.Fatal(err)
	}

	// The context ends once the statement runs on the server.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ormtest.CancelWhenRunning(t, pool, pid0, cancel)
	err := runInTx(ctx, db, pgtx.ReadCommitted, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.ExecContext(ctx, "select pg_sleep(30)")
		return err
	})
	if !errors.Is(err, context.Canceled) || ormtest.SQLState(err) != pgerrcode.QueryCanceled {
		t.Fatalf("err = %v, want context.Canceled with the server's 57014", err)
	}

	var pid int
	if err := db.QueryRowContext(t.Context(), "select pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	s := pool.Stats()
	t.Logf("cancels %+v, new connections %d", s.Cancels, s.Pool.NewConnsCount())
	if s.Cancels.SignalledCount != 1 || s.Cancels.ClosedCount != 0 {
		t.Errorf("cancels %+v, want one signalled and none closed", s.Cancels)
	}
	if n := s.Pool.NewConnsCount(); n != 1 || pid != pid0 {
		t.Errorf("new connections %d, backend %d then %d: the connection must be kept", n, pid0, pid)
	}
}
