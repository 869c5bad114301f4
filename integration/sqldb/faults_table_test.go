package sqldb

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/bouncer"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// Bounds of the fault table's tests.
const (
	// lockDeadline is the deadline of a transaction that sleeps on the
	// server holding a row lock, sleepSQL its sleep: long enough that a
	// statement left running shows, short enough to end the test soon.
	lockDeadline = 400 * time.Millisecond
	sleepSQL     = "select pg_sleep(3)"
	// lockRounds is how many times pgtx's modules meet the deadline at
	// least; up to maxLockRounds while none released the lock within
	// releaseBound (a loaded machine delays this process's ROLLBACK).
	lockRounds, maxLockRounds = 4, 10
	// releaseBound is how soon after the deadline the issue wants the lock
	// released, on the server's clock.
	releaseBound = 10 * time.Millisecond
	// outageFor is how long the server refuses connections.
	outageFor = 1500 * time.Millisecond
)

// faults are the faults, each run against every way.
var faults = []struct {
	name string
	run  func(t *testing.T, c cell, w way)
	// serial runs the ways one after the other: what is measured is the
	// way's, not the machine's other work.
	serial bool
}{
	{"40001 at COMMIT", faultCommitConflict, false},
	{"lost COMMIT answer", faultLostCommit, false},
	{"deadline in pg_sleep, row lock held", faultDeadline, true},
	{"connections refused", faultRefused, false},
	{"PgBouncer, transaction mode", faultBouncer, false},
}

// TestFaultTable runs the faults against the own ways of
// database/sql (a hand-written retry loop), sqlx (the same loop) and GORM
// (db.Transaction), and against pgtx's modules for them, on real
// PostgreSQL through the fault kit. Each way's outcome is asserted: the
// own ways' failures as observed, pgtx's modules correct. The table is
// logged at the end.
func TestFaultTable(t *testing.T) {
	ft := &faultTable{}
	t.Cleanup(func() { t.Log("fault table:\n" + ft.String()) })
	for fi, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			for wi, w := range ways {
				t.Run(w.String(), func(t *testing.T) {
					if !f.serial {
						t.Parallel()
					}
					f.run(t, cell{ft, fi, wi, f.name}, w)
				})
			}
		})
	}
}

// faultCommitConflict: the database's first COMMIT of a transfer fails with
// 40001, raised by the server at COMMIT by a deferred constraint trigger.
// The hand-written loops and pgtx's modules run the transfer again and it
// applies once; GORM's Transaction runs fn once and the transfer is lost.
func faultCommitConflict(t *testing.T, c cell, w way) {
	dsn := pgtxtest.NewDatabase(t, bankSchema)
	admin := directConn(t, dsn)
	mustExec(t, admin, failFirstCommitSQL)
	r := w.open(t, dsn, openOpts{})
	runs := 0
	err := r.tx(testCtx(t), transfer("t-1", 10, &runs))
	rows, bal := ledger(t, admin, "t-1")
	switch {
	case w.pgtx || w.lib != "GORM":
		if err != nil || runs != 2 || rows != 1 || bal != 990 {
			t.Errorf("err %v, fn ran %d times, ledger rows %d, balance %d: want nil, 2, 1, 990", err, runs, rows, bal)
		}
		c.add(t, 0, w.String(), fmt.Sprintf("ok: fn ran %d times, applied once", runs))
	default:
		if sqlState(err) != "40001" || runs != 1 || rows != 0 || bal != 1000 {
			t.Errorf("err %v, fn ran %d times, ledger rows %d, balance %d: want 40001, 1, 0, 1000 (GORM runs fn once)", err, runs, rows, bal)
		}
		c.add(t, 0, w.String(), fmt.Sprintf("lost: fn ran %d time, error %s returned, balance unchanged", runs, sqlState(err)))
	}
}

// proxied returns a fresh database's DSN and a fault proxy's DSN for it.
func proxied(t *testing.T) (direct string, proxy *faultproxy.Proxy, through string) {
	t.Helper()
	direct = pgtxtest.NewDatabase(t, bankSchema)
	proxy = faultproxy.New(t, server.Shared(t).Addr())
	through, err := proxy.DSN(direct)
	if err != nil {
		t.Fatal(err)
	}
	return direct, proxy, through
}

// faultLostCommit: the COMMIT of a transfer is applied, and its answer
// dropped with the connection. The hand-written loop returns an error for
// a transfer it made; if it also retries a broken connection, it makes the
// transfer twice; GORM returns an error for a transfer it made; pgtx's
// modules resolve the COMMIT: nil, and one transfer.
func faultLostCommit(t *testing.T, c cell, w way) {
	direct, proxy, through := proxied(t)
	admin := directConn(t, direct)
	r := w.open(t, through, openOpts{})
	variants := []bool{false}
	if !w.pgtx && w.lib != "GORM" {
		variants = append(variants, true)
	}
	var balance int64 = 1000
	for sub, retryBroken := range variants {
		r.retryBroken = retryBroken
		name := w.String()
		if retryBroken {
			name += " (also retries a broken connection, pgconn.SafeToRetry)"
		}
		id := fmt.Sprintf("t-%d", sub)
		cuts := proxy.Stats().CutsOnCommitReply
		proxy.CutOnCommitReply(1)
		runs := 0
		err := r.tx(testCtx(t), transfer(id, 10, &runs))
		if n := proxy.Stats().CutsOnCommitReply - cuts; n != 1 {
			t.Fatalf("%s: the proxy dropped %d COMMIT answers, want 1 (err %v)", name, n, err)
		}
		rows, bal := ledger(t, admin, id)
		outcome := ""
		switch {
		case w.pgtx:
			if err != nil || runs != 1 || rows != 1 || bal != balance-10 {
				t.Errorf("err %v, fn ran %d times, ledger rows %d, balance %d: want nil, 1, 1, %d", err, runs, rows, bal, balance-10)
			}
			outcome = fmt.Sprintf("ok: COMMIT resolved, nil returned, applied once (resolved %d)", r.pool.Stats().Resolved.CommittedCount)
		case retryBroken:
			if err != nil || runs != 2 || rows != 2 || bal != balance-20 {
				t.Errorf("err %v, fn ran %d times, ledger rows %d, balance %d: want the transfer doubled: nil, 2, 2, %d", err, runs, rows, bal, balance-20)
			}
			outcome = fmt.Sprintf("doubled: fn ran %d times, nil returned, %d ledger rows, %d moved", runs, rows, balance-bal)
		default:
			if err == nil || runs != 1 || rows != 1 || bal != balance-10 {
				t.Errorf("err %v, fn ran %d times, ledger rows %d, balance %d: want an error for a transfer applied once", err, runs, rows, bal)
			}
			outcome = fmt.Sprintf("false failure: error %q returned (pgconn.SafeToRetry: %v), yet the transfer committed", shortErr(err), pgconn.SafeToRetry(err))
		}
		balance = bal
		c.add(t, sub, name, outcome)
	}
}

// shortErr is err's message without pgx's wrapping of the connection's
// addresses.
func shortErr(err error) string {
	if err == nil {
		return "nil"
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}

// lockRound runs, in a transaction of r under a deadline of lockDeadline, a
// function that locks the hot row and sleeps on the server, while waiter,
// a session of its own, waits for the row. It returns the holder's backend
// pid, how long after the deadline the waiter got the row on the server's
// clock (offset is the server's clock minus ours), whether that measure is
// valid (not when the waiter began waiting only after the deadline, on a
// stalled machine), and the transaction's error.
func lockRound(t *testing.T, r *runner, waiter *pgx.Conn, offset time.Duration) (pid int64, release time.Duration, valid bool, err error) {
	t.Helper()
	locked, gone := make(chan struct{}), make(chan struct{})
	type got struct{ began, at time.Time }
	waited := make(chan got, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-locked:
		case <-gone:
			return
		}
		var g got
		if err := waiter.QueryRow(testCtx(t), "update hot set n = n + 1 where id = 1 returning statement_timestamp(), clock_timestamp()").Scan(&g.began, &g.at); err != nil {
			t.Errorf("waiter: %v", err)
		}
		waited <- g
	})
	defer wg.Wait()
	ctx, cancel := context.WithTimeout(testCtx(t), lockDeadline)
	defer cancel()
	deadline, _ := ctx.Deadline()
	err = r.tx(ctx, func(_ context.Context, s stmts) error {
		var err error
		if pid, err = s.scalar("select pg_backend_pid()"); err != nil {
			return err
		}
		if err := s.exec("select n from hot where id = 1 for update"); err != nil {
			return err
		}
		close(locked)
		return s.exec(sleepSQL)
	})
	select {
	case <-locked:
	default:
		close(gone)
		t.Fatalf("the row was never locked: %v", err)
	}
	g := <-waited
	onServer := deadline.Add(offset)
	return pid, g.at.Sub(onServer), g.began.Before(onServer), err
}

// backendPid runs a transaction of r that sleeps on the server a little
// (where a late cancel would land) and returns its backend's pid.
func backendPid(t *testing.T, r *runner) (int64, error) {
	t.Helper()
	var pid int64
	err := r.tx(testCtx(t), func(_ context.Context, s stmts) error {
		var err error
		if pid, err = s.scalar("select pg_backend_pid()"); err != nil {
			return err
		}
		return s.exec("select pg_sleep(0.05)")
	})
	return pid, err
}

// faultDeadline: a transaction locks a row and sleeps on the server past
// its deadline, while another session waits for the row. pgtx's modules
// release the lock at the deadline (on the server's clock), return
// DeadlineExceeded, keep the connection (the same backend serves the next
// transaction, no new connection), and the next transaction, run at once
// on that connection, is not hit by a late cancel. The own ways return
// the error too, but database/sql closes the connection.
func faultDeadline(t *testing.T, c cell, w way) {
	dsn := pgtxtest.NewDatabase(t, bankSchema)
	waiter := directConn(t, dsn)
	offset := serverOffset(t, waiter)
	r := w.open(t, dsn, openOpts{mutate: func(c *pgtx.Config) { c.MaxConns = 1 }})
	r.db.SetMaxOpenConns(1)
	pid0, err := backendPid(t, r)
	if err != nil {
		t.Fatal(err)
	}
	rounds := 1
	if w.pgtx {
		rounds = lockRounds
	}
	var releases []time.Duration
	pids := []int64{pid0}
	noneWithin := func() bool { return w.pgtx && slices.Min(releases) > releaseBound }
	for try := 0; (len(releases) < rounds || len(releases) < maxLockRounds && noneWithin()) && try < 3*maxLockRounds; try++ {
		holder, release, valid, err := lockRound(t, r, waiter, offset)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		next, nerr := backendPid(t, r)
		if nerr != nil {
			t.Errorf("the next transaction: %v", nerr)
		}
		pids = append(pids, holder, next)
		if valid {
			releases = append(releases, release)
		} else {
			t.Logf("the waiter came after the deadline: round not counted")
		}
	}
	if len(releases) == 0 {
		t.Fatal("the waiter came after the deadline in every round")
	}
	slices.Sort(releases)
	median := releases[len(releases)/2]
	var outcome string
	if w.pgtx {
		s := r.pool.Stats()
		for _, p := range pids {
			if p != pid0 {
				t.Errorf("backends %v: want %d throughout: the cancel keeps the connection", pids, pid0)
				break
			}
		}
		if n := s.Pool.NewConnsCount(); n != 1 {
			t.Errorf("new connections = %d, want 1", n)
		}
		// The lock is released when the cancelled statement's error has
		// reached this process and its ROLLBACK the server: a loaded
		// machine may delay a round by its scheduling (tens of ms seen
		// with the other ways running at once), never to the sleep's 3s.
		if releases[0] > releaseBound || releases[len(releases)-1] > time.Second {
			t.Errorf("lock released %v after the deadline: want a round within %v, all within 1s", releases, releaseBound)
		}
		outcome = fmt.Sprintf("ok: DeadlineExceeded; lock released %v after the deadline (server clock; best %v, median %v of %d); same backend for %d transactions, 1 connection; next transaction not cancelled",
			roundAll(releases), releases[0].Round(100*time.Microsecond), median.Round(100*time.Microsecond), len(releases), len(pids))
	} else {
		holder, next := pids[1], pids[2]
		if holder == next {
			t.Errorf("backend %d served the next transaction: want database/sql to have closed the connection", holder)
		}
		outcome = fmt.Sprintf("connection closed: DeadlineExceeded, next transaction on a new backend (%d, was %d); lock released %v after the deadline (pgx's background cancel request)",
			next, holder, median.Round(100*time.Microsecond))
	}
	c.add(t, 0, w.String(), outcome)
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(100 * time.Microsecond)
	}
	return out
}

// faultRefused: the server refuses connections for outageFor, its live
// sessions cut, and a transfer starts with a 10s deadline. pgtx's modules
// ride the outage out and commit once; the own ways fail at once.
func faultRefused(t *testing.T, c cell, w way) {
	direct, proxy, through := proxied(t)
	admin := directConn(t, direct)
	r := w.open(t, through, openOpts{})
	if _, err := backendPid(t, r); err != nil {
		t.Fatal(err)
	}
	proxy.RefuseNew(true)
	proxy.CutAll()
	ended := make(chan struct{})
	time.AfterFunc(outageFor, func() {
		proxy.RefuseNew(false)
		close(ended)
	})
	defer func() { <-ended }()
	ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
	defer cancel()
	start := time.Now()
	runs := 0
	err := r.tx(ctx, transfer("t-1", 10, &runs))
	took := time.Since(start)
	during := true
	select {
	case <-ended:
		during = false
	default:
	}
	rows, bal := ledger(t, admin, "t-1")
	refused := proxy.Stats().Refused
	var outcome string
	if w.pgtx {
		if err != nil || rows != 1 || bal != 990 || refused == 0 || during {
			t.Errorf("err %v after %v (outage on: %v), ledger rows %d, balance %d, refused %d: want nil after the outage, 1, 990, > 0",
				err, took, during, rows, bal, refused)
		}
		outcome = fmt.Sprintf("ok: rode out a %v outage (%d connections refused), committed once after %v", outageFor, refused, took.Round(10*time.Millisecond))
	} else {
		if err == nil || !during || rows != 0 {
			t.Errorf("err %v after %v (outage on: %v), ledger rows %d: want an error during the outage, nothing applied", err, took, during, rows)
		}
		outcome = fmt.Sprintf("failed at once: error after %v of a %v outage: %q", took.Round(time.Millisecond), outageFor, shortErr(err))
	}
	c.add(t, 0, w.String(), outcome)
}

// faultBouncer: behind PgBouncer 1.18 in transaction mode (2 server
// connections per database), as PgBouncer's users configure pgtx
// (docs/poolers.md: no startup parameters, the exec mode, the protocol
// cancel), and each own way as the library opens it: a transfer whose
// first COMMIT fails with 40001, 4 workers making 5 transfers each, and a
// deadline in pg_sleep with a row lock held. pgtx's modules rerun the
// transfer, make every transfer once, cancel the sleep and keep the
// connection; what the own ways get is logged.
func faultBouncer(t *testing.T, c cell, w way) {
	direct := pgtxtest.NewDatabase(t, bankSchema)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	b := bouncer.New(t, server.Shared(t), &bouncer.Config{Mode: bouncer.PoolTransaction, DefaultPoolSize: 2})
	through := b.DSN(strings.TrimPrefix(u.Path, "/"))
	admin := directConn(t, direct)
	mustExec(t, admin, failFirstCommitSQL)
	r := w.open(t, through, openOpts{mutate: func(c *pgtx.Config) {
		c.StatementTimeout = -1
		c.IdleInTransactionTimeout = -1
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		c.CancelMode = pgtx.CancelModeProtocol
		c.MaxConns = 4
	}})
	r.db.SetMaxOpenConns(4)
	var parts []string

	// A transfer whose first COMMIT fails.
	runs := 0
	err = r.tx(testCtx(t), transfer("t-commit", 10, &runs))
	rows, _ := ledger(t, admin, "t-commit")
	parts = append(parts, fmt.Sprintf("40001 at COMMIT: fn ran %d, applied %d, err %s", runs, rows, errText(err)))
	if w.pgtx && (err != nil || runs != 2 || rows != 1) {
		t.Errorf("40001 at COMMIT: err %v, fn ran %d times, ledger rows %d: want nil, 2, 1", err, runs, rows)
	}

	// 4 workers, 5 transfers each.
	const workers, each = 4, 5
	var mu sync.Mutex
	failed := map[string]int{}
	var wg sync.WaitGroup
	for wk := range workers {
		wg.Go(func() {
			for i := range each {
				runs := 0
				if err := r.tx(testCtx(t), transfer(fmt.Sprintf("w-%d-%d", wk, i), 1, &runs)); err != nil {
					mu.Lock()
					failed[errText(err)]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	made := queryInt(t, admin, "select count(*) from ledger where transfer like 'w-%'")
	if sum := queryInt(t, admin, "select sum(balance) from accounts"); sum != 2000 {
		t.Errorf("sum of balances %d, want 2000", sum)
	}
	nfailed := 0
	for _, n := range failed {
		nfailed += n
	}
	parts = append(parts, fmt.Sprintf("%d workers x %d transfers: %d made, %d failed%s", workers, each, made, nfailed, errKinds(failed)))
	if w.pgtx && (nfailed != 0 || made != workers*each) {
		t.Errorf("transfers: %d made, failed %v: want %d, none", made, failed, workers*each)
	}

	// A deadline in pg_sleep, a row lock held.
	var conns0 int64
	if w.pgtx {
		conns0 = r.pool.Stats().Pool.NewConnsCount()
	}
	_, release, valid, err := lockRound(t, r, directConn(t, direct), serverOffset(t, admin))
	_, nerr := backendPid(t, r)
	rel := "not measured (the waiter came late)"
	if valid {
		rel = release.Round(100 * time.Microsecond).String()
	}
	part := fmt.Sprintf("deadline: err %s, lock released %s after it, next transaction err %s", errText(err), rel, errText(nerr))
	if w.pgtx {
		n := r.pool.Stats().Pool.NewConnsCount() - conns0
		part += fmt.Sprintf(", %d new connections", n)
		if !errors.Is(err, context.DeadlineExceeded) || nerr != nil || n != 0 || valid && release > time.Second {
			t.Errorf("deadline: err %v, next %v, new connections %d, released %v after the deadline: want DeadlineExceeded, nil, 0, within 1s", err, nerr, n, release)
		}
	}
	parts = append(parts, part)
	verdict := "ok: "
	if !w.pgtx {
		verdict = "own: "
	}
	c.add(t, 0, w.String(), verdict+strings.Join(parts, "; "))
}

// errText names err by its SQLSTATE and message, or "nil".
func errText(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, context.DeadlineExceeded):
		return "DeadlineExceeded"
	case sqlState(err) != "":
		return sqlState(err) + " " + shortErr(err)
	}
	return shortErr(err)
}

// errKinds lists the errors failed counts, most frequent first.
func errKinds(failed map[string]int) string {
	if len(failed) == 0 {
		return ""
	}
	var ks []string
	for k := range failed {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b string) int { return failed[b] - failed[a] })
	var sb strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&sb, "; %dx %q", failed[k], k)
	}
	return " (" + strings.TrimPrefix(sb.String(), "; ") + ")"
}
