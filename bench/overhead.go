package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
)

// overheadRow is one contender at one worker count in the overhead scenario.
type overheadRow struct {
	Contender string  `json:"contender"`
	Workers   int     `json:"workers"`
	TPS       float64 `json:"tx_per_s"`
	Ratio     float64 `json:"ratio_to_begintxfunc"`
	// WritesPerTx is socket writes per transaction, counted by a wrapping
	// net.Conn: pgx flushes once per round trip, so this is round trips.
	WritesPerTx float64 `json:"round_trips_per_tx"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	Calls       int64   `json:"calls"`
	Failed      int64   `json:"failed"`
}

// overhead measures a one-statement READ COMMITTED transaction, with no
// contention, at 1 and 8 workers: what each contender costs when nothing
// goes wrong.
func overhead(ctx context.Context, e *env) (result, error) {
	var rows []overheadRow
	for _, workers := range []int{1, 8} {
		r, err := overheadAt(ctx, e, workers)
		if err != nil {
			return result{}, err
		}
		rows = append(rows, r...)
	}
	t := table{
		Title: "Overhead: one-statement transaction (`select 1`, READ COMMITTED), no contention",
		Note: "Closed loop, each worker calling back to back, contenders alternating in short rounds on fresh pools. " +
			"Ratio is to pgx.BeginTxFunc at the same worker count. Round trips per transaction are socket writes counted by a " +
			"wrapping net.Conn (pgx flushes once per round trip). Allocations per transaction: " +
			"`go test ./integration -run '^$' -bench Transaction -benchmem` (integration/overhead_bench_test.go).",
		Header: []string{"contender", "workers", "tx/s", "ratio to BeginTxFunc", "round trips/tx", "p50 ms", "p99 ms", "failed"},
	}
	for _, r := range rows {
		t.Rows = append(t.Rows, []string{r.Contender, itoa(r.Workers), num(r.TPS), x(r.Ratio),
			fmtf(r.WritesPerTx, 2), fmtf(r.P50ms, 3), fmtf(r.P99ms, 3), itoa64(r.Failed)})
	}
	return result{Tables: []table{t}, Data: rows}, nil
}

// overheadAt runs every contender at one worker count, interleaved, in
// 3 × -rounds short rounds. Each round opens fresh pools: with few workers,
// how a connection's server process is scheduled against the client matters
// as much as what is measured, and new connections each round spread that
// luck over every contender.
func overheadAt(ctx context.Context, e *env, workers int) ([]overheadRow, error) {
	names := []string{namePgtx, nameBegin, nameNaive, nameJitter, nameCrdb}
	samples := make([]sample, len(names))
	wrote := make([]int64, len(names))
	rounds := 3 * e.opts.rounds
	slice := e.opts.dur / time.Duration(rounds)
	for round := range rounds {
		var pgtxWrites, pgxWrites atomic.Int64
		tp, err := newPgtxPool(ctx, e.dsn, workers, func(c *pgtx.Config) { c.ConnConfig.DialFunc = countingDial(&pgtxWrites) })
		if err != nil {
			return nil, err
		}
		xp, err := newPgxPool(ctx, e.dsn, workers, func(c *pgxpool.Config) { c.ConnConfig.DialFunc = countingDial(&pgxWrites) })
		if err != nil {
			tp.Close()
			return nil, err
		}
		cs := standardContenders(tp, xp)
		writes := []*atomic.Int64{&pgtxWrites, &pgxWrites, &pgxWrites, &pgxWrites, &pgxWrites}
		if err := errors.Join(fill(ctx, workers, tp.Exec), fill(ctx, workers, xp.Exec)); err != nil {
			tp.Close()
			xp.Close()
			return nil, err
		}
		calls := make([]callFunc, len(cs))
		for i, c := range cs {
			calls[i] = func(ctx context.Context, _ *rand.Rand) (int, error) { return c.run(ctx, pgtx.ReadCommitted, selectOne) }
			closedLoop(ctx, workers, 20*time.Millisecond, 1, calls[i]) // prepares the statements on every connection
		}
		for _, i := range rotation(round, len(cs)) {
			w0 := writes[i].Load()
			samples[i].add(closedLoop(ctx, workers, slice, uint64(round), calls[i]))
			wrote[i] += writes[i].Load() - w0
		}
		tp.Close()
		xp.Close()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	base := perSecond(samples[1].OK, samples[1].Elapsed) // pgx.BeginTxFunc
	rows := make([]overheadRow, len(names))
	for i, name := range names {
		s := &samples[i]
		tps := perSecond(s.OK, s.Elapsed)
		rows[i] = overheadRow{
			Contender: name, Workers: workers, TPS: tps, Ratio: ratio(tps, base),
			WritesPerTx: ratio(float64(wrote[i]), float64(s.Calls)),
			P50ms:       msf(percentile(s.okLat, .5)), P99ms: msf(percentile(s.okLat, .99)),
			Calls: s.Calls, Failed: s.Failed,
		}
	}
	return rows, nil
}

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
