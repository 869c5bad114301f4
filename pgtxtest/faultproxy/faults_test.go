package faultproxy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
)

// The next n COMMITs fail with the server's own error, in either protocol; the
// transaction is rolled back and the connection is idle and usable.
func TestProxyFailCommits(t *testing.T) {
	e := newProxyEnv(t)
	ctx := testContext(t)
	direct := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.direct))
	kittest.ExecOK(t, ctx, direct, "CREATE TABLE t (id int PRIMARY KEY)")

	simple := func(ctx context.Context, c *pgx.Conn) error { return c.PgConn().Exec(ctx, "commit").Close() }
	extended := func(ctx context.Context, c *pgx.Conn) error {
		return c.PgConn().ExecParams(ctx, "commit", nil, nil, nil, nil).Read().Err
	}
	tests := []struct {
		name   string
		code   string
		commit func(context.Context, *pgx.Conn) error
	}{
		{"simple 40001", "40001", simple},
		{"simple 40P01", "40P01", simple},
		{"extended 40001", "40001", extended},
		{"extended 40P01", "40P01", extended},
	}
	id := 0
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := pgx.ConnectConfig(ctx, kittest.ConnConfig(t, e.viaProxy))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			before := e.proxy.Stats().InjectedFailures
			rollbacks, err := kittest.XactRollbacks(ctx, direct)
			if err != nil {
				t.Fatal(err)
			}
			e.proxy.FailCommits(1, tc.code)
			id++
			kittest.ExecOK(t, ctx, c, "BEGIN")
			kittest.ExecOK(t, ctx, c, "INSERT INTO t VALUES ($1)", id)
			pgErr := kittest.RequireSQLState(t, "COMMIT", tc.commit(ctx, c), tc.code)
			if !strings.HasPrefix(pgErr.Message, failedByProxy) || pgErr.Where != "" || pgErr.Severity != "ERROR" {
				t.Errorf("error %+v: want the injected message, severity ERROR and no PL/pgSQL context", *pgErr)
			}
			if s := c.PgConn().TxStatus(); s != 'I' {
				t.Errorf("transaction status after the failed COMMIT %q, want 'I'", s)
			}
			if n := proxyRowCount(t, ctx, direct, id); n != 0 {
				t.Errorf("the failed transaction's row is there (%d)", n)
			}
			if got := e.proxy.Stats().InjectedFailures - before; got != 1 {
				t.Errorf("InjectedFailures grew by %d, want 1", got)
			}

			// The rule is used up: the next transaction commits.
			id++
			kittest.ExecOK(t, ctx, c, "BEGIN")
			kittest.ExecOK(t, ctx, c, "INSERT INTO t VALUES ($1)", id)
			if err := tc.commit(ctx, c); err != nil {
				t.Fatalf("the next COMMIT: %v", err)
			}
			if n := proxyRowCount(t, ctx, direct, id); n != 1 {
				t.Errorf("the next transaction's row: %d, want 1", n)
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			kittest.WaitRollbacksAbove(t, ctx, direct, rollbacks)
		})
	}

	// Only a COMMIT of an open transaction counts: one outside a transaction, or
	// of a failed one, goes through as is and leaves the rule armed.
	c := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.viaProxy))
	t.Run("not in a transaction", func(t *testing.T) {
		e.proxy.FailCommits(1, "40001")
		defer e.proxy.StopFailing()
		before := e.proxy.Stats().InjectedFailures
		kittest.ExecOK(t, ctx, c, "COMMIT") // a warning: no transaction in progress
		kittest.ExecOK(t, ctx, c, "BEGIN")
		if _, err := c.Exec(ctx, "SELECT 1/0"); err == nil {
			t.Fatal("1/0 did not fail")
		}
		tag, err := c.PgConn().Exec(ctx, "COMMIT").ReadAll()
		if err != nil || len(tag) != 1 || tag[0].CommandTag.String() != "ROLLBACK" {
			t.Fatalf("COMMIT of a failed transaction: %v %v, want ROLLBACK", tag, err)
		}
		if got := e.proxy.Stats().InjectedFailures - before; got != 0 {
			t.Errorf("InjectedFailures grew by %d, want 0", got)
		}
		// A COMMIT that shares its Query message with another statement is not
		// failed either.
		kittest.ExecOK(t, ctx, c, "BEGIN")
		if err := c.PgConn().Exec(ctx, "COMMIT; SELECT 1").Close(); err != nil {
			t.Fatalf("COMMIT; SELECT 1: %v", err)
		}
		// pgx's Tx.Commit is.
		err = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error { return nil })
		kittest.RequireSQLState(t, "BeginFunc", err, "40001")
	})

	t.Run("every COMMIT", func(t *testing.T) {
		e.proxy.FailCommits(0, "40001")
		for range 3 {
			kittest.RequireSQLState(t, "BeginFunc", pgx.BeginFunc(ctx, c, func(pgx.Tx) error { return nil }), "40001")
		}
		e.proxy.StopFailing()
		if err := pgx.BeginFunc(ctx, c, func(pgx.Tx) error { return nil }); err != nil {
			t.Fatalf("after StopFailing: %v", err)
		}
	})
}

// Codes other than 40001 and 40P01 are refused.
func TestProxyFailCodeRefused(t *testing.T) {
	t.Parallel()
	p, err := Start("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, code := range []string{"", "23505", "40002", "57P01", "40001'; DROP TABLE x; --"} {
		for name, arm := range map[string]func() error{
			"FailCommits":         func() error { return p.FailCommits(1, code) },
			"FailEveryCommitOnce": func() error { return p.FailEveryCommitOnce(code) },
		} {
			tb := kittest.RunFakeTB(func(tb testing.TB) { p.tb = tb; _ = arm() })
			if !tb.Failed() || !strings.Contains(tb.Messages(), "use 40001 (serialization_failure) or 40P01") {
				t.Errorf("%s(%q) with a test: failed %t, %q", name, code, tb.Failed(), tb.Messages())
			}
			p.tb = nil
			if err := arm(); !errors.Is(err, pgtx.ErrInvalidArgument) || !strings.Contains(err.Error(), "cannot be injected") {
				t.Errorf("%s(%q) without a test: %v, want an error wrapping pgtx.ErrInvalidArgument", name, code, err)
			}
		}
	}
	if p.failArmed.Load() || p.everyOn.Load() {
		t.Error("a refused code armed a rule")
	}
}

// SlowStatements holds matching statements, in either protocol, and no others.
func TestProxySlowStatements(t *testing.T) {
	e := newProxyEnv(t)
	ctx := testContext(t)
	c := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.viaProxy))
	const d = 200 * time.Millisecond
	e.proxy.SlowStatements(MatchPrefix("select 'slow"), d)
	e.proxy.SlowStatements(MatchPrefix("select 'forever"), time.Hour)

	tests := []struct {
		name     string
		sql      string
		args     []any
		slow     bool
		deadline time.Duration // > 0: the query must fail with this deadline
	}{
		{"simple, matching", "select 'slow'", []any{pgx.QueryExecModeSimpleProtocol}, true, 0},
		{"extended, matching", "select 'slow' || $1::text", []any{"!"}, true, 0},
		{"not matching", "select 'fast'", nil, false, 0},
		{"held past the caller's deadline", "select 'forever'", nil, true, 100 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := e.proxy.Stats().SlowedStatements
			conn := c
			qctx := ctx
			if tc.deadline > 0 {
				conn = kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.viaProxy)) // the deadline closes it
				var cancel context.CancelFunc
				qctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			start := time.Now()
			var s string
			err := conn.QueryRow(qctx, tc.sql, tc.args...).Scan(&s)
			took := time.Since(start)
			switch {
			case tc.deadline > 0:
				if !errors.Is(err, context.DeadlineExceeded) && !pgconn.Timeout(err) {
					t.Errorf("error %v, want the deadline", err)
				}
			case err != nil:
				t.Fatal(err)
			case tc.slow && took < d:
				t.Errorf("took %v, want at least %v", took, d)
			}
			want := int64(0)
			if tc.slow {
				want = 1
			}
			if got := e.proxy.Stats().SlowedStatements - before; got != want {
				t.Errorf("SlowedStatements grew by %d, want %d", got, want)
			}
		})
	}
	e.proxy.Reset()
	before := e.proxy.Stats().SlowedStatements
	kittest.ExecOK(t, ctx, c, "select 'slow'")
	if got := e.proxy.Stats().SlowedStatements; got != before {
		t.Errorf("after Reset, SlowedStatements grew from %d to %d", before, got)
	}
}

func TestStatementKind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		sql  string
		want int
	}{
		{"commit", stmtCommit},
		{"COMMIT;", stmtCommit},
		{" /* c */ commit work ; ; ", stmtCommit},
		{"END TRANSACTION", stmtCommit},
		{"commit and no chain", stmtCommit},
		{"commit and chain", stmtEnd},
		{"commit prepared 'x'", stmtEnd},
		{"commit; select 1", stmtEnd},
		{"rollback", stmtEnd},
		{"ABORT", stmtEnd},
		{"rollback work", stmtEnd},
		{"rollback to savepoint sp1", stmtSavepoint},
		{"ROLLBACK TRANSACTION TO sp1", stmtSavepoint},
		{"savepoint sp1", stmtSavepoint},
		{"release savepoint sp1", stmtSavepoint},
		{"begin isolation level serializable; set local statement_timeout = 5100; select pg_current_xact_id()", stmtBegin},
		{"start transaction read only", stmtBegin},
		{"start", stmtOther},
		{"committed", stmtOther},
		{"select 'commit'", stmtOther},
		{"", stmtOther},
	}
	for _, tc := range tests {
		if got := statementKind(tc.sql); got != tc.want {
			t.Errorf("statementKind(%q) = %d, want %d", tc.sql, got, tc.want)
		}
	}
}
