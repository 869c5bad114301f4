package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// contentionRow is one contender on one variant at one worker count.
type contentionRow struct {
	Variant   string `json:"variant"`
	Workers   int    `json:"workers"`
	Accounts  int    `json:"accounts"`
	Contender string `json:"contender"`
	// CommitsPerS counts the transfers that really committed (each one adds 2
	// to the accounts' update counters), per second; pgbench's is its tps.
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
	// Manager is what pgtx's contention manager did in the cell (the pgtx
	// row only).
	Manager *managerState `json:"manager,omitempty"`
}

// managerState is what the contention manager of the pgtx pool (its empty
// label) did during the slices of one cell, and where it ended.
type managerState struct {
	// Limiting and Limit are the gate's state after the cell's last slice.
	Limiting bool `json:"limiting"`
	Limit    int  `json:"limit"`
	// Admitted counts the attempts of the cell's slices that passed the
	// gate while it limited, and WaitP99ms is the p99 of their waits there:
	// the upper bound of the bucket of pgtx's Histogram that holds it.
	Admitted  int64   `json:"gate_admitted"`
	WaitP99ms float64 `json:"gate_wait_p99_ms"`
	// ConflictShare is the share of the cell's attempts the manager counted
	// as conflicts (40001, 40P01).
	ConflictShare float64 `json:"conflict_share"`
	// Summary is the above in words, as the tables say it.
	Summary string `json:"summary"`
}

// contentionRows turns one worker count's stats into rows, with the ratios
// to the full-jitter loop and to the ceiling of the same variant.
func contentionRows(workers, accounts int, cells []transferCell, stats []transferStats) []contentionRow {
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
			Variant: tc.variant, Workers: workers, Accounts: accounts, Contender: tc.c.name,
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

// contentionTables lays the rows out: one table per variant of the hot
// cells, the ceiling's, and the low-contention cell's.
func contentionTables(rows []contentionRow, o options, deadlockTimeout string) []table {
	backoff := fmt.Sprintf("pgtx with its default conflict backoff (%v base, %v cap)", pgtxConflictBaseBackoff, pgtxConflictMaxBackoff)
	if o.conflictBase != 0 || o.conflictMax != 0 {
		backoff = fmt.Sprintf("pgtx with ConflictBaseBackoff %v, ConflictMaxBackoff %v (0 = default)", o.conflictBase, o.conflictMax)
	}
	note := "Transfers between 2 of 10 hot accounts (read one balance, update both rows), SERIALIZABLE, closed loop, " +
		"contenders alternating in slices; each pool has as many connections as there are workers. Commits are counted in the database (an update counter on each row) within " +
		"each slice's window, not from what the calls returned; \"reported, not committed\" are calls that returned nil " +
		"although nothing committed. Calls still running shortly after a slice's window are cancelled and not counted " +
		"as calls (\"cut short\"; their attempts count). Latencies are of the calls that returned nil, retries included. " +
		"Retrying contenders give up after 10 retries. " + backoff + "; \"" + namePgtxNoManager + "\" is the same with Contention.Threshold -1. " +
		"pgx.BeginTxFunc, crdbpgxv5.ExecuteTx and \"" + namePgtxNoResolve + "\" run up to " + itoa(extrasUpTo) + " workers only. " +
		"deadlock_timeout was " + deadlockTimeout +
		" (-deadlock-timeout; the server default is 1s): in the random variant a deadlock is found only after that wait. The invariant (sum of balances) is checked after every slice. " +
		pgbenchNote
	header := []string{"workers", "contender", "commits/s", "× full-jitter", "of ceiling", "attempts/commit",
		"failed calls", "reported, not committed", "cut short", "p50 ms", "p99 ms", "invariant"}
	var ts []table
	for _, v := range []struct{ variant, title string }{
		{variantOrdered, "Contention, rows updated in id order (40001 only)"},
		{variantRandom, "Contention, rows updated in random order (40001 and 40P01)"},
		{variantCeiling, "Contention ceiling: the same transfers in READ COMMITTED, both rows locked in id order (`select ... for update`), no aborts"},
	} {
		t := table{Title: v.title, Header: header}
		var hot []contentionRow
		for _, r := range rows {
			if r.Accounts == hotAccounts && r.Variant == v.variant {
				hot = append(hot, r)
			}
		}
		switch v.variant {
		case variantOrdered:
			t.Note = note + " " + managerNote(hot)
		case variantRandom:
			t.Note = "As above, rows updated in random order. " + managerNote(hot)
		}
		for _, r := range hot {
			t.Rows = append(t.Rows, contentionCells(r, true))
		}
		ts = append(ts, t)
	}

	var low []contentionRow
	for _, r := range rows {
		if r.Accounts == lowAccounts {
			low = append(low, r)
		}
	}
	if len(low) > 0 {
		t := table{
			Title: fmt.Sprintf("Low contention: %s accounts, %d workers", num(lowAccounts), lowWorkers),
			Note: "The same transfers, rows updated in id order, between 2 of " + num(lowAccounts) + " accounts, so that few of them conflict: " +
				"what the contention manager costs when it has little to do. Measured as the hot cells (the accounts table recreated), " +
				"without the ceiling. " + managerNote(low),
			Header: slices.Delete(slices.Clone(header), 4, 5),
		}
		for _, r := range low {
			t.Rows = append(t.Rows, contentionCells(r, false))
		}
		ts = append(ts, t)
	}
	return ts
}

// pgbenchNote says how the pgbench rows were measured.
var pgbenchNote = "\"" + namePgbench + "\" is PostgreSQL's pgbench, a C client on the same server, running the same transfer " +
	"as a script on the same table with the same deadlock_timeout, as many clients as workers, prepared statements: it ran once per variant " +
	"for -dur after the interleaved slices of its worker count, not in them (its -T takes whole seconds). On 40001 or 40P01 it " +
	"retries the whole transaction at once, with the same values, no backoff, and gives up after 10 retries. Its commits/s is its tps, " +
	"its attempts/commit (processed + failed + retries) / processed, its latencies from its per-transaction log; the update " +
	"counters must have grown by 2 per transaction it counts as processed, or the invariant column says so. Its run is unbroken, " +
	"where the Go slices start afresh every -dur/rounds and cut their last calls short, and it waits for its last transactions: " +
	"where a queue builds up (many cut-short calls in the Go rows), its latencies can exceed its -T."

// managerNote says where pgtx's contention manager ended in each cell of
// rows.
func managerNote(rows []contentionRow) string {
	var parts []string
	for _, r := range rows {
		if r.Manager == nil {
			continue
		}
		parts = append(parts, fmt.Sprintf("%d workers: %s", r.Workers, r.Manager.Summary))
	}
	if len(parts) == 0 {
		return ""
	}
	return "pgtx's contention manager (Stats().Contention of the pgtx pool; its calls carry the label transfer-<variant>, so each variant " +
		"has a gate of its own, which keeps what it learnt from one slice to the next), at the end of the pgtx row's last slice, with the gate's waits over its slices: " +
		strings.Join(parts, "; ") + "."
}

// contentionCells is the table row of r, with the "of ceiling" column when
// ceiling is set.
func contentionCells(r contentionRow, ceiling bool) []string {
	failed := itoa64(r.Failed)
	if r.Failed > 0 {
		failed += " (" + causes(r.Causes) + ")"
	}
	vsJitter := x(r.VsJitter)
	if r.Variant == variantCeiling {
		vsJitter = "—"
	}
	cut := itoa64(r.CutShort)
	if r.Contender == namePgbench {
		cut = "—"
	}
	cells := []string{itoa(r.Workers), r.Contender, num(r.CommitsPerS), vsJitter}
	if ceiling {
		cells = append(cells, pct(r.OfCeiling))
	}
	return append(cells, fmtf(r.AttemptsPerCommit, 2), failed, itoa64(r.Phantom), cut,
		ms(time.Duration(r.P50ms*float64(time.Millisecond))), ms(time.Duration(r.P99ms*float64(time.Millisecond))),
		r.Invariant)
}
