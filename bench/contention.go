package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/pgtx-go/pgtx"
)

// The accounts and cells of the contention scenario.
const (
	hotAccounts    = 10    // the hot cells: every transfer between 2 of 10 accounts
	lowAccounts    = 1_000 // the low-contention cell
	lowWorkers     = 8     // the low-contention cell's workers
	initialBalance = 1_000_000
	// extrasUpTo is the largest worker count at which pgx.BeginTxFunc,
	// crdbpgxv5.ExecuteTx and pgtx without resolution run: above it they
	// add only cut-short calls and time.
	extrasUpTo = 32
)

// The variants of the transfer workload.
const (
	variantOrdered = "ordered" // rows updated in id order: 40001 only
	variantRandom  = "random"  // rows updated in random order: 40P01 too
	variantCeiling = "ceiling" // READ COMMITTED, both rows locked in id order first
)

// pgtx's default conflict backoff (RetryConfig.ConflictBaseBackoff and
// ConflictMaxBackoff, as their docs state; pgtx does not export its
// defaults), for the tables' notes.
const (
	pgtxConflictBaseBackoff = 5 * time.Millisecond
	pgtxConflictMaxBackoff  = 500 * time.Millisecond
)

// nameCeiling is the ceiling's contender name.
const nameCeiling = "ceiling: READ COMMITTED + FOR UPDATE"

// namePgtxNoManager is pgtx with its contention manager switched off
// (Contention.Threshold -1): a conflict retry always waits its backoff.
const namePgtxNoManager = "pgtx, contention manager off"

// pgbenchTries is pgbench's --max-tries: one try and loopMaxRetries retries,
// as every Go contender that retries.
const pgbenchTries = loopMaxRetries + 1

// namePgbench is the outside anchor's contender name.
var namePgbench = "pgbench --max-tries=" + strconv.Itoa(pgbenchTries)

// cellPlan is one worker count of the contention scenario: the accounts,
// the variants and which contenders run.
type cellPlan struct {
	workers, accounts int
	variants          []string
	naive             bool // the naive retry loop
	extras            bool // pgx.BeginTxFunc, crdbpgxv5.ExecuteTx
	noResolve         bool // pgtx without resolution
	ceiling           bool // the READ COMMITTED ceiling
}

// hotPlan is the plan of the hot cells at workers.
func hotPlan(workers int) cellPlan {
	return cellPlan{workers: workers, accounts: hotAccounts, variants: []string{variantOrdered, variantRandom},
		naive: true, extras: workers <= extrasUpTo, noResolve: workers <= extrasUpTo, ceiling: true}
}

// lowPlan is the plan of the low-contention cell.
func lowPlan() cellPlan {
	return cellPlan{workers: lowWorkers, accounts: lowAccounts, variants: []string{variantOrdered}, noResolve: true}
}

// pools is the number of pools the plan's contenders open at once, each of
// workers connections.
func (p cellPlan) pools() int {
	n := 3 // pgtx, pgtx without the manager, the pgx pool
	if p.noResolve {
		n++ // pgtx without resolution
	}
	return n
}

// contention runs SERIALIZABLE transfers over 10 hot accounts at each
// -workers count, rows updated in id order and in random order, for every
// contender, and the READ COMMITTED ceiling, all interleaved per worker
// count, then pgbench on each variant; and a low-contention cell, 1,000
// accounts at 8 workers, ordered, with pgtx, pgtx without its contention
// manager, the full-jitter loop and pgbench.
func contention(ctx context.Context, e *env) (result, error) {
	plans := make([]cellPlan, 0, len(e.opts.workers)+1)
	for _, w := range e.opts.workers {
		plans = append(plans, hotPlan(w))
	}
	plans = append(plans, lowPlan())
	// Before minutes of Go slices, not after them.
	if _, err := findPgbench(); err != nil {
		return result{}, err
	}
	if err := checkMaxConnections(ctx, e, plans); err != nil {
		return result{}, err
	}
	restore := setDeadlockTimeout(ctx, e)
	defer restore()
	var rows []contentionRow
	accounts := 0
	for _, p := range plans {
		if p.accounts != accounts {
			if err := setupAccounts(ctx, e.admin, p.accounts); err != nil {
				return result{}, err
			}
			accounts = p.accounts
		}
		r, err := runCell(ctx, e, p)
		if err != nil {
			return result{}, fmt.Errorf("%d workers, %d accounts: %w", p.workers, p.accounts, err)
		}
		rows = append(rows, r...)
	}
	deadlockTimeout, err := showDeadlockTimeout(ctx, e)
	if err != nil {
		return result{}, err
	}
	return result{Tables: contentionTables(rows, e.opts, deadlockTimeout), Data: rows}, nil
}

// checkMaxConnections fails when the server's max_connections cannot hold
// the largest cell: its pools open at once, pgbench's clients (the pools
// stay open while it runs), and a margin for the admin pool and the checks.
func checkMaxConnections(ctx context.Context, e *env, plans []cellPlan) error {
	var s string
	if err := e.admin.QueryRow(ctx, "show max_connections").Scan(&s); err != nil {
		return err
	}
	have, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("show max_connections: %q: %w", s, err)
	}
	margin := int(e.admin.Config().MaxConns) + 6
	need, worst := connectionsNeeded(plans, margin)
	if have < need {
		return fmt.Errorf("the server's max_connections is %d; the contention scenario needs at least %d "+
			"(at %d workers: %d pools of %d connections open at once, pgbench's %d clients, and %d for the admin pool and checks): "+
			"raise max_connections or pass a smaller -workers", have, need, worst.workers, worst.pools(), worst.workers, worst.workers, margin)
	}
	return nil
}

// connectionsNeeded is the most connections a plan of plans needs at once,
// and that plan: its pools, pgbench's clients while they are open, and
// margin.
func connectionsNeeded(plans []cellPlan, margin int) (need int, worst cellPlan) {
	for _, p := range plans {
		if n := p.pools()*p.workers + p.workers + margin; n > need {
			need, worst = n, p
		}
	}
	return need, worst
}

// runCell runs one worker count: the Go contenders interleaved slice by
// slice, then pgbench once per variant, on the pools' server while the
// pools stay open.
func runCell(ctx context.Context, e *env, p cellPlan) ([]contentionRow, error) {
	backoff := func(edit func(*pgtx.Config)) func(*pgtx.Config) {
		return func(c *pgtx.Config) {
			c.Retry.ConflictBaseBackoff = e.opts.conflictBase
			c.Retry.ConflictMaxBackoff = e.opts.conflictMax
			if edit != nil {
				edit(c)
			}
		}
	}
	tp, err := newPgtxPool(ctx, e.dsn, p.workers, backoff(nil))
	if err != nil {
		return nil, err
	}
	defer tp.Close()
	// The same pgtx without its contention manager: what the manager buys
	// over the backoff alone.
	op, err := newPgtxPool(ctx, e.dsn, p.workers, backoff(func(c *pgtx.Config) { c.Contention.Threshold = -1 }))
	if err != nil {
		return nil, err
	}
	defer op.Close()
	xp, err := newPgxPool(ctx, e.dsn, p.workers, nil)
	if err != nil {
		return nil, err
	}
	defer xp.Close()
	execs := []execFunc{tp.Exec, op.Exec, xp.Exec}

	// The pgx-based contenders share the pgx pool: they never run at the
	// same time.
	var np *pgtx.Pool
	if p.noResolve {
		// The same pgtx without resolution of ambiguous COMMITs: what
		// reading each transaction's id costs under write contention.
		np, err = newPgtxPool(ctx, e.dsn, p.workers, backoff(func(c *pgtx.Config) { c.ResolveTimeout = -1 }))
		if err != nil {
			return nil, err
		}
		defer np.Close()
		execs = append(execs, np.Exec)
	}
	// pgtx's calls carry a label per variant, as an application names its
	// kinds of transaction: the contention manager learns each apart.
	var cells []transferCell
	for _, v := range p.variants {
		label := "transfer-" + v
		cs := []contender{labelledPgtxContender(namePgtx, tp, label), labelledPgtxContender(namePgtxNoManager, op, label)}
		if p.extras {
			cs = append(cs, beginContender(nameBegin, xp))
		}
		if p.naive {
			cs = append(cs, naiveContender(nameNaive, xp, loopMaxRetries))
		}
		cs = append(cs, jitterContender(nameJitter, xp, loopMaxRetries))
		if p.extras {
			cs = append(cs, crdbContender(nameCrdb, xp))
		}
		if np != nil {
			cs = append(cs, labelledPgtxContender(namePgtxNoResolve, np, label))
		}
		for _, c := range cs {
			cells = append(cells, transferCell{variant: v, c: c})
		}
	}
	if p.ceiling {
		cells = append(cells, transferCell{variant: variantCeiling, c: beginContender(nameCeiling, xp)})
	}
	watch := newManagerWatch(tp)
	for i, tc := range cells {
		if tc.c.name == namePgtx {
			watch.follow(i, "transfer-"+tc.variant)
		}
	}
	stats, err := runTransfers(ctx, e, p.workers, p.accounts, cells, execs, watch.observe)
	if err != nil {
		return nil, err
	}
	rows := contentionRows(p.workers, p.accounts, cells, stats)
	for i := range rows {
		rows[i].Manager = watch.state(i)
	}
	for _, v := range p.variants {
		r, err := pgbenchRow(ctx, e, p.workers, p.accounts, v)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	anchorRatios(rows)
	return rows, nil
}

// pgbenchRow runs pgbench on one variant for -dur and makes its row: its
// commits, retries and failures are its own counts, checked against the
// accounts' update counters, and the invariant is checked after it.
func pgbenchRow(ctx context.Context, e *env, workers, accounts int, variant string) (contentionRow, error) {
	before, err := readLedger(ctx, e.admin)
	if err != nil {
		return contentionRow{}, err
	}
	run, err := runPgbench(ctx, e.dsn, workers, accounts, variant == variantOrdered, e.opts.dur, pgbenchTries)
	if err != nil {
		return contentionRow{}, err
	}
	after, err := readLedger(ctx, e.admin)
	if err != nil {
		return contentionRow{}, err
	}
	committed := (after.updates - before.updates) / 2
	causes := map[string]int64{}
	for code, n := range map[string]int64{
		"40001": run.SerializationFailures,
		"40P01": run.DeadlockFailures,
		"other": run.Failed - run.SerializationFailures - run.DeadlockFailures,
	} {
		if n > 0 {
			causes[code] = n
		}
	}
	if len(causes) == 0 {
		causes = nil
	}
	inv := checkInvariant(after, accounts)
	if committed < run.Processed {
		msg := fmt.Sprintf("MISMATCH: the counters show %d commits, pgbench %d", committed, run.Processed)
		if inv == "unchanged" {
			inv = msg
		} else {
			inv += "; " + msg
		}
	}
	return contentionRow{
		Variant: variant, Workers: workers, Accounts: accounts, Contender: namePgbench,
		CommitsPerS: run.TPS, Phantom: max(0, run.Processed-committed),
		// Every try counts, those of the transactions that failed too, as
		// the Go contenders' attempts do: pgbench's retries count both.
		AttemptsPerCommit: ratio(float64(run.Processed+run.Failed+run.Retries), float64(run.Processed)),
		Calls:             run.Processed + run.Failed, Failed: run.Failed, Causes: causes,
		P50ms: msf(run.P50), P99ms: msf(run.P99), Invariant: inv,
	}, nil
}

// anchorRatios sets the ratios of the pgbench rows: to the full-jitter loop
// of the same variant, accounts and worker count, and to the ceiling at the
// same accounts and worker count.
func anchorRatios(rows []contentionRow) {
	find := func(variant string, workers, accounts int, name string) float64 {
		for _, r := range rows {
			if r.Variant == variant && r.Workers == workers && r.Accounts == accounts && r.Contender == name {
				return r.CommitsPerS
			}
		}
		return 0
	}
	for i := range rows {
		r := &rows[i]
		if r.Contender != namePgbench {
			continue
		}
		r.VsJitter = ratio(r.CommitsPerS, find(r.Variant, r.Workers, r.Accounts, nameJitter))
		r.OfCeiling = ratio(r.CommitsPerS, find(variantCeiling, r.Workers, r.Accounts, nameCeiling))
	}
}
