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
	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/examples/orm/ent/ent"
	"github.com/pgtx-go/pgtx/examples/orm/internal/ormtest"
	"github.com/pgtx-go/pgtx/pgtxtest"
)

// TestMain checks for goroutines the tests leaked.
func TestMain(m *testing.M) { pgtxtest.Main(m) }

// withSchema gives a test's database the client's schema, made by
// client.Schema.Create once in the template database. Change its key when
// ./ent/schema changes.
var withSchema = pgtxtest.WithMigrate("ent schema: accounts v1", func(ctx context.Context, conn *pgx.Conn) error {
	pool, err := pgtx.New(ctx, conn.Config().ConnString())
	if err != nil {
		return err
	}
	defer pool.Close()
	client, _ := openClient(pool)
	defer client.Close()
	return client.Schema.Create(ctx)
})

// newClient returns an ent client on a pool of a fresh database with the
// schema, closed when the test ends, and the *sql.DB its driver is on.
func newClient(t *testing.T, opts ...pgtxtest.PoolOption) (*pgtx.Pool, *ent.Client, *sql.DB) {
	t.Helper()
	pool := pgtxtest.NewPool(t, append(opts, withSchema)...)
	client, db := openClient(pool)
	t.Cleanup(func() {
		if err := client.Close(); err != nil {
			t.Error(err)
		}
	})
	return pool, client, db
}

// entWithTx is the WithTx helper of ent's documentation: fn runs once in
// a transaction of client's, rolled back when fn fails, else committed.
func entWithTx(ctx context.Context, client *ent.Client, fn func(ctx context.Context, tx *ent.Tx) error) error {
	tx, err := client.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
	if err != nil {
		return err
	}
	if err := fn(ctx, tx); err != nil {
		if rerr := tx.Rollback(); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return err
	}
	return tx.Commit()
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
// fails with a serialization failure (40001) raised by the server. ent's
// client.Tx and Commit, as its WithTx helper runs them, run the transfer once
// and return the error: the transfer is lost unless the caller reruns it.
// withTx reruns it through pgtxsql.Run, and it commits once.
func TestTransferUnderInjected40001(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		withTx   func(ctx context.Context, db *sql.DB, client *ent.Client, fn func(ctx context.Context, tx *ent.Tx) error) error
		wantCode string // the error's SQLSTATE; "" for none
		wantRuns int
		want     []int64
	}{
		{
			name: "ent client.Tx",
			withTx: func(ctx context.Context, _ *sql.DB, client *ent.Client, fn func(ctx context.Context, tx *ent.Tx) error) error {
				return entWithTx(ctx, client, fn)
			},
			wantCode: pgerrcode.SerializationFailure,
			wantRuns: 1,
			want:     []int64{100, 0},
		},
		{
			name: "pgtx withTx",
			withTx: func(ctx context.Context, db *sql.DB, client *ent.Client, fn func(ctx context.Context, tx *ent.Tx) error) error {
				return withTx(ctx, db, client, pgtx.Serializable, fn)
			},
			wantRuns: 2,
			want:     []int64{70, 30},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			_, client, db := newClient(t, pgtxtest.WithFailEveryCommitOnce(pgerrcode.SerializationFailure))
			ids, err := createAccounts(ctx, client, 100, 0)
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			err = tt.withTx(ctx, db, client, func(ctx context.Context, tx *ent.Tx) error {
				runs++
				return transfer(ctx, tx, ids[0], ids[1], 30)
			})
			if code := ormtest.SQLState(err); code != tt.wantCode {
				t.Errorf("err = %v, want SQLSTATE %q", err, tt.wantCode)
			}
			if runs != tt.wantRuns {
				t.Errorf("fn ran %d times, want %d", runs, tt.wantRuns)
			}
			got, err := balances(ctx, client, ids...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("balances %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCancelOnTheServer: a context that ends the client's
// transaction during pg_sleep cancels the statement on the server, and the
// pool's one connection is kept: the same backend serves the next statement.
func TestCancelOnTheServer(t *testing.T) {
	t.Parallel()
	pool, client, db := newClient(t, pgtxtest.WithConfig(func(c *pgtx.Config) { c.MaxConns = 1 }))
	pid0 := backendPID(t, db)

	// The context ends once the statement runs on the server.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ormtest.CancelWhenRunning(t, pool, pid0, cancel)
	err := withTx(ctx, db, client, pgtx.ReadCommitted, func(ctx context.Context, tx *ent.Tx) error {
		_, err := tx.ExecContext(ctx, "select pg_sleep(30)")
		return err
	})
	if !errors.Is(err, context.Canceled) || ormtest.SQLState(err) != pgerrcode.QueryCanceled {
		t.Fatalf("err = %v, want context.Canceled with the server's 57014", err)
	}

	pid := backendPID(t, db)
	s := pool.Stats()
	t.Logf("cancels %+v, new connections %d", s.Cancels, s.Pool.NewConnsCount())
	if s.Cancels.SignalledCount != 1 || s.Cancels.ClosedCount != 0 {
		t.Errorf("cancels %+v, want one signalled and none closed", s.Cancels)
	}
	if n := s.Pool.NewConnsCount(); n != 1 || pid != pid0 {
		t.Errorf("new connections %d, backend %d then %d: the connection must be kept", n, pid0, pid)
	}
}

// backendPID returns the pid of the backend that serves a statement on db.
func backendPID(t *testing.T, db *sql.DB) int {
	t.Helper()
	var pid int
	if err := db.QueryRowContext(t.Context(), "select pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}
