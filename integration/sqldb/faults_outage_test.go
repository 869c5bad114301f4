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
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/integration/internal/itest"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/bouncer"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// faultRefused: the server refuses connections for outageFor, its live
// sessions cut, and a transfer starts with a 10s deadline. pgtx's modules
// ride the outage out and commit once; the own ways fail at once.
func faultRefused(t *testing.T, c cell, w way) {
	direct, proxy, through := proxied(t)
	admin := itest.DirectConn(t, direct)
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
	ctx, cancel := context.WithTimeout(itest.Ctx(t), 10*time.Second)
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
	admin := itest.DirectConn(t, direct)
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
	err = r.tx(itest.Ctx(t), transfer("t-commit", 10, &runs))
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
				if err := r.tx(itest.Ctx(t), transfer(fmt.Sprintf("w-%d-%d", wk, i), 1, &runs)); err != nil {
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
	_, release, valid, err := lockRound(t, r, itest.DirectConn(t, direct), serverOffset(t, admin))
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
	case itest.SQLState(err) != "":
		return itest.SQLState(err) + " " + shortErr(err)
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
