package pgtx

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/internal/errs"
)

// TestQueryMethodsKeepTheContextsError: the Pool's query methods, on a
// context that ended, fail with an error matching ctx.Err(), through every
// result type they return; with a context that cannot end, pgx's own
// results come back unwrapped. The pool's server does not exist.
func TestQueryMethodsKeepTheContextsError(t *testing.T) {
	p := newTestPool(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	matches := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: err = %v, want one matching context.Canceled", what, err)
		}
	}
	_, err := p.Exec(ctx, "select 1")
	matches(t, "Exec", err)
	rows, err := p.Query(ctx, "select 1")
	matches(t, "Query", err)
	if rows.Next() {
		t.Error("Query's rows have a row")
	}
	matches(t, "Rows.Err", rows.Err())
	matches(t, "Rows.Scan", rows.Scan())
	rows.Close()
	var n int
	matches(t, "QueryRow.Scan", p.QueryRow(ctx, "select 1").Scan(&n))
	_, err = p.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"a"}, pgx.CopyFromRows(nil))
	matches(t, "CopyFrom", err)

	b := &pgx.Batch{}
	b.Queue("select 1")
	b.Queue("select 2")
	b.Queue("select 3")
	br := p.SendBatch(ctx, b)
	_, err = br.Exec()
	matches(t, "BatchResults.Exec", err)
	_, err = br.Query()
	matches(t, "BatchResults.Query", err)
	matches(t, "BatchResults.QueryRow", br.QueryRow().Scan(&n))
	_ = br.Tx()
	matches(t, "BatchResults.Close", br.Close())

	// A context that cannot end: pgx's results as they are. (The server
	// that does not exist is not waited for.)
	p.loop.Policy.UnavailableTimeout = 0
	if _, ok := p.QueryRow(context.Background(), "select 1").(errs.CtxRow); ok {
		t.Error("QueryRow wrapped the row of a context that cannot end")
	}
	if br := p.SendBatch(context.Background(), &pgx.Batch{}); br != nil {
		if _, ok := br.(*errs.CtxBatchResults); ok {
			t.Error("SendBatch wrapped the results of a context that cannot end")
		}
		_ = br.Close()
	}
}

// TestPoolNotOpenedRows: the rows of a pool that was not opened answer
// with its error.
func TestPoolNotOpenedRows(t *testing.T) {
	var p Pool
	if rows, err := p.Query(context.Background(), "select 1"); !errors.Is(err, ErrInvalidArgument) || rows.Err() == nil {
		t.Errorf("Query on a Pool not opened: %v", err)
	}
}
