package sqldb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/integration/internal/itest"
	"github.com/pgtx-go/pgtx/pgtxtest"
)

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
		if err := waiter.QueryRow(itest.Ctx(t), "update hot set n = n + 1 where id = 1 returning statement_timestamp(), clock_timestamp()").Scan(&g.began, &g.at); err != nil {
			t.Errorf("waiter: %v", err)
		}
		waited <- g
	})
	defer wg.Wait()
	ctx, cancel := context.WithTimeout(itest.Ctx(t), lockDeadline)
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
	err := r.tx(itest.Ctx(t), func(_ context.Context, s stmts) error {
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
	waiter := itest.DirectConn(t, dsn)
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
