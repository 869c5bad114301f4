package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// massLossBound is how long the resolution of every lost COMMIT of a pool
// may take, from the loss to the calls' return: about 100ms on a quiet
// machine, past 250ms on a loaded one, and far under the 2s AcquireTimeout
// a question waiting for the main pool would take.
const massLossBound = time.Second

// TestResolveMassLoss: as many COMMIT answers are lost at once as the pool
// has connections (a network blip, a failover, an admin KILL), so every slot
// of the main pool is held by a dead connection while its call asks what
// became of its transaction. The question must not wait for that pool: every
// call resolves to success within massLossBound, fn ran once each, and every
// row is there once. MaxConns 1 is the smallest such pool.
func TestResolveMassLoss(t *testing.T) {
	for _, conns := range []int{1, 4} {
		t.Run(fmt.Sprintf("MaxConns %d", conns), func(t *testing.T) {
			ctx := testCtx(t)
			direct, proxy, through := proxied(t)
			admin := directConn(t, direct)
			mustExec(t, ctx, admin, "create table ledger (id text primary key)")
			pool := newPool(t, through, func(c *pgtx.Config) {
				c.MaxConns = int32(conns)
			})
			proxy.CutOnCommitReply(conns)

			// Every fn returns only once all of them have run, so the COMMITs
			// leave together and their answers are lost together.
			var ready sync.WaitGroup
			ready.Add(conns)
			allReady := make(chan struct{})
			go func() { ready.Wait(); close(allReady) }()
			type result struct {
				err  error
				runs int64
				took time.Duration
			}
			results := make(chan result, conns)
			for i := range conns {
				go func() {
					var runs counter
					var committing time.Time
					err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
						if _, err := tx.Exec(ctx, "insert into ledger values ($1)", fmt.Sprint("t-", i)); err != nil {
							return err
						}
						if runs.inc() == 1 {
							ready.Done()
							<-allReady
						}
						committing = time.Now()
						return nil
					})
					results <- result{err: err, runs: runs.get(), took: time.Since(committing)}
				}()
			}
			var slowest time.Duration
			for range conns {
				r := <-results
				slowest = max(slowest, r.took)
				switch {
				case r.err != nil:
					t.Errorf("err = %v: a COMMIT the server applied must resolve to success", r.err)
				case r.runs != 1:
					t.Errorf("fn ran %d times, want once", r.runs)
				case r.took > massLossBound:
					t.Errorf("the call took %v after fn returned, want under %v", r.took, massLossBound)
				}
			}
			t.Logf("%d COMMIT answers lost at once: the slowest call returned %v after its fn", conns, slowest.Round(time.Microsecond))
			if got := proxy.Stats().CutsOnCommitReply; got != int64(conns) {
				t.Fatalf("the proxy cut %d answers, want %d", got, conns)
			}
			if rows := queryInt(t, ctx, admin, "select count(*) from ledger"); rows != conns {
				t.Errorf("rows %d, want %d", rows, conns)
			}
			if r := pool.Stats().Resolved; r.CommittedCount != int64(conns) || r.UnknownCount != 0 {
				t.Errorf("resolutions %+v, want %d committed", r, conns)
			}
		})
	}
}

// TestResolveNoIdIsNotNothingWritten: a transaction that writes no row
// may still send a notification at COMMIT (it takes its id only then).
// When its COMMIT's answer is lost it must not run again: the id is read
// at COMMIT with one assigned, and the notification is delivered once. A
// READ ONLY transaction may notify too, and is resolved like any other
// instead of reporting ErrCommitUnknown. A sequence is another matter: it
// hands out values outside transactions (nextval takes no id between the
// values it logs), so a write-free transaction that took one is run again,
// as any retry would, and takes another value (NotAppliedCount).
func TestResolveNoIdIsNotNothingWritten(t *testing.T) {
	tests := []struct {
		name     string
		readOnly bool
		fn       string
	}{
		{"notify", false, "notify pgtx_resolve, 'sent'"},
		{"notify read only", true, "select pg_notify('pgtx_resolve', 'sent')"},
		{"sequence", false, "select nextval('pgtx_seq')"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			direct, proxy, through := proxied(t)
			admin := directConn(t, direct)
			// The first value logs the sequence ahead; the transaction's
			// nextval then takes no transaction id.
			mustExec(t, ctx, admin, "create sequence pgtx_seq")
			mustExec(t, ctx, admin, "select nextval('pgtx_seq')")
			listener := directConn(t, direct)
			mustExec(t, ctx, listener, "listen pgtx_resolve")
			pool := newPool(t, through, nil) // resolution is on by default
			proxy.CutOnCommitReply(1)

			var runs counter
			err := pgtx.TransactionWithOptions(ctx, pool, pgtx.ReadCommitted, pgtx.Options{ReadOnly: tt.readOnly},
				func(ctx context.Context, tx pgx.Tx) error {
					runs.inc()
					_, err := tx.Exec(ctx, tt.fn)
					return err
				})
			if proxy.Stats().CutsOnCommitReply != 1 {
				t.Fatalf("the proxy did not cut at COMMIT's answer")
			}
			if err != nil {
				t.Fatalf("err = %v: a COMMIT the server applied must resolve to success", err)
			}
			wantRuns, wantLast := int64(1), 2
			if tt.name == "sequence" {
				wantRuns, wantLast = 2, 3
			}
			if runs.get() != wantRuns {
				t.Errorf("fn ran %d times, want %d", runs.get(), wantRuns)
			}
			if got := queryInt(t, ctx, admin, "select last_value::int from pgtx_seq"); tt.name == "sequence" && got != wantLast {
				t.Errorf("the sequence's last value is %d, want %d", got, wantLast)
			}
			if tt.name != "sequence" {
				if n := notifications(t, listener, "pgtx_resolve"); n != 1 {
					t.Errorf("the notification was delivered %d times, want once", n)
				}
			}
			r := pool.Stats().Resolved
			switch {
			case tt.name == "sequence" && r.NotAppliedCount != 1:
				t.Errorf("resolutions %+v, want one not applied (a write-free transaction, run again)", r)
			case tt.name != "sequence" && r.CommittedCount != 1:
				t.Errorf("resolutions %+v, want one committed", r)
			}
		})
	}
}

// notifications counts the notifications on channel that conn has received,
// waiting briefly for late ones.
func notifications(t *testing.T, conn *pgx.Conn, channel string) int {
	t.Helper()
	n := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		note, err := conn.WaitForNotification(ctx)
		cancel()
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("wait for notification: %v", err)
			}
			// The wait's cancellation leaves the connection usable.
			return n
		}
		if note.Channel == channel {
			n++
		}
	}
}

// TestResolveIdKnownBeforeCommit: the proxy cuts the connection as soon as
// COMMIT is forwarded, before anything comes back (the forwarded COMMIT is
// applied). The transaction id must already be known, so the call resolves
// to success instead of losing the id with the connection.
func TestResolveIdKnownBeforeCommit(t *testing.T) {
	ctx := testCtx(t)
	direct, proxy, through := proxied(t)
	admin := directConn(t, direct)
	mustExec(t, ctx, admin, "create table ledger (id text primary key)")
	pool := newPool(t, through, nil) // resolution is on by default
	const calls = 5
	for i := range calls {
		proxy.CutOnCommit(1)
		var runs counter
		err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			runs.inc()
			_, err := tx.Exec(ctx, "insert into ledger values ($1)", fmt.Sprint("t-", i))
			return err
		})
		if err != nil || runs.get() != 1 {
			t.Errorf("call %d: err = %v, fn ran %d times; want success, once", i, err, runs.get())
		}
	}
	if rows := queryInt(t, ctx, admin, "select count(*) from ledger"); rows != calls {
		t.Errorf("rows %d, want %d", rows, calls)
	}
	if r := pool.Stats().Resolved; r.CommittedCount != calls {
		t.Errorf("resolutions %+v, want %d committed", r, calls)
	}
}

// TestResolveLingeringBackend: the network stops forwarding as COMMIT
// leaves (a partition), while the server's side of the connection stays
// open: the backend has not noticed its client is gone and holds the
// transaction open, in progress, with its locks. CommitTimeout ends the
// wait for COMMIT's answer; the resolution finds the transaction in
// progress, ends the backend that runs it (matched by pid and transaction
// id) and asks again: aborted, so the transaction runs again and applies
// once, well within ResolveTimeout.
func TestResolveLingeringBackend(t *testing.T) {
	ctx := testCtx(t)
	direct, proxy, through := proxied(t)
	admin := directConn(t, direct)
	mustExec(t, ctx, admin, "create table ledger (id text primary key)")
	const commitTimeout = 300 * time.Millisecond
	pool := newPool(t, through, func(c *pgtx.Config) { c.CommitTimeout = commitTimeout })
	proxy.StallOnCommit(1)
	// The partition heals before the pool closes: pgconn's close of the
	// timed-out connection sends a cancel request, which the proxy holds
	// for as long as the connection is stalled.
	t.Cleanup(func() { proxy.ReleaseStalled() })

	var runs counter
	var pid uint32
	start := time.Now()
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if runs.inc() == 1 {
			if err := tx.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, "insert into ledger values ('t-1')")
		return err
	})
	took := time.Since(start)
	if proxy.Stats().Stalls != 1 {
		t.Fatalf("the proxy stalled %d connections, want 1", proxy.Stats().Stalls)
	}
	if err != nil {
		t.Fatalf("err = %v: a transaction whose backend was ended must resolve (aborted) and run again", err)
	}
	if rows := queryInt(t, ctx, admin, "select count(*) from ledger"); rows != 1 || runs.get() != 2 {
		t.Errorf("rows %d, fn ran %d times; want 1 row, 2 runs", rows, runs.get())
	}
	if n := queryInt(t, ctx, admin, "select count(*) from pg_stat_activity where pid = $1", pid); n != 0 {
		t.Errorf("the stalled backend %d is still there", pid)
	}
	if r := pool.Stats().Resolved; r.TerminatedCount != 1 || r.AbortedCount != 1 || r.UnknownCount != 0 {
		t.Errorf("resolutions %+v, want one backend ended and one aborted", r)
	}
	if limit := commitTimeout + defaultResolveTimeout/2; took > limit {
		t.Errorf("the call took %v, want well within CommitTimeout + ResolveTimeout (under %v)", took, limit)
	}
	t.Logf("the call took %v (CommitTimeout %v)", took, commitTimeout)
}
