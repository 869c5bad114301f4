package pgtx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// silentListener accepts TCP connections and never answers them, so every
// connect of a pool hangs until its ConnectTimeout.
func silentListener(t *testing.T) string {
	t.Helper()
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() { // runs after the listener's own cleanup
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return testListener(t, func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c)
	})
}

// acquireSignal is a caller's tracer that says when the pool starts an
// acquire.
type acquireSignal chan struct{}

func (s acquireSignal) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (s acquireSignal) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s acquireSignal) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	s <- struct{}{}
	return ctx
}
func (s acquireSignal) TraceAcquireEnd(context.Context, *pgxpool.Pool, pgxpool.TraceAcquireEndData) {}

// TestPoolQueue checks the wiring of the bounded acquire: Config's
// AcquireTimeout and MaxWaiters reach the pool's queue, its refusals reach
// the caller as ErrQueueFull and ErrAcquireTimeout (and not as
// context.DeadlineExceeded), the caller's tracer still sees the pool's
// acquires, and Stats reads the counts. No connection is to be had: the
// server never answers.
func TestPoolQueue(t *testing.T) {
	cfg, err := ParseConfig("postgres://u@" + silentListener(t) + "/db?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	started := make(acquireSignal, 8)
	cfg.MaxConns = 1
	cfg.MaxWaiters = 1
	cfg.AcquireTimeout = 100 * time.Millisecond
	cfg.CancelMode = CancelModeProtocol
	cfg.ConnConfig.Tracer = started
	// The acquire times out while the pool connects, an overload
	// (TestConnectTimeoutIsOverload): not retried here, one wait counted.
	cfg.Retry.MaxAdaptiveRetries = -1
	pool, err := NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	noop := func(context.Context, pgx.Tx) error { return nil }

	waiter := make(chan error, 1)
	go func() { waiter <- Transaction(context.Background(), pool, ReadCommitted, noop) }()
	<-started // the first caller waits in the pool, its place reserved
	if got := pool.Stats().Waiting; got != 1 {
		t.Errorf("Stats().Waiting = %d while one caller waits", got)
	}
	if err := Transaction(context.Background(), pool, ReadCommitted, noop); !errors.Is(err, ErrQueueFull) {
		t.Errorf("second caller: %v, want ErrQueueFull", err)
	}
	err = <-waiter
	if !errors.Is(err, ErrAcquireTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("first caller: %v, want ErrAcquireTimeout and not context.DeadlineExceeded", err)
	}

	s := pool.Stats()
	if s.Waiting != 0 || s.QueueFullCount != 1 || s.AcquireTimeoutCount != 1 || s.TransactionCount != 2 ||
		s.HeldCount != 0 || s.InFlight != 0 {
		t.Errorf("Stats() = waiting %d, queue full %d, acquire timeouts %d, transactions %d, held %d, in flight %d; want 0, 1, 1, 2, 0, 0",
			s.Waiting, s.QueueFullCount, s.AcquireTimeoutCount, s.TransactionCount, s.HeldCount, s.InFlight)
	}
	if s.AcquireWait.Count != 1 || s.AcquireWait.Max < cfg.AcquireTimeout {
		t.Errorf("AcquireWait: %d waits, the longest %v; want the one of at least %v", s.AcquireWait.Count, s.AcquireWait.Max, cfg.AcquireTimeout)
	}
}

// TestConnectTimeoutIsOverload: a connect that times out while the
// caller's context still runs may have met a server too loaded to accept
// it: the call retries it as an overload, MaxAdaptiveRetries times, and
// says so; so is an acquire timeout that came while the pool was
// connecting. A connect the caller's own deadline ended is the caller's
// timeout, not retried.
func TestConnectTimeoutIsOverload(t *testing.T) {
	cfg, err := ParseConfig("postgres://u@" + silentListener(t) + "/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.ConnectTimeout = 50 * time.Millisecond
	cfg.CancelMode = CancelModeProtocol
	cfg.Retry.Jitter = func() float64 { return 0 }
	pool, err := NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	attempts := 0
	tr := &recordingTracer{}
	pool.settings.tracer = tr
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = Transaction(ctx, pool, ReadCommitted, func(context.Context, pgx.Tx) error { attempts++; return nil })
	var classes []Class
	for _, e := range tr.ends {
		classes = append(classes, e.Class)
	}
	if fmt.Sprint(classes) != "[overload overload overload]" {
		t.Errorf("attempts' classes %v, want three overloads", classes)
	}
	if !strings.HasPrefix(fmt.Sprint(err), "pgtx: gave up after 3 attempts (MaxAdaptiveRetries 2): failed to connect to ") || attempts != 0 {
		t.Errorf("err = %v (fn ran %d times): want MaxAdaptiveRetries to end the call", err, attempts)
	}

	// AcquireTimeout before the connect timeout: the pool, with room, was
	// connecting when the acquire timed out.
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	cfg.AcquireTimeout = 50 * time.Millisecond
	slow, err := NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(slow.Close)
	tr.ends = nil
	slow.settings.tracer = tr
	err = Transaction(ctx, slow, ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
	classes = classes[:0]
	for _, e := range tr.ends {
		classes = append(classes, e.Class)
	}
	if fmt.Sprint(classes) != "[overload overload overload]" || !errors.Is(err, ErrAcquireTimeout) ||
		!strings.HasSuffix(err.Error(), "(AcquireTimeout 50ms, connecting to the server)") {
		t.Errorf("classes %v, err %v: want three overloads, ended by MaxAdaptiveRetries on the acquire timeout of a connect", classes, err)
	}

	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err = Transaction(short, pool, ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) || Classify(err) != ClassTimeout {
		t.Errorf("err = %v: want the caller's deadline", err)
	}
}
