package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxsql"
)

// sqlRow is one library's pair (its own transaction helper, pgtx's module
// for it) on one workload at one worker count.
type sqlRow struct {
	Statement string `json:"statement"`
	Library   string `json:"library"`
	Own       string `json:"own"`
	Module    string `json:"module"`
	Workers   int    `json:"workers"`
	// OwnTPS and ModuleTPS are transactions per second in each repetition:
	// successful calls over the time the contender's batches took, times
	// the workers.
	OwnTPS    spread `json:"own_tps"`
	ModuleTPS spread `json:"module_tps"`
	// Ratio is ModuleTPS / OwnTPS within each repetition: above 1 the
	// module is faster.
	Ratio spread `json:"ratio_module_over_own"`
	// OwnRoundTrips and ModuleRoundTrips are socket writes per
	// transaction, counted in a separate sequential pass.
	OwnRoundTrips    float64 `json:"own_round_trips_per_tx"`
	ModuleRoundTrips float64 `json:"module_round_trips_per_tx"`
	OwnCalls         int64   `json:"own_calls"`
	ModuleCalls      int64   `json:"module_calls"`
	OwnFailed        int64   `json:"own_failed"`
	ModuleFailed     int64   `json:"module_failed"`
}

// sqlContentionRow is one contender of the sql scenario's contention cells.
type sqlContentionRow struct {
	contentionRow
	// RoundRatio is, for pgtxsql, its commits/s over the full-jitter
	// loop's within each round.
	RoundRatio *spread `json:"round_ratio_vs_full_jitter,omitempty"`
}

// sqlResult is the sql scenario's data in the JSON file.
type sqlResult struct {
	Overhead   []sqlRow           `json:"overhead"`
	Contention []sqlContentionRow `json:"contention"`
}

// sqlWorkers are the worker counts of the sql scenario's contention cells.
var sqlWorkers = []int{8, 32}

// sqlScenario measures pgtx's modules for database/sql, sqlx and GORM
// against each library's own transaction helper: a `select 1` and a one-row
// update at 1 and 8 workers, interleaved as the overhead scenario does; and
// SERIALIZABLE transfers on 10 hot accounts through pgtxsql.Transaction
// against a full-jitter retry loop over database/sql, at 8 and 32 workers,
// interleaved as the contention scenario does.
func sqlScenario(ctx context.Context, e *env) (result, error) {
	if _, err := e.admin.Exec(ctx, `drop table if exists overhead_rows;
		create table overhead_rows (id int primary key, n int not null);
		insert into overhead_rows select g, 0 from generate_series(1, `+itoa(overheadRows)+`) g`); err != nil {
		return result{}, fmt.Errorf("create the rows: %w", err)
	}
	var data sqlResult
	var tables []table
	for _, w := range sqlWorkloads {
		trips, err := sqlRoundTrips(ctx, e, w)
		if err != nil {
			return result{}, err
		}
		var rows []sqlRow
		for _, workers := range []int{1, 8} {
			r, err := sqlAt(ctx, e, workers, trips, w)
			if err != nil {
				return result{}, err
			}
			rows = append(rows, r...)
		}
		tables = append(tables, sqlTable(w, rows, max(minOverheadReps, e.opts.rounds)))
		data.Overhead = append(data.Overhead, rows...)
	}
	crows, deadlockTimeout, err := sqlContention(ctx, e)
	if err != nil {
		return result{}, err
	}
	tables = append(tables, sqlContentionTable(crows, deadlockTimeout))
	data.Contention = crows
	return result{Tables: tables, Data: data}, nil
}

// sqlAt runs every contender of the sql set on w at one worker count,
// interleaved in batches, in repetitions on fresh pools, and makes a row
// per pair.
func sqlAt(ctx context.Context, e *env, workers int, trips []float64, w sqlWorkload) ([]sqlRow, error) {
	reps := max(minOverheadReps, e.opts.rounds)
	tps := make([][]float64, sqlContenders) // [contender][rep]
	calls, failed := make([]int64, sqlContenders), make([]int64, sqlContenders)
	var names []string
	for rep := range reps {
		set, err := newSQLSet(ctx, e, workers, false)
		if err != nil {
			return nil, err
		}
		cs := set.contenders
		if names == nil {
			for _, c := range cs {
				names = append(names, c.name)
			}
		}
		// A short unmeasured run prepares the statements on every
		// connection; then each contender gets e.opts.dur in all.
		sqlInterleaved(ctx, workers, 50*time.Millisecond, uint64(rep), cs, w)
		tallies := sqlInterleaved(ctx, workers, e.opts.dur*time.Duration(len(cs))/time.Duration(reps), uint64(rep), cs, w)
		set.close()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for i, t := range tallies {
			if t.ok == 0 {
				return nil, fmt.Errorf("%s: no call succeeded at %d workers (%d failed): %w", names[i], workers, t.failed, t.lastErr)
			}
			tps[i] = append(tps[i], t.tps(workers))
			calls[i] += t.ok + t.failed
			failed[i] += t.failed
		}
	}
	libs := []string{sqlOwn: libSQL, sqlControl: libSQL + " (A/A control)", sqlxOwn: libSQLX, gormOwn: libGORM}
	var rows []sqlRow
	for _, p := range sqlPairs {
		own, mod := p[0], p[1]
		r := make([]float64, reps)
		for k := range reps {
			r[k] = ratio(tps[mod][k], tps[own][k])
		}
		lib := libs[own]
		if mod == sqlControl {
			lib = libs[sqlControl]
		}
		rows = append(rows, sqlRow{
			Statement: w.name, Library: lib, Own: names[own], Module: names[mod], Workers: workers,
			OwnTPS: newSpread(tps[own]), ModuleTPS: newSpread(tps[mod]), Ratio: newSpread(r),
			OwnRoundTrips: trips[own], ModuleRoundTrips: trips[mod],
			OwnCalls: calls[own], ModuleCalls: calls[mod], OwnFailed: failed[own], ModuleFailed: failed[mod],
		})
	}
	return rows, nil
}

// sqlTable lays out one workload's rows.
func sqlTable(w sqlWorkload, rows []sqlRow, reps int) table {
	t := table{
		Title: "database/sql, sqlx, GORM: one-statement transaction (" + w.name + ", READ COMMITTED), no contention",
		Note: fmt.Sprintf("Each library's own transaction helper against pgtx's module for it, every guarantee on (pgtx's default Config: "+
			"resolution of ambiguous COMMITs, contention manager, session limits, bounded acquire). "+
			"The own helpers run on pgx's stdlib (stdlib.OpenDB of the DSN, which is also what gorm.io/driver/postgres's Open does), "+
			"MaxOpenConns = MaxIdleConns = workers; the modules on a pgtx.Pool of MaxConns = workers. "+
			"All seven contenders are interleaved as in the overhead scenario: each worker makes %d calls with every contender in turn, "+
			"in a random order each turn, each contender on a pool of its own; %d repetitions, each on fresh pools. "+
			"Transactions/s of a contender is its successful calls over the time its batches took, times the workers "+
			"(workers / mean latency), median over the repetitions [min–max]. "+
			"**Ratio is the module's tx/s over the own helper's, within each repetition: above 1× the module is faster**; "+
			"median [min–max] over the repetitions, and a 95%% bootstrap interval of the median. The A/A control is the "+
			"own database/sql helper against itself on a second pool: its spread is the method's own. "+
			"Round trips per transaction are socket writes counted by a wrapping net.Conn in a separate sequential pass "+
			"(200 calls on one-connection pools; pgx flushes once per round trip).", overheadBatch, reps),
		Header: []string{"library", "workers", "own helper", "own tx/s", "pgtx module", "module tx/s",
			"ratio module/own", "95% CI", "round trips/tx own → module", "calls own / module", "failed own / module"},
	}
	for _, r := range rows {
		t.Rows = append(t.Rows, []string{r.Library, itoa(r.Workers), r.Own, r.OwnTPS.format(0, ""), r.Module, r.ModuleTPS.format(0, ""),
			r.Ratio.format(3, "×"), fmtf(r.Ratio.CILow, 3) + "–" + fmtf(r.Ratio.CIHigh, 3),
			fmtf(r.OwnRoundTrips, 2) + " → " + fmtf(r.ModuleRoundTrips, 2),
			itoa64(r.OwnCalls) + " / " + itoa64(r.ModuleCalls), itoa64(r.OwnFailed) + " / " + itoa64(r.ModuleFailed)})
	}
	return t
}

// sqlTransfer is the transfer workload through database/sql: it returns
// the attempts it made.
type sqlTransfer func(ctx context.Context, from, to, amount int, ordered bool) (attempts int, err error)

// sqlContention runs the transfers on 10 hot accounts through
// pgtxsql.Transaction and through a full-jitter loop over database/sql, in
// id order and in random order, at 8 and 32 workers, interleaved in
// slices. It also returns the deadlock_timeout the cells ran with.
func sqlContention(ctx context.Context, e *env) ([]sqlContentionRow, string, error) {
	restore := setDeadlockTimeout(ctx, e)
	defer restore()
	deadlockTimeout, err := showDeadlockTimeout(ctx, e)
	if err != nil {
		return nil, "", err
	}
	if err := setupAccounts(ctx, e.admin, hotAccounts); err != nil {
		return nil, "", err
	}
	var out []sqlContentionRow
	for _, workers := range sqlWorkers {
		rows, err := sqlContentionAt(ctx, e, workers)
		if err != nil {
			return nil, "", fmt.Errorf("%d workers: %w", workers, err)
		}
		out = append(out, rows...)
	}
	return out, deadlockTimeout, nil
}

// sqlContentionAt runs one worker count of sqlContention.
func sqlContentionAt(ctx context.Context, e *env, workers int) ([]sqlContentionRow, error) {
	pool, err := newPgtxPool(ctx, e.dsn, workers, func(c *pgtx.Config) {
		c.Retry.ConflictBaseBackoff = e.opts.conflictBase
		c.Retry.ConflictMaxBackoff = e.opts.conflictMax
	})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	mod := pgtxsql.OpenDB(pool)
	defer mod.Close()
	cfg, err := pgx.ParseConfig(e.dsn)
	if err != nil {
		return nil, err
	}
	own := stdlib.OpenDB(*cfg)
	defer own.Close()
	own.SetMaxOpenConns(workers)
	own.SetMaxIdleConns(workers)

	var cells []transferCell
	for _, v := range []string{variantOrdered, variantRandom} {
		cells = append(cells,
			transferCell{variant: v, c: contender{name: nameSQLPgtx}, sql: pgtxsqlTransfer(mod, pgtx.Options{Label: "transfer-" + v})},
			transferCell{variant: v, c: contender{name: nameSQLJitter}, sql: jitterSQLTransfer(own)})
	}
	stats, err := runTransfers(ctx, e, workers, hotAccounts, cells, []execFunc{pool.Exec, sqlExec(own)}, nil)
	if err != nil {
		return nil, err
	}
	base := contentionRows(workers, hotAccounts, cells, stats)
	rows := make([]sqlContentionRow, len(base))
	for i, r := range base {
		rows[i] = sqlContentionRow{contentionRow: r}
		j := i + 1 // the full-jitter loop of the same variant follows pgtxsql's cell
		if cells[i].c.name != nameSQLPgtx {
			j = i
		}
		rows[i].VsJitter = ratio(r.CommitsPerS, base[j].CommitsPerS)
		if j != i {
			rr := make([]float64, len(stats[i].perRound))
			for k := range rr {
				rr[k] = ratio(stats[i].perRound[k], stats[j].perRound[k])
			}
			s := newSpread(rr)
			rows[i].RoundRatio = &s
		}
	}
	return rows, nil
}

// sqlTransferBody is the transfer of transfer.go in database/sql: read the
// source balance, then update both rows, in id order when ordered, else
// source first.
func sqlTransferBody(ctx context.Context, tx *sql.Tx, from, to, amount int, ordered bool) error {
	var balance int64
	if err := tx.QueryRowContext(ctx, "select balance from bench_accounts where id = $1", from).Scan(&balance); err != nil {
		return err
	}
	if balance < int64(amount) {
		return errInsufficient
	}
	first, second := from, to
	if ordered && second < first {
		first, second = second, first
	}
	for _, id := range [2]int{first, second} {
		delta := amount
		if id == from {
			delta = -amount
		}
		if _, err := tx.ExecContext(ctx, "update bench_accounts set balance = balance + $1, n = n + 1 where id = $2", delta, id); err != nil {
			return err
		}
	}
	return nil
}

// pgtxsqlTransfer runs the transfer with pgtxsql.TransactionWithOptions.
func pgtxsqlTransfer(db *sql.DB, opts pgtx.Options) sqlTransfer {
	return func(ctx context.Context, from, to, amount int, ordered bool) (int, error) {
		attempts := 0
		err := pgtxsql.TransactionWithOptions(ctx, db, pgtx.Serializable, opts, func(ctx context.Context, tx *sql.Tx) error {
			attempts++
			return sqlTransferBody(ctx, tx, from, to, amount, ordered)
		})
		return attempts, err
	}
}

// jitterSQLTransfer runs the transfer in the full-jitter loop of
// contenders.go, written over database/sql: BeginTx, the transfer, Commit,
// and on 40001, 40P01 or 53300 a full-jitter sleep and the whole
// transaction again, at most loopMaxRetries times.
func jitterSQLTransfer(db *sql.DB) sqlTransfer {
	return func(ctx context.Context, from, to, amount int, ordered bool) (int, error) {
		attempts := 0
		for n := 0; ; n++ {
			err := func() error {
				tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
				if err != nil {
					return err
				}
				attempts++
				if err := sqlTransferBody(ctx, tx, from, to, amount, ordered); err != nil {
					return errors.Join(err, tx.Rollback())
				}
				return tx.Commit()
			}()
			if err == nil || n >= loopMaxRetries || !loopRetryable(err) {
				return attempts, err
			}
			if d := fullJitter(n); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return attempts, errors.Join(err, ctx.Err())
				case <-t.C:
				}
			}
		}
	}
}

// sqlContentionTable lays out the contention cells.
func sqlContentionTable(rows []sqlContentionRow, deadlockTimeout string) table {
	t := table{
		Title: "database/sql under contention: pgtxsql.Transaction against a full-jitter loop over database/sql",
		Note: "The contention scenario's transfers between 2 of 10 hot accounts (read one balance, update both rows), SERIALIZABLE, " +
			"through database/sql: pgtxsql.Transaction on a pgtx.Pool with the default Config (contention manager on; calls labelled " +
			"transfer-<variant>), against the full-jitter loop of the contention scenario written over pgx's stdlib " +
			"(BeginTx, the transfer, Commit; on 40001, 40P01 or 53300 sleep rand × min(500ms, 5ms × 2^n) and run it all again, at most 10 times), " +
			"MaxOpenConns = MaxIdleConns = workers, and the pgtx pool's MaxConns = workers. The two alternate slice by slice " +
			"(-rounds slices of -dur/-rounds each), commits are counted in the database within each slice's window, " +
			"the invariant is checked after every slice, calls still running shortly after a window are cut short. " +
			"× full-jitter is over the whole cell; per round is the median [min–max] of that ratio within each round. " +
			"deadlock_timeout was " + deadlockTimeout + ".",
		Header: []string{"variant", "workers", "contender", "commits/s", "× full-jitter", "× full-jitter per round", "attempts/commit",
			"failed calls", "reported, not committed", "cut short", "p50 ms", "p99 ms", "invariant"},
	}
	for _, r := range rows {
		failed := itoa64(r.Failed)
		if r.Failed > 0 {
			failed += " (" + causes(r.Causes) + ")"
		}
		perRound := "—"
		if r.RoundRatio != nil {
			perRound = r.RoundRatio.format(2, "×")
		}
		t.Rows = append(t.Rows, []string{r.Variant, itoa(r.Workers), r.Contender, num(r.CommitsPerS), x(r.VsJitter), perRound,
			fmtf(r.AttemptsPerCommit, 2), failed, itoa64(r.Phantom), itoa64(r.CutShort),
			ms(time.Duration(r.P50ms * float64(time.Millisecond))), ms(time.Duration(r.P99ms * float64(time.Millisecond))), r.Invariant})
	}
	return t
}
