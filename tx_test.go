package pgtx

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/internal/txn"
)

// testListener accepts TCP connections on 127.0.0.1 and hands each to
// handle, until the test ends.
func testListener(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

// countingListener accepts TCP connections and counts them, so a test can
// prove that nothing was sent to the "server".
func countingListener(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	accepted = new(atomic.Int64)
	addr = testListener(t, func(c net.Conn) {
		accepted.Add(1)
		_ = c.Close()
	})
	return addr, accepted
}

func TestTransactionBadInputSendsNothing(t *testing.T) {
	addr, accepted := countingListener(t)
	cfg, err := ParseConfig("postgres://u@" + addr + "/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.CancelMode = CancelModeProtocol // no warm cancel-pool connection to count
	pool, err := NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	fn := func(context.Context, pgx.Tx) error { t.Error("fn ran"); return nil }
	tests := []struct {
		name string
		call func() error
	}{
		{"zero isolation", func() error { return Transaction(context.Background(), pool, 0, fn) }},
		{"unknown isolation", func() error { return Transaction(context.Background(), pool, Isolation(42), fn) }},
		{"negative isolation", func() error { return Transaction(context.Background(), pool, Isolation(-1), fn) }},
		{"nil pool", func() error { return Transaction(context.Background(), nil, Serializable, fn) }},
		{"zero Pool", func() error { return Transaction(context.Background(), &Pool{}, Serializable, fn) }},
		{"Pool not made by New", func() error { return Transaction(context.Background(), &Pool{pool: pool.pool}, Serializable, fn) }},
		{"nil fn", func() error { return Transaction(context.Background(), pool, Serializable, nil) }},
		//lint:ignore SA1012 a nil context is the bad input under test
		{"nil context", func() error { return Transaction(nil, pool, Serializable, fn) }},
		{"zero isolation with options", func() error { return TransactionWithOptions(context.Background(), pool, 0, Options{}, fn) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("err = %v, want ErrInvalidArgument", err)
			}
		})
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("%d connections were opened for bad input", n)
	}
}

// TestIsolationsMatch: internal/txn numbers and names the levels as
// Isolation does (its TestBeginSQL has the statements).
func TestIsolationsMatch(t *testing.T) {
	for iso := ReadCommitted; iso <= Serializable; iso++ {
		if got, want := txn.BeginSQL(int(iso), false, false), "begin isolation level "+iso.String(); got != want {
			t.Errorf("txn.BeginSQL(%d) = %q, want %q", int(iso), got, want)
		}
	}
}

func TestIsolationString(t *testing.T) {
	for iso, want := range map[Isolation]string{ReadCommitted: "READ COMMITTED", RepeatableRead: "REPEATABLE READ", Serializable: "SERIALIZABLE", 0: "Isolation(0)", 9: "Isolation(9)"} {
		if got := iso.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(iso), got, want)
		}
	}
}

// TestZeroPoolIsAnErrorNotAPanic: every method of a Pool that New did not
// make returns ErrInvalidArgument (or nothing to do), never a panic.
func TestZeroPoolIsAnErrorNotAPanic(t *testing.T) {
	ctx := context.Background()
	p := &Pool{}
	if _, err := p.Exec(ctx, "select 1"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Exec: %v", err)
	}
	rows, err := p.Query(ctx, "select 1")
	if !errors.Is(err, ErrInvalidArgument) || rows.Next() || !errors.Is(rows.Err(), ErrInvalidArgument) {
		t.Errorf("Query: %v", err)
	}
	rows.Close()
	var n int
	if err := p.QueryRow(ctx, "select 1").Scan(&n); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("QueryRow: %v", err)
	}
	if err := p.SendBatch(ctx, &pgx.Batch{}).Close(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("SendBatch: %v", err)
	}
	if _, err := p.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"a"}, pgx.CopyFromRows(nil)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("CopyFrom: %v", err)
	}
	if s := p.Stats(); s.Pool != nil {
		t.Errorf("Stats: %+v", s)
	}
	p.Close()
	var nilPool *Pool
	_ = nilPool.Stats()
	nilPool.Close()
	if _, err := nilPool.Exec(ctx, "select 1"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Exec on a nil Pool: %v", err)
	}
}
