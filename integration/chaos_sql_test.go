package integration

import (
	"context"
	"database/sql"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxgorm"
	"github.com/pgtx-go/pgtx/pgtxsql"
	"github.com/pgtx-go/pgtx/pgtxsqlx"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// The database/sql variant of TestChaosBank: beside the pgx workers, four
// more make the same transfers, in the same run, under the same faults,
// through pgtxsql.Transaction (two workers, one SERIALIZABLE and one READ
// COMMITTED unless the bank is hot), pgtxsqlx.Transaction and
// pgtxgorm.Transaction, each on a *sql.DB of its own over the run's
// pgtx.Pool. The same audit checks their calls, and the pool's one Stats
// must count their ambiguous COMMITs with the others.

// chaosSQLAfterCalls is how many transfers each database/sql API must
// make once the faults stop.
const chaosSQLAfterCalls = 5

// chaosRow is an account row as the database/sql workers read it.
type chaosRow struct {
	ID      int32 `db:"id"`
	Balance int64 `db:"balance"`
}

// chaosCovered reports whether rows, the transfer's two accounts, show
// from's balance covering amount.
func chaosCovered(rows []chaosRow, from int32, amount int64) bool {
	for _, r := range rows {
		if r.ID == from {
			return r.Balance >= amount
		}
	}
	return false
}

// chaosSQLAPIs returns the database/sql variant's APIs, each on a *sql.DB
// over pool that t's cleanup closes. Their transfers are pgx's, written as
// each library's users write them.
func chaosSQLAPIs(t *testing.T, pool *pgtx.Pool) []chaosAPI {
	t.Helper()
	opts := pgtx.Options{Label: "transfer"}

	db := pgtxsql.OpenDB(pool)
	t.Cleanup(func() { _ = db.Close() })
	sqlAPI := chaosAPI{name: "database/sql", workers: 2, db: db, transfer: func(ctx context.Context, iso pgtx.Isolation, c *chaosCall) error {
		return pgtxsql.TransactionWithOptions(ctx, db, iso, opts, func(ctx context.Context, tx *sql.Tx) error {
			c.runs++
			rows, err := tx.QueryContext(ctx, "select id, balance from accounts where id = any($1) order by id for update", []int32{c.from, c.to})
			if err != nil {
				return err
			}
			var accounts []chaosRow
			for rows.Next() {
				var r chaosRow
				if err := rows.Scan(&r.ID, &r.Balance); err != nil {
					_ = rows.Close()
					return err
				}
				accounts = append(accounts, r)
			}
			if err := rows.Close(); err != nil {
				return err
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if !chaosCovered(accounts, c.from, c.amount) {
				return errChaosInsufficientFunds
			}
			if _, err := tx.ExecContext(ctx, "update accounts set balance = balance - $2 where id = $1", c.from, c.amount); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "update accounts set balance = balance + $2 where id = $1", c.to, c.amount); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, "insert into ledger (transfer_id, src, dst, amount) values ($1, $2, $3, $4)", c.id, c.from, c.to, c.amount)
			return err
		})
	}}

	xdb := pgtxsqlx.OpenDB(pool)
	t.Cleanup(func() { _ = xdb.Close() })
	sqlxAPI := chaosAPI{name: "sqlx", workers: 1, db: xdb.DB, transfer: func(ctx context.Context, iso pgtx.Isolation, c *chaosCall) error {
		return pgtxsqlx.TransactionWithOptions(ctx, xdb, iso, opts, func(ctx context.Context, tx *sqlx.Tx) error {
			c.runs++
			var accounts []chaosRow
			if err := tx.SelectContext(ctx, &accounts, "select id, balance from accounts where id = any($1) order by id for update", []int32{c.from, c.to}); err != nil {
				return err
			}
			if !chaosCovered(accounts, c.from, c.amount) {
				return errChaosInsufficientFunds
			}
			if _, err := tx.ExecContext(ctx, tx.Rebind("update accounts set balance = balance - ? where id = ?"), c.amount, c.from); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, tx.Rebind("update accounts set balance = balance + ? where id = ?"), c.amount, c.to); err != nil {
				return err
			}
			_, err := tx.NamedExecContext(ctx, "insert into ledger (transfer_id, src, dst, amount) values (:id, :src, :dst, :amount)",
				map[string]any{"id": c.id, "src": c.from, "dst": c.to, "amount": c.amount})
			return err
		})
	}}

	gdb, err := gorm.Open(pgtxgorm.Dialector(pool), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatalf("gorm.Open: %v", err)
	}
	gsql, err := gdb.DB()
	if err != nil {
		t.Fatalf("gorm's *sql.DB: %v", err)
	}
	t.Cleanup(func() { _ = gsql.Close() })
	gormAPI := chaosAPI{name: "gorm", workers: 1, db: gsql, transfer: func(ctx context.Context, iso pgtx.Isolation, c *chaosCall) error {
		return pgtxgorm.TransactionWithOptions(ctx, gdb, iso, opts, func(tx *gorm.DB) error {
			c.runs++
			var accounts []chaosRow
			if err := tx.Raw("select id, balance from accounts where id in ? order by id for update", []int32{c.from, c.to}).
				Scan(&accounts).Error; err != nil {
				return err
			}
			if !chaosCovered(accounts, c.from, c.amount) {
				return errChaosInsufficientFunds
			}
			if err := tx.Exec("update accounts set balance = balance - ? where id = ?", c.amount, c.from).Error; err != nil {
				return err
			}
			if err := tx.Exec("update accounts set balance = balance + ? where id = ?", c.amount, c.to).Error; err != nil {
				return err
			}
			return tx.Exec("insert into ledger (transfer_id, src, dst, amount) values (?, ?, ?, ?)", c.id, c.from, c.to, c.amount).Error
		})
	}}
	return []chaosAPI{sqlAPI, sqlxAPI, gormAPI}
}

// checkChaosSQLDBs fails t if a database/sql API's *sql.DB still holds a
// connection once every call has returned: a transaction or rows left open
// by a call that failed.
func checkChaosSQLDBs(t *testing.T, apis []chaosAPI) {
	t.Helper()
	for _, api := range apis {
		if st := api.db.Stats(); st.InUse != 0 || st.OpenConnections != 0 {
			t.Errorf("%s: after every call returned, its *sql.DB has %d connections open, %d in use", api.name, st.OpenConnections, st.InUse)
		}
	}
}

// logChaosAPIs logs the calls of each API, by outcome.
func logChaosAPIs(t *testing.T, tally chaosTally) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(tally.apis)) {
		t.Logf("  %s: %s", name, chaosCounts(tally.apis[name]))
	}
}

// checkChaosAPIs fails t if a database/sql API committed no transfer
// while the faults hit (calls), or, in a run of at least 5s, none of them
// ran a transaction again: the run would prove nothing about them.
func checkChaosAPIs(t *testing.T, calls []chaosCall, apis []chaosAPI, dur time.Duration) {
	t.Helper()
	made, committed, reran := make(map[string]int), make(map[string]int), make(map[string]int)
	for _, c := range calls {
		made[c.api]++
		if c.outcome == chaosCommitted {
			committed[c.api]++
		}
		if c.runs > 1 {
			reran[c.api]++
		}
	}
	rerun := 0
	for _, api := range apis {
		if committed[api.name] == 0 {
			t.Errorf("%s committed none of its %d transfers during the faults: the run proves nothing about it", api.name, made[api.name])
		}
		rerun += reran[api.name]
	}
	if dur >= 5*time.Second && rerun == 0 {
		t.Errorf("no transfer through database/sql ran its transaction again during the faults: the run proves nothing about their reruns")
	}
}
