package pgpool

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

// waitReplicated waits until the standby holds n rows of items.
func waitReplicated(t *testing.T, ctx context.Context, c *cluster, n int) {
	t.Helper()
	standby := kittest.Connect(t, c.standby.DSN(""))
	kittest.Eventually(t, ctx, 30*time.Second, "rows replicated", func(ctx context.Context) error {
		var got int
		if err := standby.QueryRow(ctx, "SELECT count(*) FROM items").Scan(&got); err != nil {
			return err
		}
		if got != n {
			return errors.New("not there yet")
		}
		return nil
	})
}

// TestPgpoolRoutes: writes, and a transaction after its first write, go to the
// primary; reads go to the load-balance node, here the standby since Extra gives
// the primary no weight.
func TestPgpoolRoutes(t *testing.T) {
	t.Parallel()
	c := newCluster(t, &Config{NumInitChildren: 4, Extra: map[string]string{"backend_weight0": "0"}})
	ctx := testContext(t)
	primaryPort, standbyPort := port(t, c.primary.Addr()), port(t, c.standby.Addr())

	nodes, err := c.p.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []Node{
		{ID: 0, Addr: c.primary.Addr(), Status: "up", Role: "primary"},
		{ID: 1, Addr: c.standby.Addr(), Status: "up", Role: "standby", LoadBalanceNode: true},
	}
	if len(nodes) != len(want) {
		t.Fatalf("Nodes = %+v, want %+v", nodes, want)
	}
	for i, n := range nodes {
		n.SelectCount = 0
		if n != want[i] {
			t.Errorf("node %d = %+v, want %+v", i, nodes[i], want[i])
		}
	}

	conn := kittest.Connect(t, c.p.DSN(""))
	kittest.ExecOK(t, ctx, conn, "CREATE TABLE items (id int PRIMARY KEY)")
	if got := queryInt(t, ctx, conn, "INSERT INTO items VALUES (1) RETURNING inet_server_port()"); got != primaryPort {
		t.Errorf("a write answered by port %d, want the primary's %d", got, primaryPort)
	}
	waitReplicated(t, ctx, c, 1)
	if got := queryInt(t, ctx, conn, "SELECT inet_server_port() FROM items"); got != standbyPort {
		t.Errorf("a read answered by port %d, want the standby's %d", got, standbyPort)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if got := queryInt(t, ctx, tx, "SELECT count(*) FROM items"); got != 1 {
		t.Errorf("count = %d, want 1", got)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO items VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, ctx, tx, "SELECT inet_server_port() FROM items LIMIT 1"); got != primaryPort {
		t.Errorf("a read after a write in a transaction answered by port %d, want the primary's %d", got, primaryPort)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	log, err := os.ReadFile(c.p.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{`DB node id: 0 backend pid: \d+ statement: (Execute: )?INSERT INTO items VALUES \(1\)`,
		`DB node id: 1 backend pid: \d+ statement: (Execute: )?SELECT inet_server_port\(\) FROM items\n`} {
		if !regexp.MustCompile(re).Match(log) {
			t.Errorf("the log has no line matching %q", re)
		}
	}
	if nodes, err = c.p.Nodes(ctx); err != nil || nodes[1].SelectCount == 0 {
		t.Errorf("Nodes = %+v, %v: want SELECTs counted on the standby", nodes, err)
	}
	if strings.Contains(string(log), "WARNING") || strings.Contains(string(log), "ERROR") {
		t.Errorf("the log has warnings or errors:\n%s", log)
	}
}

// TestPgpoolProcesses: SHOW POOL_PROCESSES lists each of num_init_children
// children once, one of them holding this test's connection.
func TestPgpoolProcesses(t *testing.T) {
	t.Parallel()
	c := newCluster(t, &Config{NumInitChildren: 3, MaxPool: 2})
	ctx := testContext(t)
	kittest.ExecOK(t, ctx, kittest.Connect(t, c.p.DSN("")), "SELECT 1")
	procs, err := c.p.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pids := map[int]bool{}
	held := false
	for _, pr := range procs {
		pids[pr.PID] = true
		held = held || (pr.Database == "postgres" && pr.User == proc.Superuser)
	}
	if len(procs) != 3 || len(pids) != 3 || !held {
		t.Errorf("Processes = %+v: want 3 children, one with a connection to postgres as %s", procs, proc.Superuser)
	}
}

// TestPgpoolAttachAndRestart: a standby pgpool marked down while its server was
// down comes back with AttachNode, and with Restart, which keeps the address.
func TestPgpoolAttachAndRestart(t *testing.T) {
	t.Parallel()
	c := newCluster(t, &Config{NumInitChildren: 4})
	ctx := testContext(t)
	addr := c.p.Addr()
	for _, bringBack := range []string{"AttachNode", "Restart"} {
		if err := c.standby.Crash(ctx); err != nil {
			t.Fatal(err)
		}
		nodeState(t, ctx, c.p, 1, "down") // a new session's failed connection marks it down
		kittest.ExecOK(t, ctx, kittest.Connect(t, c.p.DSN("")), "CREATE TABLE IF NOT EXISTS items (id int)")
		if err := c.standby.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if nodes, err := c.p.Nodes(ctx); err != nil || nodes[1].Status != "down" {
			t.Fatalf("Nodes after the standby is back = %+v, %v: want node 1 still down", nodes, err)
		}
		var err error
		if bringBack == "AttachNode" {
			err = c.p.AttachNode(ctx, 1)
		} else {
			err = c.p.Restart(ctx)
		}
		if err != nil {
			t.Fatalf("%s: %v", bringBack, err)
		}
		nodeState(t, ctx, c.p, 1, "up")
	}
	if c.p.Addr() != addr {
		t.Errorf("Addr after Restart = %s, want %s", c.p.Addr(), addr)
	}
	kittest.ExecOK(t, ctx, kittest.Connect(t, c.p.DSN("")), "INSERT INTO items VALUES (1)")
	log, err := os.ReadFile(c.p.LogPath())
	if n := strings.Count(string(log), "successfully started"); err != nil || n != 2 {
		t.Errorf("the log tells of %d starts (%v), want 2", n, err)
	}
	for _, id := range []int{-1, 2} {
		if err := c.p.AttachNode(ctx, id); !errors.Is(err, pgtx.ErrInvalidArgument) {
			t.Errorf("AttachNode(%d) = %v, want pgtx.ErrInvalidArgument", id, err)
		}
	}
}

// TestPgpoolPromote: after the test promotes the standby and stops the primary,
// PromoteNode makes pgpool send writes to the new primary. With pgpool's defaults
// pgpool may have seen the primary shut down (failover_on_backend_shutdown) and
// found the new primary itself, and PromoteNode agrees; with that and
// failover_on_backend_error off, only PromoteNode switches.
func TestPgpoolPromote(t *testing.T) {
	t.Parallel()
	for _, failover := range []string{"off", "default"} {
		t.Run("pgpool failover "+failover, func(t *testing.T) {
			t.Parallel()
			cfg := &Config{NumInitChildren: 4}
			if failover == "off" {
				cfg.Extra = map[string]string{"failover_on_backend_error": "off", "failover_on_backend_shutdown": "off"}
			}
			c := newCluster(t, cfg)
			ctx := testContext(t)
			conn := kittest.Connect(t, c.p.DSN(""))
			kittest.ExecOK(t, ctx, conn, "CREATE TABLE items (id int PRIMARY KEY)")
			kittest.ExecOK(t, ctx, conn, "INSERT INTO items VALUES (1)")
			waitReplicated(t, ctx, c, 1)

			if err := c.standby.Promote(ctx); err != nil {
				t.Fatal(err)
			}
			if err := c.primary.Stop(); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, "INSERT INTO items VALUES (2)"); err == nil {
				t.Error("a write through pgpool succeeded on a connection to the stopped primary")
			}
			logStart := proc.LogSize(c.p.LogPath())
			start := time.Now()
			if err := c.p.PromoteNode(ctx, 1); err != nil {
				t.Fatalf("PromoteNode: %v", err)
			}
			t.Logf("PromoteNode took %v", time.Since(start).Round(time.Millisecond))
			promoted := strings.Contains(proc.Tail(c.p.LogPath(), logStart, 1<<20), "received promote backend request for node_id: 1")
			switch {
			case failover == "off" && !promoted:
				t.Error("pgpool's log has no promote request")
			case !promoted:
				t.Log("pgpool had found the new primary itself")
			}
			nodes, err := c.p.Nodes(ctx)
			if err != nil || nodes[0].Status != "down" || nodes[1].Role != "primary" {
				t.Errorf("Nodes after PromoteNode = %+v, %v: want node 0 down, node 1 primary", nodes, err)
			}
			after := kittest.Connect(t, c.p.DSN(""))
			if got := queryInt(t, ctx, after, "INSERT INTO items VALUES (3) RETURNING inet_server_port()"); got != port(t, c.standby.Addr()) {
				t.Errorf("a write after PromoteNode answered by port %d, want the promoted standby's", got)
			}
			if err := c.p.PromoteNode(ctx, 1); err != nil {
				t.Errorf("PromoteNode of the primary: %v", err)
			}
			if err := c.p.PromoteNode(ctx, 0); err == nil || !strings.Contains(err.Error(), "invalid promote backend request") {
				t.Errorf("PromoteNode of a node that is down = %v, want pgpool's refusal", err)
			}
		})
	}
}
