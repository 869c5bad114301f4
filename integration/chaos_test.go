package integration

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/pgpool"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

var (
	chaosDur  = flag.Duration("chaos.dur", 15*time.Second, "how long each of TestChaosBank's runs injects faults")
	chaosSeed = flag.Uint64("chaos.seed", 0, "seed of TestChaosBank's workload and fault schedule; 0 picks one (it is logged)")
)

// The bank of TestChaosBank.
const (
	chaosAccounts       = 20
	chaosHotAccounts    = 4
	chaosInitialBalance = 1000
	chaosMaxAmount      = 50
	chaosWorkers        = 8
	chaosPoolConns      = 8
	chaosMaxConnections = 40 // the server's, so a burst of connections can fill it
	chaosCallTimeout    = 10 * time.Second
	chaosAfterCalls     = 20 // transfers that must all succeed once the faults stop
	chaosAppName        = "pgtx-chaos"
)

// errChaosInsufficientFunds is fn's own error: the transfer is declined.
var errChaosInsufficientFunds = errors.New("insufficient funds")

// chaosOutcome is what a Transaction call reported.
type chaosOutcome int

const (
	chaosCommitted chaosOutcome = iota // nil: the transfer must be in the ledger once
	chaosUnknown                       // ErrCommitUnknown: in the ledger at most once
	chaosDeclined                      // fn's own error: not in the ledger
	chaosFailed                        // any other error: not in the ledger
)

// chaosCall is one transfer, as asked for and as reported.
type chaosCall struct {
	id       string
	api      string // the API that ran it: chaosAPI.name
	from, to int32
	amount   int64
	outcome  chaosOutcome
	err      error
	runs     int           // how many times fn ran
	took     time.Duration // the call's wall time
}

// TestChaosBank is the "nothing lost under faults" test. Eight workers move
// money between twenty accounts through pgtx.Transaction, each transfer
// recording its unique id in a ledger in the same transaction, while a fault
// goroutine cuts connections before BEGIN, before and after an UPDATE, before
// COMMIT, after COMMIT is forwarded and instead of COMMIT's answer, adds
// latency, refuses new connections, terminates backends, fills the server's
// connection slots, restarts the server once and crashes it twice (an
// immediate shutdown and a start: crash recovery gives again the ids of
// transactions whose records never reached the WAL). Failed calls are recorded,
// never retried by the test. Afterwards the ledger and the balances must
// agree with what every call reported: total unchanged, every success in the
// ledger once, every ambiguous COMMIT at most once, every other failure
// absent, and every account's balance explained by the ledger. It runs with
// the resolution of ambiguous COMMITs off (ResolveTimeout -1) and on, on
// four hot accounts where the contention manager limits the transfers, and
// behind Pgpool-II (load balancing over the server and a standby of it);
// with the resolution on, no resolution may be wrong.
//
// In the same runs, four more workers make the same transfers through
// database/sql (chaos_sql_test.go): pgtxsql.Transaction, pgtxsqlx's and
// pgtxgorm's, on *sql.DBs over the same pool, checked by the same audit.
//
// -chaos.dur sets the length of each run, -chaos.seed the seed.
func TestChaosBank(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos runs take -chaos.dur each")
	}
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-chaos.seed=%d repeats the workload and the order of the faults, not their timing); %v of faults per run",
		seed, seed, *chaosDur)
	tests := []struct {
		name string
		bank chaosBank
	}{
		{"ResolutionOff", chaosBank{accounts: chaosAccounts}},
		{"ResolutionOn", chaosBank{resolve: true, accounts: chaosAccounts}},
		// Hot rows: every worker SERIALIZABLE on four accounts, so that the
		// contention manager limits the transfers while the faults hit.
		{"HotRowsContentionManager", chaosBank{resolve: true, accounts: chaosHotAccounts, hot: true}},
		// Behind Pgpool-II, load-balancing over the server and a standby of
		// it, with the settings docs/poolers.md asks for: the proxy sits
		// between the pool and Pgpool-II.
		{"Pgpool", chaosBank{resolve: true, accounts: chaosAccounts, pgpool: true}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dur := *chaosDur
			if tt.bank.pgpool {
				// The faults are the other runs': half the time proves the
				// path through Pgpool-II, and keeps CI within its minutes.
				dur /= 2
			}
			runChaosBank(t, tt.bank, seed+uint64(i), dur)
		})
	}
}

// chaosBank is the shape of one run of TestChaosBank.
type chaosBank struct {
	resolve  bool  // resolve ambiguous COMMITs
	accounts int32 // how many accounts
	// hot makes every worker SERIALIZABLE (not only the even ones), and
	// requires the contention manager to have limited the transfers.
	hot bool
	// pgpool puts a Pgpool-II in front of the server and a standby of it,
	// between the proxy and the server.
	pgpool bool
}

// runChaosBank is one run of TestChaosBank on a server of its own.
func runChaosBank(t *testing.T, bank chaosBank, seed uint64, dur time.Duration) {
	resolve := bank.resolve
	// Every wait of the run is bounded by ctx: the faults, the calls in
	// flight when they stop (each has its own deadline), the checks.
	ctx, cancel := context.WithTimeout(context.Background(), dur+3*time.Minute)
	defer cancel()

	srv := server.New(t, &server.Config{Settings: map[string]string{
		"max_connections": strconv.Itoa(chaosMaxConnections),
		// A COMMIT acknowledged is on disk (the harness turns that off for
		// speed): a crash must not take back what the server said it did.
		"synchronous_commit": "on",
	}})
	direct := pgtxtest.NewDatabase(t, pgtxtest.WithServer(srv))
	setupChaosBank(t, ctx, direct, bank.accounts)
	setupChaosAudit(t, ctx, direct)
	upstream := srv.Addr()
	if bank.pgpool {
		upstream = chaosPgpool(t, srv)
	}
	proxy, through := proxyTo(t, upstream, direct)
	pool := newPool(t, through, func(c *pgtx.Config) {
		c.MaxConns = chaosPoolConns
		c.ConnConfig.RuntimeParams["application_name"] = chaosAppName // what the injector terminates
		c.ConnConfig.ConnectTimeout = 3 * time.Second
		c.AcquireTimeout = 3 * time.Second
		if !resolve {
			c.ResolveTimeout = -1
		}
		// A lost connection is retried after at most 100ms; the proxy
		// refuses connections, and the server restarts, for up to about a
		// second.
		c.Retry.MaxRetries = 20
		// Overload (53300 from a full server) backs off 100ms·2^n: eight
		// retries span seconds. A server starting up (57P03) or refusing
		// is ridden out until the deadline.
		c.Retry.MaxAdaptiveRetries = 8
	})

	proxyBefore := proxy.Stats()
	start := time.Now()
	// The injector ends the run once dur has passed and every restart it
	// owes is done: on a slow machine a restart can push the last crash
	// past dur.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	in := newChaosInjector(t, srv, proxy, direct, seed)
	// chaosWorkers workers on pgx's API, then one on each API of the
	// database/sql variant (chaos_sql_test.go), all on the same pool.
	pgxAPI := chaosPgxAPI(pool)
	sqlAPIs := chaosSQLAPIs(t, pool)
	var workerAPIs []chaosAPI
	for _, api := range append([]chaosAPI{pgxAPI}, sqlAPIs...) {
		workerAPIs = append(workerAPIs, slices.Repeat([]chaosAPI{api}, api.workers)...)
	}
	results := make([][]chaosCall, len(workerAPIs))
	var wg sync.WaitGroup
	wg.Go(func() { in.run(ctx, runCtx, dur, stop) })
	for w, api := range workerAPIs {
		wg.Go(func() { results[w] = chaosWorker(ctx, runCtx, api, w, seed, bank) })
	}
	var plain []plainCall
	wg.Go(func() { plain = chaosPlainWorker(ctx, runCtx, pool) })
	joined := make(chan struct{})
	go func() {
		wg.Wait()
		close(joined)
	}()
	// A call lasts at most its deadline plus COMMIT's, the resolution's and
	// ROLLBACK's own bounds: a minute after the run is far beyond that.
	overdue := time.NewTimer(dur + time.Minute)
	defer overdue.Stop()
	select {
	case <-joined:
	case <-overdue.C:
		t.Fatalf("the workers or the fault injector had not returned a minute after the run ended")
	}
	elapsed := time.Since(start)
	proxyAfter := proxy.Stats()

	// The faults have stopped (the injector reset the proxy): the pool must
	// serve normally. A transfer from an account the run has emptied is
	// declined, which is serving too.
	var calls []chaosCall
	for _, r := range results {
		calls = append(calls, r...)
	}
	during := len(calls)
	after := func(api chaosAPI, prefix string, n int) {
		for i := range n {
			from, to := int32(i)%bank.accounts+1, int32(i+1)%bank.accounts+1
			c := chaosTransfer(ctx, api, pgtx.Serializable, fmt.Sprintf("%s-%d", prefix, i), from, to, 1)
			if c.outcome != chaosCommitted && c.outcome != chaosDeclined {
				t.Errorf("after the faults, transfer %s (%s) failed (fn ran %d times): %v", c.id, c.api, c.runs, c.err)
			}
			calls = append(calls, c)
		}
	}
	after(pgxAPI, "after", chaosAfterCalls)
	for _, api := range sqlAPIs {
		after(api, "after-"+api.name, chaosSQLAfterCalls)
	}
	checkChaosSQLDBs(t, sqlAPIs)

	tally := verifyChaosBank(t, direct, calls, bank.accounts)
	plainOK, plainFailed := verifyChaosAudit(t, direct, plain)
	res := pool.Stats().Resolved

	// What happened, for the log.
	t.Logf("run: %v of faults, %v in all; %d calls (%.0f/s) during the faults, %d after; fn ran %d times, %d calls ran it more than once",
		dur, elapsed.Round(time.Millisecond), during, float64(during)/elapsed.Seconds(), len(calls)-during, tally.runs, tally.rerun)
	t.Logf("faults injected: %s", chaosCounts(in.injected))
	if len(in.skipped) > 0 {
		t.Logf("faults skipped (nothing to act on, or the admin connection failed): %s", chaosCounts(in.skipped))
	}
	t.Logf("proxy: %d cut before forwarding, %d cut after forwarding, %d COMMIT answers dropped, %d cut by CutAll, %d connections refused",
		proxyAfter.CutsBeforeForward-proxyBefore.CutsBeforeForward, proxyAfter.CutsAfterForward-proxyBefore.CutsAfterForward,
		proxyAfter.CutsOnCommitReply-proxyBefore.CutsOnCommitReply, proxyAfter.CutsAll-proxyBefore.CutsAll,
		proxyAfter.Refused-proxyBefore.Refused)
	t.Logf("server full: %d times filled to 53300 (%d direct connections opened); restart took %v; crash restarts took %v",
		in.full, in.hogs, in.restart.Round(time.Millisecond), in.crashes)
	t.Logf("outcomes: %s; plain statements: %d succeeded, %d failed (none on an unreachable server)", chaosCounts(tally.outcomes), plainOK, plainFailed)
	for _, kind := range slices.Sorted(maps.Keys(tally.samples)) {
		t.Logf("  e.g. %s: %v", kind, tally.samples[kind])
	}
	t.Logf("call latency: p50 %v, p99 %v, max %v", tally.quantile(0.5).Round(time.Microsecond),
		tally.quantile(0.99).Round(time.Microsecond), tally.quantile(1).Round(time.Microsecond))
	logChaosAPIs(t, tally)
	t.Logf("ambiguous COMMITs reported: %d (%d in the ledger, %d not)", tally.unknownApplied+tally.unknownAbsent,
		tally.unknownApplied, tally.unknownAbsent)
	if tally.unknownSafe > 0 {
		t.Logf("  pgconn.SafeToRetry calls %d of the %d in the ledger safe to retry: pgtx is right not to trust it at COMMIT",
			tally.unknownSafe, tally.unknownApplied)
	}
	for _, err := range tally.unknownSamples {
		t.Logf("  e.g. %s", strings.ReplaceAll(err.Error(), "\n", " | "))
	}

	if resolve {
		resolved := res.CommittedCount + res.AbortedCount + res.NotAppliedCount
		share := 0.0
		if n := resolved + res.UnknownCount; n > 0 {
			share = 100 * float64(resolved) / float64(n)
		}
		t.Logf("resolutions: committed %d, aborted %d (lost with a crash %d), not applied %d, unknown %d (restarted %d, elsewhere %d, forgotten %d, unanswered %d): %d of %d ambiguous COMMITs resolved (%.0f%%); wrong resolutions %d",
			res.CommittedCount, res.AbortedCount, res.LostCount, res.NotAppliedCount, res.UnknownCount, res.RestartedCount,
			res.ElsewhereCount, res.ForgottenCount, res.UnansweredCount, resolved, resolved+res.UnknownCount, share, tally.wrong)
		if got := int64(tally.unknownApplied + tally.unknownAbsent); got != res.UnknownCount {
			t.Errorf("%d calls returned ErrCommitUnknown, Stats().Resolved.UnknownCount = %d: every unresolved COMMIT, and only those, must end its call with ErrCommitUnknown",
				got, res.UnknownCount)
		}
		if res.NotAppliedCount != 0 {
			t.Errorf("Stats().Resolved.NotAppliedCount = %d: no transfer begins on a standby", res.NotAppliedCount)
		}
		// At least 99% resolved; one unknown is tolerated in a run too
		// short to have a hundred ambiguous COMMITs.
		if total := resolved + res.UnknownCount; res.UnknownCount > max(1, total/100) {
			t.Errorf("%d of %d ambiguous COMMITs unresolved: at least 99%% must be resolved", res.UnknownCount, total)
		}
	} else {
		t.Logf("wrong outcomes (lost or phantom transfers): %d", tally.wrong)
		if res != (pgtx.ResolveStats{}) {
			t.Errorf("Stats().Resolved = %+v with the resolution off, want zeros", res)
		}
	}

	// The contention manager: on hot rows it must have limited the
	// transfers while the faults hit, or the run proves nothing about it.
	for _, c := range pool.Stats().Contention {
		if c.Label != "transfer" {
			continue
		}
		t.Logf("contention manager: %d attempts, %d conflicts, %d commits; %d admissions while limiting (wait p99 %v, max %v); limiting %v, limit %d at the end",
			c.AttemptCount, c.ConflictCount, c.CommitCount, c.Wait.Count, c.Wait.Quantile(0.99), c.Wait.Max, c.Limiting, c.Limit)
		if bank.hot && c.Wait.Count == 0 {
			t.Errorf("the contention manager never limited the hot transfers (%d attempts, %d conflicts)", c.AttemptCount, c.ConflictCount)
		}
		if c.Running != 0 || c.Waiting != 0 {
			t.Errorf("after every call returned, the gate shows %d running and %d waiting", c.Running, c.Waiting)
		}
	}

	// A run that injected nothing, or committed nothing, proves nothing.
	if plainOK == 0 {
		t.Errorf("no plain statement succeeded (%d failed)", plainFailed)
	}
	if len(in.injected) == 0 || tally.outcomes["committed"] == 0 {
		t.Errorf("the run injected %d kinds of fault and committed %d transfers: it proves nothing",
			len(in.injected), tally.outcomes["committed"])
	}
	checkChaosAPIs(t, calls[:during], sqlAPIs, dur)
	if dur >= 5*time.Second && (in.injected["server restart"] != 1 || in.injected["crash restart"] != 2) {
		t.Errorf("the server restarted %d times and crashed %d times, want once and twice",
			in.injected["server restart"], in.injected["crash restart"])
	}
}

// chaosPgpool starts a standby of srv (a copy of it, the bank's tables
// made) and a Pgpool-II in front of both, with the settings
// docs/poolers.md asks for and a child for each of the pool's connections
// and its cancel pool's, and returns its address.
func chaosPgpool(t *testing.T, srv *server.Server) string {
	t.Helper()
	standby := server.NewStandby(t, srv)
	p := pgpool.New(t, srv, []*server.Server{standby}, &pgpool.Config{
		NumInitChildren: 2 * (chaosPoolConns + cancelPoolSize),
		Extra:           map[string]string{"failover_on_backend_error": "off", "failover_on_backend_shutdown": "off"},
	})
	return p.Addr()
}

// setupChaosBank creates the accounts, each with chaosInitialBalance, and the
// empty ledger.
func setupChaosBank(t *testing.T, ctx context.Context, dsn string, accounts int32) {
	t.Helper()
	conn := directConn(t, dsn)
	mustExec(t, ctx, conn, "create table accounts (id int primary key, balance bigint not null)")
	mustExec(t, ctx, conn, `create table ledger (
		transfer_id text primary key,
		src int not null references accounts,
		dst int not null references accounts,
		amount bigint not null check (amount > 0))`)
	mustExec(t, ctx, conn, "insert into accounts select i, $1 from generate_series(1, $2::int) i", chaosInitialBalance, accounts)
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// chaosAPI runs transfers through one API's Transaction.
type chaosAPI struct {
	name    string
	workers int // how many workers of a run use it
	// transfer runs c's transfer in one Transaction call with iso, counting
	// fn's runs in c.runs, and returns the call's error.
	transfer func(ctx context.Context, iso pgtx.Isolation, c *chaosCall) error
	db       *sql.DB // the API's *sql.DB; nil for pgx's
}

// chaosWorker makes transfers between random accounts through api until
// runCtx ends, each call with its own deadline under ctx (so the last call
// finishes rather than being cut short), and returns every call's outcome.
// Even workers use SERIALIZABLE, odd ones READ COMMITTED, unless the bank is
// hot: then all of them use SERIALIZABLE.
func chaosWorker(ctx, runCtx context.Context, api chaosAPI, w int, seed uint64, bank chaosBank) []chaosCall {
	rng := rand.New(rand.NewPCG(seed, uint64(w)+1))
	iso := pgtx.ReadCommitted
	if w%2 == 0 || bank.hot {
		iso = pgtx.Serializable
	}
	var calls []chaosCall
	for n := 0; runCtx.Err() == nil; n++ {
		from := rng.Int32N(bank.accounts) + 1
		to := rng.Int32N(bank.accounts-1) + 1
		if to >= from {
			to++
		}
		calls = append(calls, chaosTransfer(ctx, api, iso, fmt.Sprintf("w%d-%d", w, n), from, to, 1+rng.Int64N(chaosMaxAmount)))
	}
	return calls
}

// chaosTransfer moves amount from one account to another in one
// Transaction call of api and records the transfer in the ledger under id,
// within chaosCallTimeout.
func chaosTransfer(ctx context.Context, api chaosAPI, iso pgtx.Isolation, id string, from, to int32, amount int64) chaosCall {
	c := chaosCall{id: id, api: api.name, from: from, to: to, amount: amount}
	cctx, cancel := context.WithTimeout(ctx, chaosCallTimeout)
	defer cancel()
	start := time.Now()
	c.err = api.transfer(cctx, iso, &c)
	c.took = time.Since(start)
	switch {
	case c.err == nil:
		c.outcome = chaosCommitted
	case errors.Is(c.err, pgtx.ErrCommitUnknown):
		c.outcome = chaosUnknown
	case errors.Is(c.err, errChaosInsufficientFunds):
		c.outcome = chaosDeclined
	default:
		c.outcome = chaosFailed
	}
	return c
}

// chaosPgxAPI runs transfers through pgtx.Transaction on pool. Both rows
// are locked in id order, so READ COMMITTED transfers cannot deadlock; a
// transfer the balance does not cover is declined with fn's own error.
func chaosPgxAPI(pool *pgtx.Pool) chaosAPI {
	return chaosAPI{name: "pgx", workers: chaosWorkers, transfer: func(ctx context.Context, iso pgtx.Isolation, c *chaosCall) error {
		from, to, amount, id := c.from, c.to, c.amount, c.id
		return pgtx.TransactionWithOptions(ctx, pool, iso, pgtx.Options{Label: "transfer"}, func(ctx context.Context, tx pgx.Tx) error {
			c.runs++
			rows, _ := tx.Query(ctx, "select id, balance from accounts where id = any($1) order by id for update", []int32{from, to})
			var (
				acct    int32
				balance int64
				covered bool
			)
			if _, err := pgx.ForEachRow(rows, []any{&acct, &balance}, func() error {
				if acct == from {
					covered = balance >= amount
				}
				return nil
			}); err != nil {
				return err
			}
			if !covered {
				return errChaosInsufficientFunds
			}
			if _, err := tx.Exec(ctx, "update accounts set balance = balance - $2 where id = $1", from, amount); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "update accounts set balance = balance + $2 where id = $1", to, amount); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "insert into ledger (transfer_id, src, dst, amount) values ($1, $2, $3, $4)", id, from, to, amount)
			return err
		})
	}}
}

// chaosTally is what the checks counted.
type chaosTally struct {
	outcomes       map[string]int   // calls by outcome (failures by kind)
	runs, rerun    int              // fn runs in all; calls that ran fn more than once
	unknownApplied int              // ErrCommitUnknown calls whose transfer is in the ledger
	unknownAbsent  int              // ErrCommitUnknown calls whose transfer is not
	wrong          int              // lost or phantom transfers: must be 0
	samples        map[string]error // the first error of each failure kind
	unknownSamples []error          // the first few ErrCommitUnknown errors
	// unknownSafe counts ErrCommitUnknown calls in the ledger whose error
	// pgconn.SafeToRetry calls safe to retry: a retry loop trusting it would
	// have applied them twice.
	unknownSafe int
	took        []time.Duration // every call's wall time, sorted
	// apis counts the calls of each API (chaosCall.api), by outcome as
	// outcomes does, and "rerun" for calls that ran fn more than once.
	apis map[string]map[string]int
}

// verifyChaosBank checks the server's ledger and balances, read over a
// direct connection, against every call's outcome, and fails t for each
// disagreement.
func verifyChaosBank(t *testing.T, dsn string, calls []chaosCall, accounts int32) chaosTally {
	t.Helper()
	ctx := testCtx(t)
	conn := directConn(t, dsn)

	type entry struct {
		from, to int32
		amount   int64
	}
	ledger := make(map[string]entry)
	var (
		id string
		e  entry
	)
	rows, _ := conn.Query(ctx, "select transfer_id, src, dst, amount from ledger")
	if _, err := pgx.ForEachRow(rows, []any{&id, &e.from, &e.to, &e.amount}, func() error {
		ledger[id] = e
		return nil
	}); err != nil {
		t.Fatalf("read the ledger: %v", err)
	}
	balances := make(map[int32]int64)
	var (
		acct    int32
		balance int64
	)
	rows, _ = conn.Query(ctx, "select id, balance from accounts")
	if _, err := pgx.ForEachRow(rows, []any{&acct, &balance}, func() error {
		balances[acct] = balance
		return nil
	}); err != nil {
		t.Fatalf("read the balances: %v", err)
	}

	// Money is neither made nor lost, and every account's balance is its
	// initial balance moved by exactly the ledger's transfers: each ledger
	// row was applied once, with its balance change, and nothing else was.
	var total int64
	for _, b := range balances {
		total += b
	}
	if want := int64(accounts) * chaosInitialBalance; total != want || len(balances) != int(accounts) {
		t.Errorf("total balance %d over %d accounts, want %d over %d", total, len(balances), want, accounts)
	}
	want := make(map[int32]int64, accounts)
	for i := range accounts {
		want[i+1] = chaosInitialBalance
	}
	for _, e := range ledger {
		want[e.from] -= e.amount
		want[e.to] += e.amount
	}
	for a, b := range balances {
		if b != want[a] {
			t.Errorf("account %d holds %d; the ledger says %d", a, b, want[a])
		}
	}

	// Every call's report agrees with the ledger.
	tally := chaosTally{outcomes: make(map[string]int), samples: make(map[string]error), apis: make(map[string]map[string]int)}
	made := make(map[string]bool, len(calls))
	for _, c := range calls {
		if made[c.id] {
			t.Fatalf("transfer id %s used twice: the test is broken", c.id)
		}
		made[c.id] = true
		tally.runs += c.runs
		tally.took = append(tally.took, c.took)
		if tally.apis[c.api] == nil {
			tally.apis[c.api] = make(map[string]int)
		}
		api := tally.apis[c.api]
		api["calls"]++
		if c.runs > 1 {
			tally.rerun++
			api["rerun"]++
		}
		e, present := ledger[c.id]
		if present && e != (entry{c.from, c.to, c.amount}) {
			t.Errorf("ledger row %s is %+v, but the call asked for %d → %d, %d", c.id, e, c.from, c.to, c.amount)
		}
		switch c.outcome {
		case chaosCommitted:
			tally.outcomes["committed"]++
			api["committed"]++
			if !present {
				tally.wrong++
				t.Errorf("LOST: transfer %s (%s) was reported committed (fn ran %d times) but is not in the ledger", c.id, c.api, c.runs)
			}
		case chaosUnknown:
			tally.outcomes["commit unknown"]++
			api["commit unknown"]++
			if len(tally.unknownSamples) < 4 {
				tally.unknownSamples = append(tally.unknownSamples, c.err)
			}
			if present {
				tally.unknownApplied++
				api["commit unknown (applied)"]++
				if pgconn.SafeToRetry(c.err) {
					tally.unknownSafe++
				}
			} else {
				tally.unknownAbsent++
			}
		case chaosDeclined:
			tally.outcomes["insufficient funds"]++
			api["insufficient funds"]++
			if present {
				tally.wrong++
				t.Errorf("PHANTOM: transfer %s (%s) was declined but is in the ledger", c.id, c.api)
			}
		case chaosFailed:
			kind := chaosFailureKind(c.err)
			tally.outcomes["failed: "+kind]++
			api["failed"]++
			if tally.samples[kind] == nil {
				tally.samples[kind] = c.err
			}
			if present {
				tally.wrong++
				hint := ""
				if sqlState(c.err) == "23505" {
					hint = " (23505: fn ran again after a COMMIT that had applied)"
				}
				t.Errorf("PHANTOM: transfer %s (%s) failed (%s, fn ran %d times) but is in the ledger%s: %v", c.id, c.api, kind, c.runs, hint, c.err)
			}
		}
	}
	for id := range ledger {
		if !made[id] {
			t.Errorf("the ledger holds %s, which no call made", id)
		}
	}
	slices.Sort(tally.took)
	return tally
}

// quantile returns the q-quantile of the sorted durations ds, 0 when empty.
func (t chaosTally) quantile(q float64) time.Duration {
	if len(t.took) == 0 {
		return 0
	}
	return t.took[min(len(t.took)-1, int(q*float64(len(t.took))))]
}

// chaosFailureKind names a failed call's error for the counts: its class
// and SQLSTATE, and whether the retry budget, the acquire timeout or the
// call's deadline ended it.
func chaosFailureKind(err error) string {
	kind := pgtx.Classify(err).String()
	switch {
	case errors.Is(err, pgtx.ErrRetryBudgetExhausted):
		kind = "retry budget exhausted after " + kind
	case errors.Is(err, pgtx.ErrAcquireTimeout):
		kind = "acquire timeout"
	case errors.Is(err, context.DeadlineExceeded):
		kind = "call deadline"
	}
	if code := sqlState(err); code != "" {
		kind += " " + code
	}
	return kind
}

// chaosCounts formats counts as "name n, name n" in name order.
func chaosCounts(m map[string]int) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	return b.String()
}
