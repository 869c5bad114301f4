package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/bulkhead"
)

// The timeout storm: slow calls (pg_sleep(1)) arrive open-loop at
// stormSlowRate per second, each with a deadline of stormSlowTimeout, while
// stormFastWorkers run `select 1` transactions back to back. The connections
// add up to stormConns in every setup.
const (
	stormConns       = 8
	stormFastConns   = 6
	stormSlowConns   = stormConns - stormFastConns
	stormSlowWaiters = 2
	stormSlowRate    = 10.0
	stormSlowTimeout = 2 * time.Second
	stormFastWorkers = 4
	stormLeadIn      = time.Second // slow load alone before the fast class is measured
	stormRounds      = 2
)

// stormSetup is one way of giving the two classes connections.
type stormSetup struct {
	name       string
	fast, slow *pgtx.Pool
	slowLoad   bool
}

// timeoutRow is one setup of the timeout storm.
type timeoutRow struct {
	Setup         string           `json:"setup"`
	FastPerS      float64          `json:"fast_goodput_per_s"`
	FastOfAlone   float64          `json:"fast_of_alone"`
	FastP50ms     float64          `json:"fast_p50_ms"`
	FastP99ms     float64          `json:"fast_p99_ms"`
	FastFailed    int64            `json:"fast_failed"`
	FastCauses    map[string]int64 `json:"fast_failed_by_cause,omitempty"`
	SlowCalls     int64            `json:"slow_calls"`
	SlowOK        int64            `json:"slow_ok"`
	SlowCauses    map[string]int64 `json:"slow_failed_by_cause,omitempty"`
	SlowFailP50ms float64          `json:"slow_time_to_fail_p50_ms"`
}

// timeoutStorm compares, under a storm of slow calls, the fast class's
// goodput and latency with one shared pool, with per-class pools
// (bulkhead.New), and with per-class pools whose slow class has a
// bounded queue (MaxWaiters) so that it fails fast.
func timeoutStorm(ctx context.Context, e *env) (result, error) {
	cfg, err := pgtx.ParseConfig(e.dsn)
	if err != nil {
		return result{}, err
	}
	cfg.MaxConns = stormConns
	shared, err := pgtx.NewWithConfig(ctx, cfg)
	if err != nil {
		return result{}, err
	}
	defer shared.Close()
	split, err := bulkhead.New(ctx, &bulkhead.Config{Base: cfg, Pools: map[string]bulkhead.PoolConfig{
		"fast": {MaxConns: stormFastConns},
		"slow": {MaxConns: stormSlowConns},
	}})
	if err != nil {
		return result{}, err
	}
	defer split.Close()
	shedding, err := bulkhead.New(ctx, &bulkhead.Config{Base: cfg, Pools: map[string]bulkhead.PoolConfig{
		"fast": {MaxConns: stormFastConns},
		"slow": {MaxConns: stormSlowConns, MaxWaiters: stormSlowWaiters},
	}})
	if err != nil {
		return result{}, err
	}
	defer shedding.Close()
	setups := []stormSetup{
		{name: fmt.Sprintf("fast class alone, no slow load (pool of %d)", stormConns), fast: shared, slow: shared},
		{name: fmt.Sprintf("one shared pool of %d", stormConns), fast: shared, slow: shared, slowLoad: true},
		{name: fmt.Sprintf("bulkheads: fast %d, slow %d connections", stormFastConns, stormSlowConns), slowLoad: true},
		{name: fmt.Sprintf("bulkheads, slow class MaxWaiters %d (fails fast)", stormSlowWaiters), slowLoad: true},
	}
	for i, bh := range map[int]*bulkhead.Pools{2: split, 3: shedding} {
		if setups[i].fast, err = bh.Pool("fast"); err != nil {
			return result{}, err
		}
		if setups[i].slow, err = bh.Pool("slow"); err != nil {
			return result{}, err
		}
	}

	fastCall := func(p *pgtx.Pool) callFunc {
		return func(ctx context.Context, _ *rand.Rand) (int, error) {
			return pgtxContender("", p).run(ctx, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "select 1")
				return err
			})
		}
	}
	slowCall := func(p *pgtx.Pool) callFunc {
		return func(ctx context.Context, _ *rand.Rand) (int, error) {
			return pgtxContender("", p).run(ctx, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "select pg_sleep(1)")
				return err
			})
		}
	}
	for _, s := range setups {
		warm(ctx, stormFastWorkers, fastCall(s.fast))
	}
	fast := make([]sample, len(setups))
	slow := make([]sample, len(setups))
	slice := 3 * e.opts.dur / 2
	err = interleave(ctx, len(setups), stormRounds, func(ctx context.Context, round, i int) error {
		s := setups[i]
		var wg sync.WaitGroup
		if s.slowLoad {
			wg.Go(func() {
				slow[i].add(openLoop(ctx, stormSlowRate, stormLeadIn+slice, 256, stormSlowTimeout, uint64(round), slowCall(s.slow)))
			})
			time.Sleep(stormLeadIn)
		}
		fast[i].add(closedLoop(ctx, stormFastWorkers, slice, uint64(round), fastCall(s.fast)))
		wg.Wait()
		return nil
	})
	if err != nil {
		return result{}, err
	}
	return timeoutResult(setups, fast, slow, slice), nil
}

// timeoutResult lays the storm's samples out as rows and a table.
func timeoutResult(setups []stormSetup, fast, slow []sample, slice time.Duration) result {
	alone := perSecond(fast[0].OK, fast[0].Elapsed)
	t := table{
		Title: "Timeout storm: a slow class (`select pg_sleep(1)`) and a fast class (`select 1` transactions)",
		Note: fmt.Sprintf("Slow calls arrive open-loop at %.0f/s with a %v deadline; %d fast workers call back to back. "+
			"Each setup has %d connections in all; %d rounds of %v with the slow load started %v before the fast class is measured. "+
			"Fast p50/p99 are over all fast calls, failed ones included. All pools are pgtx pools (AcquireTimeout 2s).",
			stormSlowRate, stormSlowTimeout, stormFastWorkers, stormConns, stormRounds, slice, stormLeadIn),
		Header: []string{"setup", "fast tx/s", "of alone", "fast p50 ms", "fast p99 ms", "fast failed",
			"slow calls", "slow ok", "slow failed", "slow time to fail p50 ms"},
	}
	rows := make([]timeoutRow, len(setups))
	for i, s := range setups {
		f, sl := &fast[i], &slow[i]
		rate := perSecond(f.OK, f.Elapsed)
		rows[i] = timeoutRow{
			Setup: s.name, FastPerS: rate, FastOfAlone: ratio(rate, alone),
			FastP50ms: msf(percentile(f.allLat, .5)), FastP99ms: msf(percentile(f.allLat, .99)),
			FastFailed: f.Failed, FastCauses: f.Causes,
			SlowCalls: sl.Calls, SlowOK: sl.OK, SlowCauses: sl.Causes,
			SlowFailP50ms: msf(percentile(sl.failLat, .5)),
		}
		r := rows[i]
		fastFailed := itoa64(r.FastFailed)
		if r.FastFailed > 0 {
			fastFailed += " (" + causes(r.FastCauses) + ")"
		}
		slowCalls, slowOK, slowFailed, slowFail := "—", "—", "—", "—"
		if s.slowLoad {
			slowCalls, slowOK, slowFailed = itoa64(r.SlowCalls), itoa64(r.SlowOK), itoa64(sl.Failed)
			if sl.Failed > 0 {
				slowFailed += " (" + causes(r.SlowCauses) + ")"
				slowFail = ms(time.Duration(r.SlowFailP50ms * float64(time.Millisecond)))
			}
		}
		t.Rows = append(t.Rows, []string{r.Setup, num(r.FastPerS), pct(r.FastOfAlone), fmtf(r.FastP50ms, 2), fmtf(r.FastP99ms, 1),
			fastFailed, slowCalls, slowOK, slowFailed, slowFail})
	}
	return result{Tables: []table{t}, Data: rows}
}
