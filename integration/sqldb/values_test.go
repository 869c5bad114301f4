package sqldb

import (
	"context"
	"database/sql"
	"reflect"
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
