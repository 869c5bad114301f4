package pgtx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

func TestBeginSQL(t *testing.T) {
	tests := []struct {
		iso    Isolation
		opts   Options
		want   string
		wantMs int64 // the statement_timeout set; -1: none
	}{
		{ReadCommitted, Options{}, "begin isolation level READ COMMITTED", -1},
		{RepeatableRead, Options{ReadOnly: true}, "begin isolation level REPEATABLE READ read only", -1},
		{Serializable, Options{ReadOnly: true, Deferrable: true}, "begin isolation level SERIALIZABLE read only deferrable", -1},
		{Serializable, Options{StatementTimeout: 1500 * time.Millisecond}, "begin isolation level SERIALIZABLE", 1500},
		{Serializable, Options{StatementTimeout: 10 * time.Microsecond}, "begin isolation level SERIALIZABLE", 1},
		{ReadCommitted, Options{StatementTimeout: -1}, "begin isolation level READ COMMITTED", 0},
	}
	for _, tt := range tests {
		a := &txAttempt{pool: &Pool{settings: settings{statementTimeout: 5 * time.Second}}, iso: tt.iso, opts: tt.opts}
		if got := beginSQLs[tt.iso][b2i(tt.opts.ReadOnly)][b2i(tt.opts.Deferrable)]; got != tt.want {
			t.Errorf("BEGIN of %v %+v = %q, want %q", tt.iso, tt.opts, got, tt.want)
		}
		ms, ok := a.statementTimeout(context.Background())
		if !ok {
			ms = -1
		}
		if ms != tt.wantMs {
			t.Errorf("statement_timeout of %v %+v = %d, want %d", tt.iso, tt.opts, ms, tt.wantMs)
		}
	}
}

// TestBeginSQLCarriesTheDeadline: with a deadline on ctx, the transaction's
// statement_timeout is the time left plus the margin, unless the timeout in
// force (the session's, or the call's) is shorter.
func TestBeginSQLCarriesTheDeadline(t *testing.T) {
	tests := []struct {
		name    string
		session time.Duration // the session's statement_timeout; 0: none
		call    time.Duration // Options.StatementTimeout
		left    time.Duration // time left before the deadline
		wantMin int64         // the statement_timeout sent, in ms, between wantMin and wantMax; -1: none sent
		wantMax int64
	}{
		{"deadline shorter than the session's", 5 * time.Second, 0, time.Second, 1000, 1100},
		{"deadline longer than the session's", 5 * time.Second, 0, time.Minute, -1, -1},
		{"no session timeout", 0, 0, time.Minute, 59000, 60100},
		{"call's timeout shorter than the deadline", 5 * time.Second, 200 * time.Millisecond, time.Second, 200, 200},
		{"deadline shorter than the call's", 5 * time.Second, 3 * time.Second, time.Second, 1000, 1100},
		{"call lifted the limit", 5 * time.Second, -1, 2 * time.Second, 2000, 2100},
		{"deadline all but passed", 5 * time.Second, 0, -time.Second, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(tt.left))
			defer cancel()
			a := &txAttempt{pool: &Pool{settings: settings{statementTimeout: tt.session}}, iso: Serializable, opts: Options{StatementTimeout: tt.call}}
			ms, ok := a.statementTimeout(ctx)
			if tt.wantMin < 0 {
				if ok {
					t.Errorf("statement_timeout %d ms, want none", ms)
				}
				return
			}
			if !ok || ms < tt.wantMin || ms > tt.wantMax {
				t.Errorf("statement_timeout %d ms (set %v), want one in [%d, %d] ms", ms, ok, tt.wantMin, tt.wantMax)
			}
		})
	}
}

func TestIsolationString(t *testing.T) {
	for iso, want := range map[Isolation]string{ReadCommitted: "READ COMMITTED", RepeatableRead: "REPEATABLE READ", Serializable: "SERIALIZABLE", 0: "Isolation(0)", 9: "Isolation(9)"} {
		if got := iso.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(iso), got, want)
		}
	}
}

// TestStatementTimeoutDoesNotAllocate: working out the timeout of a
// transaction costs nothing.
func TestStatementTimeoutDoesNotAllocate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	a := &txAttempt{pool: &Pool{settings: settings{statementTimeout: 5 * time.Second}}, iso: Serializable}
	if n := testing.AllocsPerRun(100, func() { _, _ = a.statementTimeout(ctx) }); n != 0 {
		t.Errorf("statementTimeout allocates %v times", n)
	}
}

// errRollbackTag stands for COMMIT answered with the tag ROLLBACK.
var errRollbackTag = errors.New("ROLLBACK")

// TestCommitClassification: what each answer to COMMIT means (the outcome
// table of DESIGN.md).
func TestCommitClassification(t *testing.T) {
	fatal := func(code, msg string) error {
		return &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: msg}
	}
	errorSev := func(code string) error {
		return &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: code}
	}
	tests := []struct {
		name          string
		err           error
		want          Class
		wantAmbiguous bool
	}{
		{"committed", nil, classNone, false},
		{"commit answered ROLLBACK", errRollbackTag, ClassPermanent, false},
		{"40001 at commit is a conflict", errorSev("40001"), ClassConflict, false},
		{"23505 at commit (deferred constraint)", errorSev("23505"), ClassPermanent, false},
		{"57014 at commit (deferred trigger cancelled)", errorSev("57014"), ClassTimeout, false},
		{"08007 at commit: transaction_resolution_unknown", errorSev("08007"), ClassAmbiguous, true},
		{"40003 at commit: statement_completion_unknown", errorSev("40003"), ClassAmbiguous, true},
		{"conn closed", pgconn.ErrConnClosed, ClassAmbiguous, true},
		{"EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), ClassAmbiguous, true},
		{"our commit timeout", fmt.Errorf("timeout: %w", context.DeadlineExceeded), ClassAmbiguous, true},
		{"FATAL 57P01 during sync-rep wait", fatal("57P01", "terminating connection due to administrator command"), ClassAmbiguous, true},
		{"ERROR 08006", errorSev("08006"), ClassAmbiguous, true},
		{"pooler killed the server connection", fatal("08P01", "query timeout"), ClassAmbiguous, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tag := pgconn.NewCommandTag("COMMIT")
			in := tt.err
			if in == errRollbackTag {
				tag, in = pgconn.NewCommandTag("ROLLBACK"), nil
			}
			class, err := commitOutcome(tag, in)
			if class != tt.want {
				t.Errorf("class = %v, want %v", class, tt.want)
			}
			if got := errors.Is(err, ErrCommitUnknown); got != tt.wantAmbiguous {
				t.Errorf("errors.Is(err, ErrCommitUnknown) = %v, want %v (err %v)", got, tt.wantAmbiguous, err)
			}
			if in != nil && !errors.Is(err, in) {
				t.Errorf("err = %v lost the original %v", err, tt.err)
			}
		})
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
