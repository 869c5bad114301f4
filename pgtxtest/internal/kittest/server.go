package kittest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// OneShot runs fn on a fresh connection to dsn, so that a server that went away
// costs one try, not the rest of the test.
func OneShot(ctx context.Context, dsn string, fn func(context.Context, *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return fn(ctx, conn)
}

// WaitRow waits until the row of items with id is visible on the server at dsn.
func WaitRow(t testing.TB, ctx context.Context, dsn string, id int) {
	t.Helper()
	Eventually(t, ctx, 30*time.Second, "row "+strconv.Itoa(id)+" replicated", func(ctx context.Context) error {
		return OneShot(ctx, dsn, func(ctx context.Context, conn *pgx.Conn) error {
			var n int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM items WHERE id = $1", id).Scan(&n); err != nil {
				return err
			}
			if n != 1 {
				return errors.New("not there yet")
			}
			return nil
		})
	})
}

// Timeline returns the server's current timeline, the first 8 hex digits of the
// name of the WAL file it writes.
func Timeline(t testing.TB, conn *pgx.Conn) uint64 {
	t.Helper()
	name := QueryString(t, conn, "SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)")
	tli, err := strconv.ParseUint(name, 16, 32)
	if err != nil {
		t.Fatalf("timeline %q: %v", name, err)
	}
	return tli
}

// WaitRollbacksAbove waits until the server counts more than before rolled-back
// transactions in conn's database. A backend reports its counts when it exits,
// and when idle at most once a second (once in ten seconds from PostgreSQL 15
// on): close the connections that rolled back first.
func WaitRollbacksAbove(t testing.TB, ctx context.Context, conn *pgx.Conn, before int64) {
	t.Helper()
	Eventually(t, ctx, 20*time.Second, "xact_rollback grows", func(ctx context.Context) error {
		n, err := XactRollbacks(ctx, conn)
		if err == nil && n <= before {
			err = fmt.Errorf("xact_rollback %d, was %d", n, before)
		}
		return err
	})
}

// XactRollbacks returns the server's count of rolled-back transactions in the
// database conn is connected to.
func XactRollbacks(ctx context.Context, conn *pgx.Conn) (int64, error) {
	var n int64
	err := conn.QueryRow(ctx, "SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&n)
	return n, err
}

// RequireSQLState fails the test unless err carries a server error with code.
func RequireSQLState(t testing.TB, what string, err error, code string) *pgconn.PgError {
	t.Helper()
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok || pgErr.Code != code {
		t.Fatalf("%s: error %v, want a server error with SQLSTATE %s", what, err, code)
	}
	return pgErr
}
