package hooks

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/tracelog"
	"github.com/pgtx-go/pgtx/internal/acquire"
	"github.com/pgtx-go/pgtx/internal/cancel"
	"github.com/pgtx-go/pgtx/internal/connstate"
	"github.com/pgtx-go/pgtx/internal/pgpool"
	"github.com/pgtx-go/pgtx/internal/slotlimit"
)

type sysClock struct{}

func (sysClock) Now() time.Time { return time.Now() }

// fakeServer is a server that accepts every login and then answers every
// query with an error, as a server without pg_stat_get_activity would,
// until the connection closes: enough for pgx to connect, and for a pool
// to hand the connection out. It counts the connections made.
type fakeServer struct{ conns atomic.Int32 }

func (s *fakeServer) dial(context.Context, string, string) (net.Conn, error) {
	client, server := net.Pipe()
	s.conns.Add(1)
	go func() {
		defer server.Close()
		b := pgproto3.NewBackend(server, server)
		if _, err := b.ReceiveStartupMessage(); err != nil {
			return
		}
		b.Send(&pgproto3.AuthenticationOk{})
		b.Send(&pgproto3.ParameterStatus{Name: "client_encoding", Value: "UTF8"})
		b.Send(&pgproto3.BackendKeyData{ProcessID: 42, SecretKey: []byte{0, 0, 0, 7}})
		b.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		if b.Flush() != nil {
			return
		}
		for {
			msg, err := b.Receive()
			if err != nil {
				return
			}
			if _, ok := msg.(*pgproto3.Query); ok {
				b.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "42883", Message: "function pg_stat_get_activity does not exist"})
				b.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
				if b.Flush() != nil {
					return
				}
			}
		}
	}()
	return client, nil
}

// config returns a main pool's config whose connections reach srv.
func config(t *testing.T, srv *fakeServer) *pgxpool.Config {
	t.Helper()
	pc, err := pgxpool.ParseConfig("postgres://app@fake/app?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.DialFunc = srv.dial
	pc.ConnConfig.LookupFunc = func(context.Context, string) ([]string, error) { return []string{"127.0.0.1"}, nil }
	return pc
}

// TestInstallWrapsTheCallersHooks: the pool's connection tracer counts the
// waiters and each connection gets the caller's tracer back; the caller's
// BeforeConnect and ShouldPing still run, and none is made up where the
// caller set none.
func TestInstallWrapsTheCallersHooks(t *testing.T) {
	errHook := errors.New("the caller's BeforeConnect")
	for _, withHooks := range []bool{false, true} {
		pc := config(t, &fakeServer{})
		user := &tracelog.TraceLog{}
		pc.ConnConfig.Tracer = user
		var pinged bool
		if withHooks {
			pc.BeforeConnect = func(context.Context, *pgx.ConnConfig) error { return errHook }
			pc.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { pinged = true; return true }
		}
		Install(pc, cancel.New(cancel.Settings{Mode: cancel.ModeProtocol}, sysClock{}), &acquire.Queue{}, &pgpool.Verdict{}, slotlimit.New(slotlimit.Settings{Max: 4, Stat: func() (int, int) { return 1, 1 }}), nil)

		if _, ok := pc.ConnConfig.Tracer.(*acquire.Tracer); !ok {
			t.Errorf("the pool's tracer is %T, want the queue's", pc.ConnConfig.Tracer)
		}
		cc := pc.ConnConfig.Copy()
		err := pc.BeforeConnect(context.Background(), cc)
		if cc.Tracer != user || withHooks && err != errHook || !withHooks && err != nil {
			t.Errorf("hooks %v: BeforeConnect = %v, the connection's tracer %T; want the caller's", withHooks, err, cc.Tracer)
		}
		switch {
		case !withHooks && pc.ShouldPing != nil:
			t.Error("a ShouldPing was made up")
		case withHooks && (!pc.ShouldPing(context.Background(), pgxpool.ShouldPingParams{}) || !pinged):
			t.Error("the caller's ShouldPing did not decide")
		}
	}
}

// TestInstallThroughPgxpool: pgtx's context watcher replaces the caller's;
// a connection is set up (AfterConnect) before
// the caller's AfterConnect sees it, the caller's PrepareConn, or else its
// BeforeAcquire, decides whether it is handed out, and a connection doomed
// by a cancel that was not confirmed is never handed out again, whatever
// the caller's hooks say.
func TestInstallThroughPgxpool(t *testing.T) {
	tests := []struct {
		name                   string
		prepareConn, beforeAcq bool
		wantPrepared, wantAcq  int32 // calls per hand-out
	}{
		{"no hook of the caller's", false, false, 0, 0},
		{"BeforeAcquire", false, true, 0, 1},
		{"PrepareConn", true, false, 1, 0},
		{"PrepareConn wins over BeforeAcquire", true, true, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			srv := &fakeServer{}
			pc := config(t, srv)
			user := &tracelog.TraceLog{}
			pc.ConnConfig.Tracer = user
			var prepared, acquired atomic.Int32
			if tt.prepareConn {
				pc.PrepareConn = func(context.Context, *pgx.Conn) (bool, error) { prepared.Add(1); return true, nil }
			}
			if tt.beforeAcq {
				//lint:ignore SA1019 the deprecated hook is what is under test
				pc.BeforeAcquire = func(context.Context, *pgx.Conn) bool { acquired.Add(1); return true }
			}
			var userWatcher atomic.Bool
			pc.ConnConfig.BuildContextWatcherHandler = func(pgConn *pgconn.PgConn) ctxwatch.Handler {
				userWatcher.Store(true)
				return &pgconn.DeadlineContextWatcherHandler{Conn: pgConn.Conn()}
			}
			var setUpFirst bool
			var afterConnects, connected atomic.Int32
			pc.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
				st := connstate.Of(conn.PgConn())
				setUpFirst = st != nil && st.Tracer == user
				afterConnects.Add(1)
				return nil
			}
			// ModeClose: a cancel closes the connection at once, never
			// confirmed: it dooms it.
			Install(pc, cancel.New(cancel.Settings{Mode: cancel.ModeClose}, sysClock{}), &acquire.Queue{}, &pgpool.Verdict{}, slotlimit.New(slotlimit.Settings{Max: 4, Stat: func() (int, int) { return 1, 1 }}), func() {
				if connected.Add(1) != afterConnects.Load() {
					t.Error("connected was told before the caller's AfterConnect ran")
				}
			})
			pool, err := pgxpool.NewWithConfig(ctx, pc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)

			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if userWatcher.Load() {
				t.Error("the caller's context watcher was kept")
			}
			if !setUpFirst {
				t.Error("the caller's AfterConnect ran before the connection's state was set up")
			}
			if p, a := prepared.Load(), acquired.Load(); p != tt.wantPrepared || a != tt.wantAcq {
				t.Errorf("PrepareConn ran %d times, BeforeAcquire %d; want %d, %d", p, a, tt.wantPrepared, tt.wantAcq)
			}
			h := &connstate.Of(conn.Conn().PgConn()).Cancel
			h.HandleCancel(ctx)
			h.HandleUnwatchAfterCancel()
			if !h.Doomed() {
				t.Fatal("the cancel did not doom the connection")
			}
			conn.Release()

			conn, err = pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			if n := srv.conns.Load(); n != 2 || connected.Load() != 2 {
				t.Errorf("%d connections made, %d told connected; want a second one for the doomed, each told", n, connected.Load())
			}
			if p, a := prepared.Load(), acquired.Load(); p != 2*tt.wantPrepared || a != 2*tt.wantAcq {
				t.Errorf("PrepareConn ran %d times, BeforeAcquire %d; want %d, %d: never for the doomed connection", p, a, 2*tt.wantPrepared, 2*tt.wantAcq)
			}
		})
	}
}
