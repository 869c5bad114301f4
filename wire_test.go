package pgtx

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/fakepg"
	"github.com/pgtx-go/pgtx/internal/pgpool"
)

// fakePool returns a pool whose connections reach srv, with no pause
// between attempts; srv's connections are waited for at cleanup.
func fakePool(t *testing.T, srv *fakepg.Server, mutate func(*Config)) *Pool {
	t.Helper()
	cfg, err := ParseConfig(fakepg.URL)
	if err != nil {
		t.Fatal(err)
	}
	srv.Reach(&cfg.ConnConfig.Config)
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cfg.CancelMode = CancelModeProtocol
	cfg.ResolveTimeout = -1
	cfg.Retry.Jitter = func() float64 { return 0 }
	if mutate != nil {
		mutate(cfg)
	}
	pool, err := NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		srv.Wait()
	})
	return pool
}

// sent returns the statements srv received but the probe every connection
// makes when it is made ([pgpool.Identify]).
func sent(srv *fakepg.Server) []string {
	var out []string
	for _, sql := range srv.SQL() {
		if !pgpool.IsProbe(sql) {
			out = append(out, sql)
		}
	}
	return out
}

// on answers the n-th time (from 1) a statement with the verb sql is sent
// with a, and every other statement with success.
func on(sql string, n int, a fakepg.Answer) func(int, string) fakepg.Answer {
	seen := 0
	return func(_ int, s string) fakepg.Answer {
		if s == sql {
			if seen++; seen == n {
				return a
			}
		}
		return fakepg.Answer{}
	}
}

const update = "update acct set balance = balance - 1 where id = 1"

// TestTransactionOverTheWire runs whole calls against a scripted server:
// what each answer of the server, and each thing fn does, makes
// Transaction send, return and retry.
func TestTransactionOverTheWire(t *testing.T) {
	errOwn := errors.New("insufficient funds")
	tests := []struct {
		name     string
		answer   func(int, string) fakepg.Answer
		fn       func(ctx context.Context, tx pgx.Tx) error
		wantErr  func(error) bool
		wantSQL  []string
		wantRuns int
		wantConn int
		// cuts is how many connections the server closes: pgconn sends a
		// cancel request for each, from a goroutine of its own (its
		// asyncClose), which may or may not have reached the server when
		// the call returns.
		cuts int
	}{
		{
			name:     "commits",
			wantErr:  func(err error) bool { return err == nil },
			wantSQL:  []string{"begin isolation level SERIALIZABLE", update, "commit"},
			wantRuns: 1, wantConn: 1,
		},
		{
			name:    "a serialization failure runs the whole transaction again",
			answer:  on(update, 1, fakepg.Answer{Code: "40001"}),
			wantErr: func(err error) bool { return err == nil },
			wantSQL: []string{"begin isolation level SERIALIZABLE", update, "rollback",
				"begin isolation level SERIALIZABLE", update, "commit"},
			wantRuns: 2, wantConn: 1,
		},
		{
			name:    "a serialization failure at COMMIT runs it again",
			answer:  on("commit", 1, fakepg.Answer{Code: "40001"}),
			wantErr: func(err error) bool { return err == nil },
			wantSQL: []string{"begin isolation level SERIALIZABLE", update, "commit",
				"begin isolation level SERIALIZABLE", update, "commit"},
			wantRuns: 2, wantConn: 1,
		},
		{
			name:     "fn's own error rolls back and is returned as it is",
			fn:       func(ctx context.Context, tx pgx.Tx) error { _, _ = tx.Exec(ctx, update); return errOwn },
			wantErr:  func(err error) bool { return errors.Is(err, errOwn) && Classify(err) == ClassPermanent },
			wantSQL:  []string{"begin isolation level SERIALIZABLE", update, "rollback"},
			wantRuns: 1, wantConn: 1,
		},
		{
			name:   "fn that swallows a failed statement's error commits nothing",
			answer: on(update, 1, fakepg.Answer{Code: "23505"}),
			fn: func(ctx context.Context, tx pgx.Tx) error {
				_, _ = tx.Exec(ctx, update)
				return nil
			},
			wantErr:  func(err error) bool { return errors.Is(err, pgx.ErrTxCommitRollback) },
			wantSQL:  []string{"begin isolation level SERIALIZABLE", update, "rollback"},
			wantRuns: 1, wantConn: 1,
		},
		{
			// Pgpool-II's own errors (XX000, its default code) end the
			// session, its ERRORs too, whatever the text: a bug of its own
			// met during a failover ("could not find block containing
			// chunk") is a lost session, not the transaction's error.
			name: "a pooler's own error that ended the session runs it again on a fresh one",
			answer: on(update, 1, fakepg.Answer{Code: "XX000", Message: "could not find block containing chunk 0x561ffcb52ab8",
				Fatal: true}),
			wantErr:  func(err error) bool { return err == nil },
			wantSQL:  []string{"begin isolation level SERIALIZABLE", update, "begin isolation level SERIALIZABLE", update, "commit"},
			wantRuns: 2, wantConn: 2, cuts: 1,
		},
		{
			name:     "a connection lost before COMMIT runs it again on a fresh one",
			answer:   on(update, 1, fakepg.Answer{Close: true}),
			wantErr:  func(err error) bool { return err == nil },
			wantSQL:  []string{"begin isolation level SERIALIZABLE", update, "begin isolation level SERIALIZABLE", update, "commit"},
			wantRuns: 2, wantConn: 2, cuts: 1,
		},
		{
			name:   "fn that swallows a lost connection's error does not commit, and runs again",
			answer: on(update, 1, fakepg.Answer{Close: true}),
			fn: func(ctx context.Context, tx pgx.Tx) error {
				_, _ = tx.Exec(ctx, update)
				return nil
			},
			wantErr:  func(err error) bool { return err == nil },
			wantSQL:  []string{"begin isolation level SERIALIZABLE", update, "begin isolation level SERIALIZABLE", update, "commit"},
			wantRuns: 2, wantConn: 2, cuts: 1,
		},
		{
			name:   "a lost COMMIT with resolution off is ErrCommitUnknown, never run again",
			answer: on("commit", 1, fakepg.Answer{Close: true}),
			wantErr: func(err error) bool {
				return errors.Is(err, ErrCommitUnknown) && Classify(err) == ClassAmbiguous
			},
			wantSQL:  []string{"begin isolation level SERIALIZABLE", update, "commit"},
			wantRuns: 1, wantConn: 1, cuts: 1,
		},
		{
			name: "fn's network error from elsewhere is not a lost connection",
			fn: func(ctx context.Context, tx pgx.Tx) error {
				_, _ = tx.Exec(ctx, update)
				return io.ErrUnexpectedEOF // an HTTP call's, say
			},
			wantErr:  func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, new(*RetryError)) },
			wantSQL:  []string{"begin isolation level SERIALIZABLE", update, "rollback"},
			wantRuns: 1, wantConn: 1,
		},
		{
			name:     "fn that sends nothing sends nothing",
			fn:       func(context.Context, pgx.Tx) error { return nil },
			wantErr:  func(err error) bool { return err == nil },
			wantRuns: 1, wantConn: 1, // acquired before fn ran

		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &fakepg.Server{Answer: tt.answer}
			pool := fakePool(t, srv, nil)
			fn := tt.fn
			if fn == nil {
				fn = func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, update)
					return err
				}
			}
			runs := 0
			err := Transaction(context.Background(), pool, Serializable, func(ctx context.Context, tx pgx.Tx) error {
				runs++
				return fn(ctx, tx)
			})
			if !tt.wantErr(err) {
				t.Errorf("err = %v", err)
			}
			if runs != tt.wantRuns {
				t.Errorf("fn ran %d times, want %d", runs, tt.wantRuns)
			}
			if got := sent(srv); !slices.Equal(got, tt.wantSQL) {
				t.Errorf("the server received\n%q\nwant\n%q", got, tt.wantSQL)
			}
			if got := srv.Conns(); got != tt.wantConn {
				t.Errorf("%d sessions started, want %d", got, tt.wantConn)
			}
			// No context ended: the only cancel requests are pgconn's for
			// the connections the server closed.
			if got := srv.Cancels(); got > tt.cuts {
				t.Errorf("%d cancel requests, want at most %d (one per connection cut): no context ended", got, tt.cuts)
			}
		})
	}
}

// TestTransactionOverTheWireContextEnded: a context that ended while fn
// ran rolls back instead of committing, and the error matches it.
func TestTransactionOverTheWireContextEnded(t *testing.T) {
	srv := &fakepg.Server{}
	pool := fakePool(t, srv, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := Transaction(ctx, pool, ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, update)
		cancel()
		return err
	})
	if !errors.Is(err, context.Canceled) || Classify(err) != ClassTimeout {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	want := []string{"begin isolation level READ COMMITTED", update, "rollback"}
	if got := sent(srv); !slices.Equal(got, want) {
		t.Errorf("the server received %q, want %q", got, want)
	}
}

// TestTransactionOverTheWireUniqueViolation: under SERIALIZABLE with
// RetryUniqueViolations a unique violation is retried as a conflict, and
// without it returned at once.
func TestTransactionOverTheWireUniqueViolation(t *testing.T) {
	for _, retry := range []bool{false, true} {
		srv := &fakepg.Server{Answer: on(update, 1, fakepg.Answer{Code: "23505"})}
		pool := fakePool(t, srv, nil)
		runs := 0
		err := TransactionWithOptions(context.Background(), pool, Serializable, Options{RetryUniqueViolations: retry},
			func(ctx context.Context, tx pgx.Tx) error {
				runs++
				_, err := tx.Exec(ctx, update)
				return err
			})
		var pgErr *pgconn.PgError
		switch {
		case retry && (err != nil || runs != 2):
			t.Errorf("retried: err = %v after %d runs, want nil after 2", err, runs)
		case !retry && (!errors.As(err, &pgErr) || pgErr.Code != "23505" || runs != 1):
			t.Errorf("not retried: err = %v after %d runs, want 23505 after 1", err, runs)
		}
	}
}
