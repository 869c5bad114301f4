package pgtx

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// gateClock widens the window between a caller's admission and its wait:
// Now holds each caller until three are inside it (or 200ms pass), so that
// callers admitted by a check-then-act race are all let in together.
type gateClock struct {
	arrived atomic.Int64
	open    chan struct{}
	once    sync.Once
}

func (c *gateClock) Now() time.Time {
	if c.arrived.Add(1) == 3 {
		c.once.Do(func() { close(c.open) })
	}
	t := time.NewTimer(200 * time.Millisecond)
	defer t.Stop()
	select {
	case <-c.open:
	case <-t.C:
	}
	return time.Now()
}

func (c *gateClock) Sleep(ctx context.Context, d time.Duration) error {
	return realClock{}.Sleep(ctx, d)
}

// TestMaxWaitersReservesBeforeWaiting: 32 callers at once, MaxWaiters 2, no
// connection to be had: exactly 30 are refused with ErrQueueFull. The bound
// is a reservation made before waiting, not a count read and acted on later.
func TestMaxWaitersReservesBeforeWaiting(t *testing.T) {
	cfg, err := ParseConfig("postgres://u@" + silentListener(t) + "/db?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	cfg.MaxWaiters = 2
	cfg.AcquireTimeout = 300 * time.Millisecond
	cfg.CancelMode = CancelModeProtocol
	pool, err := NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	pool.clock = &gateClock{open: make(chan struct{})}

	const callers = 32
	var refused atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range callers {
		wg.Go(func() {
			<-start
			err := Transaction(context.Background(), pool, ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
			if errors.Is(err, ErrQueueFull) {
				refused.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := int(refused.Load()); got != callers-cfg.MaxWaiters {
		t.Errorf("refused %d of %d callers, want %d: more than MaxWaiters (%d) waited", got, callers, callers-cfg.MaxWaiters, cfg.MaxWaiters)
	}
}
