package txn

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/errs"
	"github.com/pgtx-go/pgtx/internal/fakepg"
)

// connect returns a connection to srv in the simple protocol; it is closed,
// and srv's goroutines waited for, at cleanup.
func connect(t *testing.T, srv *fakepg.Server) *pgx.Conn {
	t.Helper()
	return srv.Connect(t, pgx.QueryExecModeSimpleProtocol)
}

// answerTo answers the statement sql with a, every other with success.
func answerTo(sql string, a fakepg.Answer) func(int, string) fakepg.Answer {
	return func(_ int, s string) fakepg.Answer {
		if s == sql {
			return a
		}
		return fakepg.Answer{}
	}
}

const (
	begin = "begin isolation level SERIALIZABLE"
	stmt  = "update acct set balance = 0 where id = 1"
)

// TestCommitOverTheWire: what Commit sends, and what each answer of the
// server at COMMIT makes of the attempt (DESIGN.md's outcome table, here
// through the wire: the rows of TestCommitOutcome that a server can send).
func TestCommitOverTheWire(t *testing.T) {
	run := func(ctx context.Context, tx *Tx) error { _, err := tx.Exec(ctx, stmt); return err }
	tests := []struct {
		name      string
		answer    func(int, string) fakepg.Answer
		fn        func(ctx context.Context, tx *Tx) error
		want      classify.Class
		wantErr   func(error) bool
		wantSQL   []string
		wantEnded bool // the connection is closed
	}{
		{name: "nothing sent, nothing to commit", fn: func(context.Context, *Tx) error { return nil },
			want: classify.None, wantErr: isNil},
		{name: "committed", want: classify.None, wantErr: isNil, wantSQL: []string{begin, stmt, "commit"}},
		{name: "a failed statement fn swallowed: rolled back", answer: answerTo(stmt, fakepg.Answer{Code: "23505"}),
			fn:   func(ctx context.Context, tx *Tx) error { _, _ = tx.Exec(ctx, stmt); return nil },
			want: classify.Permanent, wantErr: is(pgx.ErrTxCommitRollback), wantSQL: []string{begin, stmt, "rollback"}},
		{name: "40001 at COMMIT is a conflict", answer: answerTo("commit", fakepg.Answer{Code: "40001"}),
			want: classify.Conflict, wantErr: isCode("40001"), wantSQL: []string{begin, stmt, "commit"}},
		{name: "a deferred constraint at COMMIT is permanent", answer: answerTo("commit", fakepg.Answer{Code: "23505"}),
			want: classify.Permanent, wantErr: isCode("23505"), wantSQL: []string{begin, stmt, "commit"}},
		{name: "the answer lost", answer: answerTo("commit", fakepg.Answer{Close: true}),
			want: classify.Ambiguous, wantErr: is(errs.ErrCommitUnknown), wantSQL: []string{begin, stmt, "commit"}, wantEnded: true},
		{name: "FATAL 57P01 at COMMIT (shutdown during a sync-rep wait)",
			answer: answerTo("commit", fakepg.Answer{Code: "57P01", Fatal: true, Message: "terminating connection due to administrator command"}),
			want:   classify.Ambiguous, wantErr: is(errs.ErrCommitUnknown), wantSQL: []string{begin, stmt, "commit"}, wantEnded: true},
		{name: "FATAL 25P03: the session had died idle, before COMMIT",
			answer: answerTo("commit", fakepg.Answer{Code: "25P03", Fatal: true, Message: "terminating connection due to idle-in-transaction timeout"}),
			want:   classify.Timeout, wantErr: isCode("25P03"), wantSQL: []string{begin, stmt, "commit"}, wantEnded: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &fakepg.Server{Answer: tt.answer}
			conn := connect(t, srv)
			ctx := context.Background()
			var tx Tx
			tx.Start(ctx, conn, &Settings{}, begin, 0)
			fn := tt.fn
			if fn == nil {
				fn = run
			}
			if err := fn(ctx, &tx); err != nil {
				t.Fatalf("fn: %v", err)
			}
			c, err := Commit(ctx, &tx, nil)
			tx.End()
			if c != tt.want || !tt.wantErr(err) {
				t.Errorf("Commit = %v, %v; want class %v", c, err, tt.want)
			}
			if got := srv.SQL(); !slices.Equal(got, tt.wantSQL) {
				t.Errorf("the server received %q, want %q", got, tt.wantSQL)
			}
			if got := conn.IsClosed(); got != tt.wantEnded {
				t.Errorf("connection closed = %v, want %v", got, tt.wantEnded)
			}
		})
	}
}

// TestHandleOverTheWire: the first statement carries BEGIN (and the
// call's statement_timeout) in one query, later ones go alone, a savepoint
// is a savepoint, fn's Commit and Rollback are refused and roll the
// attempt back, and once the attempt ends every method refuses.
func TestHandleOverTheWire(t *testing.T) {
	srv := &fakepg.Server{}
	conn := connect(t, srv)
	ctx := context.Background()
	var tx Tx
	tx.Start(ctx, conn, &Settings{}, begin, 1500e6) // Options.StatementTimeout 1.5s
	if tx.Begun() {
		t.Fatal("begun before a statement")
	}
	if _, err := tx.Exec(ctx, stmt); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "delete from acct where id = 2"); err != nil {
		t.Fatal(err)
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Exec(ctx, "insert into acct values (3, 0)"); err != nil {
		t.Fatal(err)
	}
	if err := sp.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The first misuse is the one reported, whatever fn does after it.
	for _, err := range []error{tx.Commit(ctx), tx.Rollback(ctx)} {
		if !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), "fn called tx.Commit") {
			t.Errorf("fn's Commit, then Rollback: %v, want the Commit's refusal, matching ErrInvalidArgument", err)
		}
	}
	// What the root does when fn returns nil after a refusal: Check
	// reports it, and the attempt rolls back instead of committing.
	if err := tx.Check(); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Errorf("Check after fn's Commit: %v, want a misuse", err)
	}
	Rollback(ctx, &tx)
	tx.End()
	if _, err := tx.Exec(ctx, stmt); !errors.Is(err, pgx.ErrTxClosed) {
		t.Errorf("Exec after the attempt: %v, want pgx.ErrTxClosed", err)
	}
	if err := tx.QueryRow(ctx, "select 1").Scan(new(int)); !errors.Is(err, pgx.ErrTxClosed) {
		t.Errorf("QueryRow after the attempt: %v, want pgx.ErrTxClosed", err)
	}
	if tx.Conn() != nil {
		t.Error("Conn after the attempt is not nil")
	}
	got := srv.SQL()
	want := []string{begin, "set local statement_timeout = 1500", stmt, "delete from acct where id = 2",
		"select", // pgx's transaction, made for the savepoint, with a statement that does nothing
		"savepoint sp_1", "insert into acct values (3, 0)", "rollback to savepoint sp_1", "rollback"}
	if !slices.Equal(got, want) {
		t.Errorf("the server received\n%q\nwant\n%q", got, want)
	}
}

func isNil(err error) bool { return err == nil }

func is(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }

func isCode(code string) func(error) bool {
	return func(err error) bool { return err != nil && strings.Contains(err.Error(), "SQLSTATE "+code) }
}
