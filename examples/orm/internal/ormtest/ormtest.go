// Package ormtest holds the helpers the ORM examples' tests share.
package ormtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
)

// SQLState returns err's SQLSTATE, or "" when it has none.
func SQLState(err error) string {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pgErr.Code
	}
	return ""
}

// CancelWhenRunning calls cancel once the backend pid runs a pg_sleep, as
// pg_stat_activity shows from a connection of its own: the context ends
// while the statement runs on the server, however loaded the machine.
func CancelWhenRunning(t *testing.T, pool *pgtx.Pool, pid int, cancel context.CancelFunc) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { <-done; conn.Close(context.Background()) })
	go func() {
		defer close(done)
		defer cancel()
		for t.Context().Err() == nil {
			var running bool
			err := conn.QueryRow(t.Context(), "select exists (select from pg_stat_activity where pid = $1 and state = 'active' and query like '%pg_sleep%')", pid).Scan(&running)
			if err != nil || running {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
}
