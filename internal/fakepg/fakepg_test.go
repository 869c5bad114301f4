package fakepg

import (
	"context"
	"errors"
	"slices"
	"strings"
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
	conn := srv.Connect(t, pgx.QueryExecModeSimpleProtocol)
	ctx := context.Background()
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

// TestExtendedProtocol: in every exec mode pgx has, a query gets its
// scripted rows (in the binary format where pgx asks for it, NULL as
// NULL), and in a batch an error skips the statements after it up to
// Sync, as the server skips them, while the transaction fails.
func TestExtendedProtocol(t *testing.T) {
	const (
		query = "select id, name, gone from t where id > $1"
		bad   = "update t set id = 0"
	)
	answer := func(_ int, sql string) Answer {
		switch {
		case strings.HasPrefix(sql, "select id, name, gone from t"): // the simple protocol has the argument in the text
			return Answer{Columns: []Column{{"id", 20}, {"name", 25}, {"gone", 16}},
				Rows: [][]any{{7, "seven", true}, {-8, nil, false}}}
		case sql == bad:
			return Answer{Code: "23505"}
		}
		return Answer{}
	}
	type row struct {
		id   int64
		name *string
		gone bool
	}
	seven := "seven"
	want := []row{{7, &seven, true}, {-8, nil, false}}
	modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			srv := &Server{Answer: answer}
			conn := srv.Connect(t, mode)
			ctx := context.Background()
			rows, err := conn.Query(ctx, query, "6")
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
				var x row
				err := r.Scan(&x.id, &x.name, &x.gone)
				return x, err
			})
			if err != nil || len(got) != 2 || got[0].id != 7 || *got[0].name != "seven" || !got[0].gone ||
				got[1].id != -8 || got[1].name != nil || got[1].gone {
				t.Errorf("rows %+v, %v; want %+v", got, err, want)
			}

			if mode != pgx.QueryExecModeSimpleProtocol {
				st := srv.Log()[len(srv.Log())-1]
				if st.SQL != query || len(st.Params) != 1 || st.Params[0] == nil || *st.Params[0] != "6" {
					t.Errorf("the server logged %+v, want the query with its parameter 6", st)
				}
			}
			if _, err := conn.Exec(ctx, "begin"); err != nil {
				t.Fatal(err)
			}
			b := &pgx.Batch{}
			b.Queue("update t set id = 1")
			b.Queue(bad)
			b.Queue("update t set id = 2")
			err = conn.SendBatch(ctx, b).Close()
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
				t.Errorf("batch: %v, want 23505", err)
			}
			if s := conn.PgConn().TxStatus(); s != 'E' {
				t.Errorf("status %c after the failed batch, want E", s)
			}
			if _, err := conn.Exec(ctx, "rollback"); err != nil {
				t.Fatal(err)
			}
			log := srv.SQL()
			if slices.Contains(log, "update t set id = 2") || !slices.Contains(log, bad) {
				t.Errorf("the server ran %q: want the failing statement, and none after it", log)
			}
		})
	}
}

// TestExtendedProtocolPipeline: a pipeline's Flush makes the results
// before it arrive while the rest is still to come, and a statement whose
// answer closes the connection ends the session, with what came before
// it delivered.
func TestExtendedProtocolPipeline(t *testing.T) {
	srv := &Server{Answer: func(_ int, sql string) Answer {
		switch sql {
		case "select 42":
			return Answer{Columns: []Column{{"n", 23}}, Rows: [][]any{{42}}}
		case "commit":
			return Answer{Close: true}
		}
		return Answer{}
	}}
	conn := srv.Connect(t, pgx.QueryExecModeExec)
	ctx := context.Background()
	p := conn.PgConn().StartPipeline(ctx)
	p.SendQueryParams("select 42", nil, nil, nil, nil)
	p.SendFlushRequest()
	p.SendQueryParams("commit", nil, nil, nil, nil)
	p.SendPipelineSync()
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	res, err := p.GetResults()
	rr, ok := res.(*pgconn.ResultReader)
	if err != nil || !ok {
		t.Fatalf("first result %T, %v", res, err)
	}
	r := rr.Read()
	if r.Err != nil || len(r.Rows) != 1 || string(r.Rows[0][0]) != "42" {
		t.Errorf("select 42 read %q, %v", r.Rows, r.Err)
	}
	if res, err = p.GetResults(); err == nil {
		if rr, ok := res.(*pgconn.ResultReader); ok {
			_, err = rr.Close()
		}
	}
	if err == nil {
		t.Error("the COMMIT whose answer was lost returned no error")
	}
	_ = p.Close()
	if !conn.IsClosed() {
		t.Error("the connection is still open after its answer was lost")
	}
}

// TestPrepareInSQL: a statement prepared with SQL's PREPARE is executed by
// a simple EXECUTE and by the extended protocol's Bind, each answered as
// the statement prepared.
func TestPrepareInSQL(t *testing.T) {
	const read = "select pg_current_xact_id_if_assigned()::text::int8 as pgtx_xid"
	srv := &Server{Answer: func(_ int, sql string) Answer {
		if sql == read {
			return Answer{Columns: []Column{{"pgtx_xid", 20}}, Rows: [][]any{{742}}}
		}
		return Answer{}
	}}
	conn := srv.Connect(t, pgx.QueryExecModeExec)
	ctx := context.Background()
	pg := conn.PgConn()
	if err := pg.Exec(ctx, "prepare pgtx_xid as "+read).Close(); err != nil {
		t.Fatal(err)
	}
	res, err := pg.Exec(ctx, "execute pgtx_xid").ReadAll()
	if err != nil || len(res) != 1 || len(res[0].Rows) != 1 || string(res[0].Rows[0][0]) != "742" {
		t.Errorf("execute pgtx_xid: %v, %v; want the row 742", res, err)
	}
	r := pg.ExecPrepared(ctx, "pgtx_xid", nil, nil, []int16{1}).Read()
	if r.Err != nil || len(r.Rows) != 1 || len(r.Rows[0][0]) != 8 || r.Rows[0][0][7] != 742%256 {
		t.Errorf("the prepared statement bound: %v, %v; want 742 in binary", r.Rows, r.Err)
	}
}
