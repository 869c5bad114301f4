package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
)

// nameBeginPgtxPool is pgx.BeginTxFunc run on pgtx's own pool: set beside
// pgx.BeginTxFunc on a plain pgxpool, it separates what pgtx's pool costs
// (its hooks, session parameters, cancel handler) from what the call costs.
const nameBeginPgtxPool = "pgx.BeginTxFunc on pgtx's pool"

// namePgtxUnbounded is pgtx with its bounded acquire switched off
// (Config.AcquireTimeout < 0): what that guarantee costs.
const namePgtxUnbounded = "pgtx, AcquireTimeout -1"

// namePgtxNoLimits is pgtx with the server-side session limits it sets
// switched off (Config.StatementTimeout and IdleInTransactionTimeout < 0):
// what those guarantees cost.
const namePgtxNoLimits = "pgtx, no session limits"

// namePgtxNoResolve is pgtx with the resolution of ambiguous COMMITs
// switched off (Config.ResolveTimeout < 0): what reading each
// transaction's id (with fn's first statement, or in COMMIT's write) costs.
const namePgtxNoResolve = "pgtx, ResolveTimeout -1"

// namePgtxBare is pgtx with neither the resolution nor the contention
// manager: against namePgtxNoResolve, what the manager costs a transaction
// that never conflicts.
const namePgtxBare = "pgtx, ResolveTimeout -1, contention manager off"

// nameBeginControl is pgx.BeginTxFunc on a second plain pgxpool: the same
// contender as the baseline, measured as if it were another one (an A/A
// control). How far its ratio strays from 1 is the noise of the method.
const nameBeginControl = "pgx.BeginTxFunc again (A/A control)"

// minOverheadReps is the fewest repetitions the overhead scenario makes, so
// that its spread says something.
const minOverheadReps = 5

// overheadRow is one contender at one worker count in the overhead scenario.
// Latencies are per call, in microseconds; each figure is given as the
// median over the repetitions with their minimum and maximum.
type overheadRow struct {
	Statement string `json:"statement"`
	// Latency is the network the cell ran over: loopback, or the fault
	// proxy's one-way delay (-latency).
	Latency   string `json:"network"`
	Contender string `json:"contender"`
	Workers   int    `json:"workers"`
	// Median and Mean are the median over the repetitions of each
	// repetition's median and mean latency.
	Median spread `json:"median_us"`
	Mean   spread `json:"mean_us"`
	// RatioMedian and RatioMean compare with pgx.BeginTxFunc on a plain
	// pgxpool within each repetition: its latency over this contender's, so
	// above 1 is faster.
	RatioMedian spread  `json:"ratio_median"`
	RatioMean   spread  `json:"ratio_mean"`
	P99us       float64 `json:"p99_us"` // over every call of every repetition
	// ClientCPU and ServerCPU are CPU time per call, in microseconds, of
	// the benchmark process and of the contender's server backend (1 worker
	// only; ServerCPU only when the server runs on this machine).
	ClientCPU *spread `json:"client_cpu_us,omitempty"`
	ServerCPU *spread `json:"server_cpu_us,omitempty"`
	// ClientCPURatio and ServerCPURatio are this contender's CPU per call
	// over the baseline's, within each repetition: above 1 costs more.
	ClientCPURatio *spread `json:"client_cpu_ratio,omitempty"`
	ServerCPURatio *spread `json:"server_cpu_ratio,omitempty"`
	// RoundTrips is socket writes per transaction, counted by a wrapping
	// net.Conn in a separate sequential pass: pgx flushes once per round
	// trip.
	RoundTrips float64 `json:"round_trips_per_tx"`
	Calls      int64   `json:"calls"`
	Failed     int64   `json:"failed"`
}

// overhead measures a one-statement READ COMMITTED transaction, with no
// contention, at 1 and 8 workers: what each contender costs when nothing
// goes wrong.
func overhead(ctx context.Context, e *env) (result, error) {
	if _, err := e.admin.Exec(ctx, `drop table if exists overhead_rows;
		create table overhead_rows (id int primary key, n int not null);
		insert into overhead_rows select g, 0 from generate_series(1, `+itoa(overheadRows)+`) g`); err != nil {
		return result{}, fmt.Errorf("overhead: create the rows: %w", err)
	}
	var tables []table
	var rows []overheadRow
	for _, d := range e.opts.latencies {
		at, closeProxy, err := atLatency(e, d)
		if err != nil {
			return result{}, fmt.Errorf("overhead at %v: %w", d, err)
		}
		for _, st := range overheadStatements {
			t, r, err := overheadOf(ctx, at, st)
			if err != nil {
				closeProxy()
				return result{}, err
			}
			if d != 0 {
				t.Title += ", at " + latencyName(d)
			}
			for i := range r {
				r[i].Latency = latencyName(d)
			}
			tables, rows = append(tables, t), append(rows, r...)
		}
		closeProxy()
	}
	return result{Tables: tables, Data: rows}, nil
}

// overheadRows is how many rows the update statement spreads over, so
// that its transactions seldom meet.
const overheadRows = 1000

// overheadStatement is a transaction the overhead scenario measures.
type overheadStatement struct {
	name string // in the table's title
	fn   func(ctx context.Context, tx pgx.Tx) error
}

// overheadStatements are the overhead scenario's transactions: a read
// (`select 1`, its first statement without arguments) and a one-row update
// with arguments.
var overheadStatements = []overheadStatement{
	{"`select 1`", selectOne},
	{"a one-row update (`update overhead_rows set n = n + 1 where id = $1`)", updateOne},
}

// updateOne is the one-row update: a random row of overheadRows.
func updateOne(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, "update overhead_rows set n = n + 1 where id = $1", rand.IntN(overheadRows)+1)
	return err
}

// overheadOf measures st at 1 and 8 workers.
func overheadOf(ctx context.Context, e *env, st overheadStatement) (table, []overheadRow, error) {
	trips, err := roundTrips(ctx, e, st.fn)
	if err != nil {
		return table{}, nil, err
	}
	var rows []overheadRow
	for _, workers := range []int{1, 8} {
		r, err := overheadAt(ctx, e, workers, trips, st.fn)
		if err != nil {
			return table{}, nil, err
		}
		for i := range r {
			r[i].Statement = st.name
		}
		rows = append(rows, r...)
	}
	reps := len(rows[0].Median.Reps)
	t := table{
		Title: "Overhead: one-statement transaction (" + st.name + ", READ COMMITTED), no contention",
		Note: fmt.Sprintf("Contenders interleaved in batches: each worker makes %d calls with every contender in turn, the contenders "+
			"in a random order each turn, each contender on a pool of its own, so the machine's noise hits all alike. "+
			"%d repetitions, each on fresh pools (pgx's defaults, MaxConns = workers); "+
			"each latency is the median over the repetitions of the repetition's median (or mean), [min–max] across them. "+
			"Ratio is pgx.BeginTxFunc on a plain pgxpool over the contender, within each repetition: above 1× is faster; "+
			"the A/A control is the same pgx.BeginTxFunc on a second plain pool, so its spread is the method's own. "+
			"Ratios are the median over the repetitions with a 95%% bootstrap interval of that median in parentheses. "+
			"Round trips per transaction are socket writes counted by a wrapping net.Conn in a separate sequential pass "+
			"(pgx flushes once per round trip). At 1 worker, CPU per call is measured around every batch: the benchmark process's "+
			"(getrusage) and the contender's server backend's (/proc/pid/schedstat, when the server runs on this machine), "+
			"with its ratio to the baseline's within each repetition in parentheses (above 1× costs more) and that ratio's bootstrap interval. "+
			"Allocations: `go test ./integration -run '^$' -bench Transaction -benchmem`.", overheadBatch, reps),
		Header: []string{"contender", "workers", "median µs", "mean µs", "ratio (median)", "ratio (mean)", "p99 µs",
			"client CPU µs/call", "server CPU µs/call", "round trips/tx", "calls", "failed"},
	}
	cpu := func(s, r *spread) string {
		if s == nil || r == nil {
			return "—"
		}
		return fmt.Sprintf("%s (%s× of baseline, %s–%s)", fmtf(s.Median, 1), fmtf(r.Median, 3), fmtf(r.CILow, 3), fmtf(r.CIHigh, 3))
	}
	for _, r := range rows {
		t.Rows = append(t.Rows, []string{r.Contender, itoa(r.Workers), r.Median.format(0, ""), r.Mean.format(0, ""),
			r.RatioMedian.formatCI(3, "×"), r.RatioMean.formatCI(3, "×"), fmtf(r.P99us, 0), cpu(r.ClientCPU, r.ClientCPURatio), cpu(r.ServerCPU, r.ServerCPURatio),
			fmtf(r.RoundTrips, 2), itoa64(r.Calls), itoa64(r.Failed)})
	}
	return t, rows, nil
}

// overheadBatch is how many calls in a row a worker makes with one
// contender before it moves to the next: short enough that the machine's
// noise hits every contender alike, long enough that most calls find their
// pool's connection warm, as a program's calls on its one pool do.
const overheadBatch = 8

// overheadSet is the overhead scenario's contenders, each on a pool of its
// own (so that no contender runs on a connection another has just warmed),
// the baseline (pgx.BeginTxFunc on a plain pgxpool) first.
type overheadSet struct {
	contenders []contender
	// queryRows are the contenders' pools' QueryRow, for the CPU probe.
	queryRows []func(ctx context.Context, sql string, args ...any) pgx.Row
	// writes counts each contender's socket writes when asked for.
	writes  []atomic.Int64
	closers []func()
}

func (s *overheadSet) close() {
	for _, c := range s.closers {
		c()
	}
}

// newOverheadSet opens the pools of every contender, maxConns connections
// each, all open; when countWrites is set, contender i's connections count
// their socket writes in the set's writes[i].
func newOverheadSet(ctx context.Context, e *env, maxConns int, countWrites bool) (*overheadSet, error) {
	s := &overheadSet{}
	dial := func(i int) func(ctx context.Context, network, addr string) (net.Conn, error) {
		if s.writes == nil {
			return nil
		}
		return countingDial(&s.writes[i])
	}
	// opened registers a pool just opened and opens all its connections.
	opened := func(close func(), queryRow func(context.Context, string, ...any) pgx.Row, exec execFunc) error {
		s.closers = append(s.closers, close)
		s.queryRows = append(s.queryRows, queryRow)
		return fill(ctx, maxConns, exec)
	}
	type maker func(i int) (contender, error)
	onPgx := func(name string, mk func(string, *pgxpool.Pool) contender) maker {
		return func(i int) (contender, error) {
			p, err := newPgxPool(ctx, e.dsn, maxConns, func(c *pgxpool.Config) {
				if d := dial(i); d != nil {
					c.ConnConfig.DialFunc = d
				}
			})
			if err != nil {
				return contender{}, err
			}
			return mk(name, p), opened(p.Close, p.QueryRow, p.Exec)
		}
	}
	onPgtx := func(name string, edit func(*pgtx.Config), mk func(string, *pgtx.Pool) contender) maker {
		return func(i int) (contender, error) {
			p, err := newPgtxPool(ctx, e.dsn, maxConns, func(c *pgtx.Config) {
				if d := dial(i); d != nil {
					c.ConnConfig.DialFunc = d
				}
				if edit != nil {
					edit(c)
				}
			})
			if err != nil {
				return contender{}, err
			}
			return mk(name, p), opened(p.Close, p.QueryRow, p.Exec)
		}
	}
	loop := func(mk func(string, *pgxpool.Pool, int) contender) func(string, *pgxpool.Pool) contender {
		return func(name string, p *pgxpool.Pool) contender { return mk(name, p, loopMaxRetries) }
	}
	beginOnPgtxPool := func(name string, p *pgtx.Pool) contender { return beginContender(name, p.Pgxpool()) }
	makers := []maker{
		onPgx(nameBegin, beginContender),
		onPgx(nameBeginControl, beginContender),
		onPgtx(nameBeginPgtxPool, nil, beginOnPgtxPool),
		onPgtx(namePgtx, nil, pgtxContender),
		onPgtx(namePgtxUnbounded, func(c *pgtx.Config) { c.AcquireTimeout = -1 }, pgtxContender),
		onPgtx(namePgtxNoLimits, func(c *pgtx.Config) { c.StatementTimeout, c.IdleInTransactionTimeout = -1, -1 }, pgtxContender),
		onPgtx(namePgtxNoResolve, func(c *pgtx.Config) { c.ResolveTimeout = -1 }, pgtxContender),
		onPgtx(namePgtxBare, func(c *pgtx.Config) { c.ResolveTimeout, c.Contention.Threshold = -1, -1 }, pgtxContender),
		onPgx(nameNaive, loop(naiveContender)),
		onPgx(nameJitter, loop(jitterContender)),
		onPgx(nameCrdb, crdbContender),
	}
	if countWrites {
		s.writes = make([]atomic.Int64, len(makers))
	}
	for i, mk := range makers {
		c, err := mk(i)
		if err != nil {
			s.close()
			return nil, err
		}
		s.contenders = append(s.contenders, c)
	}
	return s, nil
}

// overheadAt runs every contender at one worker count, interleaved in
// batches, in repetitions on fresh pools: with few workers, how a connection's
// server process is scheduled against the client moves a pool's latency by
// tens of percent, and new pools each repetition show that spread instead of
// hiding it in one number.
func overheadAt(ctx context.Context, e *env, workers int, trips []float64, fn func(context.Context, pgx.Tx) error) ([]overheadRow, error) {
	reps := max(minOverheadReps, e.opts.rounds)
	var names []string
	var medians, means [][]float64 // [contender][rep], µs
	var all [][]time.Duration      // [contender], every call
	var failed []int64
	var clientCPU, serverCPU [][]float64 // [contender][rep], µs per call
	for rep := range reps {
		set, err := newOverheadSet(ctx, e, workers, false)
		if err != nil {
			return nil, err
		}
		cs := set.contenders
		if names == nil {
			for _, c := range cs {
				names = append(names, c.name)
			}
			medians, means = make([][]float64, len(cs)), make([][]float64, len(cs))
			all, failed = make([][]time.Duration, len(cs)), make([]int64, len(cs))
		}
		// A short unmeasured run prepares the statements on every
		// connection; then each contender gets e.opts.dur in all.
		interleavedLoop(ctx, workers, 50*time.Millisecond, uint64(rep), cs, nil, fn)
		var probe *cpuProbe
		if workers == 1 {
			probe = newCPUProbe(ctx, set.queryRows)
		}
		lat, fails, tallies := interleavedLoop(ctx, workers, e.opts.dur*time.Duration(len(cs))/time.Duration(reps), uint64(rep), cs, probe, fn)
		set.close()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for i := range cs {
			if len(lat[i]) == 0 {
				return nil, fmt.Errorf("%s: no call succeeded at %d workers (%d failed)", names[i], workers, fails[i])
			}
			slices.Sort(lat[i])
			medians[i] = append(medians[i], usf(percentile(lat[i], .5)))
			means[i] = append(means[i], usf(meanOf(lat[i])))
			all[i] = append(all[i], lat[i]...)
			failed[i] += fails[i]
		}
		if probe != nil {
			if clientCPU == nil {
				clientCPU, serverCPU = make([][]float64, len(cs)), make([][]float64, len(cs))
			}
			for i, t := range tallies {
				c, s := t.perCall()
				clientCPU[i] = append(clientCPU[i], c)
				if s > 0 {
					serverCPU[i] = append(serverCPU[i], s)
				}
			}
		}
	}
	rows := make([]overheadRow, len(names))
	for i, name := range names {
		rm, rmean := make([]float64, reps), make([]float64, reps)
		for r := range reps {
			rm[r] = ratio(medians[0][r], medians[i][r])
			rmean[r] = ratio(means[0][r], means[i][r])
		}
		rows[i] = overheadRow{
			Contender: name, Workers: workers,
			Median: newSpread(medians[i]), Mean: newSpread(means[i]),
			RatioMedian: newSpread(rm), RatioMean: newSpread(rmean),
			P99us:      usf(percentile(all[i], .99)),
			RoundTrips: trips[i],
			Calls:      int64(len(all[i])) + failed[i], Failed: failed[i],
		}
		rows[i].ClientCPU, rows[i].ClientCPURatio = cpuSpreads(clientCPU, i, reps)
		rows[i].ServerCPU, rows[i].ServerCPURatio = cpuSpreads(serverCPU, i, reps)
	}
	return rows, nil
}
