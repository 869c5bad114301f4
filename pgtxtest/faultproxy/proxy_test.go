package faultproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
	"go.uber.org/goleak"
)

// testTimeout bounds every database operation of a proxy or bouncer test.
const testTimeout = 60 * time.Second

// proxyEnv is a fresh database reachable directly and through a Proxy.
type proxyEnv struct {
	proxy    *Proxy
	direct   string // DSN straight to the server
	viaProxy string // DSN of the same database through the proxy
	// lockKey is a session advisory lock that a proxied connection takes so
	// that the test can wait, over a direct connection, until that
	// connection's server backend has exited (and so has processed
	// everything the proxy forwarded to it). It is random because
	// the tests of other packages may share the server.
	lockKey int64
}

// newProxyEnv creates a database on the shared server and a proxy in front
// of the server.
func newProxyEnv(t *testing.T) *proxyEnv {
	t.Helper()
	srv := server.Shared(t)
	if srv.Addr() == "" {
		t.Skip("the test server is reached over a Unix socket; the proxy needs TCP")
	}
	dsn := newTestDatabase(t, srv)
	p := New(t, srv.Addr())
	via, err := p.DSN(dsn)
	if err != nil {
		t.Fatalf("proxy DSN: %v", err)
	}
	return &proxyEnv{proxy: p, direct: dsn, viaProxy: via, lockKey: rand.Int64()}
}

// testContext returns a context that bounds a test's database work.
func testContext(t *testing.T) context.Context {
	t.Helper()
	return kittest.Context(t, testTimeout)
}

// requireConnCut fails the test unless err is a connection failure rather than
// an error reported by the server.
func requireConnCut(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got no error, want the connection to be cut", what)
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		t.Fatalf("%s: got server error %v, want a connection error", what, pgErr)
	}
}

// holdBackendLock makes c's server backend hold e.lockKey until it exits;
// see waitBackendGone.
func (e *proxyEnv) holdBackendLock(t *testing.T, ctx context.Context, c *pgx.Conn) {
	t.Helper()
	kittest.ExecOK(t, ctx, c, "select pg_advisory_lock($1)", e.lockKey)
}

// waitBackendGone blocks until the backend that called holdBackendLock has
// exited, which it does only after processing every byte the proxy
// forwarded before cutting the connection.
func (e *proxyEnv) waitBackendGone(t *testing.T, ctx context.Context, direct *pgx.Conn) {
	t.Helper()
	tx, err := direct.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "set local lock_timeout = '30s'"); err != nil {
		t.Fatalf("set lock_timeout: %v", err)
	}
	if _, err := tx.Exec(ctx, "select pg_advisory_xact_lock($1)", e.lockKey); err != nil {
		t.Fatalf("wait for the cut backend to exit: %v", err)
	}
}

// proxyRowCount returns how many rows of table t have the given id.
func proxyRowCount(t *testing.T, ctx context.Context, c *pgx.Conn, id int) int {
	t.Helper()
	var n int
	if err := c.QueryRow(ctx, "select count(*) from t where id = $1", id).Scan(&n); err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return n
}

func TestProxyPassThrough(t *testing.T) {
	e := newProxyEnv(t)
	ctx := testContext(t)
	c := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.viaProxy))
	kittest.ExecOK(t, ctx, c, "create table items (id int primary key, note text)")
	big := strings.Repeat("x", 300<<10)

	tests := []struct {
		name string
		run  func(t *testing.T) error
	}{
		{"simple protocol", func(t *testing.T) error {
			var n int
			if err := c.QueryRow(ctx, "select 41 + 1", pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
				return err
			}
			return proxyWantEqual("result", n, 42)
		}},
		{"extended protocol", func(t *testing.T) error {
			var n int
			if err := c.QueryRow(ctx, "select $1::int + 1", 41).Scan(&n); err != nil {
				return err
			}
			return proxyWantEqual("result", n, 42)
		}},
		{"extended protocol unprepared", func(t *testing.T) error {
			var s string
			if err := c.QueryRow(ctx, "select $1::text || 'b'", pgx.QueryExecModeExec, "a").Scan(&s); err != nil {
				return err
			}
			return proxyWantEqual("result", s, "ab")
		}},
		{"multi-row simple", func(t *testing.T) error {
			return proxySumRows(ctx, c, "select g from generate_series(1, 20000) g", pgx.QueryExecModeSimpleProtocol)
		}},
		{"multi-row extended", func(t *testing.T) error {
			return proxySumRows(ctx, c, "select g from generate_series(1, $1::int) g", 20000)
		}},
		{"large bind parameter", func(t *testing.T) error {
			var n int
			if err := c.QueryRow(ctx, "select length($1::text)", big).Scan(&n); err != nil {
				return err
			}
			return proxyWantEqual("length", n, len(big))
		}},
		{"large simple query", func(t *testing.T) error {
			var n int
			if err := c.QueryRow(ctx, "select length('"+big+"')").Scan(&n); err != nil {
				return err
			}
			return proxyWantEqual("length", n, len(big))
		}},
		{"transaction", func(t *testing.T) error {
			tx, err := c.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "insert into items values ($1, $2)", 1, "one"); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}},
		{"copy from", func(t *testing.T) error {
			rows := make([][]any, 5000)
			for i := range rows {
				rows[i] = []any{i + 100, fmt.Sprint("note ", i)}
			}
			n, err := c.CopyFrom(ctx, pgx.Identifier{"items"}, []string{"id", "note"}, pgx.CopyFromRows(rows))
			if err != nil {
				return err
			}
			return proxyWantEqual("copied", n, int64(len(rows)))
		}},
		{"batch", func(t *testing.T) error {
			b := &pgx.Batch{}
			b.Queue("select count(*) from items")
			b.Queue("select $1::int", 7)
			br := c.SendBatch(ctx, b)
			var count, seven int
			if err := br.QueryRow().Scan(&count); err != nil {
				return err
			}
			if err := br.QueryRow().Scan(&seven); err != nil {
				return err
			}
			if err := br.Close(); err != nil {
				return err
			}
			if err := proxyWantEqual("count", count, 5001); err != nil {
				return err
			}
			return proxyWantEqual("seven", seven, 7)
		}},
		{"server error passes through", func(t *testing.T) error {
			_, err := c.Exec(ctx, "select 1/0")
			pgErr, ok := errors.AsType[*pgconn.PgError](err)
			if !ok || pgErr.Code != "22012" {
				return fmt.Errorf("got %v, want division_by_zero", err)
			}
			return nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.run(t); err != nil {
				t.Fatal(err)
			}
		})
	}
	if s := e.proxy.Stats(); s.CutsAfterForward+s.CutsBeforeForward+s.CutsAll != 0 {
		t.Errorf("stats %+v: want no cuts", s)
	}
}

// proxyWantEqual returns an error unless got == want.
func proxyWantEqual[T comparable](what string, got, want T) error {
	if got != want {
		return fmt.Errorf("%s = %v, want %v", what, got, want)
	}
	return nil
}

// proxySumRows runs a generate_series query over 1..20000 and checks every row
// arrived.
func proxySumRows(ctx context.Context, c *pgx.Conn, sql string, args ...any) error {
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	var n, sum int
	for rows.Next() {
		var g int
		if err := rows.Scan(&g); err != nil {
			return err
		}
		n++
		sum += g
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := proxyWantEqual("rows", n, 20000); err != nil {
		return err
	}
	return proxyWantEqual("sum", sum, 20000*20001/2)
}

func TestProxyCancelRequest(t *testing.T) {
	e := newProxyEnv(t)
	ctx := testContext(t)
	c, done := e.startCancellable(t, ctx)
	before := e.proxy.Stats().Accepted
	if err := c.PgConn().CancelRequest(ctx); err != nil {
		t.Fatalf("cancel request: %v", err)
	}
	requireCanceled(t, <-done)
	if got := e.proxy.Stats().Accepted - before; got != 1 {
		t.Errorf("cancel request used %d proxied connections, want 1", got)
	}
	kittest.ExecOK(t, ctx, c, "select 1")
}

func TestProxyCutOnCommit(t *testing.T) {
	e := newProxyEnv(t)
	ctx := testContext(t)
	direct := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.direct))
	kittest.ExecOK(t, ctx, direct, "create table t (id int primary key)")

	c := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.viaProxy))
	e.holdBackendLock(t, ctx, c)
	e.proxy.CutOnCommit(1)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if _, err := tx.Exec(ctx, "insert into t values (1)"); err != nil {
		t.Fatalf("insert: %v", err)
	}
	if _, err := tx.Exec(ctx, "insert into t values ($1)", 2); err != nil {
		t.Fatalf("insert: %v", err)
	}
	requireConnCut(t, "commit", tx.Commit(ctx))
	if !c.IsClosed() {
		t.Error("connection still open after the cut")
	}

	e.waitBackendGone(t, ctx, direct)
	for _, id := range []int{1, 2} {
		if n := proxyRowCount(t, ctx, direct, id); n != 1 {
			t.Errorf("row %d: %d rows on the server after the cut commit, want 1 (COMMIT not applied)", id, n)
		}
	}
	if s := e.proxy.Stats(); s.CutsAfterForward != 1 {
		t.Errorf("stats %+v: want CutsAfterForward 1", s)
	}

	// The rule was one-shot: the next commit goes through.
	c2 := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.viaProxy))
	tx2, err := c2.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if _, err := tx2.Exec(ctx, "insert into t values (3)"); err != nil {
		t.Fatalf("insert: %v", err)
	}
	if err := tx2.Commit(ctx); err != nil {
		t.Fatalf("second commit: %v", err)
	}
	if n := proxyRowCount(t, ctx, direct, 3); n != 1 {
		t.Errorf("row 3: %d rows, want 1", n)
	}
}

func TestProxyCutStatement(t *testing.T) {
	modes := []struct {
		name  string
		mode  pgx.QueryExecMode
		prime bool // execute the statement once before arming the rule
	}{
		{"simple protocol", pgx.QueryExecModeSimpleProtocol, false},
		{"exec", pgx.QueryExecModeExec, false},
		{"describe exec", pgx.QueryExecModeDescribeExec, false},
		{"cache describe", pgx.QueryExecModeCacheDescribe, true},
		{"cache statement", pgx.QueryExecModeCacheStatement, false},
		{"cache statement reused", pgx.QueryExecModeCacheStatement, true},
	}
	kinds := []struct {
		name    string
		arm     func(p *Proxy, match func(string) bool)
		wantRow bool
		stats   func(Stats) int64
	}{
		{"after forward", func(p *Proxy, m func(string) bool) { p.CutAfterForward(m, 1) }, true,
			func(s Stats) int64 { return s.CutsAfterForward }},
		{"before forward", func(p *Proxy, m func(string) bool) { p.CutBeforeForward(m, 1) }, false,
			func(s Stats) int64 { return s.CutsBeforeForward }},
	}
	const insert = "insert into t (id) values ($1)"
	for _, kind := range kinds {
		for _, mode := range modes {
			t.Run(kind.name+"/"+mode.name, func(t *testing.T) {
				e := newProxyEnv(t)
				ctx := testContext(t)
				direct := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.direct))
				kittest.ExecOK(t, ctx, direct, "create table t (id int primary key)")
				c := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.viaProxy))
				e.holdBackendLock(t, ctx, c)
				if mode.prime {
					kittest.ExecOK(t, ctx, c, insert, mode.mode, 1)
				}

				kind.arm(e.proxy, MatchPrefix("INSERT into t"))
				_, err := c.Exec(ctx, insert, mode.mode, 2)
				requireConnCut(t, "insert", err)

				e.waitBackendGone(t, ctx, direct)
				want := 0
				if kind.wantRow {
					want = 1
				}
				if n := proxyRowCount(t, ctx, direct, 2); n != want {
					t.Errorf("%d rows on the server after the cut, want %d", n, want)
				}
				if got := kind.stats(e.proxy.Stats()); got != 1 {
					t.Errorf("stats %+v: want one cut of this kind", e.proxy.Stats())
				}
			})
		}
	}
}

func TestProxyRuleCounts(t *testing.T) {
	tests := []struct {
		name     string
		n        int
		wantCuts []bool // per commit, in order
	}{
		{"one-shot", 1, []bool{true, false, false}},
		{"twice", 2, []bool{true, true, false}},
		{"every time", 0, []bool{true, true, true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newProxyEnv(t)
			ctx := testContext(t)
			e.proxy.CutOnCommit(tc.n)
			for i, wantCut := range tc.wantCuts {
				c := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.viaProxy))
				tx, err := c.Begin(ctx)
				if err != nil {
					t.Fatalf("begin %d: %v", i, err)
				}
				err = tx.Commit(ctx)
				if wantCut {
					requireConnCut(t, fmt.Sprint("commit ", i), err)
				} else if err != nil {
					t.Fatalf("commit %d: %v", i, err)
				}
			}
			want := int64(0)
			for _, cut := range tc.wantCuts {
				if cut {
					want++
				}
			}
			if s := e.proxy.Stats(); s.CutsAfterForward != want {
				t.Errorf("stats %+v: want CutsAfterForward %d", s, want)
			}
		})
	}
}

func TestProxyRefuseNew(t *testing.T) {
	e := newProxyEnv(t)
	ctx := testContext(t)
	cfg := kittest.ConnConfig(t, e.viaProxy)
	established := kittest.ConnectConfig(t, ctx, cfg)

	e.proxy.RefuseNew(true)
	if c, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		_ = c.Close(ctx)
		t.Fatal("connect succeeded while RefuseNew(true)")
	}
	if s := e.proxy.Stats(); s.Refused < 1 {
		t.Errorf("stats %+v: want Refused >= 1", s)
	}
	kittest.ExecOK(t, ctx, established, "select 1")

	e.proxy.RefuseNew(false)
	c := kittest.ConnectConfig(t, ctx, cfg)
	kittest.ExecOK(t, ctx, c, "select 1")
}

// TestProxyRejectNew: while RejectNew has a code, a new connection fails
// with a FATAL server error of that code and the server's words for it;
// established connections keep working, and an empty code stops it.
func TestProxyRejectNew(t *testing.T) {
	e := newProxyEnv(t)
	ctx := testContext(t)
	cfg := kittest.ConnConfig(t, e.viaProxy)
	established := kittest.ConnectConfig(t, ctx, cfg)

	tests := []struct{ code, msg string }{
		{"57P03", "the database system is starting up"},
		{"53300", "sorry, too many clients already"},
		{"08004", "connection rejected"},
	}
	for i, tt := range tests {
		e.proxy.RejectNew(tt.code)
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			_ = c.Close(ctx)
			t.Fatalf("connect succeeded while RejectNew(%q)", tt.code)
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != tt.code || pgErr.Severity != "FATAL" || pgErr.Message != tt.msg {
			t.Errorf("RejectNew(%q): err = %v, want FATAL %s %q", tt.code, err, tt.code, tt.msg)
		}
		if s := e.proxy.Stats(); s.Rejected != int64(i+1) {
			t.Errorf("stats %+v: want Rejected %d", s, i+1)
		}
	}
	kittest.ExecOK(t, ctx, established, "select 1")

	e.proxy.RejectNew("")
	c := kittest.ConnectConfig(t, ctx, cfg)
	kittest.ExecOK(t, ctx, c, "select 1")
}

func TestProxySetLatency(t *testing.T) {
	const d = 150 * time.Millisecond
	e := newProxyEnv(t)
	ctx := testContext(t)
	cfg := kittest.ConnConfig(t, e.viaProxy)
	c := kittest.ConnectConfig(t, ctx, cfg)

	tests := []struct {
		name string
		run  func() error
	}{
		{"connect", func() error {
			c, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				return err
			}
			return c.Close(ctx)
		}},
		{"simple query", func() error {
			_, err := c.Exec(ctx, "select 1", pgx.QueryExecModeSimpleProtocol)
			return err
		}},
		{"extended query", func() error {
			_, err := c.Exec(ctx, "select $1::int", pgx.QueryExecModeExec, 1)
			return err
		}},
	}
	e.proxy.SetLatency(d)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			if err := tc.run(); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took < d {
				t.Errorf("took %v with latency %v, want at least the latency", took, d)
			}
		})
	}
	e.proxy.SetLatency(0)
	kittest.ExecOK(t, ctx, c, "select 1")
}

// startCancellable opens a proxied connection and starts a statement on it
// that runs until cancelled; it returns the connection and the channel that
// gets the statement's error, once the statement is known to be running.
func (e *proxyEnv) startCancellable(t *testing.T, ctx context.Context) (*pgx.Conn, <-chan error) {
	t.Helper()
	started := make(chan struct{}, 1)
	cfg := kittest.ConnConfig(t, e.viaProxy)
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if n.Message == "started" {
			select {
			case started <- struct{}{}:
			default:
			}
		}
	}
	c := kittest.ConnectConfig(t, ctx, cfg)
	done := make(chan error, 1)
	go func() {
		// The server flushes the notice at once, so once it arrives the
		// statement is running and a cancel request will interrupt it.
		_, err := c.Exec(ctx, "do $$ begin raise notice 'started'; perform pg_sleep(60); end $$")
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("statement ended early: %v", err)
	}
	return c, done
}

// requireCanceled fails the test unless err is query_canceled.
func requireCanceled(t *testing.T, err error) {
	t.Helper()
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "57014" {
		t.Fatalf("got %v, want query_canceled (57014)", err)
	}
}

func TestProxyConnLatencyCancelRequest(t *testing.T) {
	const d = 500 * time.Millisecond
	e := newProxyEnv(t)
	ctx := testContext(t)
	other := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.viaProxy))
	c, done := e.startCancellable(t, ctx)
	e.proxy.SetConnLatency(ConnCancelRequest, d)

	// Sessions are not held: neither before nor while a cancel request is.
	start := time.Now()
	kittest.ExecOK(t, ctx, other, "select 1")
	if took := time.Since(start); took >= d {
		t.Errorf("a session's round trip took %v with cancel-request latency %v, want it not held", took, d)
	}

	start = time.Now()
	cancelled := make(chan error, 1)
	go func() { cancelled <- c.PgConn().CancelRequest(ctx) }()
	roundTrip := time.Now()
	kittest.ExecOK(t, ctx, other, "select 1")
	if took := time.Since(roundTrip); took >= d {
		t.Errorf("a session's round trip during a held cancel request took %v, want it not held", took)
	}
	if err := <-cancelled; err != nil {
		t.Fatalf("cancel request: %v", err)
	}
	if took := time.Since(start); took < d {
		t.Errorf("cancel request acknowledged after %v, want at least the latency %v", took, d)
	}
	requireCanceled(t, <-done)
	if took := time.Since(start); took < d {
		t.Errorf("statement cancelled %v after the cancel request, want at least the latency %v", took, d)
	}
	kittest.ExecOK(t, ctx, c, "select 1")
}

func TestProxyConnLatencySessionSparesCancel(t *testing.T) {
	e := newProxyEnv(t)
	ctx := testContext(t)
	c, done := e.startCancellable(t, ctx)
	e.proxy.SetConnLatency(ConnSession, time.Hour)

	cancelCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.PgConn().CancelRequest(cancelCtx); err != nil {
		t.Fatalf("cancel request with session latency: %v", err)
	}
	requireCanceled(t, <-done)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("cancel with session latency took %v, want it not held", took)
	}
	e.proxy.Reset()
	kittest.ExecOK(t, ctx, c, "select 1")
}

func TestProxyConnLatencySettings(t *testing.T) {
	p := New(t, "127.0.0.1:1") // never dialled
	const ms = time.Millisecond
	type want struct{ session, cancel, unknown time.Duration }
	steps := []struct {
		name string
		do   func()
		want want
	}{
		{"none", func() {}, want{}},
		{"for all", func() { p.SetLatency(100 * ms) }, want{100 * ms, 100 * ms, 100 * ms}},
		{"cancel above all", func() { p.SetConnLatency(ConnCancelRequest, 300*ms) }, want{100 * ms, 300 * ms, 100 * ms}},
		{"session below all", func() { p.SetConnLatency(ConnSession, 50*ms) }, want{100 * ms, 300 * ms, 100 * ms}},
		{"all removed", func() { p.SetLatency(0) }, want{50 * ms, 300 * ms, 0}},
		{"unknown types ignored", func() {
			for _, c := range []ConnType{0, -1, ConnCancelRequest + 1, 1 << 30} {
				p.SetConnLatency(c, time.Hour)
			}
		}, want{50 * ms, 300 * ms, 0}},
		{"negative removes", func() { p.SetConnLatency(ConnCancelRequest, -time.Second) }, want{50 * ms, 0, 0}},
		{"reset clears types", func() {
			p.SetLatency(time.Second)
			p.SetConnLatency(ConnCancelRequest, time.Second)
			p.Reset()
		}, want{}},
	}
	for _, step := range steps {
		step.do()
		got := want{p.latencyFor(ConnSession), p.latencyFor(ConnCancelRequest), p.latencyFor(ConnCancelRequest + 1)}
		if got != step.want {
			t.Errorf("%s: latencies (session, cancel, unknown) = %v, want %v", step.name, got, step.want)
		}
	}
	for c, want := range map[ConnType]string{ConnSession: "session", ConnCancelRequest: "cancel request", 7: "ConnType(7)"} {
		if got := c.String(); got != want {
			t.Errorf("ConnType(%d).String() = %q, want %q", int(c), got, want)
		}
	}
}

func TestProxyCutAll(t *testing.T) {
	e := newProxyEnv(t)
	ctx := testContext(t)
	cfg := kittest.ConnConfig(t, e.viaProxy)
	conns := []*pgx.Conn{kittest.ConnectConfig(t, ctx, cfg), kittest.ConnectConfig(t, ctx, cfg)}
	for _, c := range conns {
		kittest.ExecOK(t, ctx, c, "select 1")
	}
	if n := e.proxy.CutAll(); n != len(conns) {
		t.Fatalf("CutAll() = %d, want %d", n, len(conns))
	}
	for i, c := range conns {
		_, err := c.Exec(ctx, "select 1")
		requireConnCut(t, fmt.Sprint("query on connection ", i), err)
	}
	c := kittest.ConnectConfig(t, ctx, cfg)
	kittest.ExecOK(t, ctx, c, "select 1")
	if s := e.proxy.Stats(); s.CutsAll != int64(len(conns)) {
		t.Errorf("stats %+v: want CutsAll %d", s, len(conns))
	}
}

// noAnswerWait is how long a client waits for an answer that a stalled
// connection must never deliver.
const noAnswerWait = time.Second

// requireNoAnswer fails the test unless err says the client gave up waiting
// for an answer, rather than getting one or seeing its connection close.
func requireNoAnswer(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got an answer, want none", what)
	}
	if !errors.Is(err, context.DeadlineExceeded) && !pgconn.Timeout(err) {
		t.Fatalf("%s: got %v, want the client to time out waiting", what, err)
	}
}

// giveUp closes c's socket at once, as a client that timed out and gave up
// does. (pgx's own close of a timed-out connection waits for its cancel
// request, which the proxy holds while the connection is stalled, and for
// the server to close the connection.)
func giveUp(c *pgx.Conn) {
	_ = c.PgConn().Conn().Close()
}

// waitStalledClientsEnded waits until the proxy has seen the client side of
// each of its n stalled connections end, so that what the server shows
// afterwards is what it shows after the clients gave up.
func waitStalledClientsEnded(t *testing.T, ctx context.Context, p *Proxy, n int) {
	t.Helper()
	var ended []<-chan struct{}
	for _, pc := range p.snapshot() {
		if pc.stalled.Load() {
			ended = append(ended, pc.clientEnded)
		}
	}
	if len(ended) != n {
		t.Fatalf("%d stalled connections, want %d", len(ended), n)
	}
	for _, ch := range ended {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("the proxy never saw a stalled connection's client leave: %v", ctx.Err())
		}
	}
}

// backendState returns the pg_stat_activity state of the backend with the
// given process ID, and whether the backend exists.
func backendState(t *testing.T, ctx context.Context, direct *pgx.Conn, pid uint32) (string, bool) {
	t.Helper()
	var state *string
	err := direct.QueryRow(ctx, "select state from pg_stat_activity where pid = $1", int64(pid)).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false
	}
	if err != nil {
		t.Fatalf("pg_stat_activity of backend %d: %v", pid, err)
	}
	if state == nil {
		return "", true
	}
	return *state, true
}

// requireBackendState fails the test unless the backend with the given
// process ID exists and is in the given state.
func requireBackendState(t *testing.T, ctx context.Context, direct *pgx.Conn, pid uint32, want string) {
	t.Helper()
	got, ok := backendState(t, ctx, direct, pid)
	if !ok {
		t.Fatalf("backend %d is gone, want it alive and %q", pid, want)
	}
	if got != want {
		t.Fatalf("backend %d is %q, want %q", pid, got, want)
	}
}

// waitBackendExit polls pg_stat_activity until the backend with the given
// process ID is gone, for at most 30 seconds.
func waitBackendExit(t *testing.T, ctx context.Context, direct *pgx.Conn, pid uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		state, ok := backendState(t, ctx, direct, pid)
		if !ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("backend %d still %q: %v", pid, state, ctx.Err())
		case <-tick.C:
		}
	}
}

// rowLocked reports whether row id of table t is locked by another
// transaction, trying to lock it from direct without waiting.
func rowLocked(t *testing.T, ctx context.Context, direct *pgx.Conn, id int) bool {
	t.Helper()
	tx, err := direct.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "select id from t where id = $1 for update nowait", id)
	if err == nil {
		return false
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "55P03" {
		return true
	}
	t.Fatalf("lock row %d: %v", id, err)
	return false
}

// lockRow begins a transaction on c that inserts row ins into table t and
// locks row id.
func lockRow(t *testing.T, ctx context.Context, c *pgx.Conn, id, ins int) {
	t.Helper()
	kittest.ExecOK(t, ctx, c, "begin")
	kittest.ExecOK(t, ctx, c, "insert into t values ($1)", ins)
	kittest.ExecOK(t, ctx, c, "select id from t where id = $1 for update", id)
}

func TestProxyStallOnCommit(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(ctx context.Context, c *pgx.Conn) error // before the transaction
		commit  func(ctx context.Context, c *pgx.Conn) error
		// state is the backend's state while stalled. A Bind makes a backend
		// report 'active' until the next Sync, so when the stall comes at the
		// Execute of a prepared COMMIT, whose Bind has reached the server,
		// the backend is 'active' but waiting for the client all the same.
		state string
	}{
		{
			name: "simple protocol",
			commit: func(ctx context.Context, c *pgx.Conn) error {
				_, err := c.Exec(ctx, "commit")
				return err
			},
			state: "idle in transaction",
		},
		{
			name: "extended protocol",
			commit: func(ctx context.Context, c *pgx.Conn) error {
				return c.PgConn().ExecParams(ctx, "commit", nil, nil, nil, nil).Read().Err
			},
			state: "idle in transaction",
		},
		{
			name: "prepared statement",
			prepare: func(ctx context.Context, c *pgx.Conn) error {
				_, err := c.Prepare(ctx, "stall_commit", "commit")
				return err
			},
			commit: func(ctx context.Context, c *pgx.Conn) error {
				return c.PgConn().ExecPrepared(ctx, "stall_commit", nil, nil, nil).Read().Err
			},
			state: "active",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newProxyEnv(t)
			ctx := testContext(t)
			direct := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.direct))
			kittest.ExecOK(t, ctx, direct, "create table t (id int primary key)")
			kittest.ExecOK(t, ctx, direct, "insert into t values (1)")

			c := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.viaProxy))
			if tc.prepare != nil {
				if err := tc.prepare(ctx, c); err != nil {
					t.Fatalf("prepare: %v", err)
				}
			}
			pid := c.PgConn().PID()
			lockRow(t, ctx, c, 1, 2)
			e.proxy.StallOnCommit(1)
			commitCtx, cancel := context.WithTimeout(ctx, noAnswerWait)
			err := tc.commit(commitCtx, c)
			cancel()
			requireNoAnswer(t, "commit", err)
			if s := e.proxy.Stats(); s.Stalls != 1 {
				t.Fatalf("stats %+v: want Stalls 1", s)
			}

			giveUp(c)
			waitStalledClientsEnded(t, ctx, e.proxy, 1)
			requireBackendState(t, ctx, direct, pid, tc.state)
			if !rowLocked(t, ctx, direct, 1) {
				t.Fatal("row 1 is free while the stalled transaction holds its lock")
			}

			if n := e.proxy.ReleaseStalled(); n != 1 {
				t.Fatalf("ReleaseStalled() = %d, want 1", n)
			}
			waitBackendExit(t, ctx, direct, pid)
			if rowLocked(t, ctx, direct, 1) {
				t.Error("row 1 still locked after the stalled backend exited")
			}
			if n := proxyRowCount(t, ctx, direct, 2); n != 0 {
				t.Errorf("row 2: %d rows, want 0 (the stalled COMMIT reached the server)", n)
			}
			if n := e.proxy.ReleaseStalled(); n != 0 {
				t.Errorf("second ReleaseStalled() = %d, want 0", n)
			}

			// The rule was one-shot: the next commit goes through.
			c2 := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.viaProxy))
			lockRow(t, ctx, c2, 1, 3)
			kittest.ExecOK(t, ctx, c2, "commit")
			if n := proxyRowCount(t, ctx, direct, 3); n != 1 {
				t.Errorf("row 3: %d rows, want 1", n)
			}
			if s := e.proxy.Stats(); s.Stalls != 1 || s.CutsAfterForward+s.CutsBeforeForward+s.CutsAll != 0 {
				t.Errorf("stats %+v: want Stalls 1 and no cuts", s)
			}
		})
	}
}

func TestProxyStallAll(t *testing.T) {
	e := newProxyEnv(t)
	ctx := testContext(t)
	direct := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.direct))
	kittest.ExecOK(t, ctx, direct, "create table t (id int primary key)")
	kittest.ExecOK(t, ctx, direct, "insert into t values (1), (2)")

	cfg := kittest.ConnConfig(t, e.viaProxy)
	// Each client sends, once stalled, a statement whose effect would show
	// if it reached the server: a COMMIT would free the row lock and keep
	// the transaction's insert, an INSERT outside a transaction would add
	// row 100.
	conns := []struct {
		c     *pgx.Conn
		lock  int // row locked by the connection's transaction; 0 for none
		state string
		sql   string // sent after StallAll
	}{
		{c: kittest.ConnectConfig(t, ctx, cfg), lock: 1, state: "idle in transaction", sql: "commit"},
		{c: kittest.ConnectConfig(t, ctx, cfg), lock: 2, state: "idle in transaction", sql: "commit"},
		{c: kittest.ConnectConfig(t, ctx, cfg), state: "idle", sql: "insert into t values (100)"},
	}
	pids := make([]uint32, len(conns))
	for i, sc := range conns {
		pids[i] = sc.c.PgConn().PID()
		if sc.lock != 0 {
			lockRow(t, ctx, sc.c, sc.lock, 10+i)
		} else {
			kittest.ExecOK(t, ctx, sc.c, "select 1")
		}
	}

	if n := e.proxy.StallAll(); n != len(conns) {
		t.Fatalf("StallAll() = %d, want %d", n, len(conns))
	}
	if n := e.proxy.StallAll(); n != 0 {
		t.Errorf("second StallAll() = %d, want 0", n)
	}
	for i, sc := range conns {
		qctx, cancel := context.WithTimeout(ctx, noAnswerWait)
		_, err := sc.c.Exec(qctx, sc.sql)
		cancel()
		requireNoAnswer(t, fmt.Sprintf("%s on connection %d", sc.sql, i), err)
		giveUp(sc.c)
	}
	waitStalledClientsEnded(t, ctx, e.proxy, len(conns))
	for i, sc := range conns {
		requireBackendState(t, ctx, direct, pids[i], sc.state)
		if sc.lock != 0 && !rowLocked(t, ctx, direct, sc.lock) {
			t.Errorf("row %d is free while a stalled transaction holds its lock", sc.lock)
		}
	}

	// Only the connections open at the time were stalled, and CutAll
	// leaves stalled connections alone. (It also cuts the cancel requests
	// that pgx sent for the timed-out connections, which the proxy holds
	// while their backends are stalled, so its count is not checked.)
	fresh := kittest.ConnectConfig(t, ctx, cfg)
	kittest.ExecOK(t, ctx, fresh, "select 1")
	if n := e.proxy.CutAll(); n < 1 {
		t.Errorf("CutAll() = %d, want at least the connection opened after StallAll", n)
	}
	_, err := fresh.Exec(ctx, "select 1")
	requireConnCut(t, "query after CutAll", err)
	for i, sc := range conns {
		requireBackendState(t, ctx, direct, pids[i], sc.state)
	}

	if n := e.proxy.ReleaseStalled(); n != len(conns) {
		t.Fatalf("ReleaseStalled() = %d, want %d", n, len(conns))
	}
	for i, sc := range conns {
		waitBackendExit(t, ctx, direct, pids[i])
		if sc.lock != 0 && rowLocked(t, ctx, direct, sc.lock) {
			t.Errorf("row %d still locked after its stalled backend exited", sc.lock)
		}
	}
	for _, id := range []int{10, 11, 100} {
		if n := proxyRowCount(t, ctx, direct, id); n != 0 {
			t.Errorf("row %d: %d rows, want 0 (a stalled client's statement reached the server)", id, n)
		}
	}
	if s := e.proxy.Stats(); s.Stalls != int64(len(conns)) {
		t.Errorf("stats %+v: want Stalls %d", s, len(conns))
	}
}

func TestProxyCloseReleasesStalled(t *testing.T) {
	srv := server.Shared(t)
	if srv.Addr() == "" {
		t.Skip("the test server is reached over a Unix socket; the proxy needs TCP")
	}
	dsn := newTestDatabase(t, srv)
	ctx := testContext(t)
	direct := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, dsn))
	kittest.ExecOK(t, ctx, direct, "create table t (id int primary key)")
	kittest.ExecOK(t, ctx, direct, "insert into t values (1)")
	ignore := goleak.IgnoreCurrent()

	p, err := Start(srv.Addr())
	if err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	via, err := p.DSN(dsn)
	if err != nil {
		t.Fatalf("proxy DSN: %v", err)
	}
	c, err := pgx.ConnectConfig(ctx, kittest.ConnConfig(t, via))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	pid := c.PgConn().PID()
	lockRow(t, ctx, c, 1, 2)
	p.StallOnCommit(0)
	if n := p.StallAll(); n != 1 {
		t.Fatalf("StallAll() = %d, want 1", n)
	}
	// Reset disarms the rule but leaves the stalled connection stalled.
	p.Reset()
	requireBackendState(t, ctx, direct, pid, "idle in transaction")
	if !rowLocked(t, ctx, direct, 1) {
		t.Fatal("row 1 is free while the stalled transaction holds its lock")
	}
	other, err := pgx.ConnectConfig(ctx, kittest.ConnConfig(t, via))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	kittest.ExecOK(t, ctx, other, "begin")
	kittest.ExecOK(t, ctx, other, "commit")

	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	waitBackendExit(t, ctx, direct, pid)
	if rowLocked(t, ctx, direct, 1) {
		t.Error("row 1 still locked after Close")
	}
	for _, c := range []*pgx.Conn{c, other} {
		_ = c.Close(ctx)
	}
	if s := p.Stats(); s.Stalls != 1 || s.Active != 0 {
		t.Errorf("stats %+v: want Stalls 1, no active connections after Close", s)
	}
	goleak.VerifyNone(t, ignore)
}

func TestProxyReset(t *testing.T) {
	e := newProxyEnv(t)
	ctx := testContext(t)
	e.proxy.CutOnCommit(0)
	e.proxy.CutBeforeForward(nil, 0)
	e.proxy.StallOnCommit(0)
	e.proxy.SetLatency(time.Hour)
	e.proxy.RefuseNew(true)
	e.proxy.Reset()

	c := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, e.viaProxy))
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after Reset: %v", err)
	}
	if s := e.proxy.Stats(); s.CutsAfterForward+s.CutsBeforeForward+s.Stalls != 0 || s.Refused != 0 {
		t.Errorf("stats %+v: want no cuts, stalls or refusals after Reset", s)
	}
}

func TestProxyStats(t *testing.T) {
	e := newProxyEnv(t)
	ctx := testContext(t)
	cfg := kittest.ConnConfig(t, e.viaProxy)
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	before := e.proxy.Stats()
	if before.Accepted != 1 || before.Active != 1 {
		t.Errorf("after connect: stats %+v, want Accepted 1, Active 1", before)
	}
	for _, sql := range []string{"select 1", "select 2", "select 3"} {
		kittest.ExecOK(t, ctx, c, sql)
	}
	kittest.ExecOK(t, ctx, c, "select $1::int", pgx.QueryExecModeExec, 4) // one Parse
	if got := e.proxy.Stats().Statements - before.Statements; got != 4 {
		t.Errorf("statements seen = %d, want 4", got)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := e.proxy.Close(); err != nil {
		t.Fatalf("close proxy: %v", err)
	}
	want := Stats{Accepted: 1, Statements: before.Statements + 4}
	if s := e.proxy.Stats(); s != want {
		t.Errorf("after Close: stats %+v, want %+v", s, want)
	}
}

func TestProxyCloseLeavesNoGoroutines(t *testing.T) {
	srv := server.Shared(t)
	if srv.Addr() == "" {
		t.Skip("the test server is reached over a Unix socket; the proxy needs TCP")
	}
	dsn := newTestDatabase(t, srv)
	ctx := testContext(t)
	ignore := goleak.IgnoreCurrent()
	fdsBefore := openFDs()

	p, err := Start(srv.Addr())
	if err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	via, err := p.DSN(dsn)
	if err != nil {
		t.Fatalf("proxy DSN: %v", err)
	}
	cfg := kittest.ConnConfig(t, via)
	var conns []*pgx.Conn
	open := func() *pgx.Conn {
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		conns = append(conns, c)
		return c
	}
	idle := open()
	kittest.ExecOK(t, ctx, idle, "select 1")
	cut := open()
	p.CutOnCommit(1)
	tx, err := cut.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	requireConnCut(t, "commit", tx.Commit(ctx))
	raw, err := net.Dial("tcp", p.Addr()) // stuck before its startup message
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	slow := open()
	p.SetLatency(time.Hour)
	done := make(chan error, 1)
	go func() {
		_, err := slow.Exec(ctx, "select 1")
		done <- err
	}()

	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	requireConnCut(t, "query held by latency", <-done)
	for _, c := range conns {
		_ = c.Close(ctx)
	}
	_ = raw.Close()
	if s := p.Stats(); s.Active != 0 {
		t.Errorf("stats %+v: want no active connections after Close", s)
	}
	// VerifyNone also waits for pgx's background closing of the cut
	// connection, which holds a socket until it returns.
	goleak.VerifyNone(t, ignore)
	if fdsAfter := openFDs(); fdsAfter > fdsBefore {
		t.Errorf("%d file descriptors open after Close, %d before", fdsAfter, fdsBefore)
	}
}

// openFDs counts this process's open file descriptors, or returns -1 where
// /proc/self/fd is not available.
func openFDs() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(entries)
}

// fakeUpstream is a server that records what each connection sent until
// the proxy closed it.
type fakeUpstream struct {
	ln       net.Listener
	wg       sync.WaitGroup
	stopOnce sync.Once
	received chan []byte
}

// newFakeUpstream starts a fakeUpstream that is stopped when the test ends.
func newFakeUpstream(t *testing.T) *fakeUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	u := &fakeUpstream{ln: ln, received: make(chan []byte, 1024)}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(testTimeout))
				b, _ := io.ReadAll(c)
				u.received <- b
			}()
		}
	}()
	t.Cleanup(u.stop)
	return u
}

// stop closes the listener and waits for the server's goroutines.
func (u *fakeUpstream) stop() {
	u.stopOnce.Do(func() {
		_ = u.ln.Close()
		u.wg.Wait()
	})
}

// next returns what the next upstream connection received.
func (u *fakeUpstream) next(t *testing.T) []byte {
	t.Helper()
	select {
	case b := <-u.received:
		return b
	case <-time.After(testTimeout):
		t.Fatal("upstream connection was never closed")
		return nil
	}
}

// readUntilClosed reads from c until the proxy closes it and returns what
// it read. It fails the test if the proxy keeps the connection open.
func readUntilClosed(t *testing.T, c net.Conn) []byte {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 512)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				t.Fatalf("proxy kept the connection open (read %q)", got)
			}
			return got
		}
	}
}

// wireUint32 encodes v as a big-endian uint32.
func wireUint32(v uint32) []byte {
	return binary.BigEndian.AppendUint32(nil, v)
}

// wireMsg frames a regular protocol message with a correct length.
func wireMsg(typ byte, body string) []byte {
	return append(append([]byte{typ}, wireUint32(uint32(len(body)+4))...), body...)
}

// wireCat concatenates byte slices.
func wireCat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func TestProxyMalformedInput(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	upstream := newFakeUpstream(t)
	p := New(t, upstream.ln.Addr().String())

	startup, err := (&pgproto3.StartupMessage{
		ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters:      map[string]string{"user": "u", "database": "d"},
	}).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	ssl := wireCat(wireUint32(8), wireUint32(80877103))
	tests := []struct {
		name      string
		send      []byte
		wantReply string // what the proxy answers itself before closing
		upstream  bool   // whether the startup message reaches the server
	}{
		{"http request", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), "", false},
		{"tls client hello", []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}, "", false},
		{"startup length too small", wireCat(wireUint32(4), wireUint32(196608)), "", false},
		{"startup length too large", wireCat(wireUint32(1<<20), wireUint32(196608), []byte("user\x00u\x00\x00")), "", false},
		{"startup length negative", wireCat(wireUint32(0xffffffff), wireUint32(196608)), "", false},
		{"unknown protocol version", wireCat(wireUint32(8), wireUint32(2<<16)), "", false},
		{"startup without terminator", wireCat(wireUint32(14), wireUint32(196608), []byte("user\x00u")), "", false},
		{"ssl request then garbage", wireCat(ssl, []byte("garbage!")), "N", false},
		{"endless ssl requests", wireCat(ssl, ssl, ssl, ssl, ssl, ssl), "NNNN", false},
		{"ssl request with body", wireCat(wireUint32(12), wireUint32(80877103), wireUint32(0)), "", false},
		{"short cancel request", wireCat(wireUint32(10), wireUint32(80877102), []byte{0, 1}), "", false},
		{"negative message length", wireCat(startup, []byte{'Q'}, wireUint32(0xffffffff)), "", true},
		{"message length below 4", wireCat(startup, []byte{'Q'}, wireUint32(2)), "", true},
		{"message length too large", wireCat(startup, []byte{'S'}, wireUint32(0x40000000)), "", true},
		{"query without terminator", wireCat(startup, wireMsg('Q', "select 1")), "", true},
		{"empty query body", wireCat(startup, wireMsg('Q', "")), "", true},
		{"parse without terminators", wireCat(startup, wireMsg('P', "stmt")), "", true},
		{"bind without names", wireCat(startup, wireMsg('B', "portal")), "", true},
		{"execute too short", wireCat(startup, wireMsg('E', "\x00")), "", true},
		{"close too short", wireCat(startup, wireMsg('C', "S")), "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer c.Close()
			_, _ = c.Write(tc.send) // the proxy may already have closed
			if got := readUntilClosed(t, c); string(got) != tc.wantReply {
				t.Errorf("proxy replied %q, want %q", got, tc.wantReply)
			}
			if tc.upstream {
				if got := upstream.next(t); string(got) != string(startup) {
					t.Errorf("upstream received %q, want only the startup message %q", got, startup)
				}
			}
		})
	}

	t.Run("random garbage", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range 100 {
			garbage := make([]byte, 1+rng.IntN(300))
			for j := range garbage {
				garbage[j] = byte(rng.Uint32())
			}
			if i%2 == 0 {
				garbage[0] = "QPBECSHXdfc"[rng.IntN(11)]
			}
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			_, _ = c.Write(wireCat(startup, garbage))
			// Half-close so a frame that merely looks incomplete ends too.
			_ = c.(*net.TCPConn).CloseWrite()
			readUntilClosed(t, c)
			_ = c.Close()
			upstream.next(t)
		}
	})

	t.Run("upstream down", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		down := New(t, addr)
		c, err := net.Dial("tcp", down.Addr())
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer c.Close()
		_, _ = c.Write(startup)
		if got := readUntilClosed(t, c); len(got) != 0 {
			t.Errorf("proxy replied %q, want nothing", got)
		}
	})

	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if s := p.Stats(); s.Active != 0 {
		t.Errorf("stats %+v: want no active connections", s)
	}
	upstream.stop()
	goleak.VerifyNone(t, ignore)
}

func TestProxyDSN(t *testing.T) {
	p := New(t, "127.0.0.1:5432")
	addr := p.Addr()
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{in: "postgres://u:pw@db.example:5432/app?sslmode=disable", want: "postgres://u:pw@" + addr + "/app?sslmode=disable"},
		{in: "postgresql://u@localhost/app", want: "postgresql://u@" + addr + "/app"},
		{in: "postgres://u@/app?host=/tmp&port=5433&application_name=x", want: "postgres://u@" + addr + "/app?application_name=x"},
		{in: "postgres://u@h1:1,h2:2/app", want: "postgres://u@" + addr + "/app"},
		{in: "host=localhost port=5432 user=u", wantErr: true},
		{in: "mysql://u@h/app", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := p.DSN(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("DSN(%q) = %q, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("DSN(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestIsCommit(t *testing.T) {
	tests := []struct {
		sql  string
		want bool
	}{
		{"COMMIT", true},
		{"commit", true},
		{"  Commit ;  ", true},
		{"\n\tcommit\n", true},
		{"END", true},
		{"end transaction", true},
		{"COMMIT WORK", true},
		{"commit transaction;", true},
		{"COMMIT AND CHAIN", true},
		{"commit and no chain", true},
		{"commit; select 1", true},
		{"commit;select 1", true},
		{"/* why */ commit", true},
		{"/* nested /* comment */ still */ COMMIT", true},
		{"-- line comment\ncommit", true},
		{"commit -- trailing comment", true},
		{"commit/* c */;", true},
		{";; commit", true},
		{"COMMIT PREPARED 'tx1'", true},
		{"", false},
		{"   ", false},
		{"committed", false},
		{"commit_ts", false},
		{"endx", false},
		{"END PREPARED 'tx1'", false},
		{"commit foo", false},
		{"rollback", false},
		{"abort", false},
		{"begin", false},
		{"begin; commit", false},
		{"select 'commit'", false},
		{"select 1; commit", false},
		{"prepare transaction 'tx1'", false},
		{"-- commit", false},
		{"/* commit", false},
		{"/* unterminated commit */ /* x", false},
		{"commitñ", false},
	}
	for _, tc := range tests {
		t.Run(tc.sql, func(t *testing.T) {
			if got := IsCommit(tc.sql); got != tc.want {
				t.Errorf("IsCommit(%q) = %v, want %v", tc.sql, got, tc.want)
			}
		})
	}
}

func TestMatchPrefix(t *testing.T) {
	tests := []struct {
		prefix, sql string
		want        bool
	}{
		{"insert", "INSERT INTO t VALUES (1)", true},
		{"INSERT into t", "insert into t (id) values ($1)", true},
		{"insert", "   \n\tinsert into t", true},
		{"insert", "/* tag */ -- note\n insert into t", true},
		{"insert", "/* a /* b */ c */insert", true},
		{"ins", "insert", true},
		{"", "anything", true},
		{"", "", true},
		{"insert", "update t set x = 1", false},
		{"insert", "", false},
		{"insert", "ins", false},
		{"insert", "select 'insert'", false},
		{"insert", "-- insert", false},
		{"insert into t", "insert into u", false},
		{"ÉTÉ", "été", true},
		{"straße", "STRASSE", false},
	}
	for _, tc := range tests {
		t.Run(tc.prefix+"/"+tc.sql, func(t *testing.T) {
			if got := MatchPrefix(tc.prefix)(tc.sql); got != tc.want {
				t.Errorf("MatchPrefix(%q)(%q) = %v, want %v", tc.prefix, tc.sql, got, tc.want)
			}
		})
	}
}
