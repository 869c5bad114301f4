package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
)

// connectRuns is how many times the connect scenario measures each
// contender of a measure, and connectWarmRuns how many runs come first,
// unmeasured.
const (
	connectRuns     = 50
	connectWarmRuns = 3
)

// The contenders of the connect scenario: pgxpool is the baseline.
const (
	nameConnPgxpool = "pgxpool"
	nameConnControl = "pgxpool again (A/A control)"
	nameConnPgtx    = "pgtx"
	nameConnBegin   = "pgx.BeginTxFunc on pgxpool"
	nameConnTx      = "pgtx.Transaction"
)

// connectRow is one contender of one measure: the time of each run, and
// its ratio to the baseline's run of the same round.
type connectRow struct {
	Measure   string `json:"measure"`
	Contender string `json:"contender"`
	Millis    spread `json:"ms"`
	// Ratio is this contender's time over the baseline's, within each
	// round: above 1 costs more.
	Ratio spread `json:"cost_ratio"`
}

// connectCase is one contender of a measure: run makes one measured run
// and returns its time; close, when not nil, closes what the case opened.
type connectCase struct {
	name  string
	run   func(ctx context.Context) (time.Duration, error)
	close func()
}

// connect measures what making a connection costs, pgxpool against pgtx
// with its defaults: a reconnect in a warm pool (Reset, then one
// statement, or a one-statement transaction) and a new pool with its
// first statement. The contenders run alternately, in a random order each
// round, on the same server.
func connect(ctx context.Context, e *env) (result, error) {
	type measure struct {
		name  string
		cases func() ([]connectCase, error)
	}
	measures := []measure{
		{"reconnect: Reset, then `select 1`", func() ([]connectCase, error) { return reconnectCases(ctx, e, false) }},
		{"reconnect: Reset, then a one-statement transaction", func() ([]connectCase, error) { return reconnectCases(ctx, e, true) }},
		{"new pool and its first `select 1`", func() ([]connectCase, error) { return newPoolCases(e), nil }},
	}
	var rows []connectRow
	for i, m := range measures {
		cs, err := m.cases()
		if err != nil {
			return result{}, fmt.Errorf("%s: %w", m.name, err)
		}
		ms, err := connectRounds(ctx, cs, uint64(i))
		for _, c := range cs {
			if c.close != nil {
				c.close()
			}
		}
		if err != nil {
			return result{}, fmt.Errorf("%s: %w", m.name, err)
		}
		for k, c := range cs {
			r := make([]float64, len(ms[k]))
			for j := range r {
				r[j] = ratio(ms[k][j], ms[0][j])
			}
			rows = append(rows, connectRow{Measure: m.name, Contender: c.name, Millis: newSpread(ms[k]), Ratio: newSpread(r)})
		}
	}
	t := table{
		Title: "Connect: a reconnect in a warm pool, and a new pool",
		Note: fmt.Sprintf("Each contender is measured %d times (after %d unmeasured runs), the contenders of a measure alternately, "+
			"in a random order each round, on the same server. Reconnect: a pool of one connection, warm, is Reset "+
			"(pgtx: Pool.Pgxpool().Reset()), then one call is timed, which makes the new connection. New pool: pgxpool.New "+
			"or pgtx.New with the defaults, then its first `select 1`, timed together; the pool is closed untimed. "+
			"Time is the median [min–max] in ms; the cost ratio is the contender's time over the first row's of its measure "+
			"in the same round (above 1× costs more), the median over the rounds with a 95%% bootstrap interval; "+
			"the A/A control's is the method's own noise.", connectRuns, connectWarmRuns),
		Header: []string{"measure", "contender", "ms", "cost ratio"},
	}
	for _, r := range rows {
		t.Rows = append(t.Rows, []string{r.Measure, r.Contender, r.Millis.format(2, ""), r.Ratio.formatCI(3, "×")})
	}
	return result{Tables: []table{t}, Data: rows}, nil
}

// connectRounds runs every case connectWarmRuns times unmeasured, then
// connectRuns times, the cases in a random order each round, and returns
// each case's times in ms, round by round.
func connectRounds(ctx context.Context, cs []connectCase, seed uint64) ([][]float64, error) {
	rng := rand.New(rand.NewPCG(seed, 7))
	ms := make([][]float64, len(cs))
	for round := range connectWarmRuns + connectRuns {
		for _, i := range rng.Perm(len(cs)) {
			d, err := cs[i].run(ctx)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", cs[i].name, err)
			}
			if round >= connectWarmRuns {
				ms[i] = append(ms[i], float64(d)/float64(time.Millisecond))
			}
		}
	}
	return ms, nil
}

// reconnectCases opens a warm pool of one connection per contender; each
// run resets it and times the call that follows: `select 1`, or with tx a
// one-statement transaction.
func reconnectCases(ctx context.Context, e *env, tx bool) ([]connectCase, error) {
	var cs []connectCase
	closeAll := func() {
		for _, c := range cs {
			c.close()
		}
	}
	onPgx := func(name string) error {
		p, err := newPgxPool(ctx, e.dsn, 1, nil)
		if err != nil {
			return err
		}
		call := func(ctx context.Context) error { _, err := p.Exec(ctx, "select 1"); return err }
		if tx {
			call = func(ctx context.Context) error { return beginTxFunc(ctx, p, pgtx.ReadCommitted, selectOne) }
		}
		cs = append(cs, connectCase{name: name, run: timedAfter(p.Reset, call), close: p.Close})
		return call(ctx)
	}
	onPgtx := func(name string) error {
		p, err := newPgtxPool(ctx, e.dsn, 1, nil)
		if err != nil {
			return err
		}
		call := func(ctx context.Context) error { _, err := p.Exec(ctx, "select 1"); return err }
		if tx {
			call = func(ctx context.Context) error { return pgtx.Transaction(ctx, p, pgtx.ReadCommitted, selectOne) }
		}
		cs = append(cs, connectCase{name: name, run: timedAfter(p.Pgxpool().Reset, call), close: p.Close})
		return call(ctx)
	}
	steps := []func() error{func() error { return onPgx(nameConnPgxpool) }, func() error { return onPgx(nameConnControl) }, func() error { return onPgtx(nameConnPgtx) }}
	if tx {
		steps = []func() error{func() error { return onPgx(nameConnBegin) }, func() error { return onPgtx(nameConnTx) }}
	}
	for _, step := range steps {
		if err := step(); err != nil {
			closeAll()
			return nil, err
		}
	}
	return cs, nil
}

// newPoolCases times a new pool with the defaults and its first
// `select 1`; the pool is closed untimed.
func newPoolCases(e *env) []connectCase {
	pgxCase := func(name string) connectCase {
		return connectCase{name: name, run: func(ctx context.Context) (time.Duration, error) {
			t0 := time.Now()
			p, err := pgxpool.New(ctx, e.dsn)
			if err != nil {
				return 0, err
			}
			defer p.Close()
			_, err = p.Exec(ctx, "select 1")
			return time.Since(t0), err
		}}
	}
	return []connectCase{pgxCase(nameConnPgxpool), pgxCase(nameConnControl), {name: nameConnPgtx, run: func(ctx context.Context) (time.Duration, error) {
		t0 := time.Now()
		p, err := pgtx.New(ctx, e.dsn)
		if err != nil {
			return 0, err
		}
		defer p.Close()
		_, err = p.Exec(ctx, "select 1")
		return time.Since(t0), err
	}}}
}

// timedAfter returns a run that calls reset, untimed, then times call.
func timedAfter(reset func(), call func(ctx context.Context) error) func(ctx context.Context) (time.Duration, error) {
	return func(ctx context.Context) (time.Duration, error) {
		reset()
		t0 := time.Now()
		err := call(ctx)
		return time.Since(t0), err
	}
}
