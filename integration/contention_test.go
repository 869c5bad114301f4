package integration

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// contentionEvents records what a pool's tracer hears of the contention
// manager: its changes of limit and every attempt's admission.
type contentionEvents struct {
	nopTracer
	mu       sync.Mutex
	changes  []pgtx.TraceContentionData
	attempts int
	waited   int           // attempts that waited at the gate
	maxWait  time.Duration // the longest wait
	limits   map[int]int   // attempts by the limit they ran under
}

func (e *contentionEvents) TraceAttemptEnd(_ context.Context, d pgtx.TraceAttemptEndData) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.attempts++
	if d.AdmissionWait > 0 {
		e.waited++
		e.maxWait = max(e.maxWait, d.AdmissionWait)
	}
	e.limits[d.Limit]++
}

func (e *contentionEvents) TraceContention(_ context.Context, d pgtx.TraceContentionData) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.changes = append(e.changes, d)
}

// TestContentionManagerOnHotRows runs SERIALIZABLE transfers of sixteen
// workers over two accounts of a real server, with the contention manager
// at its defaults. The manager must engage on the conflicts, say so in
// Stats and to the tracer, let attempts wait at its gate holding no
// connection, and lose nothing: every call commits, the total is unchanged
// and every committed transfer is applied once. A second phase gives the
// calls deadlines shorter than the queue at the gate: they end with the
// deadline, never hang, and commit nothing they report as failed.
func TestContentionManagerOnHotRows(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of hot-row transfers")
	}
	ctx := testCtx(t)
	dsn := newDB(t)
	conn := directConn(t, dsn)
	mustExec(t, ctx, conn, "create table hot (id int primary key, balance bigint not null, n bigint not null default 0)")
	mustExec(t, ctx, conn, "insert into hot values (1, 1000000), (2, 1000000)")

	const workers = 16
	events := &contentionEvents{limits: map[int]int{}}
	pool := newPool(t, dsn, func(c *pgtx.Config) {
		c.MaxConns = workers
		c.Tracer = events
	})
	// Both rows are updated in id order (no deadlock, each of which would
	// cost the server's deadlock_timeout), the money going either way.
	transfer := func(ctx context.Context, i int) error {
		delta := 1 - 2*(i%2)
		return pgtx.TransactionWithOptions(ctx, pool, pgtx.Serializable, pgtx.Options{Label: "hot"}, func(ctx context.Context, tx pgx.Tx) error {
			var b int64
			if err := tx.QueryRow(ctx, "select balance from hot where id = 1").Scan(&b); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "update hot set balance = balance - $1, n = n + 1 where id = 1", delta); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "update hot set balance = balance + $1, n = n + 1 where id = 2", delta)
			return err
		})
	}

	// Phase 1: every call must commit.
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		committed int
		failures  []error
	)
	stop := time.Now().Add(2 * time.Second)
	for w := range workers {
		wg.Go(func() {
			for i := w; time.Now().Before(stop); i += workers {
				err := transfer(ctx, i)
				mu.Lock()
				if err == nil {
					committed++
				} else {
					failures = append(failures, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range failures[:min(len(failures), 5)] {
		t.Errorf("a transfer failed: %v", err)
	}
	s := contentionStats(t, pool, "hot")
	t.Logf("%d transfers committed; manager: %+v", committed, s)
	events.mu.Lock()
	t.Logf("tracer: %d attempts, %d waited at the gate (longest %v), by limit %v; %d changes of limit, first %+v",
		events.attempts, events.waited, events.maxWait, events.limits, len(events.changes), events.changes[:min(1, len(events.changes))])
	switch {
	case len(events.changes) == 0 || !events.changes[0].Limiting || events.changes[0].Previous != 0:
		t.Errorf("the tracer heard no engagement of the manager: %+v", events.changes)
	case events.waited == 0:
		t.Error("no attempt waited at the gate")
	case s.Wait.Count == 0 || s.ConflictCount == 0 || s.CommitCount != int64(committed):
		t.Errorf("Stats().Contention for the label: %+v, want admissions through the gate, conflicts, and %d commits", s, committed)
	}
	events.mu.Unlock()
	if s.Running != 0 || s.Waiting != 0 || pool.Stats().InFlight != 0 {
		t.Errorf("after every call returned: %d running and %d waiting at the gate, %d holding connections", s.Running, s.Waiting, pool.Stats().InFlight)
	}
	checkHotLedger(t, ctx, conn, committed)

	// Phase 2: deadlines shorter than the queue. Nothing hangs, and a call
	// that failed committed nothing.
	before := committed
	var late, other int
	for w := range workers {
		wg.Go(func() {
			for i := range 20 {
				cctx, cancel := context.WithTimeout(ctx, time.Duration(1+i%3)*time.Millisecond)
				err := transfer(cctx, w+i)
				cancel()
				mu.Lock()
				switch {
				case err == nil:
					committed++
				case errors.Is(err, context.DeadlineExceeded):
					late++
				default:
					other++
					failures = append(failures, err)
				}
				mu.Unlock()
			}
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("calls with 1-3ms deadlines had not returned after 30s")
	}
	t.Logf("with 1-3ms deadlines: %d committed, %d ended by the deadline, %d otherwise", committed-before, late, other)
	if late == 0 || other > 0 {
		t.Errorf("%d calls ended by the deadline and %d otherwise (%v), want the deadline only", late, other, failures[len(failures)-other:])
	}
	checkHotLedger(t, ctx, conn, committed)
}

// checkHotLedger checks the hot accounts: the total unchanged and two
// updates for every transfer that committed, none for the others.
func checkHotLedger(t *testing.T, ctx context.Context, conn *pgx.Conn, committed int) {
	t.Helper()
	var total, n int64
	if err := conn.QueryRow(ctx, "select sum(balance)::bigint, sum(n)::bigint from hot").Scan(&total, &n); err != nil {
		t.Fatal(err)
	}
	if total != 2000000 || n != 2*int64(committed) {
		t.Errorf("total %d (want 2000000), %d updates (want %d: two per committed transfer)", total, n, 2*committed)
	}
}

// contentionStats is the pool's contention state for label.
func contentionStats(t *testing.T, pool *pgtx.Pool, label string) pgtx.ContentionStats {
	t.Helper()
	for _, s := range pool.Stats().Contention {
		if s.Label == label {
			return s
		}
	}
	t.Fatalf("Stats().Contention has no label %q", label)
	return pgtx.ContentionStats{}
}
