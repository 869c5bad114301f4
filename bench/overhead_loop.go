package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// cpuSpreads returns contender i's CPU per call over the repetitions, and
// its ratio to the baseline's (contender 0) within each; nil when it was
// not measured in every repetition.
func cpuSpreads(perRep [][]float64, i, reps int) (value, toBaseline *spread) {
	if perRep == nil || len(perRep[i]) != reps || len(perRep[0]) != reps {
		return nil, nil
	}
	r := make([]float64, reps)
	for k := range reps {
		r[k] = ratio(perRep[i][k], perRep[0][k])
	}
	v, rs := newSpread(perRep[i]), newSpread(r)
	return &v, &rs
}

// interleavedLoop runs workers goroutines for d; each makes overheadBatch
// calls with every contender in turn, the contenders in a random order each
// turn. It returns every successful call's latency and the failed calls,
// per contender, after joining every goroutine, and, when probe is not nil
// (one worker only), the CPU time the batches took.
func interleavedLoop(ctx context.Context, workers int, d time.Duration, seed uint64, cs []contender, probe *cpuProbe, fn func(context.Context, pgx.Tx) error) ([][]time.Duration, []int64, []cpuTally) {
	lat := make([][][]time.Duration, workers)
	fails := make([][]int64, workers)
	tallies := make([]cpuTally, len(cs))
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		lat[w], fails[w] = make([][]time.Duration, len(cs)), make([]int64, len(cs))
		batch := func(i int) int {
			for range overheadBatch {
				callCtx, cancel := context.WithTimeout(ctx, callSafetyLimit)
				t0 := time.Now()
				_, err := cs[i].run(callCtx, pgtx.ReadCommitted, fn)
				took := time.Since(t0)
				cancel()
				if err != nil {
					fails[w][i]++
					continue
				}
				lat[w][i] = append(lat[w][i], took)
			}
			return overheadBatch
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for time.Since(start) < d && ctx.Err() == nil {
				for _, i := range rng.Perm(len(cs)) {
					if probe != nil {
						probe.around(i, &tallies[i], func() int { return batch(i) })
						continue
					}
					batch(i)
				}
			}
		})
	}
	wg.Wait()
	merged, failed := make([][]time.Duration, len(cs)), make([]int64, len(cs))
	for w := range workers {
		for i := range cs {
			merged[i] = append(merged[i], lat[w][i]...)
			failed[i] += fails[w][i]
		}
	}
	return merged, failed, tallies
}

// roundTrips counts, for each overhead contender, socket writes per
// transaction over 200 sequential calls on a one-connection pool.
func roundTrips(ctx context.Context, e *env, fn func(context.Context, pgx.Tx) error) ([]float64, error) {
	set, err := newOverheadSet(ctx, e, 1, true)
	if err != nil {
		return nil, err
	}
	defer set.close()
	trips := make([]float64, len(set.contenders))
	const calls = 200
	for i, c := range set.contenders {
		if _, err := c.run(ctx, pgtx.ReadCommitted, fn); err != nil { // prepares the statement
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		w0 := set.writes[i].Load()
		for range calls {
			if _, err := c.run(ctx, pgtx.ReadCommitted, fn); err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
		}
		trips[i] = float64(set.writes[i].Load()-w0) / calls
	}
	return trips, nil
}

// meanOf returns the mean of ds.
func meanOf(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// usf is d in microseconds.
func usf(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// selectOne is the overhead scenario's transaction: one statement.
func selectOne(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, "select 1")
	return err
}

// countingDial is a pgconn DialFunc whose connections count their writes in n.
func countingDial(n *atomic.Int64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{KeepAlive: 5 * time.Minute}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, writes: n}, nil
	}
}

// countingConn is a net.Conn that counts its Write calls.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

// Write counts the call and writes b.
func (c *countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}
