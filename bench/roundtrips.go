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
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/deferred"
)

// The roundtrips scenario: transactions of one to four statements at each
// -latency, one worker, pgtx's forms against pgx.BeginTxFunc.

// rtAccounts is how many accounts the transfers spread over, so that
// they seldom meet.
const rtAccounts = 1000

// rtCall is one contender's transaction: from and to are two accounts.
type rtCall func(ctx context.Context, from, to int) error

// rtContender is a contender of a roundtrips cell, on a pool of its own.
type rtContender struct {
	name string
	open func(ctx context.Context, dsn string, dial dialFunc) (rtCall, func(), error)
}

type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// setDial sets *dst to dial, when dial is set.
func setDial(dst *pgconn.DialFunc, dial dialFunc) {
	if dial != nil {
		*dst = dial
	}
}

// rtCell is a transaction shape and its contenders, the baseline first.
type rtCell struct {
	name        string
	contenders  []rtContender
	wantBaseRTs string // the baseline's round trips, for the note
}

const (
	rtSelect    = "select 1"
	rtUpdate    = "update rt_accounts set balance = balance + 1 where id = $1"
	rtLock      = "select balance from rt_accounts where id = $1 for update"
	rtDebit     = "update rt_accounts set balance = balance - $2 where id = $1"
	rtCredit    = "update rt_accounts set balance = balance + $2 where id = $1"
	rtLedgerRow = "insert into rt_ledger (payer, payee, amount) values ($1, $2, $3)"
)

// onPgxPool opens a one-connection pgxpool and makes its call.
func onPgxPool(name string, call func(p *pgxpool.Pool) rtCall) rtContender {
	return rtContender{name, func(ctx context.Context, dsn string, dial dialFunc) (rtCall, func(), error) {
		p, err := newPgxPool(ctx, dsn, 1, func(c *pgxpool.Config) { setDial(&c.ConnConfig.DialFunc, dial) })
		if err != nil {
			return nil, nil, err
		}
		return call(p), p.Close, nil
	}}
}

// onPgtxPool opens a one-connection pgtx pool and makes its call.
func onPgtxPool(name string, call func(p *pgtx.Pool) rtCall) rtContender {
	return rtContender{name, func(ctx context.Context, dsn string, dial dialFunc) (rtCall, func(), error) {
		p, err := newPgtxPool(ctx, dsn, 1, func(c *pgtx.Config) { setDial(&c.ConnConfig.DialFunc, dial) })
		if err != nil {
			return nil, nil, err
		}
		return call(p), p.Close, nil
	}}
}

// rtTransfer is the four-statement transfer on tx, its writes sent by exec.
func rtTransfer(ctx context.Context, tx pgx.Tx, from, to int, exec func(ctx context.Context, sql string, args ...any) error) error {
	var b int
	if err := tx.QueryRow(ctx, rtLock, from).Scan(&b); err != nil {
		return err
	}
	if err := exec(ctx, rtDebit, from, 1); err != nil {
		return err
	}
	if err := exec(ctx, rtCredit, to, 1); err != nil {
		return err
	}
	return exec(ctx, rtLedgerRow, from, to, 1)
}

func txExec(tx pgx.Tx) func(ctx context.Context, sql string, args ...any) error {
	return func(ctx context.Context, sql string, args ...any) error {
		_, err := tx.Exec(ctx, sql, args...)
		return err
	}
}

// rtBatch is the transfer's four statements as one batch.
func rtBatch(from, to int) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(rtLock, from)
	b.Queue(rtDebit, from, 1)
	b.Queue(rtCredit, to, 1)
	b.Queue(rtLedgerRow, from, to, 1)
	return b
}

// rtCells are the roundtrips scenario's cells.
var rtCells = []rtCell{
	{name: "`select 1`", wantBaseRTs: "3", contenders: []rtContender{
		onPgxPool(nameBegin, func(p *pgxpool.Pool) rtCall {
			return func(ctx context.Context, _, _ int) error {
				return pgx.BeginTxFunc(ctx, p, pgx.TxOptions{}, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, rtSelect); return err })
			}
		}),
		onPgtxPool(namePgtx, func(p *pgtx.Pool) rtCall {
			return func(ctx context.Context, _, _ int) error {
				return pgtx.Transaction(ctx, p, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error { _, err := tx.Exec(ctx, rtSelect); return err })
			}
		}),
	}},
	{name: "a one-row update", wantBaseRTs: "3", contenders: []rtContender{
		onPgxPool(nameBegin, func(p *pgxpool.Pool) rtCall {
			return func(ctx context.Context, from, _ int) error {
				return pgx.BeginTxFunc(ctx, p, pgx.TxOptions{}, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, rtUpdate, from); return err })
			}
		}),
		onPgtxPool(namePgtx, func(p *pgtx.Pool) rtCall {
			return func(ctx context.Context, from, _ int) error {
				return pgtx.Transaction(ctx, p, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error { _, err := tx.Exec(ctx, rtUpdate, from); return err })
			}
		}),
	}},
	{name: "a 4-statement transfer (select … for update, two updates, a ledger insert)", wantBaseRTs: "6", contenders: []rtContender{
		onPgxPool(nameBegin, func(p *pgxpool.Pool) rtCall {
			return func(ctx context.Context, from, to int) error {
				return pgx.BeginTxFunc(ctx, p, pgx.TxOptions{}, func(tx pgx.Tx) error { return rtTransfer(ctx, tx, from, to, txExec(tx)) })
			}
		}),
		onPgtxPool(namePgtx, func(p *pgtx.Pool) rtCall {
			return func(ctx context.Context, from, to int) error {
				return pgtx.Transaction(ctx, p, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error { return rtTransfer(ctx, tx, from, to, txExec(tx)) })
			}
		}),
		onPgtxPool("pgtx, writes deferred (deferred.Exec)", func(p *pgtx.Pool) rtCall {
			return func(ctx context.Context, from, to int) error {
				return pgtx.Transaction(ctx, p, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error { return rtTransfer(ctx, tx, from, to, deferred.Exec) })
			}
		}),
	}},
	{name: "the transfer's 4 statements as a batch", wantBaseRTs: "6", contenders: []rtContender{
		onPgxPool(nameBegin, func(p *pgxpool.Pool) rtCall {
			return func(ctx context.Context, from, to int) error {
				return pgx.BeginTxFunc(ctx, p, pgx.TxOptions{}, func(tx pgx.Tx) error { return rtTransfer(ctx, tx, from, to, txExec(tx)) })
			}
		}),
		onPgxPool("pgx.BeginTxFunc sending the batch", func(p *pgxpool.Pool) rtCall {
			return func(ctx context.Context, from, to int) error {
				return pgx.BeginTxFunc(ctx, p, pgx.TxOptions{}, func(tx pgx.Tx) error { return tx.SendBatch(ctx, rtBatch(from, to)).Close() })
			}
		}),
		onPgtxPool("pgtx, deferred.Transaction", func(p *pgtx.Pool) rtCall {
			return func(ctx context.Context, from, to int) error {
				return deferred.Transaction(ctx, p, pgtx.ReadCommitted, pgtx.Options{}, rtBatch(from, to))
			}
		}),
	}},
}

// rtRow is one contender of one cell at one latency.
type rtRow struct {
	Cell       string  `json:"transaction"`
	Latency    string  `json:"network"`
	Contender  string  `json:"contender"`
	Median     spread  `json:"median_us"`
	Ratio      spread  `json:"ratio"` // the baseline's median over this one's, per repetition
	RoundTrips float64 `json:"round_trips_per_tx"`
	Calls      int64   `json:"calls"`
	Failed     int64   `json:"failed"`
}

// roundtripsScenario measures rtCells at every -latency.
func roundtripsScenario(ctx context.Context, e *env) (result, error) {
	if _, err := e.admin.Exec(ctx, `drop table if exists rt_accounts, rt_ledger;
		create table rt_accounts (id int primary key, balance bigint not null);
		insert into rt_accounts select g, 1000000 from generate_series(1, `+itoa(rtAccounts)+`) g;
		create table rt_ledger (id bigserial primary key, payer int not null, payee int not null, amount int not null)`); err != nil {
		return result{}, fmt.Errorf("roundtrips: create the tables: %w", err)
	}
	reps := max(minOverheadReps, e.opts.rounds)
	t := table{
		Title: "Round trips: transactions of 1 to 4 statements, 1 worker, against pgx.BeginTxFunc",
		Note: fmt.Sprintf("Each contender on a one-connection pool of its own, fresh in each of %d repetitions; within a repetition the "+
			"contenders are interleaved in batches of %d calls in a random order, for %v each. Latency is the median over the "+
			"repetitions of each repetition's median [min–max]; ratio is pgx.BeginTxFunc's median over the contender's within each "+
			"repetition (above 1× is faster), median [min–max]. Round trips per transaction are socket writes counted in a "+
			"separate pass. Networks other than loopback go through the kit's fault proxy (SetLatency: each client→server write "+
			"held that long).", reps, overheadBatch, e.opts.dur),
		Header: []string{"transaction", "network", "contender", "median µs", "ratio", "round trips/tx", "calls", "failed"},
	}
	var rows []rtRow
	for _, d := range e.opts.latencies {
		at, closeProxy, err := atLatency(e, d)
		if err != nil {
			return result{}, fmt.Errorf("roundtrips at %v: %w", d, err)
		}
		for _, c := range rtCells {
			r, err := rtMeasure(ctx, at.dsn, c, reps, e.opts.dur)
			if err != nil {
				closeProxy()
				return result{}, fmt.Errorf("roundtrips, %s at %v: %w", c.name, d, err)
			}
			for _, row := range r {
				row.Latency = latencyName(d)
				rows = append(rows, row)
				t.Rows = append(t.Rows, []string{row.Cell, row.Latency, row.Contender, row.Median.format(0, ""),
					row.Ratio.format(2, "×"), fmtf(row.RoundTrips, 2), itoa64(row.Calls), itoa64(row.Failed)})
			}
		}
		closeProxy()
	}
	return result{Tables: []table{t}, Data: rows}, nil
}

// rtMeasure runs cell c's contenders interleaved, in reps repetitions.
func rtMeasure(ctx context.Context, dsn string, c rtCell, reps int, dur time.Duration) ([]rtRow, error) {
	n := len(c.contenders)
	trips, err := rtRoundTrips(ctx, dsn, c)
	if err != nil {
		return nil, err
	}
	medians := make([][]float64, n)
	calls, failed := make([]int64, n), make([]int64, n)
	for rep := range reps {
		callsOf := make([]rtCall, n)
		var closers []func()
		for i, ct := range c.contenders {
			call, closePool, err := ct.open(ctx, dsn, nil)
			if err != nil {
				for _, f := range closers {
					f()
				}
				return nil, err
			}
			callsOf[i], closers = call, append(closers, closePool)
		}
		rng := rand.New(rand.NewPCG(uint64(rep), 7))
		lat := make([][]time.Duration, n)
		one := func(i int) {
			from := rng.IntN(rtAccounts) + 1
			to := from%rtAccounts + 1
			cctx, cancel := context.WithTimeout(ctx, callSafetyLimit)
			t0 := time.Now()
			err := callsOf[i](cctx, from, to)
			took := time.Since(t0)
			cancel()
			calls[i]++
			if err != nil {
				failed[i]++
				return
			}
			lat[i] = append(lat[i], took)
		}
		for i := range n { // warm: the statements described and cached
			for range 4 {
				one(i)
			}
			lat[i] = lat[i][:0]
		}
		for end := time.Now().Add(dur * time.Duration(n)); time.Now().Before(end) && ctx.Err() == nil; {
			for _, i := range rng.Perm(n) {
				for range overheadBatch {
					one(i)
				}
			}
		}
		for _, f := range closers {
			f()
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for i := range n {
			if len(lat[i]) == 0 {
				return nil, fmt.Errorf("%s: no call succeeded (%d failed)", c.contenders[i].name, failed[i])
			}
			slices.Sort(lat[i])
			medians[i] = append(medians[i], usf(percentile(lat[i], .5)))
		}
	}
	rows := make([]rtRow, n)
	for i, ct := range c.contenders {
		r := make([]float64, reps)
		for k := range reps {
			r[k] = ratio(medians[0][k], medians[i][k])
		}
		rows[i] = rtRow{Cell: c.name, Contender: ct.name, Median: newSpread(medians[i]), Ratio: newSpread(r),
			RoundTrips: trips[i], Calls: calls[i], Failed: failed[i]}
	}
	return rows, nil
}

// rtRoundTrips counts each contender's socket writes per transaction over
// 50 sequential calls, after 4 to warm its connection.
func rtRoundTrips(ctx context.Context, dsn string, c rtCell) ([]float64, error) {
	out := make([]float64, len(c.contenders))
	for i, ct := range c.contenders {
		var n atomic.Int64
		call, closePool, err := ct.open(ctx, dsn, countingDial(&n))
		if err != nil {
			return nil, err
		}
		const warm, counted = 4, 50
		for k := range warm + counted {
			if k == warm {
				n.Store(0)
			}
			if err := call(ctx, k%rtAccounts+1, (k+1)%rtAccounts+1); err != nil {
				closePool()
				return nil, fmt.Errorf("%s: %w", ct.name, err)
			}
		}
		closePool()
		out[i] = float64(n.Load()) / counted
	}
	return out, nil
}
