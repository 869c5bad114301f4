package itest

import (
	"cmp"
	"context"
	"sync"
	"testing"

	"github.com/pgtx-go/pgtx"
)

// NewPool opens a pgtx pool on dsn, with mutate applied to its Config, and
// closes it at cleanup.
func NewPool(t testing.TB, dsn string, mutate func(*pgtx.Config)) *pgtx.Pool {
	t.Helper()
	cfg, err := pgtx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if mutate != nil {
		mutate(cfg)
	}
	pool, err := pgtx.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("NewWithConfig: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// FillIdle leaves n idle connections in pool: n acquires hold one each at
// once, then release them.
func FillIdle(t testing.TB, ctx context.Context, pool *pgtx.Pool, n int) {
	t.Helper()
	held, release := make(chan error, n), make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			c, err := pool.Pgxpool().Acquire(ctx)
			held <- err
			if err == nil {
				<-release
				c.Release()
			}
		})
	}
	var err error
	for range n {
		err = cmp.Or(err, <-held)
	}
	close(release)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if idle := pool.Pgxpool().Stat().IdleConns(); idle != int32(n) {
		t.Fatalf("%d idle connections, want %d", idle, n)
	}
}
