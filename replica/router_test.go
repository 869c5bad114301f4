package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
)

// unreachablePool returns a Pool that never connects: pgxpool opens
// connections on demand, CancelModeProtocol has no cancel pool, and nothing
// listens on port 1, so a connect is refused at once.
func unreachablePool(t *testing.T, breaker *pgtx.BreakerConfig) *pgtx.Pool {
	t.Helper()
	cfg, err := pgtx.ParseConfig("postgres://pgtx@127.0.0.1:1/none?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	cfg.CancelMode = pgtx.CancelModeProtocol
	cfg.Breaker = breaker
	p, err := pgtx.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// behaviour is what a fake transaction on one pool does.
type behaviour func(ctx context.Context) error

func fail(err error) behaviour { return func(context.Context) error { return err } }

// slow waits for its context to end.
func slow(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// call is one fake transaction.
type call struct {
	pool string
	iso  pgtx.Isolation
	opts pgtx.Options
}

// fake stands in for pgtx.TransactionWithOptions and Pool.BreakerState: each
// pool has a name, a behaviour and an open or closed breaker.
type fake struct {
	names  map[*pgtx.Pool]string
	behave map[string]behaviour
	open   map[string]bool

	mu    sync.Mutex
	calls []call
}

// newRouter returns a router over a primary "p" and replicas "r0", "r1"...,
// each with its behaviour (running fn when none is given), whose transactions are
// fake's.
func newRouter(t *testing.T, replicas int, cfg Config, behave map[string]behaviour, open ...string) (*Router, *fake) {
	t.Helper()
	f := &fake{names: map[*pgtx.Pool]string{}, behave: behave, open: map[string]bool{}}
	for _, name := range open {
		f.open[name] = true
	}
	primary := unreachablePool(t, nil)
	f.names[primary] = "p"
	var rs []*pgtx.Pool
	for i := range replicas {
		r := unreachablePool(t, nil)
		f.names[r] = fmt.Sprintf("r%d", i)
		rs = append(rs, r)
	}
	router, err := New(primary, rs, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	router.run = f.run
	router.isOpen = func(p *pgtx.Pool) bool { return f.open[f.names[p]] }
	return router, f
}

func (f *fake) run(ctx context.Context, pool *pgtx.Pool, iso pgtx.Isolation, opts pgtx.Options, fn func(context.Context, pgx.Tx) error) error {
	name := f.names[pool]
	f.mu.Lock()
	f.calls = append(f.calls, call{pool: name, iso: iso, opts: opts})
	f.mu.Unlock()
	if b := f.behave[name]; b != nil {
		return b(ctx)
	}
	return fn(ctx, nil)
}

// pools returns the names of the pools called, in order.
func (f *fake) pools() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	for _, c := range f.calls {
		names = append(names, c.pool)
	}
	return names
}

var (
	errOverload = &pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"}
	errLost     = &pgconn.PgError{Code: "08006", Message: "connection failure"}
	errConflict = &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
	errCaller   = errors.New("the caller's own error")
)

func TestNew(t *testing.T) {
	p := unreachablePool(t, nil)
	tests := []struct {
		name     string
		primary  *pgtx.Pool
		replicas []*pgtx.Pool
		wantErr  bool
	}{
		{"nil primary", nil, []*pgtx.Pool{p}, true},
		{"nil replica", p, []*pgtx.Pool{p, nil}, true},
		{"no replicas", p, nil, false},
		{"replicas", p, []*pgtx.Pool{p, p}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.primary, tt.replicas, &Config{})
			if tt.wantErr {
				if r != nil || !errors.Is(err, pgtx.ErrInvalidArgument) {
					t.Fatalf("New = %v, %v, want nil and an ErrInvalidArgument", r, err)
				}
				return
			}
			if err != nil || r == nil {
				t.Fatalf("New = %v, %v, want a Router", r, err)
			}
		})
	}
}

func TestNewCopiesReplicas(t *testing.T) {
	router, f := newRouter(t, 1, Config{}, nil)
	replicas := []*pgtx.Pool{router.replicas[0]}
	r2, err := New(router.primary, replicas, &Config{})
	if err != nil {
		t.Fatal(err)
	}
	r2.run, r2.isOpen = f.run, router.isOpen
	replicas[0] = router.primary // the caller's slice changes; the router's does not
	if err := r2.Read(context.Background(), func(context.Context, pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := f.pools(); !slices.Equal(got, []string{"r0"}) {
		t.Errorf("pools called = %q, want [r0]", got)
	}
}

func TestConfigTimeout(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		want    time.Duration
	}{
		{"zero means the default", 0, defaultReplicaTimeout},
		{"explicit", 50 * time.Millisecond, 50 * time.Millisecond},
		{"negative means no bound of its own", -1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				deadline    time.Time
				hasDeadline bool
			)
			start := time.Now()
			router, _ := newRouter(t, 1, Config{ReplicaTimeout: tt.timeout}, map[string]behaviour{
				"r0": func(ctx context.Context) error {
					deadline, hasDeadline = ctx.Deadline()
					return nil
				},
			})
			if router.timeout != tt.want {
				t.Errorf("timeout = %v, want %v", router.timeout, tt.want)
			}
			if err := router.Read(context.Background(), func(context.Context, pgx.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.want < 0 && hasDeadline:
				t.Errorf("replica context has a deadline %v, want none", deadline)
			case tt.want > 0 && (!hasDeadline || deadline.Sub(start) > tt.want+time.Second || deadline.Before(start)):
				t.Errorf("replica context deadline %v (set: %v), want about %v from the start", deadline.Sub(start), hasDeadline, tt.want)
			}
		})
	}
}

func TestRead(t *testing.T) {
	short := Config{ReplicaTimeout: 20 * time.Millisecond}
	tests := []struct {
		name      string
		replicas  int
		cfg       Config
		behave    map[string]behaviour
		open      []string
		wantCalls []string
		wantErr   error // matched with errors.Is; nil: success
		wantStats Stats
	}{
		{name: "served by the replica", replicas: 1,
			wantCalls: []string{"r0"}, wantStats: Stats{ReplicaReadCount: 1}},
		{name: "no replicas: the primary", replicas: 0,
			wantCalls: []string{"p"}, wantStats: Stats{FallbackCount: 1}},
		{name: "lost connection falls back", replicas: 2, behave: map[string]behaviour{"r0": fail(errLost)},
			wantCalls: []string{"r0", "p"}, wantStats: Stats{FallbackCount: 1}},
		{name: "overload falls back to the primary without retargeting", replicas: 2,
			behave:    map[string]behaviour{"r0": fail(errOverload)},
			wantCalls: []string{"r0", "p"}, wantStats: Stats{FallbackCount: 1}},
		{name: "overload retargets to the next replica", replicas: 2, cfg: Config{RetargetOnOverload: true},
			behave:    map[string]behaviour{"r0": fail(errOverload)},
			wantCalls: []string{"r0", "r1"}, wantStats: Stats{ReplicaReadCount: 1, RetargetCount: 1}},
		{name: "overload everywhere: retargets, then the primary", replicas: 2, cfg: Config{RetargetOnOverload: true},
			behave:    map[string]behaviour{"r0": fail(errOverload), "r1": fail(errOverload)},
			wantCalls: []string{"r0", "r1", "p"}, wantStats: Stats{RetargetCount: 1, FallbackCount: 1}},
		{name: "a lost connection does not retarget", replicas: 2, cfg: Config{RetargetOnOverload: true},
			behave:    map[string]behaviour{"r0": fail(errLost)},
			wantCalls: []string{"r0", "p"}, wantStats: Stats{FallbackCount: 1}},
		{name: "the replica's breaker refuses", replicas: 1, behave: map[string]behaviour{"r0": fail(pgtx.ErrCircuitOpen)},
			wantCalls: []string{"r0", "p"}, wantStats: Stats{FallbackCount: 1}},
		{name: "an open breaker is skipped", replicas: 2, open: []string{"r0"},
			wantCalls: []string{"r1"}, wantStats: Stats{ReplicaReadCount: 1}},
		{name: "every breaker open", replicas: 2, open: []string{"r0", "r1"},
			wantCalls: []string{"p"}, wantStats: Stats{FallbackCount: 1}},
		{name: "slower than ReplicaTimeout falls back", replicas: 1, cfg: short, behave: map[string]behaviour{"r0": slow},
			wantCalls: []string{"r0", "p"}, wantStats: Stats{FallbackCount: 1}},
		{name: "a timeout error falls back", replicas: 1, behave: map[string]behaviour{"r0": fail(pgtx.ErrAcquireTimeout)},
			wantCalls: []string{"r0", "p"}, wantStats: Stats{FallbackCount: 1}},
		{name: "the caller's error is returned", replicas: 2, behave: map[string]behaviour{"r0": fail(errCaller)},
			wantCalls: []string{"r0"}, wantErr: errCaller},
		{name: "no rows is returned", replicas: 1, behave: map[string]behaviour{"r0": fail(pgx.ErrNoRows)},
			wantCalls: []string{"r0"}, wantErr: pgx.ErrNoRows},
		{name: "a conflict is returned", replicas: 1, behave: map[string]behaviour{"r0": fail(errConflict)},
			wantCalls: []string{"r0"}, wantErr: errConflict},
		{name: "the primary's error is returned", replicas: 1,
			behave:    map[string]behaviour{"r0": fail(errLost), "p": fail(errOverload)},
			wantCalls: []string{"r0", "p"}, wantErr: errOverload, wantStats: Stats{FallbackCount: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			router, f := newRouter(t, tt.replicas, tt.cfg, tt.behave, tt.open...)
			ran := 0
			err := router.Read(context.Background(), func(context.Context, pgx.Tx) error {
				ran++
				return nil
			})
			if tt.wantErr == nil && err != nil {
				t.Errorf("Read = %v, want success", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("Read = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil && ran != 1 {
				t.Errorf("fn ran %d times, want once", ran)
			}
			if got := f.pools(); !slices.Equal(got, tt.wantCalls) {
				t.Errorf("pools called = %q, want %q", got, tt.wantCalls)
			}
			if got := router.Stats(); got != tt.wantStats {
				t.Errorf("Stats = %+v, want %+v", got, tt.wantStats)
			}
		})
	}
}

// TestReadWithOptions: the isolation and options reach every transaction,
// READ ONLY is forced, and with retargeting the replicas get no overload or
// unavailable-server retries of their own while the primary keeps the
// caller's.
func TestReadWithOptions(t *testing.T) {
	for _, retarget := range []bool{false, true} {
		t.Run(fmt.Sprintf("retarget=%v", retarget), func(t *testing.T) {
			router, f := newRouter(t, 2, Config{RetargetOnOverload: retarget}, map[string]behaviour{
				"r0": fail(errOverload), "r1": fail(errOverload),
			})
			opts := pgtx.Options{Label: "report", MaxRetries: 4, MaxAdaptiveRetries: 3, StatementTimeout: time.Second}
			if err := router.ReadWithOptions(context.Background(), pgtx.RepeatableRead, opts, func(context.Context, pgx.Tx) error {
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(f.calls) < 2 {
				t.Fatalf("calls = %+v, want a replica and the primary", f.calls)
			}
			for _, c := range f.calls {
				want := opts
				want.ReadOnly = true
				if retarget && c.pool != "p" {
					want.MaxAdaptiveRetries, want.UnavailableTimeout = -1, -1
				}
				if c.iso != pgtx.RepeatableRead || c.opts != want {
					t.Errorf("%s: iso %v, opts %+v, want %v, %+v", c.pool, c.iso, c.opts, pgtx.RepeatableRead, want)
				}
			}
		})
	}
}

func TestReadInvalid(t *testing.T) {
	router, f := newRouter(t, 1, Config{}, nil)
	fn := func(context.Context, pgx.Tx) error { return nil }
	var nilCtx context.Context
	var nilRouter *Router
	tests := []struct {
		name string
		read func() error
	}{
		{"nil context", func() error { return router.Read(nilCtx, fn) }},
		{"nil fn", func() error { return router.Read(context.Background(), nil) }},
		{"nil Router", func() error { return nilRouter.Read(context.Background(), fn) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.read(); !errors.Is(err, pgtx.ErrInvalidArgument) {
				t.Errorf("err = %v, want ErrInvalidArgument", err)
			}
		})
	}
	if got := f.pools(); len(got) != 0 {
		t.Errorf("pools called = %q, want none", got)
	}
	if got := router.Stats(); got != (Stats{}) {
		t.Errorf("Stats = %+v, want zero", got)
	}
	if got := nilRouter.Stats(); got != (Stats{}) {
		t.Errorf("nil Router: Stats = %+v, want zero", got)
	}
}

// TestReadCallerGone: once the caller's context has ended, the replica's
// error is returned: no fallback.
func TestReadCallerGone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	router, f := newRouter(t, 1, Config{}, map[string]behaviour{
		"r0": func(rctx context.Context) error {
			cancel()
			<-rctx.Done()
			return errLost
		},
	})
	err := router.Read(ctx, func(context.Context, pgx.Tx) error { return nil })
	if !errors.Is(err, errLost) {
		t.Errorf("Read = %v, want the replica's error", err)
	}
	if got := f.pools(); !slices.Equal(got, []string{"r0"}) {
		t.Errorf("pools called = %q, want [r0]", got)
	}
	if got := router.Stats(); got != (Stats{}) {
		t.Errorf("Stats = %+v, want zero", got)
	}
}

func TestReadRoundRobin(t *testing.T) {
	router, f := newRouter(t, 3, Config{}, nil)
	for range 6 {
		if err := router.Read(context.Background(), func(context.Context, pgx.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := f.pools(), []string{"r0", "r1", "r2", "r0", "r1", "r2"}; !slices.Equal(got, want) {
		t.Errorf("pools called = %q, want %q", got, want)
	}
	if got := router.Stats(); got != (Stats{ReplicaReadCount: 6}) {
		t.Errorf("Stats = %+v, want 6 replica reads", got)
	}
}

// TestReadUnreachable runs the real pgtx.TransactionWithOptions on pools
// nothing listens for: the replica's refused connection falls back to the
// primary, whose refused connection is the error; fn never runs. With a
// breaker that opens on the first failure, the next read skips the replica.
func TestReadUnreachable(t *testing.T) {
	primary := unreachablePool(t, nil)
	replica := unreachablePool(t, &pgtx.BreakerConfig{Name: "replica", ConsecutiveFailures: 1})
	router, err := New(primary, []*pgtx.Pool{replica}, &Config{})
	if err != nil {
		t.Fatal(err)
	}
	noRetries := pgtx.Options{MaxRetries: -1, MaxAdaptiveRetries: -1, UnavailableTimeout: -1}
	fn := func(context.Context, pgx.Tx) error {
		t.Error("fn ran without a connection")
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)

	err = router.ReadWithOptions(ctx, pgtx.ReadCommitted, noRetries, fn)
	if err == nil || pgtx.Classify(err) != pgtx.ClassUnavailable {
		t.Fatalf("Read = %v (class %v), want the primary's refused connection", err, pgtx.Classify(err))
	}
	if got := router.Stats(); got != (Stats{FallbackCount: 1}) {
		t.Errorf("Stats = %+v, want one fallback", got)
	}
	if got := replica.BreakerState(); got != pgtx.BreakerOpen {
		t.Fatalf("replica breaker %v after a failure, want open", got)
	}
	calls := replica.Stats().Breaker
	if calls == nil {
		t.Fatal("replica Stats().Breaker is nil, want the breaker's counts")
	}

	err = router.ReadWithOptions(ctx, pgtx.ReadCommitted, noRetries, fn)
	if err == nil || pgtx.Classify(err) != pgtx.ClassUnavailable {
		t.Fatalf("second Read = %v, want the primary's refused connection", err)
	}
	after := replica.Stats().Breaker
	if after == nil {
		t.Fatal("replica Stats().Breaker is nil, want the breaker's counts")
	}
	if after.CallCount != calls.CallCount || after.RejectedCount != calls.RejectedCount {
		t.Errorf("replica breaker counts went from %+v to %+v: the open replica was not skipped", calls, after)
	}
	if got := router.Stats(); got != (Stats{FallbackCount: 2}) {
		t.Errorf("Stats = %+v, want two fallbacks", got)
	}
}
