package behindpgpool

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/integration/internal/itest"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/pgpool"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
	"github.com/pgtx-go/pgtx/pooler"
)

// pgpoolEnv is a primary, its streaming standby and a Pgpool-II in front of
// both, in streaming-replication mode with load balancing on (weights 1:1)
// and connection caching, as users run it, with a database of the test's
// own: its DSN directly on each server and through Pgpool-II.
type pgpoolEnv struct {
	primary, standby           *server.Server
	pool                       *pgpool.Pgpool
	direct, onStandby, through string
}

// behindPgpool starts the primary, creates the database with setup run on
// it, then the standby (a copy of the primary by then: it has them) and
// Pgpool-II in front of both (extra: pgpool.conf settings over the kit's;
// nil for Pgpool-II's own defaults).
func behindPgpool(t *testing.T, extra map[string]string, setup ...string) *pgpoolEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a primary, a standby and a Pgpool-II of its own")
	}
	ctx := itest.Ctx(t)
	e := &pgpoolEnv{primary: server.New(t, nil)}
	e.direct = pgtxtest.NewDatabase(t, pgtxtest.WithServer(e.primary))
	admin := itest.DirectConn(t, e.direct)
	for _, sql := range setup {
		itest.Exec(t, ctx, admin, sql)
	}
	e.standby = server.NewStandby(t, e.primary)
	var err error
	if e.onStandby, err = server.DSNWithAddr(e.direct, e.standby.Addr()); err != nil {
		t.Fatal(err)
	}
	e.pool = pgpool.New(t, e.primary, []*server.Server{e.standby}, &pgpool.Config{Extra: extra})
	u, err := url.Parse(e.direct)
	if err != nil {
		t.Fatal(err)
	}
	e.through = e.pool.DSN(strings.TrimPrefix(u.Path, "/"))
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if log, err := os.ReadFile(e.pool.LogPath()); err == nil {
			const n = 16 << 10
			t.Logf("Pgpool-II log (last %d bytes):\n%s", min(n, len(log)), log[max(0, len(log)-n):])
		}
	})
	return e
}

// pauseReplay stops the standby's replay, so that a read it answers is
// certainly stale once the primary writes again, and resumes it when the
// test ends.
func (e *pgpoolEnv) pauseReplay(t *testing.T) {
	t.Helper()
	ctx := itest.Ctx(t)
	conn := itest.DirectConn(t, e.onStandby)
	itest.Exec(t, ctx, conn, "select pg_wal_replay_pause()")
	for range 500 {
		var state string
		if err := conn.QueryRow(ctx, "select pg_get_wal_replay_pause_state()").Scan(&state); err != nil {
			t.Fatal(err)
		}
		if state == "paused" {
			t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "select pg_wal_replay_resume()") })
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the standby's replay never paused")
}

// port returns the port of the server at addr (host:port).
func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if _, err := fmt.Sscan(p, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// balancedTo returns a pool through Pgpool-II of one connection whose
// session Pgpool-II balances to the node at addr, mutate applied to its
// Config: pools are opened until one's session has that node (weights
// 1:1, so each has an even chance).
func (e *pgpoolEnv) balancedTo(t *testing.T, addr string, mutate func(*pgtx.Config)) *pgtx.Pool {
	t.Helper()
	ctx := itest.Ctx(t)
	for range 40 {
		pool := itest.NewPool(t, e.through, func(c *pgtx.Config) {
			c.MaxConns = 1
			if mutate != nil {
				mutate(c)
			}
		})
		if got := loadBalanceNode(t, ctx, pool); got == addr {
			return pool
		}
		pool.Close()
	}
	t.Fatalf("40 sessions through Pgpool-II, none balanced to %s", addr)
	return nil
}

// loadBalanceNode returns the address of the node Pgpool-II balances the
// session of pool's one connection to.
func loadBalanceNode(t *testing.T, ctx context.Context, pool *pgtx.Pool) string {
	t.Helper()
	rows, err := pool.Query(ctx, "show pool_nodes", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatalf("show pool_nodes: %v", err)
	}
	defer rows.Close()
	var addr string
	for rows.Next() {
		v := rows.RawValues()
		fields := rows.FieldDescriptions()
		var host, p string
		var lb bool
		for i, f := range fields {
			switch f.Name {
			case "hostname":
				host = string(v[i])
			case "port":
				p = string(v[i])
			case "load_balance_node":
				lb = string(v[i]) == "true"
			}
		}
		if lb {
			addr = net.JoinHostPort(host, p)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// poolerTracer records what pools tell their pooler.Tracer, and their
// cancels.
type poolerTracer struct {
	mu      sync.Mutex
	found   []pooler.Data
	cancels []pgtx.TraceCancelData
}

func (p *poolerTracer) TraceCancel(_ context.Context, d pgtx.TraceCancelData) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cancels = append(p.cancels, d)
}

func (p *poolerTracer) TraceTransactionStart(ctx context.Context, _ pgtx.TraceTransactionStartData) context.Context {
	return ctx
}
func (p *poolerTracer) TraceTransactionEnd(context.Context, pgtx.TraceTransactionEndData) {}
func (p *poolerTracer) TraceAttemptStart(ctx context.Context, _ pgtx.TraceAttemptStartData) context.Context {
	return ctx
}
func (p *poolerTracer) TraceAttemptEnd(context.Context, pgtx.TraceAttemptEndData) {}

func (p *poolerTracer) TracePooler(_ context.Context, d pooler.Data) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.found = append(p.found, d)
}

func (p *poolerTracer) poolers() []pooler.Data {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]pooler.Data(nil), p.found...)
}
