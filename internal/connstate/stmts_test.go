package connstate

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// fakeConn prepares every statement and records what it was asked.
type fakeConn struct {
	prepared    []string // the names given, "" for unnamed
	deallocated []string
	failPrepare error
	failDealloc error
}

func (f *fakeConn) Prepare(_ context.Context, name, sql string, _ []uint32) (*pgconn.StatementDescription, error) {
	if f.failPrepare != nil {
		return nil, f.failPrepare
	}
	f.prepared = append(f.prepared, name)
	return &pgconn.StatementDescription{Name: name, SQL: sql}, nil
}

func (f *fakeConn) Deallocate(_ context.Context, name string) error {
	f.deallocated = append(f.deallocated, name)
	return f.failDealloc
}

// filled returns a cache in mode holding n statements, s0 to s<n-1>.
func filled(t *testing.T, mode pgx.QueryExecMode, n int) (*Stmts, *fakeConn) {
	t.Helper()
	c, f := &Stmts{}, &fakeConn{}
	c.SetMode(mode)
	for i := range n {
		if _, err := c.Get(context.Background(), f, "s"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	return c, f
}

func TestSetMode(t *testing.T) {
	tests := []struct {
		mode      pgx.QueryExecMode
		on, named bool
	}{
		{pgx.QueryExecModeCacheStatement, true, true},
		{pgx.QueryExecModeCacheDescribe, true, false},
		{pgx.QueryExecModeDescribeExec, false, false},
		{pgx.QueryExecModeExec, false, false},
		{pgx.QueryExecModeSimpleProtocol, false, false},
	}
	for _, tt := range tests {
		var c Stmts
		c.SetMode(tt.mode)
		if c.On != tt.on || c.Named != tt.named {
			t.Errorf("%v: on %v named %v, want %v %v", tt.mode, c.On, c.Named, tt.on, tt.named)
		}
	}
}

// TestGet: a statement is prepared once, named in the named mode; a full
// cache forgets one (deallocating it when named) before preparing another.
func TestGet(t *testing.T) {
	tests := []struct {
		name        string
		mode        pgx.QueryExecMode
		n           int
		failDealloc error
		wantNames   bool
		wantDealloc int
		wantErr     bool
	}{
		{"named, room left", pgx.QueryExecModeCacheStatement, 3, nil, true, 0, false},
		{"unnamed, room left", pgx.QueryExecModeCacheDescribe, 3, nil, false, 0, false},
		{"named, full: one deallocated", pgx.QueryExecModeCacheStatement, StmtCacheSize, nil, true, 1, false},
		{"unnamed, full: one forgotten", pgx.QueryExecModeCacheDescribe, StmtCacheSize, nil, false, 0, false},
		{"named, full, the deallocate fails", pgx.QueryExecModeCacheStatement, StmtCacheSize, errors.New("broken"), true, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, f := filled(t, tt.mode, tt.n)
			f.failDealloc = tt.failDealloc
			again, err := c.Get(context.Background(), f, "s0")
			if err != nil || again.SQL != "s0" || len(f.prepared) != tt.n {
				t.Fatalf("a cached statement was prepared again (%d prepares, err %v)", len(f.prepared), err)
			}
			sd, err := c.Get(context.Background(), f, "new")
			if (err != nil) != tt.wantErr {
				t.Fatalf("Get = %v, want error %v", err, tt.wantErr)
			}
			if len(f.deallocated) != tt.wantDealloc {
				t.Errorf("deallocated %v, want %d", f.deallocated, tt.wantDealloc)
			}
			if c.Len() > StmtCacheSize {
				t.Errorf("the cache holds %d, more than %d", c.Len(), StmtCacheSize)
			}
			if tt.wantErr {
				return
			}
			if named := sd.Name != ""; named != tt.wantNames {
				t.Errorf("statement name %q, want named %v", sd.Name, tt.wantNames)
			}
			if tt.wantNames && sd.Name != "pgtx_"+strconv.Itoa(tt.n+1) {
				t.Errorf("statement name %q, want pgtx_%d", sd.Name, tt.n+1)
			}
		})
	}
}

// TestInvalidate: a statement that no longer exists (26000) forgets every
// one and the prepared id reads; a changed result type (0A000) forgets the
// statement; any other error forgets nothing.
func TestInvalidate(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		wantLen int
		xidKept bool
	}{
		{"26000: invalid_sql_statement_name", &pgconn.PgError{Code: "26000"}, 0, false},
		{"0A000: cached plan must not change result type", &pgconn.PgError{Code: "0A000"}, 2, true},
		{"another server error", &pgconn.PgError{Code: "23505"}, 3, true},
		{"a network error", errors.New("eof"), 3, true},
		{"no error", nil, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, f := filled(t, pgx.QueryExecModeCacheStatement, 3)
			c.XidPrepared = true
			c.Invalidate("s1", tt.err)
			if c.Len() != tt.wantLen || c.XidPrepared != tt.xidKept {
				t.Errorf("len %d xidPrepared %v, want %d %v", c.Len(), c.XidPrepared, tt.wantLen, tt.xidKept)
			}
			if _, err := c.Get(context.Background(), f, "s0"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPrepareFails: a statement that does not prepare is not kept.
func TestPrepareFails(t *testing.T) {
	c, f := &Stmts{}, &fakeConn{failPrepare: &pgconn.PgError{Code: "42601"}}
	if _, err := c.Get(context.Background(), f, "selec 1"); err == nil || c.Len() != 0 {
		t.Errorf("Get = %v with %d kept, want the error and none", err, c.Len())
	}
}
