package server

import (
	"context"
	"errors"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
)

// standbyPair starts a primary of the test's own and a hot standby of it.
func standbyPair(t *testing.T) (primary, standby *Server) {
	t.Helper()
	primary = startLocalForTest(t, nil)
	return primary, NewStandby(t, primary)
}

// standbyCtx returns a context that ends well before the test binary's timeout, so
// a step that hangs fails the test instead.
func standbyCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStandbyReplicates(t *testing.T) {
	t.Parallel()
	ctx := standbyCtx(t)
	primary, standby := standbyPair(t)
	if standby.Kind() != KindLocal || standby.Addr() == primary.Addr() || standby.LogPath() == primary.LogPath() {
		t.Errorf("standby %s at %s (log %s), primary at %s (log %s): want a local server of its own",
			standby.Kind(), standby.Addr(), standby.LogPath(), primary.Addr(), primary.LogPath())
	}
	pconn := kittest.Connect(t, primary.DSN(""))
	kittest.ExecOK(t, ctx, pconn, "CREATE TABLE items (id int PRIMARY KEY)")
	kittest.ExecOK(t, ctx, pconn, "INSERT INTO items VALUES (1)")
	kittest.WaitRow(t, ctx, standby.DSN(""), 1)

	kittest.Eventually(t, ctx, 10*time.Second, "the primary streams to the standby", func(ctx context.Context) error {
		var n int
		if err := pconn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'").Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return errors.New(strconv.Itoa(n) + " streaming standbys")
		}
		return nil
	})
	sconn := kittest.Connect(t, standby.DSN(""))
	if got := kittest.QueryString(t, sconn, "SELECT pg_is_in_recovery()::text"); got != "true" {
		t.Errorf("standby: pg_is_in_recovery() = %s, want true", got)
	}
	if got := kittest.QueryString(t, pconn, "SELECT pg_is_in_recovery()::text"); got != "false" {
		t.Errorf("primary: pg_is_in_recovery() = %s, want false", got)
	}
	_, err := sconn.Exec(ctx, "INSERT INTO items VALUES (2)")
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Errorf("write on the standby: %v, want read_only_sql_transaction (25006)", err)
	}
}

func TestStandbyPromote(t *testing.T) {
	t.Parallel()
	ctx := standbyCtx(t)
	primary, standby := standbyPair(t)
	pconn := kittest.Connect(t, primary.DSN(""))
	kittest.ExecOK(t, ctx, pconn, "CREATE TABLE items (id int PRIMARY KEY)")
	kittest.ExecOK(t, ctx, pconn, "INSERT INTO items VALUES (1)")
	kittest.WaitRow(t, ctx, standby.DSN(""), 1)

	start := time.Now()
	if err := standby.Promote(ctx); err != nil {
		t.Fatalf("Promote: %v", err)
	}
	t.Logf("promoted in %v", time.Since(start).Round(time.Millisecond))
	sconn := kittest.Connect(t, standby.DSN(""))
	if got := kittest.QueryString(t, sconn, "SELECT pg_is_in_recovery()::text"); got != "false" {
		t.Errorf("after Promote: pg_is_in_recovery() = %s, want false", got)
	}
	kittest.ExecOK(t, ctx, sconn, "INSERT INTO items VALUES (2)")
	if got := kittest.QueryString(t, sconn, "SELECT count(*)::text FROM items"); got != "2" {
		t.Errorf("promoted standby holds %s rows, want 2", got)
	}
	if p, s := kittest.Timeline(t, pconn), kittest.Timeline(t, sconn); s <= p {
		t.Errorf("timeline of the promoted standby %d, of the primary %d: want a new, greater one", s, p)
	}
	if err := standby.Promote(ctx); err == nil {
		t.Error("a second Promote succeeded on a server that is no longer a standby")
	}
}

func TestStandbyCrashAndStart(t *testing.T) {
	t.Parallel()
	ctx := standbyCtx(t)
	primary, standby := standbyPair(t)
	pconn := kittest.Connect(t, primary.DSN(""))
	kittest.ExecOK(t, ctx, pconn, "CREATE TABLE items (id int PRIMARY KEY)")
	kittest.ExecOK(t, ctx, pconn, "INSERT INTO items VALUES (1)")
	kittest.WaitRow(t, ctx, standby.DSN(""), 1)

	if err := standby.Crash(ctx); err != nil {
		t.Fatalf("Crash: %v", err)
	}
	if err := kittest.OneShot(ctx, standby.DSN(""), func(context.Context, *pgx.Conn) error { return nil }); err == nil {
		t.Fatal("the standby accepts connections after Crash")
	}
	if err := standby.Crash(ctx); err == nil {
		t.Error("Crash of a server that is down succeeded")
	}
	log, err := os.ReadFile(standby.LogPath())
	if err != nil || !strings.Contains(string(log), "received immediate shutdown request") {
		t.Errorf("the standby's log does not tell of an immediate shutdown (%v):\n%s", err, log)
	}
	// Written while the standby is down: it must catch up when it is back.
	kittest.ExecOK(t, ctx, pconn, "INSERT INTO items VALUES (2)")

	if err := standby.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := standby.Start(ctx); err == nil {
		t.Error("Start of a running server succeeded")
	}
	sconn := kittest.Connect(t, standby.DSN(""))
	if got := kittest.QueryString(t, sconn, "SELECT pg_is_in_recovery()::text"); got != "true" {
		t.Errorf("after Start: pg_is_in_recovery() = %s, want true", got)
	}
	kittest.WaitRow(t, ctx, standby.DSN(""), 2)
	kittest.ExecOK(t, ctx, pconn, "INSERT INTO items VALUES (3)")
	kittest.WaitRow(t, ctx, standby.DSN(""), 3)
}

// TestCrashedServerStops: a server that Crash took down keeps its directory until
// Stop, which removes it; Start on a stopped server fails.
func TestCrashedServerStops(t *testing.T) {
	t.Parallel()
	ctx := standbyCtx(t)
	s := startLocalForTest(t, nil)
	if err := s.Crash(ctx); err != nil {
		t.Fatalf("Crash: %v", err)
	}
	if _, err := os.Stat(s.local.dataDir()); err != nil {
		t.Errorf("data directory after Crash: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop after Crash: %v", err)
	}
	if _, err := os.Stat(s.local.root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster directory after Stop: %v", err)
	}
	for name, fn := range map[string]func(context.Context) error{"Start": s.Start, "Crash": s.Crash, "Promote": s.Promote} {
		if err := fn(ctx); err == nil || !strings.Contains(err.Error(), "stopped") {
			t.Errorf("%s of a stopped server: %v, want an error that says it is stopped", name, err)
		}
	}
}

func TestStandbyNeedsLocalServer(t *testing.T) {
	t.Parallel()
	envURL, err := url.Parse("postgres://u@db.example:5432/app")
	if err != nil {
		t.Fatal(err)
	}
	env := &Server{kind: KindEnv, base: envURL}
	local := &Server{kind: KindLocal, base: (&localCluster{port: 5433}).dsn(), local: &localCluster{port: 5433}}
	tests := []struct {
		name      string
		primary   *Server
		ci        string
		haveLocal bool
		wantFail  bool
		wantMsg   string // "" for a standby that can start
	}{
		{name: "local primary", primary: local, haveLocal: true},
		{name: "env primary, not CI: skip", primary: env, haveLocal: true, wantMsg: "only a local primary"},
		{name: "env primary, CI, local binaries: fail", primary: env, ci: "true", haveLocal: true, wantFail: true, wantMsg: "New"},
		{name: "env primary, CI, no local binaries: skip", primary: env, ci: "true", wantMsg: "install the PostgreSQL server package"},
		{name: "no primary: fail", primary: nil, wantFail: true, wantMsg: "needs a server"},
		{name: "a Server not made by pgtxtest: fail", primary: &Server{}, wantFail: true, wantMsg: "needs a server"},
	}
	for _, tc := range tests {
		fail, msg := standbyVerdict(kittest.FakeEnv(map[string]string{"CI": tc.ci}), tc.primary, tc.haveLocal)
		if fail != tc.wantFail || (tc.wantMsg == "") != (msg == "") || !strings.Contains(msg, tc.wantMsg) {
			t.Errorf("%s: standbyVerdict = fail %v msg %q; want fail %v msg containing %q", tc.name, fail, msg, tc.wantFail, tc.wantMsg)
		}
	}
	if tb := kittest.RunFakeTB(func(tb testing.TB) { NewStandby(tb, nil) }); !tb.Failed() {
		t.Error("NewStandby(nil) did not fail the test")
	}
	ctx := context.Background()
	for name, fn := range map[string]func(context.Context) error{"Start": env.Start, "Crash": env.Crash, "Promote": env.Promote} {
		if err := fn(ctx); err == nil || !strings.Contains(err.Error(), "local server") {
			t.Errorf("%s of an env server: %v, want an error that asks for a local server", name, err)
		}
	}
}
