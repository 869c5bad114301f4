package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
)

// The overload storm: open-loop arrivals at overloadFactor × the measured
// capacity, through pools of overloadConns connections (more than the server
// admits, so that the server, not the pool, sheds the load).
const (
	overloadFactor      = 2.0
	overloadConns       = 32
	overloadMaxInFlight = 4096
	overloadCallTimeout = 10 * time.Second
	naiveOverloadRetry  = 10
)

// overloadRow is one contender in the overload storm.
type overloadRow struct {
	Contender          string           `json:"contender"`
	OfferedPerS        float64          `json:"offered_calls_per_s"`
	CapacityPerS       float64          `json:"capacity_per_s"`
	GoodputPerS        float64          `json:"goodput_per_s"`
	AttemptsPerCall    float64          `json:"attempts_per_call"`
	AttemptsPerSuccess float64          `json:"attempts_per_success"`
	P50ms              float64          `json:"p50_ms"`
	P99ms              float64          `json:"p99_ms"`
	Calls              int64            `json:"calls"`
	Failed             int64            `json:"failed_calls"`
	Causes             map[string]int64 `json:"failed_by_cause,omitempty"`
	Dropped            int64            `json:"dropped_arrivals"`
}

// overload installs a server-side admission function that raises 53300 when
// more than -admit statements are active (integration/backpressure_test.go's
// admit()), measures the capacity with a closed loop of -admit workers, then
// offers twice that in an open loop to each contender in turn.
func overload(ctx context.Context, e *env) (result, error) {
	_, err := e.admin.Exec(ctx, `create or replace function bench_admit(lim int) returns void language plpgsql as $$
		begin
			if (select count(*) from pg_stat_activity where state = 'active' and query like 'select bench_admit(%') > lim then
				raise exception 'server busy' using errcode = '53300';
			end if;
			perform pg_sleep(0.005);
		end $$`)
	if err != nil {
		return result{}, err
	}
	sql := fmt.Sprintf("select bench_admit(%d)", e.opts.admit)
	work := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, sql)
		return err
	}

	budgetOn, err := newPgtxPool(ctx, e.dsn, overloadConns, nil)
	if err != nil {
		return result{}, err
	}
	defer budgetOn.Close()
	budgetOff, err := newPgtxPool(ctx, e.dsn, overloadConns, func(c *pgtx.Config) { c.Retry.BudgetRatio = -1 })
	if err != nil {
		return result{}, err
	}
	defer budgetOff.Close()
	xp, err := newPgxPool(ctx, e.dsn, overloadConns, nil)
	if err != nil {
		return result{}, err
	}
	defer xp.Close()
	cs := []contender{
		pgtxContender("pgtx (retry budget on)", budgetOn),
		pgtxContender("pgtx (budget off: Retry.BudgetRatio -1)", budgetOff),
		naiveContender(fmt.Sprintf("naive retry loop (%d immediate retries on 53300)", naiveOverloadRetry), xp, naiveOverloadRetry),
		beginContender("no retry (pgx.BeginTxFunc)", xp),
	}
	for _, exec := range []func(context.Context, string, ...any) (pgconn.CommandTag, error){budgetOn.Exec, budgetOff.Exec, xp.Exec} {
		if err := fill(ctx, overloadConns, exec); err != nil {
			return result{}, err
		}
	}
	calls := make([]callFunc, len(cs))
	for i, c := range cs {
		calls[i] = func(ctx context.Context, _ *rand.Rand) (int, error) { return c.run(ctx, pgtx.ReadCommitted, work) }
	}

	// Capacity: -admit workers never exceed the admission limit.
	noRetry := calls[len(calls)-1]
	warm(ctx, e.opts.admit, noRetry)
	capS := closedLoop(ctx, e.opts.admit, e.opts.dur, 7, noRetry)
	capacity := perSecond(capS.OK, capS.Elapsed)
	if capacity <= 0 {
		return result{}, fmt.Errorf("capacity run: no call succeeded (%s)", causes(capS.Causes))
	}
	rate := overloadFactor * capacity

	samples := make([]sample, len(cs))
	slice := 2 * e.opts.dur / time.Duration(e.opts.rounds)
	err = interleave(ctx, len(cs), e.opts.rounds, func(ctx context.Context, round, i int) error {
		samples[i].add(openLoop(ctx, rate, slice, overloadMaxInFlight, overloadCallTimeout, uint64(round), calls[i]))
		return nil
	})
	if err != nil {
		return result{}, err
	}
	rows := make([]overloadRow, len(cs))
	t := table{
		Title: fmt.Sprintf("Overload storm: open-loop arrivals at %.0f× capacity, server admits %d statements at once (53300 above)", overloadFactor, e.opts.admit),
		Note: fmt.Sprintf("Capacity measured first: %d workers in a closed loop, no retry, %v: %s successes/s (%d failed). "+
			"Then %s calls/s offered to each contender in turn (%d rounds of %v), each call in its own goroutine, "+
			"pools of %d connections. Goodput = successes that returned within the arrival window, per second. "+
			"Latencies are of successful calls. A call is `select bench_admit(%d)` (5ms on the server) in a READ COMMITTED transaction.",
			e.opts.admit, e.opts.dur, num(capacity), capS.Failed, num(rate), e.opts.rounds, slice, overloadConns, e.opts.admit),
		Header: []string{"contender", "goodput/s", "of capacity", "attempts per call", "attempts per success", "p50 ms", "p99 ms", "failed calls", "dropped arrivals"},
	}
	for i, c := range cs {
		s := &samples[i]
		good := perSecond(s.OKInWindow, s.Window)
		rows[i] = overloadRow{
			Contender: c.name, OfferedPerS: rate, CapacityPerS: capacity, GoodputPerS: good,
			AttemptsPerCall:    ratio(float64(s.Attempts), float64(s.Calls)),
			AttemptsPerSuccess: ratio(float64(s.Attempts), float64(s.OK)),
			P50ms:              msf(percentile(s.okLat, .5)), P99ms: msf(percentile(s.okLat, .99)),
			Calls: s.Calls, Failed: s.Failed, Causes: s.Causes, Dropped: s.Dropped,
		}
		r := rows[i]
		failed := fmt.Sprintf("%d of %d", r.Failed, r.Calls)
		if r.Failed > 0 {
			failed += " (" + causes(r.Causes) + ")"
		}
		t.Rows = append(t.Rows, []string{r.Contender, num(r.GoodputPerS), pct(ratio(r.GoodputPerS, capacity)),
			fmtf(r.AttemptsPerCall, 2), fmtf(r.AttemptsPerSuccess, 2),
			ms(time.Duration(r.P50ms * float64(time.Millisecond))), ms(time.Duration(r.P99ms * float64(time.Millisecond))),
			failed, itoa64(r.Dropped)})
	}
	return result{Tables: []table{t}, Data: rows}, nil
}
