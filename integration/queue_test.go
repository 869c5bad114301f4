package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
)

// pollUntil polls cond every millisecond until it holds, and fails the test
// when it does not within 10s. It is for observing counters that follow an
// event the test cannot be told of directly (a goroutine parked in pgxpool's
// acquire), never for ordering the test's own steps.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// holdAll acquires every connection of pool directly (bypassing
// Transaction), so the next callers must wait. The returned func releases
// one connection per call; cleanup releases the rest.
func holdAll(t *testing.T, ctx context.Context, pool *pgtx.Pool) (release func()) {
	t.Helper()
	var held []*pgxpool.Conn
	for range pool.Stats().Pool.MaxConns() {
		c, err := pool.Pgxpool().Acquire(ctx)
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		held = append(held, c)
	}
	t.Cleanup(func() {
		for _, c := range held {
			c.Release()
		}
	})
	return func() {
		t.Helper()
		if len(held) == 0 {
			t.Fatal("no connection left to release")
		}
		held[0].Release()
		held = held[1:]
	}
}

// TestQueueDepthWhileCallersWait: the queue-depth metric (Stats.Waiting) is
// above 0 exactly while callers wait for a connection, drops by one as each
// gets one, and returns to 0 after; the acquire-wait histogram grows by one
// observation per call; InFlight and OldestInFlight follow the transactions
// parked in fn.
func TestQueueDepthWhileCallersWait(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, newDB(t), func(c *pgtx.Config) {
		c.MaxConns = 2
		c.AcquireTimeout = 30 * time.Second // the callers wait as long as the test needs
	})
	release := holdAll(t, ctx, pool)
	if s := pool.Stats(); s.Waiting != 0 || s.InFlight != 0 {
		t.Fatalf("with both connections held and no caller: Waiters %d, InFlight %d, want 0, 0", s.Waiting, s.InFlight)
	}
	before := pool.Stats()

	const n = 5
	gate := make(chan struct{}) // closed to let the transactions in fn finish
	entered := make(chan struct{}, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			errs <- pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				entered <- struct{}{}
				select {
				case <-gate:
				case <-ctx.Done():
					return ctx.Err()
				}
				_, err := tx.Exec(ctx, "select 1")
				return err
			})
		}()
	}
	gateOpen := false
	t.Cleanup(func() {
		if !gateOpen {
			close(gate)
		}
	})
	awaitEntered := func() {
		t.Helper()
		select {
		case <-entered:
		case <-ctx.Done():
			t.Fatal("no transaction got the released connection")
		}
	}

	pollUntil(t, "Waiters == n", func() bool { return pool.Stats().Waiting == n })
	if s := pool.Stats(); s.InFlight != 0 || s.TransactionCount-before.TransactionCount != n || s.AcquireWait.Count != before.AcquireWait.Count {
		t.Fatalf("while all wait: InFlight %d, calls %d, acquire waits observed %d; want 0, %d, 0",
			s.InFlight, s.TransactionCount-before.TransactionCount, s.AcquireWait.Count-before.AcquireWait.Count, n)
	}

	// One connection comes back: one caller gets it and parks in fn.
	released := time.Now()
	release()
	awaitEntered()
	pollUntil(t, "Waiters == n-1", func() bool { return pool.Stats().Waiting == n-1 })
	if s := pool.Stats(); s.InFlight != 1 || s.AcquireWait.Count-before.AcquireWait.Count != 1 {
		t.Fatalf("after one release: InFlight %d, acquire waits observed %d, want 1, 1", s.InFlight, s.AcquireWait.Count-before.AcquireWait.Count)
	}
	const parked = 50 * time.Millisecond
	pollUntil(t, "OldestInFlight >= 50ms", func() bool { return pool.Stats().OldestInFlight >= parked })
	if s, since := pool.Stats(), time.Since(released); s.OldestInFlight > since {
		t.Fatalf("OldestInFlight %v, but the connection was released to it only %v ago", s.OldestInFlight, since)
	}

	// The second comes back: two in flight, n-2 waiting.
	release()
	awaitEntered()
	pollUntil(t, "Waiters == n-2", func() bool { return pool.Stats().Waiting == n-2 })
	if s := pool.Stats(); s.InFlight != 2 || s.OldestInFlight < parked {
		t.Fatalf("after two releases: InFlight %d, OldestInFlight %v; want 2, >= %v", s.InFlight, s.OldestInFlight, parked)
	}

	// Let everyone through.
	close(gate)
	gateOpen = true
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("Transaction: %v", err)
		}
	}
	after := pool.Stats()
	t.Logf("after: Waiters %d, InFlight %d, acquire waits %d (mean %v, p99 <= %v), held %d (mean %v)",
		after.Waiting, after.InFlight, after.AcquireWait.Count-before.AcquireWait.Count,
		(after.AcquireWait.Duration-before.AcquireWait.Duration)/n, after.AcquireWait.Quantile(0.99),
		after.HeldCount-before.HeldCount, (after.HeldDuration-before.HeldDuration)/time.Duration(max(after.HeldCount-before.HeldCount, 1)))
	if after.Waiting != 0 || after.InFlight != 0 || after.OldestInFlight != 0 {
		t.Errorf("after: Waiters %d, InFlight %d, OldestInFlight %v, want 0, 0, 0", after.Waiting, after.InFlight, after.OldestInFlight)
	}
	if got := after.AcquireWait.Count - before.AcquireWait.Count; got != n {
		t.Errorf("acquire waits observed: %d, want %d", got, n)
	}
	if got := after.HeldCount - before.HeldCount; got != n {
		t.Errorf("held: %d, want %d", got, n)
	}
	// Every caller but the first waited at least until the first had been
	// parked in fn for 50ms.
	if got := after.AcquireWait.Duration - before.AcquireWait.Duration; got < (n-1)*parked {
		t.Errorf("total acquire wait %v, want >= %v", got, (n-1)*parked)
	}
	if after.AcquireTimeoutCount != before.AcquireTimeoutCount || after.QueueFullCount != before.QueueFullCount {
		t.Errorf("acquire timeouts %d, queue full %d: want none", after.AcquireTimeoutCount-before.AcquireTimeoutCount, after.QueueFullCount-before.QueueFullCount)
	}
}

// TestQueueFullRefusesAtOnce: with MaxWaiters 2 and two callers waiting, a
// third call fails at once with ErrQueueFull, without running fn, and is
// counted in Stats.QueueFullCount; the two waiting callers still succeed.
func TestQueueFullRefusesAtOnce(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, newDB(t), func(c *pgtx.Config) {
		c.MaxConns = 2
		c.MaxWaiters = 2
		c.AcquireTimeout = 30 * time.Second
	})
	release := holdAll(t, ctx, pool)

	fn := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "select 1")
		return err
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, fn) }()
	}
	pollUntil(t, "Waiters == 2", func() bool { return pool.Stats().Waiting == 2 })

	var ran counter
	start := time.Now()
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		ran.inc()
		return fn(ctx, tx)
	})
	took := time.Since(start)
	t.Logf("third call: %v after %v", err, took)
	if !errors.Is(err, pgtx.ErrQueueFull) {
		t.Fatalf("third call: %v, want ErrQueueFull", err)
	}
	if took > 100*time.Millisecond || ran.get() != 0 {
		t.Fatalf("third call took %v and ran fn %d times; want at once, never", took, ran.get())
	}
	if pgtx.Classify(err).Retryable() {
		t.Error("ErrQueueFull is retryable; want not")
	}
	if s := pool.Stats(); s.QueueFullCount != 1 || s.Waiting != 2 || s.AcquireWait.Count != 0 {
		t.Fatalf("Stats: QueueFull %d, Waiters %d, acquire waits %d; want 1, 2, 0", s.QueueFullCount, s.Waiting, s.AcquireWait.Count)
	}

	release()
	release()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("waiting caller: %v", err)
		}
	}
	if s := pool.Stats(); s.Waiting != 0 || s.QueueFullCount != 1 || s.TransactionCount != 3 || s.HeldCount != 2 {
		t.Errorf("after: Waiters %d, QueueFull %d, Calls %d, Held %d; want 0, 1, 3, 2", s.Waiting, s.QueueFullCount, s.TransactionCount, s.HeldCount)
	}
}

// TestInFlightDuringSlowStatement: a transaction sleeping on the server in
// fn shows in InFlight with a growing OldestInFlight, and its whole hold
// time lands in HoldTime when it ends.
func TestInFlightDuringSlowStatement(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, newDB(t), func(c *pgtx.Config) { c.MaxConns = 2 })
	const sleep = 300 * time.Millisecond
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "select pg_sleep($1)", sleep.Seconds())
			return err
		})
	}()
	pollUntil(t, "InFlight == 1 and OldestInFlight >= 100ms", func() bool {
		s := pool.Stats()
		return s.InFlight == 1 && s.OldestInFlight >= 100*time.Millisecond
	})
	if s := pool.Stats(); s.OldestInFlight > time.Since(start) {
		t.Errorf("OldestInFlight %v, but the call started %v ago", s.OldestInFlight, time.Since(start))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s := pool.Stats()
	t.Logf("held %d for %v", s.HeldCount, s.HeldDuration)
	if s.InFlight != 0 || s.OldestInFlight != 0 || s.HeldCount != 1 || s.HeldDuration < sleep || s.HeldDuration > time.Since(start) {
		t.Errorf("after: InFlight %d, OldestInFlight %v, Held %d, HoldTime %v; want 0, 0, 1, in [%v, %v]",
			s.InFlight, s.OldestInFlight, s.HeldCount, s.HeldDuration, sleep, time.Since(start))
	}
}
