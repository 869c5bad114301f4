package integration

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/formation"
)

// formationRounds is how many failovers of each kind TestFormationResolve
// goes through: PGTX_FORMATION_ROUNDS, 1 by default.
func formationRounds(t *testing.T) int {
	t.Helper()
	v := os.Getenv("PGTX_FORMATION_ROUNDS")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("PGTX_FORMATION_ROUNDS=%q: want a count of rounds, 1 or more", v)
	}
	return n
}

// resolveTally adds up the calls of the failovers of one kind.
type resolveTally struct {
	rounds, calls, committed, unknown, unknownApplied int
	failedEarly, byDeadline, permanent                int
	// lostAsync counts the commits acknowledged by an old primary that
	// pg_auto_failover had let go asynchronous (wait_primary) and then
	// demoted: lost for every client (not resolution's answers), in
	// lossyRounds.
	lostAsync, lossyRounds int
	// sentLost counts plain statements whose connection broke after they
	// were sent: they may have been applied, and are not sent again.
	sentLost int
	resolved pgtx.ResolveStats
	// gapOver is the most the longest gap between successes of a round
	// exceeded the formation's transition (from its events), and late the
	// longest a round's first success came after the server took writes
	// again (as a probe saw it).
	gapOver, late time.Duration
}

func (a *resolveTally) add(r pgtx.ResolveStats) {
	a.resolved.CommittedCount += r.CommittedCount
	a.resolved.AbortedCount += r.AbortedCount
	a.resolved.LostCount += r.LostCount
	a.resolved.NotAppliedCount += r.NotAppliedCount
	a.resolved.UnknownCount += r.UnknownCount
	a.resolved.ElsewhereCount += r.ElsewhereCount
	a.resolved.RestartedCount += r.RestartedCount
	a.resolved.ForgottenCount += r.ForgottenCount
	a.resolved.UnansweredCount += r.UnansweredCount
	a.resolved.UnsupportedCount += r.UnsupportedCount
}

// cut is how many COMMITs lost their answer and were asked about, and
// answered how many of them.
func (a *resolveTally) cut() (cut, answered int64) {
	r := a.resolved
	return r.CommittedCount + r.AbortedCount + r.UnknownCount, r.CommittedCount + r.AbortedCount
}

// TestFormationResolve drives a ledger workload through a real
// pg_auto_failover formation (a monitor, a primary and its synchronous
// secondary) and measures how it rides out each kind of failover (planned
// switchover, kill -9 of the primary's postmaster, a fast shutdown of it
// with 57P03 while it stops and starts, primary node stopped), and how the
// COMMITs the failovers cut are resolved: PGTX_FORMATION_ROUNDS rounds (1
// by default) of eight writers of a plain role, each write a unique id with
// a 10s deadline, in its own Transaction or (two of them) with Pool.Exec,
// through the formation's multi-host URI (target_session_attrs=read-write),
// each round from a primary with a synchronous standby. Every answer is
// checked against the final primary's ledger: a success is there once, a
// failure is not there (but a plain statement lost after it was sent, which
// may be), ErrCommitUnknown may be either and says why, in the error and
// in Stats; no call fails before its deadline but on a permanent error; the
// first success after the server takes writes again (a probe connecting
// every 50ms) comes within formationLate; and the COMMITs whose answer the
// failover lost are resolved (committed, or proven not and run again): at
// least 99% of them over the run. The table of each kind is logged.
//
// One loss is no client's doing: when pg_auto_failover lets the old primary
// go asynchronous (wait_primary) during the failover, the commits it then
// acknowledges are lost with the promotion. Those are counted apart, and
// only in a round where no resolution answered "committed", so that none of
// resolution's answers hides among them.
func TestFormationResolve(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a pg_auto_failover formation")
	}
	rounds := formationRounds(t)
	f := formation.New(t, &formation.Config{})
	var uri string
	{
		ctx := testCtx(t)
		primary, err := f.Primary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		admin := directConn(t, primary.DSN)
		mustExec(t, ctx, admin, "create table ledger (id text primary key, at timestamptz not null default clock_timestamp())")
		role, _ := testRole(t, ctx, admin, primary.DSN, "writer", "")
		mustExec(t, ctx, admin, "grant all on ledger to "+role)
		u, err := url.Parse(f.URI())
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(role) // the formation trusts local roles
		uri = u.String()
	}
	tallies := make([]resolveTally, len(formationFaults))
	for round := range rounds {
		for i, fault := range formationFaults {
			name := fmt.Sprintf("%s/%d", fault.name, round+1)
			if !t.Run(name, func(t *testing.T) {
				tallies[i].rounds++
				resolveRound(t, f, uri, fmt.Sprintf("r%d-%d-", round, i), i, &tallies[i])
			}) {
				t.Fatalf("%s failed: the formation is in no state for the next failover", name)
			}
		}
	}
	var cut, answered int64
	var table strings.Builder
	table.WriteString("| failover | rounds | calls | committed | unknown (in fact committed) | failed before the deadline | by the deadline | plain, lost after sent | resolved: committed | aborted (lost) | unknown: elsewhere, restarted, unanswered, other | resolved | acknowledged, lost asynchronously (rounds) | gap past the transition, most | first success after the server, latest |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for i, a := range tallies {
		c, ans := a.cut()
		cut, answered = cut+c, answered+ans
		r := a.resolved
		fmt.Fprintf(&table, "| %s | %d | %d | %d | %d (%d) | %d | %d | %d | %d | %d (%d) | %d, %d, %d, %d | %d of %d | %d (%d) | %v | %v |\n",
			formationFaults[i].name, a.rounds, a.calls, a.committed, a.unknown, a.unknownApplied, a.failedEarly, a.byDeadline, a.sentLost,
			r.CommittedCount, r.AbortedCount, r.LostCount, r.ElsewhereCount, r.RestartedCount, r.UnansweredCount,
			r.UnknownCount-r.ElsewhereCount-r.RestartedCount-r.UnansweredCount, ans, c, a.lostAsync, a.lossyRounds,
			a.gapOver.Round(time.Millisecond), a.late.Round(time.Millisecond))
	}
	t.Logf("PGTX_FORMATION_ROUNDS=%d:\n%s", rounds, table.String())
	if answered*100 < cut*99 {
		t.Errorf("%d of %d COMMITs the failovers cut were resolved, want at least 99%%", answered, cut)
	}
}

// resolveRound runs one failover of kind formationFaults[kind] under eight
// writers, checks every answer against the final primary's ledger, and
// adds the round to tally.
func resolveRound(t *testing.T, f *formation.Formation, uri, prefix string, kind int, tally *resolveTally) {
	fault := formationFaults[kind]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary, err := waitSteady(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	waitSyncStandby(t, ctx, primary.DSN)
	pool := newPool(t, uri, func(c *pgtx.Config) {
		c.MaxConns = formationWriters
		c.ConnConfig.ConnectTimeout = 2 * time.Second
		// A resolution rides out an unreachable server up to
		// UnavailableTimeout: on a loaded machine the formation's
		// transition has taken 15.5s, past the default 15s.
		c.Retry.UnavailableTimeout = time.Minute
	})
	probe := startWriteProbe(t, uri)
	stop := make(chan struct{})
	results := make([][]ledgerCall, formationWriters)
	var wg sync.WaitGroup
	for w := range formationWriters {
		wg.Go(func() { results[w] = ledgerWriter(ctx, pool, prefix, w, stop) })
	}
	time.Sleep(formationBefore) // writes before the fault: paces load
	faultAt := time.Now()
	if err := fault.fault(ctx, f); err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("%s: %v", fault.name, err)
	}
	backErr := fault.back(ctx, f, primary)
	if backErr == nil {
		time.Sleep(formationAfter) // writes after: paces load
	}
	close(stop)
	wg.Wait()
	if backErr != nil {
		t.Fatalf("the formation did not come back: %v", backErr)
	}
	lossy := wentAsync(t, ctx, f, primary.Name, faultAt)
	calls := slices.Concat(results...)
	checkResolveRound(t, ctx, f, pool, prefix, calls, lossy, tally)
	timeRound(t, ctx, f, calls, faultAt, probe.Stop(), tally)
	if fault.name == "primary node stopped" {
		// The next round needs the node back, as the secondary.
		if err := f.StartNode(ctx, primary.Name); err != nil {
			t.Fatal(err)
		}
	}
}

// checkResolveRound checks the final primary's ledger (the ids with
// prefix) against the calls, and adds them to tally.
func checkResolveRound(t *testing.T, ctx context.Context, f *formation.Formation, pool *pgtx.Pool, prefix string, calls []ledgerCall, lossy bool, tally *resolveTally) {
	t.Helper()
	primary, err := f.Primary(ctx)
	for deadline := time.Now().Add(time.Minute); err != nil && time.Now().Before(deadline); {
		// Between two states of a transition (wait_primary, say): wait.
		time.Sleep(100 * time.Millisecond)
		primary, err = f.Primary(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	ledger := map[string]int{}
	rows, _ := directConn(t, primary.DSN).Query(ctx, "select id, count(*) from ledger where starts_with(id, $1) group by id", prefix)
	var id string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { ledger[id] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	res := pool.Stats().Resolved
	roundUnknown := 0
	made := map[string]bool{}
	var absent []string
	for _, c := range calls {
		made[c.id] = true
		tally.calls++
		switch {
		case c.err == nil:
			tally.committed++
			switch {
			case ledger[c.id] > 1:
				t.Errorf("WRONG: %s was reported committed (fn ran %d times) and is in the ledger %d times", c.id, c.runs, ledger[c.id])
			case ledger[c.id] == 0:
				absent = append(absent, c.id)
			}
		case errors.Is(c.err, pgtx.ErrCommitUnknown):
			tally.unknown++
			roundUnknown++
			if ledger[c.id] > 0 {
				tally.unknownApplied++
			}
			t.Logf("commit unknown: %s (in the ledger %d times): %v", c.id, ledger[c.id], c.err)
			if !strings.Contains(c.err.Error(), "in flight (") {
				t.Errorf("%s: ErrCommitUnknown without its reason: %v", c.id, c.err)
			}
		case c.plain && pgtx.Classify(c.err) == pgtx.ClassConnectionLost:
			tally.sentLost++
			if ledger[c.id] > 1 {
				t.Errorf("WRONG: %s (a plain statement) is in the ledger %d times", c.id, ledger[c.id])
			}
		default:
			if ledger[c.id] != 0 {
				t.Errorf("WRONG: %s failed but is in the ledger: %v", c.id, c.err)
			}
			switch {
			case pgtx.Classify(c.err) == pgtx.ClassPermanent:
				tally.permanent++
				t.Logf("permanent error: %s: %v", c.id, c.err)
			case c.deadlineHit:
				tally.byDeadline++
			default:
				tally.failedEarly++
				t.Errorf("failed %v before its deadline: %s: %v", c.start.Add(ledgerDeadline).Sub(c.end).Round(time.Millisecond), c.id, c.err)
			}
		}
	}
	for id, n := range ledger {
		if !made[id] || n != 1 {
			t.Errorf("WRONG: the ledger holds %s %d times (made by a call: %v)", id, n, made[id])
		}
	}
	switch {
	case len(absent) == 0:
	case lossy && res.CommittedCount == 0:
		// No answer of resolution said committed: every one of them was
		// acknowledged by the old primary itself, asynchronously.
		tally.lostAsync += len(absent)
		tally.lossyRounds++
		t.Logf("%d commits acknowledged by the old primary in wait_primary (asynchronous) are not on the new primary, from %s to %s",
			len(absent), absent[0], absent[len(absent)-1])
	default:
		t.Errorf("WRONG: %d calls reported committed are not in the ledger (%v; the old primary went asynchronous: %v, resolutions said committed %d times)",
			len(absent), absent[:min(len(absent), 10)], lossy, res.CommittedCount)
	}
	if int64(roundUnknown) != res.UnknownCount {
		t.Errorf("%d calls returned ErrCommitUnknown, Stats().Resolved.UnknownCount = %d", roundUnknown, res.UnknownCount)
	}
	if reasons := res.UnsupportedCount + res.ElsewhereCount + res.RestartedCount + res.ForgottenCount + res.UnansweredCount; reasons != res.UnknownCount {
		t.Errorf("resolutions %+v: the reasons add up to %d, not the %d unknown", res, reasons, res.UnknownCount)
	}
	tally.add(res)
	t.Logf("calls %d, resolutions %+v", len(calls), res)
}

// timeRound adds to tally how far the longest gap between the round's
// successes exceeded the formation's transition, and how long after the
// server took writes again (probes) the first success after it came.
func timeRound(t *testing.T, ctx context.Context, f *formation.Formation, calls []ledgerCall, faultAt time.Time, probes []probeResult, tally *resolveTally) {
	t.Helper()
	var successes []time.Time
	for _, c := range calls {
		if c.err == nil {
			successes = append(successes, c.end)
		}
	}
	slices.SortFunc(successes, func(a, b time.Time) int { return a.Compare(b) })
	var gap time.Duration
	var from, to time.Time
	for i := 1; i < len(successes); i++ {
		if d := successes[i].Sub(successes[i-1]); d > gap {
			gap, from, to = d, successes[i-1], successes[i]
		}
	}
	transition, _ := formationTransition(t, ctx, f, faultAt)
	tally.gapOver = max(tally.gapOver, gap-transition)
	late := time.Duration(0)
	if back, ok := serverBack(probes, from, to); ok {
		late = to.Sub(back)
		tally.late = max(tally.late, late)
	}
	t.Logf("longest gap between successes %v, the formation's transition %v; the first success %v after the server took writes again",
		gap.Round(time.Millisecond), transition.Round(time.Millisecond), late.Round(time.Millisecond))
	if late > formationLate {
		t.Errorf("the first success came %v after the server took writes again, want within %v", late.Round(time.Millisecond), formationLate)
	}
	// A transition longer than a call's deadline fails calls whatever the
	// client does; what is the client's is the gap past the transition.
	if gap >= ledgerDeadline && gap > transition+formationLate {
		t.Errorf("successes stopped for %v, longer than a call's deadline and %v past the formation's transition (%v)",
			gap.Round(time.Millisecond), (gap - transition).Round(time.Millisecond), transition.Round(time.Millisecond))
	}
}

// waitSyncStandby waits until the primary at dsn has a synchronous standby
// streaming: a commit it acknowledges is on its secondary.
func waitSyncStandby(t *testing.T, ctx context.Context, dsn string) {
	t.Helper()
	conn := directConn(t, dsn)
	for deadline := time.Now().Add(time.Minute); ; {
		if queryInt(t, ctx, conn, "select count(*) from pg_stat_replication where sync_state in ('sync', 'quorum')") > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the primary never had a synchronous standby")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// wentAsync reports whether, since the fault, the old primary reported the
// state wait_primary: pg_auto_failover then stops waiting for the
// secondary (synchronous_standby_names is emptied), and a commit the old
// primary acknowledges is lost if the secondary is promoted all the same.
func wentAsync(t *testing.T, ctx context.Context, f *formation.Formation, old string, faultAt time.Time) bool {
	t.Helper()
	events, err := f.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Node == old && e.State == "wait_primary" && !e.Time.Before(faultAt.Add(-formationBefore)) {
			t.Logf("%s reported wait_primary at %v (the fault at %v): %s", old, e.Time.Format("15:04:05.000"), faultAt.Format("15:04:05.000"), e.Description)
			return true
		}
	}
	return false
}
