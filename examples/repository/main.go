// Command repository shows pgtx under a repository layer built on
// sqlc-style generated code (the db package next to this file, written by
// hand in the shape sqlc generates for pgx/v5).
//
// Repo.Transfer runs its queries through pgtx.Transaction at SERIALIZABLE:
// the callback binds the generated queries to the attempt's transaction with
// q.WithTx(tx), so nothing in the data-access code knows about retries. A
// domain error (ErrInsufficientFunds, ErrAccountNotFound) returned from the
// callback is not retried and comes back with its identity: errors.Is works
// on the result. Conflicts (40001) between concurrent transfers are retried
// as whole transactions.
//
// The program opens four accounts, runs a round of eight transfers started
// together (printing each result and its number of attempts), then a load of
// concurrent random transfers on the same hot accounts, and checks that
// money was neither created nor lost and that every committed transfer was
// recorded exactly once. It uses DATABASE_URL when set, otherwise it starts
// a throwaway PostgreSQL and removes it at the end. It exits non-zero when a
// check fails or a call fails for a reason other than the ones above.
//
//	go run ./examples/repository          # 6 workers x 50 transfers
//	go run ./examples/repository -short   # 6 workers x 10 transfers (for CI)
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/examples/repository/db"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

//go:embed db/schema.sql
var schema string

// exampleSchema is where schema.sql creates the tables; the pool puts it
// first on its search_path.
const exampleSchema = "pgtx_repository_example"

// The domain errors of the repository. They are returned from inside the
// transaction callback: pgtx does not retry them and returns them wrapped
// as they are.
var (
	ErrInsufficientFunds = errors.New("insufficient funds")
	ErrAccountNotFound   = errors.New("account not found")
)

// Repo is the repository: the operations of the domain, each in its own
// transaction, on top of the generated queries.
type Repo struct {
	pool *pgtx.Pool
	q    *db.Queries
}

// NewRepo returns a Repo whose plain reads run on pool.
func NewRepo(pool *pgtx.Pool) *Repo {
	return &Repo{pool: pool, q: db.New(pool)}
}

// OpenAccount creates an account with an opening balance.
func (r *Repo) OpenAccount(ctx context.Context, owner string, balance int64) (db.Account, error) {
	return r.q.CreateAccount(ctx, db.CreateAccountParams{Owner: owner, Balance: balance})
}

// Accounts lists the accounts, outside any transaction.
func (r *Repo) Accounts(ctx context.Context) ([]db.Account, error) {
	return r.q.ListAccounts(ctx)
}

// Transfer moves amount from one account to another and records it, in one
// SERIALIZABLE transaction. The callback may run more than once (after a
// serialization failure), so it assigns its result only at the end, and has
// no side effects outside the transaction.
func (r *Repo) Transfer(ctx context.Context, from, to, amount int64) (db.Transfer, error) {
	var out db.Transfer
	err := pgtx.Transaction(ctx, r.pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		q := r.q.WithTx(tx)
		src, err := getAccount(ctx, q, from)
		if err != nil {
			return err
		}
		if src.Balance < amount {
			return fmt.Errorf("account %d holds %d, cannot send %d: %w", from, src.Balance, amount, ErrInsufficientFunds)
		}
		dst, err := getAccount(ctx, q, to)
		if err != nil {
			return err
		}
		// Update the lower id first, so that two opposite transfers never
		// wait for each other's row in a cycle (a deadlock, 40P01, which
		// the server only detects after deadlock_timeout, 1s by default).
		updates := []db.UpdateBalanceParams{
			{ID: src.ID, Balance: src.Balance - amount},
			{ID: dst.ID, Balance: dst.Balance + amount},
		}
		if dst.ID < src.ID {
			updates[0], updates[1] = updates[1], updates[0]
		}
		for _, u := range updates {
			if err := q.UpdateBalance(ctx, u); err != nil {
				return err
			}
		}
		t, err := q.InsertTransfer(ctx, db.InsertTransferParams{FromAccountID: from, ToAccountID: to, Amount: amount})
		if err != nil {
			return err
		}
		out = t
		return nil
	})
	if err != nil {
		return db.Transfer{}, err
	}
	return out, nil
}

// getAccount turns the generated query's pgx.ErrNoRows into the domain's
// ErrAccountNotFound.
func getAccount(ctx context.Context, q *db.Queries, id int64) (db.Account, error) {
	a, err := q.GetAccount(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, fmt.Errorf("account %d: %w", id, ErrAccountNotFound)
	}
	return a, err
}

func main() {
	short := flag.Bool("short", false, "a smaller load (for CI)")
	workers := flag.Int("workers", 6, "concurrent workers in the load")
	perWorker := flag.Int("transfers", 50, "transfers per worker in the load (10 with -short)")
	flag.Parse()
	if *short {
		*perWorker = 10
	}
	if *workers < 1 || *workers > 64 || *perWorker < 1 {
		fmt.Fprintln(os.Stderr, "repository: need 1 <= -workers <= 64 and -transfers >= 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *workers, *perWorker); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "repository: interrupted")
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "repository:", err)
		os.Exit(1)
	}
}

// run sets up the server and the schema, then runs the round, the load
// and the final checks.
func run(ctx context.Context, workers, perWorker int) error {
	dsn, cleanup, err := server.DatabaseURL(ctx)
	if err != nil {
		return err
	}
	defer cleanup()

	tracer := &callTracer{}
	cfg, err := pgtx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(workers + 2)
	cfg.ConnConfig.RuntimeParams["search_path"] = exampleSchema
	cfg.Tracer = tracer
	pool, err := pgtx.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, schema); err != nil {
		return err
	}

	repo := NewRepo(pool)
	accounts, err := openAccounts(ctx, repo)
	if err != nil {
		return err
	}
	c := &checks{}
	if err := round(ctx, repo, accounts, c); err != nil {
		return err
	}
	if err := load(ctx, repo, accounts, workers, perWorker, tracer, c); err != nil {
		return err
	}
	if n := tracer.domainRetried.Load(); n > 0 {
		c.fail("%d attempts that returned a domain error were retried", n)
	}
	return final(ctx, repo, c)
}

// opening balances; they add up to total.
var opening = []struct {
	owner   string
	balance int64
}{{"alice", 500}, {"bob", 300}, {"carol", 200}, {"dave", 0}}

const total = 1000

// openAccounts opens the accounts of opening and returns their ids by
// owner.
func openAccounts(ctx context.Context, repo *Repo) (map[string]int64, error) {
	ids := map[string]int64{}
	fmt.Print("repository: accounts")
	for _, o := range opening {
		a, err := repo.OpenAccount(ctx, o.owner, o.balance)
		if err != nil {
			return nil, err
		}
		ids[o.owner] = a.ID
		fmt.Printf("  %s #%d: %d", a.Owner, a.ID, a.Balance)
	}
	fmt.Println()
	return ids, nil
}

// checks collects what the run must show.
type checks struct {
	committed atomic.Int64 // Transfer calls that returned a transfer
	problems  []string
	mu        sync.Mutex
}

// fail records a failed check.
func (c *checks) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// attemptsKey is the context key under which a caller leaves a counter for
// callTracer to fill with the call's number of attempts.
type attemptsKey struct{}

// withAttempts returns a context that makes callTracer report the number of
// attempts of the Transaction call made with it into n.
func withAttempts(ctx context.Context, n *int) context.Context {
	return context.WithValue(ctx, attemptsKey{}, n)
}

// callTracer is the pool's tracer: it counts attempts and retries by class,
// and, as a pgtx.TransactionTracer, reports each call's attempts to the
// caller that asked with withAttempts.
type callTracer struct {
	attempts atomic.Int64
	conflict atomic.Int64
	// domainRetried counts attempts that ended with a domain error and
	// were followed by another attempt: it must stay 0.
	domainRetried atomic.Int64
}

// TraceAttemptStart counts an attempt.
func (t *callTracer) TraceAttemptStart(ctx context.Context, _ pgtx.TraceAttemptStartData) context.Context {
	t.attempts.Add(1)
	return ctx
}

// TraceAttemptEnd counts conflict retries and any retry after a domain
// error (there must be none).
func (t *callTracer) TraceAttemptEnd(_ context.Context, d pgtx.TraceAttemptEndData) {
	if d.Retry && d.Class == pgtx.ClassConflict {
		t.conflict.Add(1)
	}
	if d.Retry && (errors.Is(d.Err, ErrInsufficientFunds) || errors.Is(d.Err, ErrAccountNotFound)) {
		t.domainRetried.Add(1)
	}
}

// TraceTransactionStart keeps the caller's context, and with it the
// counter withAttempts left there.
func (t *callTracer) TraceTransactionStart(ctx context.Context, _ pgtx.TraceTransactionStartData) context.Context {
	return ctx
}

// TraceTransactionEnd reports the call's attempts to the caller's counter.
func (t *callTracer) TraceTransactionEnd(ctx context.Context, d pgtx.TraceTransactionEndData) {
	if n, ok := ctx.Value(attemptsKey{}).(*int); ok {
		*n = d.Attempts
	}
}

// planned is one transfer of the round.
type planned struct {
	from, to string
	amount   int64
	note     string
}

// round starts eight transfers together and prints each result. Some of
// them cannot succeed (too large, unknown account), one depends on the order
// in which the others commit.
func round(ctx context.Context, repo *Repo, ids map[string]int64, c *checks) error {
	plan := []planned{
		{"alice", "bob", 120, ""},
		{"bob", "alice", 80, ""},
		{"alice", "carol", 60, ""},
		{"carol", "bob", 90, ""},
		{"alice", "dave", 100, ""},
		{"dave", "carol", 50, "dave starts empty: commits only if serialized after alice's transfer to dave"},
		{"carol", "alice", 5000, "more money than exists: ErrInsufficientFunds, never retried"},
		{"bob", "zoe", 10, "zoe has no account: ErrAccountNotFound"},
	}
	fmt.Printf("\n1. Eight transfers started together (SERIALIZABLE, pgtx.Transaction):\n\n")
	results := make([]string, len(plan))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, p := range plan {
		wg.Go(func() {
			<-start
			results[i] = roundOne(ctx, repo, ids, i, p, c)
		})
	}
	close(start)
	wg.Wait()
	for _, r := range results {
		fmt.Println(r)
	}
	return ctx.Err()
}

// roundOne runs one planned transfer and describes its result.
func roundOne(ctx context.Context, repo *Repo, ids map[string]int64, i int, p planned, c *checks) string {
	to, ok := ids[p.to]
	if !ok {
		to = 999_999 // an id that no account has
	}
	var attempts int
	t, err := repo.Transfer(withAttempts(ctx, &attempts), ids[p.from], to, p.amount)
	line := fmt.Sprintf("  #%d %-5s -> %-5s %5d: ", i+1, p.from, p.to, p.amount)
	switch {
	case err == nil:
		c.committed.Add(1)
		line += fmt.Sprintf("committed as transfer %d after %d attempt(s)", t.ID, attempts)
	case errors.Is(err, ErrInsufficientFunds), errors.Is(err, ErrAccountNotFound):
		line += fmt.Sprintf("%v [errors.Is: %v; pgtx.Classify: %v; attempts: %d]",
			err, domainName(err), pgtx.Classify(err), attempts)
	default:
		line += fmt.Sprintf("FAILED: %v", err)
		c.fail("transfer #%d: %v", i+1, err)
	}
	switch {
	case p.amount > total && !errors.Is(err, ErrInsufficientFunds):
		c.fail("transfer #%d: want ErrInsufficientFunds, got %v", i+1, err)
	case p.amount > total && attempts != 1:
		c.fail("transfer #%d: ErrInsufficientFunds after %d attempts, want 1: it was retried", i+1, attempts)
	case p.to == "zoe" && !errors.Is(err, ErrAccountNotFound):
		c.fail("transfer #%d: want ErrAccountNotFound, got %v", i+1, err)
	}
	if p.note != "" {
		line += "\n        (" + p.note + ")"
	}
	return line
}

// domainName names the domain error err matches.
func domainName(err error) string {
	if errors.Is(err, ErrInsufficientFunds) {
		return "ErrInsufficientFunds"
	}
	return "ErrAccountNotFound"
}
