package pgtxtest

import (
	"context"
	"strings"
	"testing"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
)

// NewPool returns a [pgtx.Pool] on a fresh database of its own for one test, made
// as [NewDatabase] makes it (with the same options: [WithServer], [WithMigrations],
// [WithMigrationsDir], [WithMigrate]), and closes it in tb.Cleanup, before the
// database is dropped.
//
// The pool's configuration is [pgtx.ParseConfig] of the database's DSN, changed by
// the [WithConfig] functions; pool.Config().ConnString() returns that DSN.
// [WithProxy] and [WithFailEveryCommitOnce] route the pool through a fault-injecting
// [faultproxy.Proxy] in front of the server (which must then be reached over TCP): the one
// WithProxy gives, or else one that NewPool makes and closes after the pool. A
// configuration pgtx refuses fails the test.
func NewPool(tb testing.TB, opts ...PoolOption) *pgtx.Pool {
	tb.Helper()
	o := collectOptions(tb, "NewPool", opts)
	s := o.serverFor(tb)
	p := o.proxy
	if p != nil || o.failEvery != "" {
		if s.Addr() == "" {
			tb.Fatalf("pgtxtest: NewPool: the %s server is reached over a Unix socket, and a proxy needs TCP: name a server with a host and port", s.Kind())
		}
		if p != nil && !strings.EqualFold(p.Upstream(), s.Addr()) {
			tb.Fatalf("pgtxtest: NewPool: WithProxy: the proxy forwards to %s, but the database is on %s", p.Upstream(), s.Addr())
		}
	}
	dsn := newDatabase(tb, o)
	if p == nil && o.failEvery != "" {
		p = faultproxy.New(tb, s.Addr())
	}
	if p != nil {
		if o.failEvery != "" {
			p.FailEveryCommitOnce(o.failEvery)
		}
		var err error
		if dsn, err = p.DSN(dsn); err != nil {
			tb.Fatalf("pgtxtest: NewPool: %v", err)
		}
	}
	cfg, err := pgtx.ParseConfig(dsn)
	if err != nil {
		tb.Fatalf("pgtxtest: NewPool: parse the DSN: %v", err)
	}
	for _, fn := range o.configs {
		fn(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	pool, err := pgtx.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("pgtxtest: NewPool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}
