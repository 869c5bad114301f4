package pgpool

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// testTimeout bounds every database operation of a pgpool test.
const testTimeout = 90 * time.Second

// testContext returns a context that bounds a test's database work.
func testContext(t *testing.T) context.Context {
	t.Helper()
	return kittest.Context(t, testTimeout)
}

// cluster is a primary of the test's own, a standby of it, and a pgpool in front
// of both.
type cluster struct {
	primary, standby *server.Server
	p                *Pgpool
}

// skipShort skips, under -short, a test that starts servers and a pgpool of
// its own: CI runs them once, in its pass without -short.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts servers and a pgpool of its own")
	}
}

// newCluster starts a primary, its standby and a pgpool configured by cfg.
func newCluster(t *testing.T, cfg *Config) *cluster {
	t.Helper()
	skipShort(t)
	primary := server.New(t, nil)
	standby := server.NewStandby(t, primary)
	return &cluster{primary: primary, standby: standby, p: New(t, primary, []*server.Server{standby}, cfg)}
}

// queryInt runs a query that returns one integer.
func queryInt(t *testing.T, ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, sql string, args ...any) int {
	t.Helper()
	var v int
	if err := q.QueryRow(ctx, sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// port returns the port of a host:port address.
func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, convErr := strconv.Atoi(p)
	if err != nil || convErr != nil {
		t.Fatalf("address %q: %v", addr, errors.Join(err, convErr))
	}
	return n
}

// nodeState waits until pgpool reports node id with status want.
func nodeState(t *testing.T, ctx context.Context, p *Pgpool, id int, want string) {
	t.Helper()
	kittest.Eventually(t, ctx, 20*time.Second, "node "+strconv.Itoa(id)+" "+want, func(ctx context.Context) error {
		nodes, err := p.Nodes(ctx)
		if err != nil {
			return err
		}
		if got := nodes[id].Status; got != want {
			return errors.New("status " + got)
		}
		return nil
	})
}
