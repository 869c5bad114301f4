package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
)

// The hot accounts of the contention scenario.
const (
	hotAccounts    = 10
	initialBalance = 1_000_000
)

// The variants of the transfer workload.
const (
	variantOrdered = "ordered" // rows updated in id order: 40001 only
	variantRandom  = "random"  // rows updated in random order: 40P01 too
	variantCeiling = "ceiling" // READ COMMITTED, both rows locked in id order first
)

// pgtx's default conflict backoff (RetryPolicy.ConflictBaseBackoff and
// ConflictMaxBackoff, as their docs state; pgtx does not export its
// defaults), for the tables' notes.
const (
	pgtxConflictBaseBackoff = 5 * time.Millisecond
	pgtxConflictMaxBackoff  = 500 * time.Millisecond
)

// nameCeiling is the ceiling's contender name.
const nameCeiling = "ceiling: READ COMMITTED + FOR UPDATE"

var errInsufficient = errors.New("insufficient funds")

// contentionRow is one contender on one variant at one worker count.
type contentionRow struct {
	Variant   string `json:"variant"`
	Workers   int    `json:"workers"`
	Contender string `json:"contender"`
	// CommitsPerS counts the transfers that really committed (each one adds 2
	// to the accounts' update counters), per second.
	CommitsPerS float64 `json:"commits_per_s"`
	// Phantom counts calls that returned nil although their transaction did
	// not commit (cockroach-go ignores COMMIT's error).
	Phantom           int64            `json:"reported_not_committed"`
	AttemptsPerCommit float64          `json:"attempts_per_commit"`
	Calls             int64            `json:"calls"`
	Failed            int64            `json:"failed_calls"`
	Causes            map[string]int64 `json:"failed_by_cause,omitempty"`
	CutShort          int64            `json:"cut_short"`
	P50ms             float64          `json:"p50_ms"`
	P99ms             float64          `json:"p99_ms"`
	VsJitter          float64          `json:"vs_full_jitter"`
	OfCeiling         float64          `json:"of_ceiling"`
	Invariant         string           `json:"invariant"`
}

// contention runs SERIALIZABLE transfers over 10 hot accounts, at 8 and 32
// workers, rows updated in id order and in random order, for every
// contender, and the READ COMMITTED ceiling, all interleaved per worker count.
func contention(ctx context.Context, e *env) (result, error) {
	if err := setupAccounts(ctx, e.admin); err != nil {
		return result{}, err
	}
	restore := setDeadlockTimeout(ctx, e)
	defer restore()
	var rows []contentionRow
	for _, workers := range []int{8, 32} {
		tp, err := newPgtxPool(ctx, e.dsn, workers, func(c *pgtx.Config) {
			c.Retry.ConflictBaseBackoff = e.opts.conflictBase
			c.Retry.ConflictMaxBackoff = e.opts.conflictMax
		})
		if err != nil {
			return result{}, err
		}
		// The same pgtx without resolution of ambiguous COMMITs: what
		// capturing each transaction's id costs under write contention.
		np, err := newPgtxPool(ctx, e.dsn, workers, func(c *pgtx.Config) {
			c.Retry.ConflictBaseBackoff = e.opts.conflictBase
			c.Retry.ConflictMaxBackoff = e.opts.conflictMax
			c.ResolveTimeout = -1
		})
		if err != nil {
			tp.Close()
			return result{}, err
		}
		xp, err := newPgxPool(ctx, e.dsn, workers, nil)
		if err != nil {
			tp.Close()
			np.Close()
			return result{}, err
		}
		var cells []transferCell
		for _, v := range []string{variantOrdered, variantRandom} {
			for _, c := range standardContenders(tp, xp) {
				cells = append(cells, transferCell{variant: v, c: c})
			}
			cells = append(cells, transferCell{variant: v, c: pgtxContender(namePgtxNoResolve, np)})
		}
		cells = append(cells, transferCell{variant: variantCeiling, c: beginContender(nameCeiling, xp)})
		stats, err := runTransfers(ctx, e, workers, cells, []execFunc{tp.Exec, np.Exec, xp.Exec})
		tp.Close()
		np.Close()
		xp.Close()
		if err != nil {
			return result{}, err
		}
		rows = append(rows, contentionRows(workers, cells, stats)...)
	}
	deadlockTimeout, err := showDeadlockTimeout(ctx, e)
	if err != nil {
		return result{}, err
	}
	return result{Tables: contentionTables(rows, e.opts, deadlockTimeout), Data: rows}, nil
}

// transferCell is one contender on one variant of the transfer workload.
type transferCell struct {
	variant string
	c       contender
}

// call is the cell's callFunc: a transfer of 1 to 10 between two distinct
// random hot accounts.
func (tc transferCell) call() callFunc {
	return func(ctx context.Context, rng *rand.Rand) (int, error) {
		from := 1 + rng.IntN(hotAccounts)
		to := 1 + rng.IntN(hotAccounts-1)
		if to >= from {
			to++
		}
		amount := 1 + rng.IntN(10)
		if tc.variant == variantCeiling {
			return tc.c.run(ctx, pgtx.ReadCommitted, lockedTransfer(from, to, amount))
		}
		return tc.c.run(ctx, pgtx.Serializable, transfer(from, to, amount, tc.variant == variantOrdered))
	}
}

// transferStats is what runTransfers measured for one cell.
type transferStats struct {
	sample
	inWindow  int64  // transfers committed within the slices' windows
	committed int64  // transfers committed in all, the slices' ends included
	invariant string // "unchanged", or what was found
}

// runTransfers runs the cells at one worker count, interleaved, and counts
// the transfers that really committed, from the accounts' update counters:
// commits/s is what committed within each slice's window, read at its end
// while the last calls still run. Calls still running a grace period later
// are cancelled, so that a slice of calls stuck behind a deadlock_timeout
// (1s) ends soon after its window; the pools are filled before each slice.
// After every slice the total balance is checked.
func runTransfers(ctx context.Context, e *env, workers int, cells []transferCell, pools []execFunc) ([]transferStats, error) {
	calls := make([]callFunc, len(cells))
	for i, tc := range cells {
		calls[i] = tc.call()
	}
	stats := make([]transferStats, len(cells))
	for i := range stats {
		stats[i].invariant = "unchanged"
	}
	slice := e.opts.dur / time.Duration(e.opts.rounds)
	grace := min(slice/5, 100*time.Millisecond)
	err := interleave(ctx, len(cells), e.opts.rounds, func(ctx context.Context, round, i int) error {
		for _, p := range pools {
			if err := fill(ctx, workers, p); err != nil {
				return err
			}
		}
		before, err := readLedger(ctx, e.admin)
		if err != nil {
			return err
		}
		var atEnd ledger
		var endErr error
		s := closedLoopCut(ctx, workers, slice, grace, uint64(round), calls[i], func() { atEnd, endErr = readLedger(ctx, e.admin) })
		after, err := readLedger(ctx, e.admin)
		if err = errors.Join(endErr, err); err != nil {
			return err
		}
		st := &stats[i]
		st.add(s)
		st.inWindow += (atEnd.updates - before.updates) / 2
		st.committed += (after.updates - before.updates) / 2
		if after.total != hotAccounts*initialBalance && st.invariant == "unchanged" {
			st.invariant = fmt.Sprintf("BROKEN: total %d, want %d", after.total, hotAccounts*initialBalance)
		}
		return nil
	})
	return stats, err
}

// contentionRows turns one worker count's stats into rows, with the ratios
// to the full-jitter loop and to the ceiling of the same variant.
func contentionRows(workers int, cells []transferCell, stats []transferStats) []contentionRow {
	rate := func(i int) float64 { return perSecond(stats[i].inWindow, stats[i].Window) }
	jitter, ceiling := map[string]float64{}, 0.0
	for i, tc := range cells {
		switch {
		case tc.c.name == nameJitter:
			jitter[tc.variant] = rate(i)
		case tc.variant == variantCeiling:
			ceiling = rate(i)
		}
	}
	rows := make([]contentionRow, len(cells))
	for i, tc := range cells {
		s := &stats[i]
		rows[i] = contentionRow{
			Variant: tc.variant, Workers: workers, Contender: tc.c.name,
			CommitsPerS: rate(i), Phantom: max(0, s.OK-s.committed),
			AttemptsPerCommit: ratio(float64(s.Attempts), float64(s.committed)),
			Calls:             s.Calls, Failed: s.Failed, Causes: s.Causes, CutShort: s.CutShort,
			P50ms: msf(percentile(s.okLat, .5)), P99ms: msf(percentile(s.okLat, .99)),
			VsJitter: ratio(rate(i), jitter[tc.variant]), OfCeiling: ratio(rate(i), ceiling),
			Invariant: s.invariant,
		}
	}
	return rows
}

// contentionTables lays the rows out as one table per variant.
func contentionTables(rows []contentionRow, o options, deadlockTimeout string) []table {
	backoff := fmt.Sprintf("pgtx with its default conflict backoff (%v base, %v cap)", pgtxConflictBaseBackoff, pgtxConflictMaxBackoff)
	if o.conflictBase != 0 || o.conflictMax != 0 {
		backoff = fmt.Sprintf("pgtx with ConflictBaseBackoff %v, ConflictMaxBackoff %v (0 = default)", o.conflictBase, o.conflictMax)
	}
	note := "Transfers between 2 of 10 hot accounts (read one balance, update both rows), SERIALIZABLE, closed loop, " +
		"contenders alternating in slices. Commits are counted in the database (an update counter on each row) within " +
		"each slice's window, not from what the calls returned; \"reported, not committed\" are calls that returned nil " +
		"although nothing committed. Calls still running shortly after a slice's window are cancelled and not counted " +
		"as calls (\"cut short\"; their attempts count). Latencies are of the calls that returned nil, retries included. " +
		"Retrying contenders give up after 10 retries. " + backoff + ". deadlock_timeout was " + deadlockTimeout +
		" (-deadlock-timeout; the server default is 1s): in the random variant a deadlock is found only after that wait. The invariant (sum of balances) is checked after every slice."
	header := []string{"workers", "contender", "commits/s", "× full-jitter", "of ceiling", "attempts/commit",
		"failed calls", "reported, not committed", "cut short", "p50 ms", "p99 ms", "invariant"}
	var ts []table
	for _, v := range []struct{ variant, title string }{
		{variantOrdered, "Contention, rows updated in id order (40001 only)"},
		{variantRandom, "Contention, rows updated in random order (40001 and 40P01)"},
		{variantCeiling, "Contention ceiling: the same transfers in READ COMMITTED, both rows locked in id order (`select ... for update`), no aborts"},
	} {
		t := table{Title: v.title, Header: header}
		if v.variant == variantOrdered {
			t.Note = note
		}
		for _, r := range rows {
			if r.Variant != v.variant {
				continue
			}
			failed := itoa64(r.Failed)
			if r.Failed > 0 {
				failed += " (" + causes(r.Causes) + ")"
			}
			vsJitter := x(r.VsJitter)
			if r.Variant == variantCeiling {
				vsJitter = "—"
			}
			t.Rows = append(t.Rows, []string{itoa(r.Workers), r.Contender, num(r.CommitsPerS), vsJitter,
				pct(r.OfCeiling), fmtf(r.AttemptsPerCommit, 2), failed, itoa64(r.Phantom), itoa64(r.CutShort),
				ms(time.Duration(r.P50ms * float64(time.Millisecond))), ms(time.Duration(r.P99ms * float64(time.Millisecond))),
				r.Invariant})
		}
		ts = append(ts, t)
	}
	return ts
}

// transfer is the SERIALIZABLE transfer: read the source balance, then
// update both rows, in id order when ordered, else source first.
func transfer(from, to, amount int, ordered bool) txFunc {
	return func(ctx context.Context, tx pgx.Tx) error {
		var balance int64
		if err := tx.QueryRow(ctx, "select balance from bench_accounts where id = $1", from).Scan(&balance); err != nil {
			return err
		}
		if balance < int64(amount) {
			return errInsufficient
		}
		first, second := from, to
		if ordered && second < first {
			first, second = second, first
		}
		return updateBoth(ctx, tx, from, first, second, amount)
	}
}

// lockedTransfer is the ceiling's transfer: READ COMMITTED, both rows
// locked in id order by one statement, then updated in id order.
func lockedTransfer(from, to, amount int) txFunc {
	return func(ctx context.Context, tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "select id, balance from bench_accounts where id in ($1, $2) order by id for update", from, to)
		if err != nil {
			return err
		}
		var balance int64
		for rows.Next() {
			var id int
			var b int64
			if err := rows.Scan(&id, &b); err != nil {
				rows.Close()
				return err
			}
			if id == from {
				balance = b
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if balance < int64(amount) {
			return errInsufficient
		}
		return updateBoth(ctx, tx, from, min(from, to), max(from, to), amount)
	}
}

// updateBoth moves amount from the account from, updating first then
// second, and counts each update in the row's counter.
func updateBoth(ctx context.Context, tx pgx.Tx, from, first, second, amount int) error {
	for _, id := range [2]int{first, second} {
		delta := amount
		if id == from {
			delta = -amount
		}
		if _, err := tx.Exec(ctx, "update bench_accounts set balance = balance + $1, n = n + 1 where id = $2", delta, id); err != nil {
			return err
		}
	}
	return nil
}

// setupAccounts creates the hot accounts afresh.
func setupAccounts(ctx context.Context, admin *pgxpool.Pool) error {
	_, err := admin.Exec(ctx, `drop table if exists bench_accounts;
		create table bench_accounts (id int primary key, balance bigint not null check (balance >= 0), n bigint not null default 0)`)
	if err != nil {
		return err
	}
	_, err = admin.Exec(ctx, "insert into bench_accounts (id, balance) select g, $1 from generate_series(1, $2) g", initialBalance, hotAccounts)
	return err
}

// setDeadlockTimeout sets the database's deadlock_timeout to -deadlock-timeout
// for the sessions opened from now on, and returns what puts it back. The
// server's default (1s) would make every deadlock of the random variant a 1s
// wait, longer than a slice. Setting it needs a superuser (the throwaway
// server's role is one); without one, the server's value stays, and the
// tables say which was in force.
func setDeadlockTimeout(ctx context.Context, e *env) (restore func()) {
	if e.opts.deadlock <= 0 {
		return func() {}
	}
	ms := strconv.FormatInt(e.opts.deadlock.Milliseconds(), 10)
	if _, err := e.admin.Exec(ctx, "do $$ begin execute format('alter database %I set deadlock_timeout = "+ms+"', current_database()); end $$"); err != nil {
		fmt.Fprintf(os.Stderr, "bench: deadlock_timeout left as it is: %v\n", err)
		return func() {}
	}
	return func() {
		_, _ = e.admin.Exec(context.WithoutCancel(ctx), "do $$ begin execute format('alter database %I reset deadlock_timeout', current_database()); end $$")
	}
}

// showDeadlockTimeout is the deadlock_timeout of a new session.
func showDeadlockTimeout(ctx context.Context, e *env) (string, error) {
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var v string
	err = conn.QueryRow(ctx, "show deadlock_timeout").Scan(&v)
	return v, err
}

// ledger is the accounts' total balance and total update count.
type ledger struct{ total, updates int64 }

// readLedger reads the ledger.
func readLedger(ctx context.Context, admin *pgxpool.Pool) (ledger, error) {
	var l ledger
	err := admin.QueryRow(ctx, "select coalesce(sum(balance), 0)::bigint, coalesce(sum(n), 0)::bigint from bench_accounts").Scan(&l.total, &l.updates)
	return l, err
}
