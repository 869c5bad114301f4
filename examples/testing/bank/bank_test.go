package bank

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// TestMain lets pgtxtest stop the server it started and check for leaked
// goroutines.
func TestMain(m *testing.M) { pgtxtest.Main(m) }

// migrations builds each test's database from the *.sql files next to this
// file, in lexical order: pgtxtest migrates a template once and clones it for
// every test.
var migrations = pgtxtest.WithMigrationsDir("migrations")

// openAccounts opens accounts 1, 2, ... with the given balances.
func openAccounts(t *testing.T, repo *Repo, balances ...int64) {
	t.Helper()
	for i, b := range balances {
		if err := repo.Open(t.Context(), int64(i+1), b); err != nil {
			t.Fatal(err)
		}
	}
}

// wantBalances checks the balances of accounts 1, 2, ...
func wantBalances(t *testing.T, repo *Repo, want ...int64) {
	t.Helper()
	for i, w := range want {
		got, err := repo.Balance(t.Context(), int64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if got != w {
			t.Errorf("balance of account %d = %d, want %d", i+1, got, w)
		}
	}
}

func TestTransfer(t *testing.T) {
	t.Parallel() // every test has a database of its own
	ctx := t.Context()
	repo := New(pgtxtest.NewPool(t, migrations))
	openAccounts(t, repo, 100, 0)

	if err := repo.Transfer(ctx, 1, 2, 30); err != nil {
		t.Fatal(err)
	}
	wantBalances(t, repo, 70, 30)

	err := repo.Transfer(ctx, 1, 2, 500)
	if !errors.Is(err, ErrInsufficientFunds) {
		t.Fatalf("Transfer of 500 = %v, want ErrInsufficientFunds", err)
	}
	wantBalances(t, repo, 70, 30) // nothing changed
}

func TestTransferIsSafeToRerun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// Every transaction's first COMMIT fails with a real serialization
	// failure (40001) from the server, so pgtx runs every fn twice.
	pool := pgtxtest.NewPool(t, migrations, pgtxtest.WithFailEveryCommitOnce("40001"))
	repo := New(pool)
	openAccounts(t, repo, 100, 0)
	notified := 0
	repo.OnTransfer = func(from, to, amount int64) { notified++ }

	runs := 0
	err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		runs++ // a side effect written here happens once per attempt
		return repo.transfer(ctx, tx, "", 1, 2, 30)
	})
	if err != nil {
		t.Fatal(err)
	}
	if runs != 2 || notified != 1 {
		t.Errorf("fn ran %d times, OnTransfer %d times; want 2 and 1", runs, notified)
	}
	if n, err := repo.Transfers(ctx); err != nil || n != 1 {
		t.Errorf("Transfers = %d, %v; want 1 transfer", n, err)
	}
	wantBalances(t, repo, 70, 30) // applied once
}

// transferCase is one case of TestTransfers: accounts opened with balances,
// then the transfers made in order, each one's expected error, and the
// balances expected at the end.
type transferCase struct {
	name      string
	balances  []int64
	transfers []transferStep
	want      []int64
}

type transferStep struct {
	from, to, amount int64
	err              error // nil, or the error errors.Is must match
}

var transferCases = []transferCase{
	{"one", []int64{100, 0}, []transferStep{{1, 2, 30, nil}}, []int64{70, 30}},
	{"whole balance", []int64{100, 0}, []transferStep{{1, 2, 100, nil}}, []int64{0, 100}},
	{"one cent over", []int64{100, 0}, []transferStep{{1, 2, 101, ErrInsufficientFunds}}, []int64{100, 0}},
	{"from empty", []int64{0, 50}, []transferStep{{1, 2, 1, ErrInsufficientFunds}}, []int64{0, 50}},
	{"back and forth", []int64{10, 10}, []transferStep{{1, 2, 10, nil}, {2, 1, 20, nil}}, []int64{20, 0}},
	{"chain", []int64{90, 0, 0}, []transferStep{{1, 2, 90, nil}, {2, 3, 90, nil}}, []int64{0, 0, 90}},
	{"spent then refused", []int64{50, 0}, []transferStep{{1, 2, 40, nil}, {1, 2, 20, ErrInsufficientFunds}}, []int64{10, 40}},
	{"refused then smaller", []int64{50, 0}, []transferStep{{1, 2, 60, ErrInsufficientFunds}, {1, 2, 50, nil}}, []int64{0, 50}},
	{"zero amount", []int64{50, 0}, []transferStep{{1, 2, 0, ErrInvalidAmount}}, []int64{50, 0}},
	{"negative amount", []int64{50, 0}, []transferStep{{1, 2, -5, ErrInvalidAmount}}, []int64{50, 0}},
	{"no such source", []int64{50}, []transferStep{{7, 1, 5, ErrNoAccount}}, []int64{50}},
	{"no such target", []int64{50}, []transferStep{{1, 7, 5, ErrNoAccount}}, []int64{50}},
	{"to itself", []int64{50}, []transferStep{{1, 1, 20, nil}}, []int64{50}},
	{"to itself, too much", []int64{50}, []transferStep{{1, 1, 60, ErrInsufficientFunds}}, []int64{50}},
	{"fan out", []int64{30, 0, 0, 0}, []transferStep{{1, 2, 10, nil}, {1, 3, 10, nil}, {1, 4, 10, nil}}, []int64{0, 10, 10, 10}},
	{"fan in", []int64{0, 5, 6, 7}, []transferStep{{2, 1, 5, nil}, {3, 1, 6, nil}, {4, 1, 7, nil}}, []int64{18, 0, 0, 0}},
	{"ring", []int64{1, 2, 3}, []transferStep{{1, 2, 1, nil}, {2, 3, 3, nil}, {3, 1, 6, nil}}, []int64{6, 0, 0}},
	{"large", []int64{1 << 50, 0}, []transferStep{{1, 2, 1 << 49, nil}}, []int64{1 << 49, 1 << 49}},
	{"many small", []int64{5, 0}, []transferStep{{1, 2, 1, nil}, {1, 2, 1, nil}, {1, 2, 1, nil}, {1, 2, 1, nil}, {1, 2, 1, nil}, {1, 2, 1, ErrInsufficientFunds}}, []int64{0, 5}},
	{"refused leaves others", []int64{10, 10, 10}, []transferStep{{1, 2, 5, nil}, {3, 2, 11, ErrInsufficientFunds}, {2, 3, 15, nil}}, []int64{5, 0, 25}},
}

// TestTransfers runs each case as a parallel test on a database of its own:
// each case opens accounts 1, 2, ... itself, which would collide if two
// cases shared a database, and then sees exactly its own rows.
func TestTransfers(t *testing.T) {
	for _, c := range transferCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			repo := New(pgtxtest.NewPool(t, migrations))
			openAccounts(t, repo, c.balances...)
			applied := int64(0)
			for _, s := range c.transfers {
				err := repo.Transfer(ctx, s.from, s.to, s.amount)
				if !errors.Is(err, s.err) {
					t.Fatalf("Transfer(%d, %d, %d) = %v, want %v", s.from, s.to, s.amount, err, s.err)
				}
				if err == nil {
					applied++
				}
			}
			wantBalances(t, repo, c.want...)
			var accounts, transfers int64
			err := repo.pool.QueryRow(ctx, "select (select count(*) from accounts), (select count(*) from transfers)").
				Scan(&accounts, &transfers)
			if err != nil {
				t.Fatal(err)
			}
			if accounts != int64(len(c.balances)) || transfers != applied {
				t.Errorf("the database holds %d accounts and %d transfers, want %d and %d (this test's own)",
					accounts, transfers, len(c.balances), applied)
			}
		})
	}
}

// TestConcurrentTransfersKeepTheTotal runs transfers on the same hot
// accounts from several goroutines at once: the serialization failures
// SERIALIZABLE raises between them are retried by pgtx, and no money is
// created or lost.
func TestConcurrentTransfersKeepTheTotal(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const workers, each = 8, 10
	// A connection per worker: the test is about the total under
	// concurrency, not the pool's queue, and on a loaded CI machine the
	// first connections can take most of AcquireTimeout to make.
	repo := New(pgtxtest.NewPool(t, migrations, pgtxtest.WithConfig(func(c *pgtx.Config) { c.MaxConns = workers })))
	openAccounts(t, repo, 1000, 1000, 1000)
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				from := int64((w+i)%3 + 1)
				to := from%3 + 1
				if err := repo.Transfer(ctx, from, to, int64(1+i)); err != nil {
					errs <- fmt.Errorf("worker %d, transfer %d: %w", w, i, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var total int64
	for id := int64(1); id <= 3; id++ {
		b, err := repo.Balance(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		total += b
	}
	if n, err := repo.Transfers(ctx); err != nil || n != workers*each || total != 3000 {
		t.Errorf("%d transfers (%v), total %d; want %d transfers and a total of 3000", n, err, total, workers*each)
	}
}

// TestTransferOnceAppliesAKeyOnce runs the same keyed transfer from several
// goroutines at once: one applies it, the others find the key (the unique
// index's conflict comes back as a serialization failure, which is retried)
// and all return nil.
func TestTransferOnceAppliesAKeyOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	repo := New(pgtxtest.NewPool(t, migrations))
	openAccounts(t, repo, 100, 0)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- repo.TransferOnce(ctx, "order-9", 1, 2, 30) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n, err := repo.Transfers(ctx); err != nil || n != 1 {
		t.Errorf("Transfers = %d, %v; want 1", n, err)
	}
	wantBalances(t, repo, 70, 30)
}

// TestDeadlockAtCommitIsRetried uses the fault proxy directly: the next
// COMMIT fails with a deadlock (40P01), which pgtx retries like a
// serialization failure.
func TestDeadlockAtCommitIsRetried(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	proxy := faultproxy.New(t, server.Shared(t).Addr())
	repo := New(pgtxtest.NewPool(t, migrations, pgtxtest.WithProxy(proxy)))
	openAccounts(t, repo, 100, 0)
	notified := 0
	repo.OnTransfer = func(from, to, amount int64) { notified++ }

	proxy.FailCommits(1, "40P01")
	if err := repo.Transfer(ctx, 1, 2, 30); err != nil {
		t.Fatal(err)
	}
	if got := proxy.Stats().InjectedFailures; got != 1 {
		t.Errorf("the proxy failed %d COMMITs, want 1", got)
	}
	if n, err := repo.Transfers(ctx); err != nil || n != 1 || notified != 1 {
		t.Errorf("Transfers = %d (%v), OnTransfer ran %d times; want 1 and 1", n, err, notified)
	}
	wantBalances(t, repo, 70, 30)
}

// TestLostCommitReplyIsResolved drops COMMIT's answer after the server has
// committed: pgtx asks the server what became of the transaction, finds it
// committed and returns nil, without running fn again.
func TestLostCommitReplyIsResolved(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	proxy := faultproxy.New(t, server.Shared(t).Addr())
	pool := pgtxtest.NewPool(t, migrations, pgtxtest.WithProxy(proxy))
	repo := New(pool)
	openAccounts(t, repo, 100, 0)
	notified := 0
	repo.OnTransfer = func(from, to, amount int64) { notified++ }

	proxy.CutOnCommitReply(1)
	if err := repo.Transfer(ctx, 1, 2, 30); err != nil {
		t.Fatal(err)
	}
	if got := pool.Stats().Resolved.CommittedCount; got != 1 {
		t.Errorf("Resolved.CommittedCount = %d, want 1", got)
	}
	if n, err := repo.Transfers(ctx); err != nil || n != 1 || notified != 1 {
		t.Errorf("Transfers = %d (%v), OnTransfer ran %d times; want 1 and 1", n, err, notified)
	}
	wantBalances(t, repo, 70, 30)
}

// TestLostCommitReplyWithoutResolution is the same fault with resolution
// switched off: the call cannot know whether the transfer committed and
// returns an error matching pgtx.ErrCommitUnknown. The caller finds out with
// the idempotency key it gave, and running the transfer again under the
// same key is safe either way.
func TestLostCommitReplyWithoutResolution(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	proxy := faultproxy.New(t, server.Shared(t).Addr())
	repo := New(pgtxtest.NewPool(t, migrations, pgtxtest.WithProxy(proxy),
		pgtxtest.WithConfig(func(c *pgtx.Config) { c.ResolveTimeout = -1 })))
	openAccounts(t, repo, 100, 0)
	notified := 0
	repo.OnTransfer = func(from, to, amount int64) { notified++ }

	proxy.CutOnCommitReply(1)
	err := repo.TransferOnce(ctx, "order-17", 1, 2, 30)
	if !errors.Is(err, pgtx.ErrCommitUnknown) {
		t.Fatalf("TransferOnce = %v, want pgtx.ErrCommitUnknown", err)
	}
	if notified != 0 {
		t.Errorf("OnTransfer ran %d times after an unknown outcome, want 0", notified)
	}
	applied, err := repo.Applied(ctx, "order-17")
	if err != nil || !applied {
		t.Fatalf("Applied = %v, %v; want true (the server committed, only the answer was lost)", applied, err)
	}
	if err := repo.TransferOnce(ctx, "order-17", 1, 2, 30); err != nil { // again: a no-op
		t.Fatal(err)
	}
	if n, err := repo.Transfers(ctx); err != nil || n != 1 {
		t.Errorf("Transfers = %d, %v; want 1", n, err)
	}
	wantBalances(t, repo, 70, 30)
}
