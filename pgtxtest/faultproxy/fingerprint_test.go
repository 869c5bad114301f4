package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
)

func TestSavepointOp(t *testing.T) {
	t.Parallel()
	tests := []struct{ sql, want string }{
		{"SAVEPOINT sp1", "savepoint"},
		{"savepoint sp14730961273846 ;", "savepoint"},
		{`/* gorm */ SAVEPOINT "My ""sp"""`, "savepoint"},
		{"release savepoint sp1", "release"},
		{"RELEASE sp1", "release"},
		{"rollback to savepoint sp1", "rollback to"},
		{"ROLLBACK WORK TO sp1", "rollback to"},
		{"rollback transaction to savepoint sp1;", "rollback to"},
		{"savepoint sp1; insert into t values (1)", ""},
		{"savepoint", ""},
		{`savepoint "unterminated`, ""},
		{"rollback", ""},
		{"release", ""},
		{"select 'savepoint a'", ""},
	}
	for _, tc := range tests {
		if got := savepointOp(tc.sql); got != tc.want {
			t.Errorf("savepointOp(%q) = %q, want %q", tc.sql, got, tc.want)
		}
	}
}

func TestBoundParams(t *testing.T) {
	t.Parallel()
	bind := func(resultFormats []int16) []byte {
		b, err := (&pgproto3.Bind{
			ParameterFormatCodes: []int16{0, 1},
			Parameters:           [][]byte{[]byte("42"), nil},
			ResultFormatCodes:    resultFormats,
		}).Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		// The body after the type, length, portal and statement names
		// (both empty).
		return b[5+2:]
	}
	none, text, binary := bind(nil), bind([]int16{0}), bind([]int16{1, 0, 1})
	if !bytes.Equal(boundParams(none), boundParams(text)) || !bytes.Equal(boundParams(text), boundParams(binary)) {
		t.Errorf("the bound parameters differ with the result formats asked:\n%x\n%x\n%x", boundParams(none), boundParams(text), boundParams(binary))
	}
	if got := boundParams(none); !bytes.Equal(got, none[:len(none)-2]) {
		t.Errorf("boundParams = %x, want the body without its result formats %x", got, none[:len(none)-2])
	}
	other := bind(nil)
	other[len(other)-4] = '3' // a parameter's value
	if bytes.Equal(boundParams(other), boundParams(none)) {
		t.Error("another parameter value gives the same bound parameters")
	}
	for _, short := range [][]byte{nil, {0}, {0, 2, 0}, none[:9]} {
		if got := boundParams(short); !bytes.Equal(got, short) {
			t.Errorf("boundParams(%x) = %x, want it whole", short, got)
		}
	}
}

func TestIDRead(t *testing.T) {
	t.Parallel()
	const read = "select pg_current_xact_id_if_assigned()::text::int8 as pgtx_xid, null::int8 as l"
	tests := []struct {
		sql      string
		isRead   bool
		stripped string
	}{
		{read, true, read},
		{"execute pgtx_xid", true, "execute pgtx_xid"},
		{"execute pgtx_xid_forced", true, "execute pgtx_xid_forced"},
		{"insert into t values (1)\n;" + read, false, "insert into t values (1)"},
		{"insert into t values (1) -- c\n;execute pgtx_xid", false, "insert into t values (1) -- c"},
		{"select pg_current_xact_id()", false, "select pg_current_xact_id()"},
		{"insert into t values (1)\n;select 1", false, "insert into t values (1)\n;select 1"},
	}
	for _, tc := range tests {
		if got := idRead(tc.sql); got != tc.isRead {
			t.Errorf("idRead(%q) = %v, want %v", tc.sql, got, tc.isRead)
		}
		if got := withoutIDRead(tc.sql); got != tc.stripped {
			t.Errorf("withoutIDRead(%q) = %q, want %q", tc.sql, got, tc.stripped)
		}
	}
}

// FailEveryCommitOnce knows a transaction again when only the result formats
// it asked for, its savepoints' names or pgtx's reads of its id changed, and
// not when a statement or a parameter did.
func TestFailEveryCommitOnceFingerprint(t *testing.T) {
	e := newProxyEnv(t)
	ctx := testContext(t)
	c := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.viaProxy))
	kittest.ExecOK(t, ctx, c, "CREATE TABLE t (id int)")
	e.proxy.FailEveryCommitOnce("40001")
	defer e.proxy.StopFailing()

	query := func(resultFormat int16) func(context.Context, *pgx.Conn) error {
		return func(ctx context.Context, c *pgx.Conn) error {
			return c.PgConn().ExecParams(ctx, "select id from t where id = $1", [][]byte{[]byte("7")}, nil, nil, []int16{resultFormat}).Read().Err
		}
	}
	param := func(v string) func(context.Context, *pgx.Conn) error {
		return func(ctx context.Context, c *pgx.Conn) error {
			return c.PgConn().ExecParams(ctx, "select id from t where id = $1", [][]byte{[]byte(v)}, nil, nil, nil).Read().Err
		}
	}
	savepoint := func(name string) func(context.Context, *pgx.Conn) error {
		return func(ctx context.Context, c *pgx.Conn) error {
			for _, sql := range []string{"insert into t values (1)", "savepoint " + name, "insert into t values (2)", "rollback to savepoint " + name, "release " + name} {
				if _, err := c.Exec(ctx, sql); err != nil {
					return err
				}
			}
			// The same again, in the extended protocol.
			return c.PgConn().ExecParams(ctx, "savepoint "+name, nil, nil, nil, nil).Read().Err
		}
	}
	const idSQL = "select pg_current_xact_id_if_assigned()::text::int8 as pgtx_xid, null::int8 as l"
	write := func(idRead bool) func(context.Context, *pgx.Conn) error {
		return func(ctx context.Context, c *pgx.Conn) error {
			sql := "insert into t values (5)"
			if idRead {
				sql += "\n;" + idSQL
			}
			if err := c.PgConn().Exec(ctx, sql).Close(); err != nil {
				return err
			}
			if idRead {
				return c.PgConn().ExecParams(ctx, idSQL, nil, nil, nil, nil).Read().Err
			}
			return nil
		}
	}
	steps := []struct {
		name     string
		body     func(context.Context, *pgx.Conn) error
		wantFail bool
	}{
		{"a query asking text results", query(0), true},
		{"the same asking binary results", query(1), false},
		{"another parameter value", param("8"), true},
		{"savepoint sp1", savepoint("sp1"), true},
		{`savepoint "other name"`, savepoint(`"other name"`), false},
		{"a write", write(false), true},
		{"the same with pgtx's id reads", write(true), false},
		{"savepoints and one more statement", func(ctx context.Context, c *pgx.Conn) error {
			if err := savepoint("sp3")(ctx, c); err != nil {
				return err
			}
			_, err := c.Exec(ctx, "insert into t values (3)")
			return err
		}, true},
	}
	for i, s := range steps {
		err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error { return s.body(ctx, tx.Conn()) })
		pgErr, isPg := errors.AsType[*pgconn.PgError](err)
		failed := isPg && pgErr.Code == "40001"
		if err != nil && !failed {
			t.Fatalf("step %d (%s): %v", i, s.name, err)
		}
		if failed != s.wantFail {
			t.Errorf("step %d (%s): COMMIT failed %v, want %v", i, s.name, failed, s.wantFail)
		}
	}
}
