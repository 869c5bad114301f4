package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// Plain statements in TestChaosBank: beside the transfers, one worker
// writes audit rows with the pool's query methods, outside any
// transaction, through the same faults.

// plainCall is one audit row's write, as reported.
type plainCall struct {
	id  string
	err error
}

// setupChaosAudit creates the audit table the plain worker writes.
func setupChaosAudit(t *testing.T, ctx context.Context, dsn string) {
	t.Helper()
	mustExec(t, ctx, directConn(t, dsn), "create table audit (id text primary key)")
}

// chaosPlainWorker writes audit rows until runCtx ends, each with its own
// deadline under ctx, in turn with Exec, QueryRow, Query, SendBatch and
// CopyFrom, and returns every call's outcome.
func chaosPlainWorker(ctx, runCtx context.Context, pool *pgtx.Pool) []plainCall {
	var calls []plainCall
	for n := 0; runCtx.Err() == nil; n++ {
		c := plainCall{id: fmt.Sprintf("p-%d", n)}
		cctx, cancel := context.WithTimeout(ctx, chaosCallTimeout)
		switch n % 5 {
		case 0:
			_, c.err = pool.Exec(cctx, "insert into audit values ($1)", c.id)
		case 1:
			var id string
			c.err = pool.QueryRow(cctx, "insert into audit values ($1) returning id", c.id).Scan(&id)
		case 2:
			rows, _ := pool.Query(cctx, "insert into audit values ($1) returning id", c.id)
			_, c.err = pgx.CollectRows(rows, pgx.RowTo[string])
		case 3:
			b := &pgx.Batch{}
			b.Queue("insert into audit values ($1)", c.id)
			c.err = pool.SendBatch(cctx, b).Close()
		case 4:
			_, c.err = pool.CopyFrom(cctx, pgx.Identifier{"audit"}, []string{"id"}, pgx.CopyFromRows([][]any{{c.id}}))
		}
		cancel()
		calls = append(calls, c)
		chaosPause(runCtx, 5*time.Millisecond)
	}
	return calls
}

// verifyChaosAudit checks the audit rows against the plain calls: each
// success is there exactly once; a failure is there at most once (its
// statement may have reached the server before its connection broke); and
// no call failed because the server could not be reached: the query
// methods wait for it. It returns how many calls succeeded and failed.
func verifyChaosAudit(t *testing.T, dsn string, calls []plainCall) (ok, failed int) {
	t.Helper()
	ctx := testCtx(t)
	present := map[string]int{}
	rows, _ := directConn(t, dsn).Query(ctx, "select id from audit")
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { present[id]++; return nil }); err != nil {
		t.Fatalf("read the audit rows: %v", err)
	}
	made := map[string]bool{}
	for _, c := range calls {
		made[c.id] = true
		switch {
		case c.err == nil:
			ok++
			if present[c.id] != 1 {
				t.Errorf("plain statement %s succeeded and its row is there %d times", c.id, present[c.id])
			}
		default:
			failed++
			if failed <= 3 {
				t.Logf("  e.g. plain statement %s: %v", c.id, c.err)
			}
			if present[c.id] > 1 {
				t.Errorf("plain statement %s failed and its row is there %d times", c.id, present[c.id])
			}
			if pgtx.Classify(c.err) == pgtx.ClassUnavailable {
				t.Errorf("plain statement %s failed on a server it could not reach, before its deadline: %v", c.id, c.err)
			}
		}
	}
	for id, n := range present {
		if !made[id] || n != 1 {
			t.Errorf("audit row %s is there %d times (made by a call: %v)", id, n, made[id])
		}
	}
	return ok, failed
}
