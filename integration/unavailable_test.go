package integration

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// closedPort returns a 127.0.0.1 address nothing listens on: connections to
// it are refused.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// TestNoServerIsNamedForWhatItIs: a connection string that names a socket
// file that does not exist (what a missing DATABASE_URL leads to) fails at
// once as permanent, without backoff; a port nobody listens on is an
// unavailable server, named as such in the message's first words, never
// "overload" (with UnavailableTimeout off it is not retried;
// TestUnavailableRetriedUntilDeadline shows it retried).
func TestNoServerIsNamedForWhatItIs(t *testing.T) {
	ctx := testCtx(t)
	tests := []struct {
		name      string
		dsn       string
		wantClass pgtx.Class
		wantText  string
		wantStart string // how the message begins
	}{
		{"no such socket file", "postgres://app@/app?host=" + filepath.Join(t.TempDir(), "no-server-here"), pgtx.ClassPermanent, "no such file or directory",
			"failed to connect to "},
		{"connection refused", "postgres://app@" + closedPort(t) + "/app?sslmode=disable", pgtx.ClassUnavailable, "connection refused",
			"pgtx: the server is unreachable: gave up after 1 attempt (UnavailableTimeout off): failed to connect to "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := &bouncerTracer{}
			pool := newPool(t, tt.dsn, func(c *pgtx.Config) {
				c.Tracer = tr
				c.CancelMode = pgtx.CancelModeProtocol
				c.Retry.UnavailableTimeout = -1
			})
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
			classes, _ := tr.snapshot()
			t.Logf("%v; attempts %s", err, classes)
			if got, want := pgtx.Classify(err), tt.wantClass; got != want || classes != "["+want.String()+"]" {
				t.Errorf("class %v, attempts %s; want %v, one attempt", got, classes, want)
			}
			if !strings.Contains(err.Error(), tt.wantText) || strings.Contains(err.Error(), "overload") || !strings.HasPrefix(err.Error(), tt.wantStart) {
				t.Errorf("err = %v: want it to begin %q, say %q, and not overload", err, tt.wantStart, tt.wantText)
			}
			if tt.wantClass == pgtx.ClassPermanent && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("err = %v: the missing socket must stay reachable", err)
			}
		})
	}
}

// TestUnavailableRetriedUntilDeadline: with the default retry policy, a
// port nobody listens on is retried with the Client Backpressure
// specification's backoff past MaxAdaptiveRetries, every attempt refused,
// until the call's deadline and not before it; the error matches
// context.DeadlineExceeded, keeps the refusal, and says the server was
// unreachable.
func TestUnavailableRetriedUntilDeadline(t *testing.T) {
	const timeout = 1500 * time.Millisecond
	tr := &bouncerTracer{}
	pool := newPool(t, "postgres://app@"+closedPort(t)+"/app?sslmode=disable", func(c *pgtx.Config) {
		c.Tracer = tr
		c.CancelMode = pgtx.CancelModeProtocol
	})
	ctx, cancel := context.WithTimeout(testCtx(t), timeout)
	defer cancel()
	start := time.Now()
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
	elapsed := time.Since(start)
	classes, backoffs := tr.snapshot()
	t.Logf("after %v: %v; attempts %s, backoffs %s", elapsed.Round(time.Millisecond), err, classes, backoffs)
	tr.mu.Lock()
	attempts := append([]pgtx.Class(nil), tr.classes...)
	tr.mu.Unlock()
	if len(attempts) <= 1+defaultMaxAdaptiveRetries {
		t.Errorf("attempts %v: want more than 1 + MaxAdaptiveRetries, until the deadline", attempts)
	}
	for _, c := range attempts {
		if c != pgtx.ClassUnavailable {
			t.Errorf("attempts %v: want every one unavailable", attempts)
			break
		}
	}
	if elapsed < timeout-50*time.Millisecond || elapsed > timeout+500*time.Millisecond {
		t.Errorf("the call ended after %v, want at its deadline (%v)", elapsed, timeout)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "overload") {
		t.Errorf("err = %v: want it to match context.DeadlineExceeded and keep the refusal", err)
	}
	var re *pgtx.RetryError
	if !errors.As(err, &re) || re.Attempts != len(attempts) || !strings.HasPrefix(err.Error(), "pgtx: the server is unreachable: gave up after ") ||
		!strings.Contains(err.Error(), " (the context ended): context deadline exceeded: failed to connect to ") {
		t.Errorf("err = %v: want a *RetryError of %d attempts saying first that the server is unreachable, then that the context ended", err, len(attempts))
	}
}

// TestUnavailableTimeoutWithoutDeadline: a call without a deadline on a
// server that stays unreachable ends at RetryConfig.UnavailableTimeout,
// saying so.
func TestUnavailableTimeoutWithoutDeadline(t *testing.T) {
	const bound = time.Second
	tr := &bouncerTracer{}
	pool := newPool(t, "postgres://app@"+closedPort(t)+"/app?sslmode=disable", func(c *pgtx.Config) {
		c.Tracer = tr
		c.CancelMode = pgtx.CancelModeProtocol
		c.Retry.UnavailableTimeout = bound
	})
	start := time.Now()
	err := pgtx.Transaction(context.Background(), pool, pgtx.ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
	elapsed := time.Since(start)
	classes, backoffs := tr.snapshot()
	t.Logf("after %v: %v; attempts %s, backoffs %s", elapsed.Round(time.Millisecond), err, classes, backoffs)
	if elapsed < bound || elapsed > bound+500*time.Millisecond {
		t.Errorf("the call ended after %v, want at UnavailableTimeout (%v)", elapsed, bound)
	}
	if pgtx.Classify(err) != pgtx.ClassUnavailable || !errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v: want the refusal, unavailable", err)
	}
	if !strings.HasPrefix(err.Error(), "pgtx: the server is unreachable: gave up after ") || !strings.Contains(err.Error(), " (UnavailableTimeout 1s): failed to connect to ") {
		t.Errorf("err = %v: want it to say first that the server is unreachable, then that UnavailableTimeout ended the call", err)
	}
}

// TestUnavailableThenConflictsKeepMaxRetries: a call that first meets a
// server refusing connections (through the fault proxy) and then, once the
// server answers, conflicts four times commits: the unavailable errors set
// no MaxAdaptiveRetries cap on the conflict retries that follow, as an
// overload would.
func TestUnavailableThenConflictsKeepMaxRetries(t *testing.T) {
	ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
	defer cancel()
	direct, proxy, through := proxied(t)
	admin := directConn(t, direct)
	mustExec(t, ctx, admin, "create table ledger (id text primary key)")
	tr := &bouncerTracer{}
	pool := newPool(t, through, func(c *pgtx.Config) { c.Tracer = tr; c.CancelMode = pgtx.CancelModeProtocol })

	proxy.RefuseNew(true)
	readmit := time.AfterFunc(700*time.Millisecond, func() { proxy.RefuseNew(false) })
	defer readmit.Stop()
	var runs counter
	err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		if runs.inc() <= 4 {
			_, err := tx.Exec(ctx, raise("40001"))
			return err
		}
		_, err := tx.Exec(ctx, "insert into ledger values ('t-1')")
		return err
	})
	classes, backoffs := tr.snapshot()
	t.Logf("err %v; attempts %s, backoffs %s", err, classes, backoffs)
	if err != nil {
		t.Fatalf("err = %v: after the server is back, conflicts keep MaxRetries", err)
	}
	tr.mu.Lock()
	attempts := append([]pgtx.Class(nil), tr.classes...)
	tr.mu.Unlock()
	unavailable := 0
	for _, c := range attempts {
		if c == pgtx.ClassUnavailable {
			unavailable++
		}
	}
	if unavailable == 0 || runs.get() != 5 {
		t.Errorf("attempts %v, fn ran %d times: want refused attempts, then 4 conflicts and a commit", attempts, runs.get())
	}
	if n := queryInt(t, ctx, admin, "select count(*) from ledger"); n != 1 {
		t.Errorf("rows = %d, want 1", n)
	}
}
