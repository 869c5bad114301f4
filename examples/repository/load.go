package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// loadStats counts the outcomes of the load.
type loadStats struct {
	calls, committed, insufficient, gaveUp atomic.Int64
	mu                                     sync.Mutex
	latencies                              []time.Duration
}

// load runs workers goroutines, each making perWorker random transfers
// between the hot accounts, and prints what happened.
func load(ctx context.Context, repo *Repo, ids map[string]int64, workers, perWorker int, tr *callTracer, c *checks) error {
	fmt.Printf("\n2. %d workers x %d random transfers between the same %d accounts:\n\n", workers, perWorker, len(ids))
	owners := make([]string, 0, len(opening))
	for _, o := range opening {
		owners = append(owners, o.owner)
	}
	attempts0, conflicts0 := tr.attempts.Load(), tr.conflict.Load()
	st := &loadStats{}
	began := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range perWorker {
				if ctx.Err() != nil {
					return
				}
				from, to := rng.IntN(len(owners)), rng.IntN(len(owners)-1)
				if to >= from {
					to++
				}
				loadOne(ctx, repo, ids[owners[from]], ids[owners[to]], 1+rng.Int64N(150), st, c)
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	elapsed := time.Since(began)
	calls := st.calls.Load()
	attempts := tr.attempts.Load() - attempts0
	slices.Sort(st.latencies)
	fmt.Printf("  calls              %d in %v\n", calls, elapsed.Round(time.Millisecond))
	fmt.Printf("  committed          %d\n", st.committed.Load())
	fmt.Printf("  insufficient funds %d (domain error: returned at once, not retried)\n", st.insufficient.Load())
	fmt.Printf("  gave up            %d (still conflicting after MaxRetries retries)\n", st.gaveUp.Load())
	fmt.Printf("  attempts           %d (%.2f per call); conflict retries %d (40001, whole transaction run again)\n",
		attempts, float64(attempts)/float64(max(calls, 1)), tr.conflict.Load()-conflicts0)
	fmt.Printf("  latency            p50 %v, p99 %v\n", percentile(st.latencies, 0.5), percentile(st.latencies, 0.99))
	return nil
}

// loadOne makes one transfer of the load and counts its outcome.
func loadOne(ctx context.Context, repo *Repo, from, to, amount int64, st *loadStats, c *checks) {
	start := time.Now()
	_, err := repo.Transfer(ctx, from, to, amount)
	d := time.Since(start)
	if ctx.Err() != nil {
		return // interrupted: not counted
	}
	st.calls.Add(1)
	switch {
	case err == nil:
		st.committed.Add(1)
		c.committed.Add(1)
	case errors.Is(err, ErrInsufficientFunds):
		st.insufficient.Add(1)
	case sqlState(err) == pgerrcode.SerializationFailure || sqlState(err) == pgerrcode.DeadlockDetected:
		st.gaveUp.Add(1)
	default:
		c.fail("transfer %d -> %d: unexpected error: %v", from, to, err)
	}
	st.mu.Lock()
	st.latencies = append(st.latencies, d)
	st.mu.Unlock()
}

// sqlState returns the SQLSTATE of the last *pgconn.PgError in err's chain,
// or "" when there is none.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// final prints the balances and checks the invariants.
func final(ctx context.Context, repo *Repo, c *checks) error {
	accounts, err := repo.Accounts(ctx)
	if err != nil {
		return err
	}
	recorded, err := repo.q.CountTransfers(ctx)
	if err != nil {
		return err
	}
	sum, err := repo.q.SumBalances(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("\n3. Balances:")
	for _, a := range accounts {
		fmt.Printf("  %s %d", a.Owner, a.Balance)
	}
	fmt.Printf("\n   total %d (opened with %d); transfers recorded %d, committed calls %d\n",
		sum, total, recorded, c.committed.Load())
	if sum != total {
		c.fail("the total balance is %d, want %d", sum, total)
	}
	if recorded != c.committed.Load() {
		c.fail("%d transfers recorded for %d committed calls", recorded, c.committed.Load())
	}
	if len(c.problems) > 0 {
		for _, p := range c.problems {
			fmt.Fprintln(os.Stderr, "repository: FAILED:", p)
		}
		return fmt.Errorf("%d check(s) failed", len(c.problems))
	}
	fmt.Println("\nrepository: ok: domain errors came back as themselves after one attempt, conflicts were retried,")
	fmt.Println("            and every committed transfer was applied exactly once")
	return nil
}

// percentile returns the q-quantile of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))].Round(10 * time.Microsecond)
}
