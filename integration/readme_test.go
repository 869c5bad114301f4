package integration_test

// The code blocks of README.md (in the repository root) and of the guides
// in docs/, verbatim, in functions that compile. Keep the two in sync: TestReadmeCodeBlocks fails
// when a README block is not found here (or, for the testing guide's tests,
// in examples/testing/bank/bank_test.go). The file lives in the integration
// module because the README's blocks import every part of pgtx, pgtxotel and
// pgtxprom included, which the root module does not depend on.

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jmoiron/sqlx"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/bulkhead"
	"github.com/pgtx-go/pgtx/deferred"
	"github.com/pgtx-go/pgtx/examples/repository/db"
	"github.com/pgtx-go/pgtx/failover"
	"github.com/pgtx-go/pgtx/pgtxgorm"
	"github.com/pgtx-go/pgtx/pgtxotel"
	"github.com/pgtx-go/pgtx/pgtxprom"
	"github.com/pgtx-go/pgtx/pgtxslog"
	"github.com/pgtx-go/pgtx/pgtxsql"
	"github.com/pgtx-go/pgtx/pgtxsqlx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/replica"
	"github.com/pgtx-go/pgtx/tracers"
	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"
)

func readmeIntro(ctx context.Context, pool *pgtx.Pool, amount, id int64) error {
	err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "update accounts set balance = balance - $1 where id = $2", amount, id)
		return err
	})
	return err
}

type Repo struct {
	pool *pgtx.Pool
	q    *db.Queries
}

var ErrInsufficientFunds = errors.New("insufficient funds")

func (r *Repo) Withdraw(ctx context.Context, account, amount int64) error {
	return pgtx.Transaction(ctx, r.pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		q := r.q.WithTx(tx) // queries bound to this attempt's transaction
		acct, err := q.GetAccount(ctx, account)
		if err != nil {
			return err
		}
		if acct.Balance < amount {
			return ErrInsufficientFunds // not retried; errors.Is works on the result
		}
		return q.UpdateBalance(ctx, db.UpdateBalanceParams{ID: account, Balance: acct.Balance - amount})
	})
}

func readmeOpen(ctx context.Context) error {
	pool, err := pgtx.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	repo := &Repo{pool: pool, q: db.New(pool)}
	return repo.Withdraw(ctx, 1, 10)
}

func readmeBackpressure(cfg *pgtx.Config) {
	cfg.Retry.MaxAdaptiveRetries = -1 // no overload retries at all
	cfg.Retry.BudgetRatio = -1        // per-call caps only
	cfg.Retry.BudgetRatio = 0.1       // or a tighter budget
}

func readmeDefaults(ctx context.Context) error {
	cfg, err := pgtx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	cfg.MaxConns = 20                      // pgxpool's own fields work as usual
	cfg.StatementTimeout = 2 * time.Second // every statement, as a session parameter
	cfg.AcquireTimeout = 500 * time.Millisecond
	cfg.Retry.MaxRetries = 5
	pool, err := pgtx.NewWithConfig(ctx, cfg)
	if err == nil {
		pool.Close()
	}
	return err
}

func readmeObservability(cfg *pgtx.Config, pool *pgtx.Pool) error {
	cfg.Tracer = pgtxslog.NewTracer(pgtxslog.WithLogger(slog.Default())) // log lines: retries, failures, cancels, ambiguous commits

	cfg.Tracer = pgtxotel.NewTracer() // a span per call, a child span per attempt, metrics

	metrics := pgtxprom.NewTracer(pgtxprom.WithPoolName("main")) // calls by outcome, attempts, retries by class, backoff, budget refusals, breaker changes
	cfg.Tracer = metrics
	collector, err := pgtxprom.NewCollector(pool, "main") // the pool's statistics: queue depth, waits, cancels, breaker
	if err != nil {
		return err
	}
	prometheus.MustRegister(metrics, collector)

	cfg.Tracer = tracers.Join(pgtxslog.NewTracer(), metrics) // each tracer receives every event it implements
	return nil
}

// reconciler is the pool's tracer: pgtxslog's, which also queues the lost
// commits for the application.
type reconciler struct {
	*pgtxslog.Tracer
	lost chan<- failover.CommitLostData
}

func (r reconciler) TraceCommitLost(ctx context.Context, d failover.CommitLostData) {
	r.Tracer.TraceCommitLost(ctx, d) // still logged
	// d.Label, d.Xid, d.CommittedAt, d.Timeline (acknowledged there),
	// d.NewTimeline (lacks it), d.Status (the new server's answer)
	select {
	case r.lost <- d:
	default: // never block the pool's goroutine: the log line stays
	}
}

func lostCommitsTracer(cfg *pgtx.Config, lostCommits chan<- failover.CommitLostData) {
	cfg.Tracer = reconciler{Tracer: pgtxslog.NewTracer(), lost: lostCommits}
}

func lostCommitsXid(ctx context.Context, tx pgx.Tx) (int64, error) {
	var xid int64
	err := tx.QueryRow(ctx, "select pg_current_xact_id()::text::bigint").Scan(&xid)
	return xid, err
}

func readmeReplica(ctx context.Context, primary *pgtx.Pool, replicaCfg *pgtx.Config, id int64) error {
	var name string
	replicaCfg.Breaker = &pgtx.BreakerConfig{Name: "replica", SlowCallThreshold: 200 * time.Millisecond}
	replicaCfg.CancelGrace = 100 * time.Millisecond // a read that falls back should not wait for the replica
	replicaPool, err := pgtx.NewWithConfig(ctx, replicaCfg)
	if err != nil {
		return err
	}
	router, err := replica.New(primary, []*pgtx.Pool{replicaPool}, nil)
	if err != nil {
		return err
	}
	err = router.Read(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, "select name from items where id = $1", id).Scan(&name)
	})
	return err
}

func readmeBulkheads(ctx context.Context, cfg *pgtx.Config) error {
	bh, err := bulkhead.New(ctx, &bulkhead.Config{Base: cfg, Pools: map[string]bulkhead.PoolConfig{
		"checkout":  {MaxConns: 8},
		"analytics": {MaxConns: 2, MaxWaiters: 4}, // a 5th waiter gets ErrQueueFull at once
	}})
	if err != nil {
		return err
	}
	defer bh.Close()
	checkout, err := bh.Pool("checkout")
	_ = checkout
	return err
}

func readmeMigrate(ctx context.Context, pool *pgtx.Pool, body func(context.Context, pgx.Tx) error) error {
	// before: for attempt := 0; attempt < 5; attempt++ { err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.Serializable}, fn); if !retryable(err) { break }; time.Sleep(...) }
	err := pgtx.Transaction(ctx, pool, pgtx.Serializable,
		func(ctx context.Context, tx pgx.Tx) error { return body(ctx, tx) })
	return err
}

func readmeAdopt(ctx context.Context, iamToken func(context.Context, *pgx.ConnConfig) error) error {
	poolConfig, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	poolConfig.BeforeConnect = iamToken // your hooks keep working
	pool, err := pgtx.NewWithConfig(ctx, &pgtx.Config{Config: poolConfig})
	if err == nil {
		pool.Close()
	}
	return err
}

func readmeGuards(ctx context.Context, pool *pgtx.Pool, item string, sendReceipt func(context.Context, int64)) (int64, error) {
	order, err := pgtx.TransactionValue(ctx, pool, pgtx.Serializable, pgtx.Options{Label: "checkout"},
		func(ctx context.Context, tx pgx.Tx) (int64, error) {
			var id int64
			if err := tx.QueryRow(ctx, "insert into orders (item) values ($1) returning id", item).Scan(&id); err != nil {
				return 0, err
			}
			if pgtx.Attempt(ctx) > 1 {
				slog.InfoContext(ctx, "checkout ran again") // the attempt number, from ctx
			}
			// Runs once, after COMMIT; never for an attempt that was retried.
			return id, pgtx.AfterCommit(ctx, func(ctx context.Context) { sendReceipt(ctx, id) })
		})
	return order, err
}

func readmeSQL(ctx context.Context, pool *pgtx.Pool, amount, id int64) error {
	db := pgtxsql.OpenDB(pool) // a *sql.DB; pgtxsqlx.OpenDB and pgtxgorm.Dialector for sqlx and GORM
	err := pgtxsql.Transaction(ctx, db, pgtx.Serializable, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "update accounts set balance = balance - $1 where id = $2", amount, id)
		return err
	})
	return errors.Join(err, db.Close())
}

// docs/database-sql.md: database/sql, sqlx and GORM over one pool.

func sqlOpen(ctx context.Context, amount, id int64) error {
	pool, err := pgtx.New(ctx, os.Getenv("DATABASE_URL")) // or pgtx.NewWithConfig, for settings and tracers
	if err != nil {
		return err
	}
	defer pool.Close()

	db := pgtxsql.OpenDB(pool) // a *sql.DB; closing it leaves the pool open
	defer db.Close()
	dbx := pgtxsqlx.OpenDB(pool) // a *sqlx.DB, with PostgreSQL's $1 placeholders
	defer dbx.Close()
	gdb, err := gorm.Open(pgtxgorm.Dialector(pool), &gorm.Config{}) // GORM's PostgreSQL dialect
	if err != nil {
		return err
	}
	sqlDB, err := gdb.DB()
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	return errors.Join(sqlTransaction(ctx, db, amount, id), sqlxTransaction(ctx, dbx, amount, id),
		gormTransaction(ctx, gdb, amount, id, func(int64) {}), sqlRun(ctx, db))
}

func sqlTransaction(ctx context.Context, db *sql.DB, amount, id int64) error {
	err := pgtxsql.Transaction(ctx, db, pgtx.Serializable, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "update accounts set balance = balance - $1 where id = $2", amount, id)
		return err
	})
	return err
}

func sqlxTransaction(ctx context.Context, dbx *sqlx.DB, amount, id int64) error {
	err := pgtxsqlx.Transaction(ctx, dbx, pgtx.Serializable, func(ctx context.Context, tx *sqlx.Tx) error {
		var balance int64
		if err := tx.GetContext(ctx, &balance, "select balance from accounts where id = $1", id); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "update accounts set balance = $1 where id = $2", balance-amount, id)
		return err
	})
	return err
}

// Account is the GORM model of accounts.
type Account struct {
	ID      int64
	Balance int64
}

func gormTransaction(ctx context.Context, gdb *gorm.DB, amount, id int64, notify func(int64)) error {
	err := pgtxgorm.TransactionWithOptions(ctx, gdb, pgtx.Serializable, pgtx.Options{Label: "withdraw"}, func(tx *gorm.DB) error {
		if err := tx.Model(&Account{}).Where("id = ?", id).Update("balance", gorm.Expr("balance - ?", amount)).Error; err != nil {
			return err
		}
		return pgtx.AfterCommit(tx.Statement.Context, func(context.Context) { notify(id) })
	})
	return err
}

func sqlRun(ctx context.Context, db *sql.DB) error {
	err := pgtxsql.Run(ctx, db, pgtx.Serializable, pgtx.Options{},
		func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) },
		func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "insert into audit (what) values ($1)", "login")
			return err
		})
	return err
}

// The README's section on pgtxtest: its tests are examples/testing/bank's,
// which TestReadmeCodeBlocks finds in that package's bank_test.go.

func readmeTestingMigrations() pgtxtest.Option {
	// The *.sql files of the directory next to this file, in lexical order. They
	// run once, into a template database; each test's database is a copy of it.
	var migrations = pgtxtest.WithMigrationsDir("migrations")
	return migrations
}

// docs/roundtrips.md: a transfer whose writes are deferred, and a batch
// as one transaction.
func roundtripsDeferred(ctx context.Context, pool *pgtx.Pool, from, to, amount int64) error {
	err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		var balance int64
		if err := tx.QueryRow(ctx, "select balance from accounts where id = $1 for update", from).Scan(&balance); err != nil {
			return err
		}
		if balance < amount {
			return ErrInsufficientFunds // the read steers fn: it goes at once
		}
		if err := deferred.Exec(ctx, "update accounts set balance = balance - $2 where id = $1", from, amount); err != nil {
			return err
		}
		if err := deferred.Exec(ctx, "update accounts set balance = balance + $2 where id = $1", to, amount); err != nil {
			return err
		}
		return deferred.Exec(ctx, "insert into ledger (payer, payee, amount) values ($1, $2, $3)", from, to, amount)
	})
	return err
}

func roundtripsBatch(ctx context.Context, pool *pgtx.Pool, from, to, amount int64) (int64, error) {
	var ledgerID int64
	b := &pgx.Batch{}
	b.Queue("update accounts set balance = balance - $2 where id = $1 and balance >= $2", from, amount)
	b.Queue("update accounts set balance = balance + $2 where id = $1", to, amount)
	b.Queue("insert into ledger (payer, payee, amount) values ($1, $2, $3) returning id", from, to, amount).
		QueryRow(func(row pgx.Row) error { return row.Scan(&ledgerID) })
	err := deferred.Transaction(ctx, pool, pgtx.ReadCommitted, pgtx.Options{}, b)
	return ledgerID, err
}

// The README's snippets are used, so the compiler checks every one of them.
var _ = []any{roundtripsDeferred, roundtripsBatch, readmeIntro, readmeOpen, readmeBackpressure, readmeDefaults, readmeObservability, readmeReplica, readmeBulkheads, readmeMigrate,
	readmeAdopt, readmeGuards, readmeTestingMigrations, lostCommitsTracer, lostCommitsXid, sqlOpen, readmeSQL}

// TestReadmeCodeBlocks checks that every Go code block of README.md and of
// the guides in docs/ compiles: a whole program (package main) is one of the
// examples, line for line, which the examples module builds; every other
// block appears, line for line (leading white space aside), in this file,
// where it compiles, or in examples/testing/bank's tests, where it runs.
func TestReadmeCodeBlocks(t *testing.T) {
	text := strings.Join(normalizedLines(t, "readme_test.go"), "\n") + "\n\n" +
		strings.Join(normalizedLines(t, "../examples/testing/bank/bank_test.go"), "\n")
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no guides in docs/ (%v)", err)
	}
	for _, path := range append([]string{"../README.md"}, docs...) {
		blocks := goBlocks(t, path)
		if path == "../README.md" && len(blocks) == 0 {
			t.Fatal("no Go blocks found in README.md")
		}
		for i, block := range blocks {
			if len(block) > 0 && block[0] == "package main" {
				if !isExample(t, block) {
					t.Errorf("%s Go block %d is a program, but no examples/*/main.go is that program:\n%s", path, i+1, strings.Join(block, "\n"))
				}
				continue
			}
			if !strings.Contains(text, strings.Join(block, "\n")) {
				t.Errorf("%s Go block %d is neither in integration/readme_test.go nor in examples/testing/bank/bank_test.go:\n%s",
					path, i+1, strings.Join(block, "\n"))
			}
		}
	}
}

// TestDocsLinks checks that every relative link of README.md and of the
// guides names a file or directory of the repository.
func TestDocsLinks(t *testing.T) {
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	for _, path := range append([]string{"../README.md"}, docs...) {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(path), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", path, target)
			}
		}
	}
}

// isExample reports whether block is, line for line from its package
// clause on, the main.go of one of the examples.
func isExample(t *testing.T, block []string) bool {
	t.Helper()
	mains, err := filepath.Glob("../examples/*/main.go")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(block, "\n")
	for _, path := range mains {
		lines := normalizedLines(t, path)
		for i, l := range lines {
			if l == "package main" {
				lines = lines[i:]
				break
			}
		}
		if strings.Join(lines, "\n") == want {
			return true
		}
	}
	return false
}

// normalizedLines returns the file's non-empty lines without leading or
// trailing white space.
func normalizedLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// goBlocks returns the normalized lines of every ```go block of a markdown
// file.
func goBlocks(t *testing.T, path string) [][]string {
	t.Helper()
	var blocks [][]string
	var cur []string
	in := false
	for _, l := range normalizedLines(t, path) {
		switch {
		case !in && l == "```go":
			in, cur = true, nil
		case in && l == "```":
			in = false
			blocks = append(blocks, cur)
		case in:
			cur = append(cur, l)
		}
	}
	return blocks
}
