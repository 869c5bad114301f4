package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
)

// sample is what one or more slices of a loop measured.
type sample struct {
	Calls    int64         // calls that returned
	OK       int64         // calls that returned nil
	Failed   int64         // calls that returned an error
	Attempts int64         // times the transaction's work ran, all calls
	Elapsed  time.Duration // wall time of the slices, draining included
	// Window is the time arrivals were issued (open loop) or calls were
	// started (closed loop); OKInWindow counts the successes that returned
	// within it.
	Window     time.Duration
	OKInWindow int64
	Dropped    int64            // open loop: arrivals refused by a full semaphore
	CutShort   int64            // closed loop: calls cancelled at the end of a slice, not counted as calls
	Causes     map[string]int64 // failed calls by cause
	okLat      []time.Duration  // latency of each successful call
	failLat    []time.Duration  // latency of each failed call
	allLat     []time.Duration  // latency of every call
}

// add merges o into s.
func (s *sample) add(o sample) {
	s.Calls += o.Calls
	s.OK += o.OK
	s.Failed += o.Failed
	s.Attempts += o.Attempts
	s.Elapsed += o.Elapsed
	s.Window += o.Window
	s.OKInWindow += o.OKInWindow
	s.Dropped += o.Dropped
	s.CutShort += o.CutShort
	for k, v := range o.Causes {
		if s.Causes == nil {
			s.Causes = map[string]int64{}
		}
		s.Causes[k] += v
	}
	s.okLat = append(s.okLat, o.okLat...)
	s.failLat = append(s.failLat, o.failLat...)
	s.allLat = append(s.allLat, o.allLat...)
}

// record counts one call.
func (s *sample) record(d time.Duration, attempts int, err error) {
	s.Calls++
	s.Attempts += int64(attempts)
	s.allLat = append(s.allLat, d)
	if err == nil {
		s.OK++
		s.okLat = append(s.okLat, d)
		return
	}
	s.Failed++
	s.failLat = append(s.failLat, d)
	if s.Causes == nil {
		s.Causes = map[string]int64{}
	}
	s.Causes[errKind(err)]++
}

// perSecond returns n per second of d.
func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// ratio returns a/b, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// percentile returns the q-quantile (nearest rank) of ds; it sorts ds.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	if !slices.IsSorted(ds) {
		slices.Sort(ds)
	}
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// errKind names the cause of a failed call for the tables.
func errKind(err error) string {
	switch {
	case errors.Is(err, pgtx.ErrRetryBudgetExhausted):
		return "retry budget"
	case errors.Is(err, pgtx.ErrQueueFull):
		return "queue full"
	case errors.Is(err, pgtx.ErrAcquireTimeout):
		return "acquire timeout"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	if strings.Contains(err.Error(), "retrying txn failed after") {
		return "crdb max retries" // cockroach-go's MaxRetriesExceededError
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return "other"
}

// causes formats failure causes as "40001 3, 40P01 1", most frequent first.
func causes(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// callFunc is one call of a loop: it returns the attempts it made.
type callFunc func(ctx context.Context, rng *rand.Rand) (attempts int, err error)

// closedLoop runs workers goroutines, each calling call back to back, for
// d. Calls in flight at d are finished and counted (Elapsed includes them).
// Every goroutine is joined before it returns.
func closedLoop(ctx context.Context, workers int, d time.Duration, seed uint64, call callFunc) sample {
	return closedLoopCut(ctx, workers, d, 0, seed, call, nil)
}

// closedLoopCut is closedLoop that also calls atEnd (when not nil) at d,
// while the last calls still run, and, when grace is positive, cancels the
// calls still running at d + grace: those are counted in CutShort (and their
// attempts in Attempts), not as calls.
func closedLoopCut(ctx context.Context, workers int, d, grace time.Duration, seed uint64, call callFunc, atEnd func()) sample {
	runCtx, cut := context.WithCancel(ctx)
	defer cut()
	per := make([]sample, workers)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			s := &per[w]
			for time.Since(start) < d && runCtx.Err() == nil {
				t0 := time.Now()
				callCtx, cancel := context.WithTimeout(runCtx, callSafetyLimit)
				attempts, err := call(callCtx, rng)
				cancel()
				if err != nil && runCtx.Err() != nil && ctx.Err() == nil {
					s.CutShort++
					s.Attempts += int64(attempts)
					continue
				}
				s.record(time.Since(t0), attempts, err)
			}
		})
	}
	if atEnd != nil || grace > 0 {
		sleepCtx(ctx, time.Until(start.Add(d)))
		if atEnd != nil {
			atEnd()
		}
		if grace > 0 {
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			t := time.NewTimer(grace)
			select {
			case <-done:
			case <-t.C:
				cut()
			}
			t.Stop()
			<-done
		}
	}
	wg.Wait()
	var total sample
	for _, s := range per {
		total.add(s)
	}
	total.Elapsed = time.Since(start)
	total.Window = d
	total.OKInWindow = total.OK
	return total
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// openLoop issues calls at rate per second for d, each in its own goroutine,
// whatever the calls' latency (open-loop arrivals), with at most maxInFlight
// in flight: an arrival finding them all busy is dropped and counted. Each
// call gets a deadline of callTimeout. It waits for every call before it
// returns.
func openLoop(ctx context.Context, rate float64, d time.Duration, maxInFlight int, callTimeout time.Duration, seed uint64, call callFunc) sample {
	var (
		mu      sync.Mutex
		total   sample
		inWin   atomic.Int64
		dropped int64
		wg      sync.WaitGroup
	)
	sem := make(chan struct{}, maxInFlight)
	start := time.Now()
	end := start.Add(d)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	issued := int64(0)
	for now := start; now.Before(end) && ctx.Err() == nil; now = <-tick.C {
		due := int64(now.Sub(start).Seconds() * rate)
		for ; issued < due; issued++ {
			select {
			case sem <- struct{}{}:
			default:
				dropped++
				continue
			}
			n := issued
			wg.Go(func() {
				defer func() { <-sem }()
				rng := rand.New(rand.NewPCG(seed, uint64(n)))
				callCtx, cancel := context.WithTimeout(ctx, callTimeout)
				t0 := time.Now()
				attempts, err := call(callCtx, rng)
				done := time.Now()
				cancel()
				if err == nil && done.Before(end) {
					inWin.Add(1)
				}
				mu.Lock()
				total.record(done.Sub(t0), attempts, err)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	total.Elapsed = time.Since(start)
	total.Window = d
	total.OKInWindow = inWin.Load()
	total.Dropped = dropped
	return total
}

// interleave runs slice for each of n cells, rounds times, starting each
// round one cell later, so that machine noise and server state (autovacuum,
// checkpoints, a neighbour's burst) hit every cell alike.
func interleave(ctx context.Context, n, rounds int, slice func(ctx context.Context, round, cell int) error) error {
	for r := range rounds {
		for _, i := range rotation(r, n) {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := slice(ctx, r, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// rotation is the order of n cells in round r: 0..n-1 rotated by r.
func rotation(r, n int) []int {
	order := make([]int, n)
	for k := range order {
		order[k] = (r + k) % n
	}
	return order
}

// execFunc is a pool's Exec method (pgtx.Pool's or pgxpool.Pool's).
type execFunc func(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)

// fill opens n connections of a pool, if it has fewer, by running n short
// statements at once.
func fill(ctx context.Context, n int, exec execFunc) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = exec(ctx, "select pg_sleep(0.005)") })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// warm runs call from workers goroutines for a short while so that every
// pool has its connections open and its statements prepared before a
// measurement.
func warm(ctx context.Context, workers int, call callFunc) {
	closedLoop(ctx, workers, 150*time.Millisecond, 1, call)
}
