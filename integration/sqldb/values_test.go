package sqldb

import (
	"context"
	"database/sql"
	"net"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxsql"
	"github.com/pgtx-go/pgtx/pgtxtest"
)

// valuesQuery selects a value of most of the types an application reads,
// NULLs among them.
const valuesQuery = `select true, 1::int2, 2::int4, 3::int8, 1.5::float4, 2.5::float8, 12.345::numeric(6,3),
	'text'::text, 'vc'::varchar(4), 'c'::char(3), 'name'::name, '\x0102'::bytea,
	'{"a": [1, 2]}'::json, '{"b": null}'::jsonb, '<x/>'::xml,
	'2024-02-29'::date, '2024-02-29 12:34:56.789'::timestamp, '2024-02-29 12:34:56.789+02'::timestamptz,
	'infinity'::date, '1 day 02:03:04'::interval, '12:34:56'::time,
	'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, '10.1.2.3/32'::inet, '10.0.0.0/8'::cidr, '08:00:2b:01:02:03'::macaddr,
	'{1,2,3}'::int4[], '{"x","y z"}'::text[], int4range(1, 5), 42::oid, 'B'::"char", 7::money,
	null::int4, null::text, null::timestamptz`

// TestValuesAsStdlibGivesThem: every value of valuesQuery reaches
// database/sql as pgx's stdlib gives it, whether the query is plain or a
// transaction's first statement (which pgtxsql sends with BEGIN, without
// asking for text results), and the column types say the same.
func TestValuesAsStdlibGivesThem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := pgtxtest.NewDatabase(t)
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	own := stdlib.OpenDB(*cc)
	t.Cleanup(func() { own.Close() })
	want, wantTypes := scanAll(t, ctx, own)

	pool := pgtxtest.NewPool(t)
	db := pgtxsql.OpenDB(pool)
	t.Cleanup(func() { db.Close() })
	ways := []struct {
		name string
		run  func(t *testing.T) ([]any, []string)
	}{
		{"plain", func(t *testing.T) ([]any, []string) { return scanAll(t, ctx, db) }},
		{"first statement of a transaction", func(t *testing.T) (got []any, types []string) {
			err := pgtxsql.Transaction(ctx, db, pgtx.ReadCommitted, func(ctx context.Context, tx *sql.Tx) error {
				got, types = scanAll(t, ctx, tx)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			return got, types
		}},
	}
	for _, w := range ways {
		t.Run(w.name, func(t *testing.T) {
			got, types := w.run(t)
			for i := range want {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("column %d (%s): got %#v, want %#v as pgx's stdlib gives it", i+1, wantTypes[i], got[i], want[i])
				}
			}
			if !reflect.DeepEqual(types, wantTypes) {
				t.Errorf("column types %v, want %v", types, wantTypes)
			}
		})
	}
}

// scanAll runs valuesQuery on q and returns its row's values, as
// database/sql hands them to a *any, and its columns' database types.
func scanAll(t *testing.T, ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) ([]any, []string) {
	t.Helper()
	rows, err := q.QueryContext(ctx, valuesQuery)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cts, err := rows.ColumnTypes()
	if err != nil {
		t.Fatal(err)
	}
	types := make([]string, len(cts))
	for i, ct := range cts {
		types[i] = ct.DatabaseTypeName() + " " + ct.ScanType().String()
	}
	if !rows.Next() {
		t.Fatalf("no row: %v", rows.Err())
	}
	vals := make([]any, len(cts))
	ptrs := make([]any, len(cts))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		t.Fatal(err)
	}
	return vals, types
}

// countingConn counts the writes on a connection: one per round trip the
// client starts.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(b)
}

// TestFirstQueryTravelsWithBegin: a transaction whose first statement is a
// query sends BEGIN alone the first time its text is seen (it asks for
// pgx's stdlib's result formats, which a statement sent with BEGIN cannot
// carry); once the text is known to need none, BEGIN travels with it, and
// the transaction costs 2 round trips. The values are stdlib's either way.
func TestFirstQueryTravelsWithBegin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var writes atomic.Int64
	pool := pgtxtest.NewPool(t, pgtxtest.WithConfig(func(c *pgtx.Config) {
		c.MaxConns = 1
		// The cancel pool, which warms its connection up with its own
		// statements whenever it connects, gets a connection string of
		// its own: only the transactions' connection is counted.
		c.CancelConnString = c.ConnString()
		c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return countingConn{conn, &writes}, nil
		}
	}))
	db := pgtxsql.OpenDB(pool)
	t.Cleanup(func() { db.Close() })
	read := func(query string) (n int64, s string) {
		t.Helper()
		var d time.Time
		err := pgtxsql.Transaction(ctx, db, pgtx.ReadCommitted, func(ctx context.Context, tx *sql.Tx) error {
			return tx.QueryRowContext(ctx, query, 41).Scan(&n, &s, &d)
		})
		if err != nil {
			t.Fatal(err)
		}
		return n, s
	}
	// The connection's setup and pgtx's own statements, on another text.
	for range 3 {
		read("select $1::int8, 'warm'::text, now()::date")
	}
	// A new text: BEGIN alone, pgx's statement cache prepares the text,
	// the query, COMMIT. Then the query with BEGIN, and COMMIT.
	for i, want := range []int64{4, 2, 2} {
		before := writes.Load()
		n, s := read("select $1::int8 + 1, 'x'::text, now()::date")
		if n != 42 || s != "x" {
			t.Errorf("transaction %d read %d, %q", i+1, n, s)
		}
		if got := writes.Load() - before; got != want {
			t.Errorf("transaction %d of the text: %d round trips, want %d", i+1, got, want)
		}
	}
}
