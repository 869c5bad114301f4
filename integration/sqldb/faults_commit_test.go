package sqldb

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/integration/internal/itest"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// faultCommitConflict: the database's first COMMIT of a transfer fails with
// 40001, raised by the server at COMMIT by a deferred constraint trigger.
// The hand-written loops and pgtx's modules run the transfer again and it
// applies once; GORM's Transaction runs fn once and the transfer is lost.
func faultCommitConflict(t *testing.T, c cell, w way) {
	dsn := pgtxtest.NewDatabase(t, bankSchema)
	admin := itest.DirectConn(t, dsn)
	mustExec(t, admin, failFirstCommitSQL)
	r := w.open(t, dsn, openOpts{})
	runs := 0
	err := r.tx(itest.Ctx(t), transfer("t-1", 10, &runs))
	rows, bal := ledger(t, admin, "t-1")
	switch {
	case w.pgtx || w.lib != "GORM":
		if err != nil || runs != 2 || rows != 1 || bal != 990 {
			t.Errorf("err %v, fn ran %d times, ledger rows %d, balance %d: want nil, 2, 1, 990", err, runs, rows, bal)
		}
		c.add(t, 0, w.String(), fmt.Sprintf("ok: fn ran %d times, applied once", runs))
	default:
		if itest.SQLState(err) != "40001" || runs != 1 || rows != 0 || bal != 1000 {
			t.Errorf("err %v, fn ran %d times, ledger rows %d, balance %d: want 40001, 1, 0, 1000 (GORM runs fn once)", err, runs, rows, bal)
		}
		c.add(t, 0, w.String(), fmt.Sprintf("lost: fn ran %d time, error %s returned, balance unchanged", runs, itest.SQLState(err)))
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
	admin := itest.DirectConn(t, direct)
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
		err := r.tx(itest.Ctx(t), transfer(id, 10, &runs))
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
