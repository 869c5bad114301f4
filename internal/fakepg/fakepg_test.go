package fakepg

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestSplit(t *testing.T) {
	tests := []struct {
		q    string
		want []string
	}{
		{"", nil},
		{"-- ping", nil},
		{"begin isolation level SERIALIZABLE;\nupdate t set n = 1 -- a comment\n", []string{"begin isolation level SERIALIZABLE", "update t set n = 1 -- a comment"}},
		{"select 1;; select 2;", []string{"select 1", "select 2"}},
		{"select\n  1", []string{"select 1"}},
	}
	for _, tt := range tests {
		if got := split(tt.q); !slices.Equal(got, tt.want) {
			t.Errorf("split(%q) = %q, want %q", tt.q, got, tt.want)
		}
	}
}

// TestTransactionStatus: the server moves the transaction status as
// PostgreSQL does: an error inside a transaction fails it, every later
// statement but ROLLBACK (TO SAVEPOINT) is refused with 25P02, and a
// COMMIT of a failed transaction answers ROLLBACK.
func TestTransactionStatus(t *testing.T) {
	srv := &Server{Answer: func(_ int, sql string) Answer {
		if sql == "insert into t values (1)" {
			return Answer{Code: "23505"}
		}
		return Answer{}
	}}
	cc, err := pgx.ParseConfig("postgres://app@fake:5432/app?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cc.DialFunc = srv.Dial
	cc.LookupFunc = func(context.Context, string) ([]string, error) { return []string{"127.0.0.1"}, nil }
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Wait()
	defer conn.Close(ctx)
	pg := conn.PgConn()
	steps := []struct {
		sql    string
		code   string // the error's SQLSTATE, "" for none
		tag    string
		status byte
	}{
		{sql: "begin", tag: "BEGIN", status: 'T'},
		{sql: "savepoint a", tag: "SAVEPOINT", status: 'T'},
		{sql: "insert into t values (1)", code: "23505", status: 'E'},
		{sql: "select 1", code: "25P02", status: 'E'},
		{sql: "rollback to savepoint a", tag: "ROLLBACK", status: 'T'},
		{sql: "insert into t values (1)", code: "23505", status: 'E'},
		{sql: "commit", tag: "ROLLBACK", status: 'I'},
		{sql: "update t set n = 2", tag: "UPDATE 1", status: 'I'},
	}
	for _, s := range steps {
		res, err := pg.Exec(ctx, s.sql).ReadAll()
		var pgErr *pgconn.PgError
		switch {
		case s.code != "" && (!errors.As(err, &pgErr) || pgErr.Code != s.code):
			t.Errorf("%s: err = %v, want SQLSTATE %s", s.sql, err, s.code)
		case s.code == "" && (err != nil || len(res) != 1 || res[0].CommandTag.String() != s.tag):
			t.Errorf("%s: %v, %v; want tag %s", s.sql, res, err, s.tag)
		}
		if got := pg.TxStatus(); got != s.status {
			t.Errorf("%s: status %c, want %c", s.sql, got, s.status)
		}
	}
	if srv.Conns() != 1 || len(srv.Log()) != len(steps) {
		t.Errorf("%d sessions, %d statements; want 1 and %d", srv.Conns(), len(srv.Log()), len(steps))
	}
}
