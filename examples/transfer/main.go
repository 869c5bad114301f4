// Command transfer runs concurrent SERIALIZABLE transfers between a few hot
// accounts through pgtx.Transaction for a few seconds, with a live progress
// line and a summary: commits, attempts per commit, retries by class, p50/p99
// latency, and the invariant (the total balance never changes).
//
// It uses DATABASE_URL when set (and says so, or that it did not answer),
// otherwise it starts a throwaway PostgreSQL from the locally installed
// binaries (or Docker), says where, and removes it at the end:
//
//	go run ./examples/transfer            # 5s, 8 workers, 5 accounts
//	go run ./examples/transfer -dur 30s -workers 32
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

const initialBalance = 1000

func main() {
	dur := flag.Duration("dur", 5*time.Second, "how long to run transfers")
	workers := flag.Int("workers", 8, "concurrent workers")
	accounts := flag.Int("accounts", 5, "number of (hot) accounts")
	flag.Parse()
	if *dur <= 0 || *workers < 1 || *accounts < 2 {
		fmt.Fprintln(os.Stderr, "transfer: need -dur > 0, -workers >= 1 and -accounts >= 2")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *dur, *workers, *accounts); err != nil {
		fmt.Fprintln(os.Stderr, "transfer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dur time.Duration, workers, accounts int) error {
	srv, err := findServer(ctx)
	if err != nil {
		return err
	}
	defer srv.stop()
	dsn := srv.dsn

	stats := &transferStats{}
	cfg, err := pgtx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(workers)
	cfg.Tracer = stats
	pool, err := pgtx.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	var version string
	if err := pool.QueryRow(ctx, "select current_setting('server_version')").Scan(&version); err != nil {
		return err
	}
	version, _, _ = strings.Cut(version, " ")
	fmt.Printf("server: %s\n", srv.describe(version))
	if err := setup(ctx, pool, accounts); err != nil {
		return err
	}
	fmt.Printf("transfer: %d workers, %d accounts, %v, SERIALIZABLE\n", workers, accounts, dur)

	// Workers start no new transfer after the run's end, and let the ones in
	// flight finish: a deadline on the calls themselves would make pgtx give
	// up on retries whose pause would end past it.
	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { worker(ctx, end, pool, accounts, uint64(w), stats) })
	}
	done := make(chan struct{})
	var progress sync.WaitGroup
	progress.Go(func() { stats.progress(done) })
	wg.Wait()
	close(done)
	progress.Wait()

	total, err := totalBalance(ctx, pool)
	if err != nil {
		return err
	}
	stats.summary(os.Stdout, total, accounts*initialBalance)
	if total != accounts*initialBalance {
		return fmt.Errorf("invariant broken: total balance %d, want %d", total, accounts*initialBalance)
	}
	return nil
}

func setup(ctx context.Context, pool *pgtx.Pool, accounts int) error {
	_, err := pool.Exec(ctx, `drop table if exists transfer_accounts;
		create table transfer_accounts (id int primary key, balance int not null check (balance >= 0))`)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, "insert into transfer_accounts select g, $1 from generate_series(1, $2) g", initialBalance, accounts)
	return err
}

var errInsufficient = errors.New("insufficient funds")

// transfer moves amount from one account to another: read the source
// balance, then update both rows, lower id first so that two transfers never
// wait for each other in a cycle. Under SERIALIZABLE two transfers touching
// the same account still conflict (40001); pgtx runs the loser again.
func transfer(ctx context.Context, pool *pgtx.Pool, from, to, amount int) error {
	return pgtx.TransactionWithOptions(ctx, pool, pgtx.Serializable, pgtx.Options{Label: "transfer"},
		func(ctx context.Context, tx pgx.Tx) error {
			var balance int
			if err := tx.QueryRow(ctx, "select balance from transfer_accounts where id = $1", from).Scan(&balance); err != nil {
				return err
			}
			if balance < amount {
				return errInsufficient
			}
			first, second := from, to
			if second < first {
				first, second = second, first
			}
			for _, id := range [2]int{first, second} {
				delta := amount
				if id == from {
					delta = -amount
				}
				if _, err := tx.Exec(ctx, "update transfer_accounts set balance = balance + $1 where id = $2", delta, id); err != nil {
					return err
				}
			}
			return nil
		})
}

func worker(ctx context.Context, end time.Time, pool *pgtx.Pool, accounts int, seed uint64, stats *transferStats) {
	rng := rand.New(rand.NewPCG(seed, 42))
	for ctx.Err() == nil && time.Now().Before(end) {
		from := 1 + rng.IntN(accounts)
		to := 1 + rng.IntN(accounts-1)
		if to >= from {
			to++
		}
		start := time.Now()
		err := transfer(ctx, pool, from, to, 1+rng.IntN(10))
		stats.call(time.Since(start), err, ctx.Err() != nil)
	}
}

func totalBalance(ctx context.Context, pool *pgtx.Pool) (int, error) {
	var total int
	err := pool.QueryRow(ctx, "select coalesce(sum(balance), 0) from transfer_accounts").Scan(&total)
	return total, err
}

// transferStats counts calls and attempts; it is the pool's
// pgtx.TransactionTracer.
type transferStats struct {
	commits, failed, insufficient, cutShort atomic.Int64
	attempts                                atomic.Int64
	retries                                 [pgtx.ClassPermanent + 1]atomic.Int64

	mu        sync.Mutex
	latencies []time.Duration
}

func (s *transferStats) TraceTransactionStart(ctx context.Context, _ pgtx.TraceTransactionStartData) context.Context {
	return ctx
}

func (s *transferStats) TraceTransactionEnd(context.Context, pgtx.TraceTransactionEndData) {}

func (s *transferStats) TraceAttemptStart(ctx context.Context, _ pgtx.TraceAttemptStartData) context.Context {
	s.attempts.Add(1)
	return ctx
}

func (s *transferStats) TraceAttemptEnd(_ context.Context, d pgtx.TraceAttemptEndData) {
	if d.Retry && d.Class >= 0 && int(d.Class) < len(s.retries) {
		s.retries[d.Class].Add(1)
	}
}

func (s *transferStats) call(d time.Duration, err error, runOver bool) {
	switch {
	case err == nil:
		s.commits.Add(1)
		s.mu.Lock()
		s.latencies = append(s.latencies, d)
		s.mu.Unlock()
	case errors.Is(err, errInsufficient):
		s.insufficient.Add(1)
	case runOver:
		s.cutShort.Add(1) // interrupted (Ctrl-C)
	default:
		s.failed.Add(1)
	}
}

func (s *transferStats) progress(done <-chan struct{}) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-done:
			fmt.Println()
			return
		case <-t.C:
			c := s.commits.Load()
			fmt.Printf("\r%5.1fs  commits %7d  attempts/commit %5.2f  retries: conflict %6d  lost %3d  overload %3d  failed %3d",
				time.Since(start).Seconds(), c, ratio(s.attempts.Load(), c),
				s.retries[pgtx.ClassConflict].Load(), s.retries[pgtx.ClassConnectionLost].Load(),
				s.retries[pgtx.ClassOverload].Load(), s.failed.Load())
		}
	}
}

func (s *transferStats) summary(w *os.File, total, want int) {
	s.mu.Lock()
	lat := slices.Clone(s.latencies)
	s.mu.Unlock()
	slices.Sort(lat)
	c := s.commits.Load()
	fmt.Fprintf(w, "commits            %d\n", c)
	fmt.Fprintf(w, "attempts           %d (%.2f per commit)\n", s.attempts.Load(), ratio(s.attempts.Load(), c))
	fmt.Fprintf(w, "retries            conflict %d, connection lost %d, overload %d\n",
		s.retries[pgtx.ClassConflict].Load(), s.retries[pgtx.ClassConnectionLost].Load(), s.retries[pgtx.ClassOverload].Load())
	fmt.Fprintf(w, "not committed      failed %d, insufficient funds %d, interrupted %d\n",
		s.failed.Load(), s.insufficient.Load(), s.cutShort.Load())
	fmt.Fprintf(w, "latency            p50 %v, p99 %v\n", percentile(lat, 0.50), percentile(lat, 0.99))
	verdict := "unchanged"
	if total != want {
		verdict = "CHANGED"
	}
	fmt.Fprintf(w, "invariant          total balance %d, want %d: %s\n", total, want, verdict)
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))].Round(10 * time.Microsecond)
}
