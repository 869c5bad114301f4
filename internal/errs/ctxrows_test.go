package errs

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// failing answers every read with err, as the rows of a statement the
// server cancelled do; failingBatch is the batch's results.
type failing struct {
	pgx.Rows
	err error
}

func (f failing) Err() error        { return f.err }
func (f failing) Scan(...any) error { return f.err }

type failingBatch struct{ err error }

func (f failingBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, f.err }
func (f failingBatch) Query() (pgx.Rows, error)         { return failing{err: f.err}, f.err }
func (f failingBatch) QueryRow() pgx.Row                { return failing{err: f.err} }
func (f failingBatch) Close() error                     { return f.err }
func (f failingBatch) Tx() pgx.Tx                       { return nil }

// TestCtxResults: every error of the wrapped results matches ctx.Err()
// once ctx has ended, and keeps the statement's own error; while ctx is
// live, the errors are the statement's as they are.
func TestCtxResults(t *testing.T) {
	cancelled := errors.New("ERROR: canceling statement due to user request (SQLSTATE 57014)")
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, ctx := range []context.Context{ended, context.Background()} {
		f := failing{err: cancelled}
		br := &CtxBatchResults{Results: failingBatch{err: cancelled}, Ctx: ctx}
		_, execErr := br.Exec()
		rows, queryErr := br.Query()
		errs := map[string]error{
			"Rows.Err":   (&CtxRows{Rows: f, Ctx: ctx}).Err(),
			"Rows.Scan":  (&CtxRows{Rows: f, Ctx: ctx}).Scan(),
			"Row.Scan":   CtxRow{Row: f, Ctx: ctx}.Scan(),
			"Batch.Exec": execErr, "Batch.Query": queryErr, "Batch.Query rows": rows.Err(),
			"Batch.QueryRow": br.QueryRow().Scan(), "Batch.Close": br.Close(),
		}
		for name, err := range errs {
			if !errors.Is(err, cancelled) {
				t.Errorf("%s: %v lost the statement's error", name, err)
			}
			if got, want := errors.Is(err, context.Canceled), ctx.Err() != nil; got != want {
				t.Errorf("%s: matches context.Canceled = %v, want %v", name, got, want)
			}
		}
		if br.Tx() != nil {
			t.Error("Tx of a batch outside a transaction is not nil")
		}
	}
}
