package formation

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
)

// formationCtx returns a context that ends well before the test binary's timeout,
// so that a step that hangs fails the test instead.
func formationCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// writeThrough inserts id into items through dsn, trying again on a fresh
// connection until it succeeds (a failover or a restart takes seconds), and returns
// how long that took and the port of the server that took the write.
func writeThrough(t *testing.T, ctx context.Context, dsn string, id int) (took time.Duration, port int) {
	t.Helper()
	start := time.Now()
	kittest.Eventually(t, ctx, time.Minute, "write "+strconv.Itoa(id)+" through "+dsn, func(ctx context.Context) error {
		return kittest.OneShot(ctx, dsn, func(ctx context.Context, conn *pgx.Conn) error {
			return conn.QueryRow(ctx, "INSERT INTO items VALUES ($1) RETURNING inet_server_port()", id).Scan(&port)
		})
	})
	return time.Since(start), port
}

// rowCount returns the number of rows of items on the server at dsn.
func rowCount(t *testing.T, ctx context.Context, dsn string) int {
	t.Helper()
	var n int
	err := kittest.OneShot(ctx, dsn, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT count(*) FROM items").Scan(&n)
	})
	if err != nil {
		t.Fatalf("count the rows at %s: %v", dsn, err)
	}
	return n
}

// serverTimeline returns the timeline of the server at dsn, a primary.
func serverTimeline(t *testing.T, ctx context.Context, dsn string) uint64 {
	t.Helper()
	conn := kittest.Connect(t, dsn)
	defer conn.Close(ctx)
	return kittest.Timeline(t, conn)
}

// logEvents logs the monitor's events since since, with their time after it, and
// returns the time of the last one (since if there is none).
func logEvents(t *testing.T, ctx context.Context, f *Formation, since time.Time) time.Time {
	t.Helper()
	events, err := f.Events(ctx)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	last := since
	var b strings.Builder
	for _, e := range events {
		if e.Time.Before(since) {
			continue
		}
		last = e.Time
		b.WriteString("\n  +" + e.Time.Sub(since).Round(time.Millisecond).String() + " " + e.Node + " " + e.State + " -> " + e.Goal + ": " + e.Description)
	}
	t.Logf("the monitor's events since the fault:%s", b.String())
	return last
}

// other returns the name of the node that is not name.
func other(name string) string {
	if name == "node1" {
		return "node2"
	}
	return "node1"
}

// TestFormation takes one formation through what the kit offers, in turn: a
// planned switchover, a kill -9 of the primary's postmaster, a stopped primary
// and its return as a secondary, then Stop. One formation, not one per step: it
// is three servers and three keepers, and the machine's other test binaries
// (timing-sensitive ones among them) run beside this one.
func TestFormation(t *testing.T) {
	ctx := formationCtx(t)
	f := New(t, &Config{Database: "bank", Settings: map[string]string{"max_connections": "150"}})
	checkNewFormation(t, ctx, f)
	t.Run("Failover", func(t *testing.T) { checkSwitchover(t, ctx, f) })
	t.Run("KillPrimary", func(t *testing.T) { checkKillPrimary(t, ctx, f, 3) })
	t.Run("StopPrimary", func(t *testing.T) { checkStopPrimary(t, ctx, f, 4) })
}

// checkNewFormation checks a formation just started: node1 primary, node2 its
// synchronous secondary, the kit's settings, the URI; it creates items with
// row 1.
func checkNewFormation(t *testing.T, ctx context.Context, f *Formation) {
	t.Helper()
	nodes, err := f.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 2 || nodes[0].Name != "node1" || nodes[0].State != "primary" || nodes[1].Name != "node2" || nodes[1].State != "secondary" {
		t.Fatalf("nodes after New: %+v, want node1 primary and node2 secondary", nodes)
	}
	for _, n := range nodes {
		if n.PID == 0 || !n.Healthy || !n.Running || n.Port == 0 || !strings.Contains(n.DSN, "127.0.0.1:"+strconv.Itoa(n.Port)+"/bank") {
			t.Errorf("node %+v: want a running, healthy node with a pid and a DSN of its own for database bank", n)
		}
	}
	if !strings.Contains(f.URI(), "target_session_attrs=read-write") {
		t.Errorf("URI %s: want target_session_attrs=read-write", f.URI())
	}
	conn := kittest.Connect(t, f.URI())
	defer conn.Close(ctx)
	kittest.ExecOK(t, ctx, conn, "CREATE TABLE items (id int PRIMARY KEY)")
	kittest.ExecOK(t, ctx, conn, "INSERT INTO items VALUES (1)")
	if got := kittest.QueryString(t, conn, "SELECT inet_server_port()::text"); got != strconv.Itoa(nodes[0].Port) {
		t.Errorf("the URI reaches port %s, want the primary's %d", got, nodes[0].Port)
	}
	// pg_auto_failover's synchronous replication: the COMMIT above waited for node2.
	if got := kittest.QueryString(t, conn, "SELECT current_setting('synchronous_standby_names') || ' ' || current_setting('synchronous_commit')"); !strings.Contains(got, "pgautofailover_standby_") || !strings.HasSuffix(got, " on") {
		t.Errorf("synchronous_standby_names and synchronous_commit on the primary: %q, want a pgautofailover standby and on", got)
	}
	if got := kittest.QueryString(t, conn, "SELECT string_agg(sync_state, ',') FROM pg_stat_replication"); got != "quorum" && got != "sync" {
		t.Errorf("the primary's standbys' sync_state: %q, want one synchronous standby", got)
	}
	mconn := kittest.Connect(t, f.MonitorDSN())
	defer mconn.Close(ctx)
	if got := kittest.QueryString(t, mconn, "SELECT current_setting('pgautofailover.health_check_period')"); got != "1s" {
		t.Errorf("the monitor's health_check_period = %s, want the kit's 1s", got)
	}
	for name, c := range map[string]*pgx.Conn{"monitor": mconn, "node1": conn} {
		if got := kittest.QueryString(t, c, "SHOW listen_addresses"); got != "127.0.0.1" {
			t.Errorf("%s listens on %q, want 127.0.0.1 only", name, got)
		}
	}
}

// checkSwitchover runs Failover on a formation whose node1 is primary and
// writes row 2 through the URI.
func checkSwitchover(t *testing.T, ctx context.Context, f *Formation) {
	before, err := f.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tli := serverTimeline(t, ctx, before.DSN)
	start := time.Now()
	if err := f.Failover(ctx); err != nil {
		t.Fatalf("Failover: %v", err)
	}
	took := time.Since(start)
	last := logEvents(t, ctx, f, start)
	t.Logf("switchover: Failover returned after %v; the monitor's last event at +%v",
		took.Round(time.Millisecond), last.Sub(start).Round(time.Millisecond))

	p, err := f.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != other(before.Name) {
		t.Errorf("primary after Failover: %s, want %s", p.Name, other(before.Name))
	}
	tookWrite, port := writeThrough(t, ctx, f.URI(), 2)
	if port != p.Port {
		t.Errorf("the write through the URI went to port %d, want the new primary's %d", port, p.Port)
	}
	t.Logf("first write through the URI after Failover returned: %v", tookWrite.Round(time.Millisecond))
	if n := rowCount(t, ctx, p.DSN); n != 2 {
		t.Errorf("the new primary holds %d rows, want 2", n)
	}
	if got := serverTimeline(t, ctx, p.DSN); got <= tli {
		t.Errorf("timeline after the switchover %d, before %d: want a new one", got, tli)
	}
	if standby, err := inRecovery(ctx, f.nodeDSN(f.member(before.Name))); err != nil || !standby {
		t.Errorf("%s after Failover: in recovery %v (%v), want a standby", before.Name, standby, err)
	}
	pconn := kittest.Connect(t, p.DSN)
	defer pconn.Close(ctx)
	if got := kittest.QueryString(t, pconn, "SHOW max_connections"); got != "150" {
		t.Errorf("max_connections on %s = %s, want Config.Settings' 150", p.Name, got)
	}
}

// checkKillPrimary kills the primary's postmaster and writes row id through
// the URI; the formation must settle with a primary and a secondary that
// hold every row.
func checkKillPrimary(t *testing.T, ctx context.Context, f *Formation, id int) {
	before, err := f.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tli := serverTimeline(t, ctx, before.DSN)
	start := time.Now()
	killed, err := f.KillPrimary(ctx)
	if err != nil {
		t.Fatalf("KillPrimary: %v", err)
	}
	if killed.Name != before.Name || killed.PID == 0 {
		t.Fatalf("KillPrimary killed %+v, want %s's postmaster", killed, before.Name)
	}
	if err := syscall.Kill(killed.PID, 0); err == nil {
		// A zombie answers kill(0) until its parent, pg_autoctl's postgres
		// controller, reaps it: that takes a moment.
		kittest.Eventually(t, ctx, 10*time.Second, "the killed postmaster is gone", func(context.Context) error {
			if err := syscall.Kill(killed.PID, 0); !errors.Is(err, syscall.ESRCH) {
				return errors.New("still there")
			}
			return nil
		})
	}
	tookWrite, port := writeThrough(t, ctx, f.URI(), id)

	// Whichever node the formation made primary, it must settle with a primary and a
	// secondary, and keep what was committed.
	var nodes []Node
	kittest.Eventually(t, ctx, time.Minute, "a primary and a secondary again", func(ctx context.Context) error {
		var err error
		if nodes, err = f.Nodes(ctx); err != nil {
			return err
		}
		if _, _, ok := pairOf(nodes); !ok {
			return errors.New(describeNodes(nodes))
		}
		return nil
	})
	settled := time.Since(start)
	last := logEvents(t, ctx, f, start)
	p, _, _ := pairOf(nodes)
	// The write may have gone to the killed node, restarted by its keeper before
	// the monitor demoted it: synchronous replication must have put it on the
	// other too.
	wrote := nodes[0].Name
	if port == nodes[1].Port {
		wrote = nodes[1].Name
	}
	if n := rowCount(t, ctx, p.DSN); n != id {
		t.Errorf("the primary %s holds %d rows, want %d (the last written on %s)", p.Name, n, id, wrote)
	}
	if p.Name == killed.Name {
		// The keeper restarted postgres in place: crash recovery, same timeline.
		if p.PID == killed.PID || p.PID == 0 {
			t.Errorf("%s's postmaster pid %d after the kill of %d: want a new one", p.Name, p.PID, killed.PID)
		}
		if got := serverTimeline(t, ctx, p.DSN); got != tli {
			t.Errorf("timeline after the restart in place %d, before %d: want the same", got, tli)
		}
		t.Logf("kill -9: %s restarted in place; first write through the URI (on %s) after %v, primary and secondary after %v, the monitor's last event at +%v",
			p.Name, wrote, tookWrite.Round(time.Millisecond), settled.Round(time.Millisecond), last.Sub(start).Round(time.Millisecond))
	} else {
		if got := serverTimeline(t, ctx, p.DSN); got <= tli {
			t.Errorf("timeline after the failover %d, before %d: want a new one", got, tli)
		}
		t.Logf("kill -9: the monitor failed over to %s; first write through the URI (on %s) after %v, primary and secondary after %v, the monitor's last event at +%v",
			p.Name, wrote, tookWrite.Round(time.Millisecond), settled.Round(time.Millisecond), last.Sub(start).Round(time.Millisecond))
	}
}

// checkStopPrimary stops the primary node, writes row id through the URI once
// the other is promoted, starts the stopped node again (a secondary), writes
// row id+1, and stops the formation: no process and no directory is left.
func checkStopPrimary(t *testing.T, ctx context.Context, f *Formation, id int) {
	before, err := f.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tli := serverTimeline(t, ctx, before.DSN)
	start := time.Now()
	stopped, err := f.StopPrimary(ctx)
	if err != nil {
		t.Fatalf("StopPrimary: %v", err)
	}
	tookStop := time.Since(start)
	if stopped.Name != before.Name {
		t.Fatalf("StopPrimary stopped %s, want %s", stopped.Name, before.Name)
	}
	if err := kittest.OneShot(ctx, stopped.DSN, func(context.Context, *pgx.Conn) error { return nil }); err == nil {
		t.Error("the stopped primary accepts connections")
	}
	if _, err := f.StopPrimary(ctx); err == nil {
		t.Error("StopPrimary while the primary is stopped and the other not yet promoted succeeded")
	}
	survivor := other(stopped.Name)
	if _, err := f.WaitState(ctx, map[string]string{survivor: "wait_primary"}); err != nil {
		t.Fatalf("promotion of %s: %v", survivor, err)
	}
	promoted := time.Since(start)
	tookWrite, port := writeThrough(t, ctx, f.URI(), id)
	last := logEvents(t, ctx, f, start)
	t.Logf("stop primary: stopped in %v, %s wait_primary after %v, first write through the URI after %v more; the monitor's last event at +%v",
		tookStop.Round(time.Millisecond), survivor, promoted.Round(time.Millisecond), tookWrite.Round(time.Millisecond), last.Sub(start).Round(time.Millisecond))
	p, err := f.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != survivor || port != p.Port {
		t.Errorf("after the stop: primary %s, the URI's write on port %d; want %s on %d", p.Name, port, survivor, p.Port)
	}
	if n := rowCount(t, ctx, p.DSN); n != id {
		t.Errorf("the promoted node holds %d rows, want %d", n, id)
	}
	if got := serverTimeline(t, ctx, p.DSN); got <= tli {
		t.Errorf("timeline after the promotion %d, before %d: want a new one", got, tli)
	}

	rejoin := time.Now()
	if err := f.StartNode(ctx, stopped.Name); err != nil {
		t.Fatalf("StartNode: %v", err)
	}
	if err := f.StartNode(ctx, stopped.Name); err == nil {
		t.Error("StartNode of a running node succeeded")
	}
	if _, err := f.WaitState(ctx, map[string]string{stopped.Name: "secondary", survivor: "primary"}); err != nil {
		t.Fatalf("after StartNode: %v", err)
	}
	t.Logf("StartNode: %s secondary and %s primary after %v", stopped.Name, survivor, time.Since(rejoin).Round(time.Millisecond))
	if _, port := writeThrough(t, ctx, f.URI(), id+1); port != p.Port {
		t.Errorf("write through the URI after the rejoin went to port %d, want %d", port, p.Port)
	}
	kittest.WaitRow(t, ctx, stopped.DSN, id+1)

	// Stop leaves no process and no directory behind.
	nodes, err := f.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pids := []int{f.monitor.postmasterPID()}
	for _, n := range nodes {
		pids = append(pids, n.PID)
	}
	if err := f.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(f.root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("formation directory after Stop: %v, want it removed", err)
	}
	for _, pid := range pids {
		if pid == 0 {
			t.Errorf("a member had no postmaster pid before Stop: %v", pids)
			continue
		}
		kittest.Eventually(t, ctx, 10*time.Second, "postmaster "+strconv.Itoa(pid)+" gone", func(context.Context) error {
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				return errors.New("still there")
			}
			return nil
		})
	}
	if _, err := f.StopPrimary(ctx); err == nil {
		t.Error("StopPrimary after Stop succeeded")
	}
}

func TestFormationMissingTools(t *testing.T) {
	t.Parallel()
	_, err := autoctl.Find(kittest.FakeEnv(map[string]string{"PGTX_TEST_PG_AUTOCTL": "/nonexistent/pg_autoctl"}))
	if err == nil || !strings.Contains(err.Error(), "PGTX_TEST_PG_AUTOCTL=/nonexistent/pg_autoctl") {
		t.Fatalf("Find with a bad PGTX_TEST_PG_AUTOCTL = %v", err)
	}
	for _, ci := range []string{"", "true"} {
		fail, msg := missingFormation(kittest.FakeEnv(map[string]string{"CI": ci}), err)
		if fail != (ci == "true") || !strings.Contains(msg, "apt-get install postgresql-15-auto-failover") || !strings.Contains(msg, "/nonexistent/pg_autoctl") {
			t.Errorf("CI=%q: missingFormation = %v, %q", ci, fail, msg)
		}
	}
}

func TestFormationBadOptions(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string]Config{
		"database":         {Database: "my-db"},
		"setting name":     {Settings: map[string]string{"max connections": "10"}},
		"setting value":    {Settings: map[string]string{"application_name": "a\nfsync = on"}},
		"monitor settings": {MonitorSettings: map[string]string{"": "1"}},
	} {
		if err := opts.validate(); err == nil {
			t.Errorf("%s: validate(%+v) = nil, want an error", name, opts)
		}
		if tb := kittest.RunFakeTB(func(tb testing.TB) { New(tb, &opts) }); !tb.Failed() {
			t.Errorf("%s: New did not fail the test", name)
		}
	}
	if err := (Config{Database: "bank", Settings: map[string]string{"work_mem": "'8MB'"}}).validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

func TestFormationStates(t *testing.T) {
	t.Parallel()
	node := func(name, state, goal string) Node {
		return Node{Name: name, State: state, Goal: goal}
	}
	steady := []Node{node("node1", "primary", "primary"), node("node2", "secondary", "secondary")}
	switching := []Node{node("node1", "draining", "demote_timeout"), node("node2", "prepare_promotion", "stop_replication")}
	promoted := []Node{node("node1", "primary", "demoted"), node("node2", "wait_primary", "wait_primary")}

	if p, ok := primaryOf(steady); !ok || p.Name != "node1" {
		t.Errorf("primaryOf(steady) = %v, %v", p.Name, ok)
	}
	if _, ok := primaryOf(switching); ok {
		t.Error("primaryOf(switching) found a primary")
	}
	if p, ok := primaryOf(promoted); !ok || p.Name != "node2" {
		t.Errorf("primaryOf(promoted) = %v, %v: want node2, wait_primary, not node1 whose goal is demoted", p.Name, ok)
	}
	if p, s, ok := pairOf(steady); !ok || p.Name != "node1" || s.Name != "node2" {
		t.Errorf("pairOf(steady) = %s, %s, %v", p.Name, s.Name, ok)
	}
	for name, nodes := range map[string][]Node{"switching": switching, "promoted": promoted, "one node": steady[:1]} {
		if _, _, ok := pairOf(nodes); ok {
			t.Errorf("pairOf(%s) found a primary and a secondary", name)
		}
	}
	for _, tc := range []struct {
		nodes []Node
		want  map[string]string
		ok    bool
	}{
		{steady, map[string]string{"node1": "primary", "node2": "secondary"}, true},
		{steady, map[string]string{"node2": "secondary"}, true},
		{steady, map[string]string{"node1": "secondary"}, false},
		{promoted, map[string]string{"node2": "wait_primary"}, true},
		{promoted, map[string]string{"node1": "primary"}, false}, // reported, but assigned demoted
		{steady, map[string]string{"node3": "primary"}, false},
	} {
		if got := reached(tc.nodes, tc.want); got != tc.ok {
			t.Errorf("reached(%s, %v) = %v, want %v", describeNodes(tc.nodes), tc.want, got, tc.ok)
		}
	}
	if got, want := describeNodes(promoted), "node1 primary (goal demoted), node2 wait_primary"; got != want {
		t.Errorf("describeNodes = %q, want %q", got, want)
	}
}

func TestFormationSweepsDeadBinariesDirs(t *testing.T) {
	t.Parallel()
	sw := kittest.NewSweep(t, formationDirPrefix, "pgtx-pgtest-cluster-999999999-1")
	// A recorded group whose postmaster.pid names a process of another group (this
	// test binary) is not killed.
	if err := os.WriteFile(filepath.Join(sw.Dead, "node1.pgid"), []byte("999999998"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(sw.Dead, "node1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sw.Dead, "node1", "postmaster.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sweepStaleFormations(sw.Base)
	sw.Check(t)
}
