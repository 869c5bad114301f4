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

var errInsufficient = errors.New("insufficient funds")

// transferCell is one contender on one variant of the transfer workload.
type transferCell struct {
	variant string
	c       contender
	// sql, when set, runs the transfer instead of c: the contenders of
	// the sql scenario, whose transactions are database/sql's.
	sql sqlTransfer
}

// call is the cell's callFunc: a transfer of 1 to 10 between two distinct
// random accounts of 1..accounts.
func (tc transferCell) call(accounts int) callFunc {
	return func(ctx context.Context, rng *rand.Rand) (int, error) {
		from := 1 + rng.IntN(accounts)
		to := 1 + rng.IntN(accounts-1)
		if to >= from {
			to++
		}
		amount := 1 + rng.IntN(10)
		if tc.sql != nil {
			return tc.sql(ctx, from, to, amount, tc.variant == variantOrdered)
		}
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
	// perRound is the commits/s within each round's window, in round order.
	perRound []float64
}

// runTransfers runs the cells at one worker count on the accounts
// 1..accounts, interleaved, and counts the transfers that really committed,
// from the accounts' update counters: commits/s is what committed within
// each slice's window, read at its end while the last calls still run.
// Calls still running a grace period later are cancelled, so that a slice
// of calls stuck behind a deadlock_timeout (1s) ends soon after its window;
// the pools are filled before each slice. After every slice the total
// balance is checked. observe, when not nil, is called just before each
// slice's calls start, with the slice's cell, and what it returns as soon
// as they have all ended.
func runTransfers(ctx context.Context, e *env, workers, accounts int, cells []transferCell, pools []execFunc, observe func(cell int) (done func())) ([]transferStats, error) {
	calls := make([]callFunc, len(cells))
	for i, tc := range cells {
		calls[i] = tc.call(accounts)
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
		done := func() {}
		if observe != nil {
			done = observe(i)
		}
		s := closedLoopCut(ctx, workers, slice, grace, uint64(round), calls[i], func() { atEnd, endErr = readLedger(ctx, e.admin) })
		done()
		after, err := readLedger(ctx, e.admin)
		if err = errors.Join(endErr, err); err != nil {
			return err
		}
		st := &stats[i]
		st.add(s)
		st.inWindow += (atEnd.updates - before.updates) / 2
		st.perRound = append(st.perRound, perSecond((atEnd.updates-before.updates)/2, s.Window))
		st.committed += (after.updates - before.updates) / 2
		if inv := checkInvariant(after, accounts); inv != "unchanged" && st.invariant == "unchanged" {
			st.invariant = inv
		}
		return nil
	})
	return stats, err
}

// checkInvariant is "unchanged" when the total balance of accounts accounts
// is what setupAccounts gave them, and what was found otherwise.
func checkInvariant(l ledger, accounts int) string {
	if want := int64(accounts) * initialBalance; l.total != want {
		return fmt.Sprintf("BROKEN: total %d, want %d", l.total, want)
	}
	return "unchanged"
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

// setupAccounts creates the accounts 1..accounts afresh, each with
// initialBalance.
func setupAccounts(ctx context.Context, admin *pgxpool.Pool, accounts int) error {
	_, err := admin.Exec(ctx, `drop table if exists bench_accounts;
		create table bench_accounts (id int primary key, balance bigint not null check (balance >= 0), n bigint not null default 0)`)
	if err != nil {
		return err
	}
	_, err = admin.Exec(ctx, "insert into bench_accounts (id, balance) select g, $1 from generate_series(1, $2) g", initialBalance, accounts)
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
