package integration

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// A ledger workload: writers that each insert unique ids into table ledger
// (id text primary key), in transactions or with plain statements, every
// call with a deadline of its own, while a test makes the server go away
// and come back.
const (
	ledgerDeadline = 10 * time.Second // each call's
	// ledgerEarly is how much before its deadline a call may end and still
	// count as ended by it (the last attempt's own bounds).
	ledgerEarly = 250 * time.Millisecond
)

// ledgerCall is one ledger write, as reported.
type ledgerCall struct {
	id          string
	start, end  time.Time
	err         error
	runs        int
	deadlineHit bool // ended within ledgerEarly of its deadline
	// plain: written with Pool.Exec, outside a transaction. A plain
	// statement whose connection broke after it was sent fails, and may
	// have been applied: it is not sent again.
	plain bool
}

// ledgerPlain reports whether writer w writes with plain statements: one
// writer in four.
func ledgerPlain(w int) bool { return w%4 == 3 }

// ledgerWriter writes unique ids until stop is closed, each call with
// its own deadline, and returns every call. Writer w writes in a
// Transaction, or with Pool.Exec when ledgerPlain(w).
func ledgerWriter(ctx context.Context, pool *pgtx.Pool, prefix string, w int, stop <-chan struct{}) []ledgerCall {
	var calls []ledgerCall
	for n := 0; ; n++ {
		select {
		case <-stop:
			return calls
		default:
		}
		c := ledgerCall{id: fmt.Sprintf("%sw%d-%d", prefix, w, n), start: time.Now(), plain: ledgerPlain(w)}
		cctx, cancel := context.WithTimeout(ctx, ledgerDeadline)
		if c.plain {
			c.runs = 1
			_, c.err = pool.Exec(cctx, "insert into ledger (id) values ($1)", c.id)
		} else {
			c.err = pgtx.Transaction(cctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				c.runs++
				_, err := tx.Exec(ctx, "insert into ledger (id) values ($1)", c.id)
				return err
			})
		}
		cancel()
		c.end = time.Now()
		c.deadlineHit = c.end.After(c.start.Add(ledgerDeadline - ledgerEarly))
		calls = append(calls, c)
	}
}
