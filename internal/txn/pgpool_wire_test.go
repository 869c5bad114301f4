package txn

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/connstate"
	"github.com/pgtx-go/pgtx/internal/fakepg"
)

// TestPgpoolOverTheWire: behind Pgpool-II BEGIN goes first, alone, before
// fn's first statement: a read-write transaction's with SET LOCAL
// statement_timeout (its deadline's, or the session's default), which
// makes it a writing one for Pgpool-II; a balanced read-only
// transaction's after the session's statement_timeout, set only for a
// deadline and restored with COMMIT or ROLLBACK; a read-only one kept on
// the primary (statement_level_load_balance) as a read-write one. A fn
// that sends nothing sends nothing.
func TestPgpoolOverTheWire(t *testing.T) {
	const (
		beginRW = "begin isolation level REPEATABLE READ"
		beginRO = "begin isolation level REPEATABLE READ read only"
		read    = "select balance from acct where id = 1"
	)
	tests := []struct {
		name     string
		begin    string
		pin      bool
		deadline bool
		fail     bool // fn's statement fails: ROLLBACK
		nothing  bool
		wantSQL  []string // "set ... = " stands for any deadline
	}{
		{name: "read-write, a deadline", begin: beginRW, deadline: true,
			wantSQL: []string{beginRW, "set local statement_timeout = ", read, "commit"}},
		{name: "read-write, no deadline", begin: beginRW,
			wantSQL: []string{beginRW, "set local statement_timeout to default", read, "commit"}},
		{name: "read-only balanced, a deadline", begin: beginRO, deadline: true,
			wantSQL: []string{"set statement_timeout = ", beginRO, read, "commit", restoreTimeoutSQL}},
		{name: "read-only balanced, no deadline", begin: beginRO,
			wantSQL: []string{beginRO, read, "commit"}},
		{name: "read-only balanced, rolled back", begin: beginRO, deadline: true, fail: true,
			wantSQL: []string{"set statement_timeout = ", beginRO, read, "rollback", restoreTimeoutSQL}},
		{name: "read-only kept on the primary", begin: beginRO, pin: true, deadline: true,
			wantSQL: []string{beginRO, "set local statement_timeout = ", read, "commit"}},
		{name: "nothing sent", begin: beginRO, deadline: true, nothing: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &fakepg.Server{Answer: func(_ int, s string) fakepg.Answer {
				if tt.fail && s == read {
					return fakepg.Answer{Code: "42501"}
				}
				return fakepg.Answer{}
			}}
			conn := srv.Connect(t, pgx.QueryExecModeCacheDescribe)
			st := connstate.Attach(conn.PgConn())
			st.Pgpool, st.PinReadOnly = true, tt.pin
			ctx := context.Background()
			if tt.deadline {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Minute)
				defer cancel()
			}
			var tx Tx
			tx.Start(ctx, conn, &Settings{}, tt.begin, 0)
			if !tt.nothing {
				_, _ = tx.Exec(ctx, read, pgx.QueryExecModeSimpleProtocol)
			}
			c, err := Commit(ctx, &tx, nil)
			tx.End()
			switch {
			case tt.fail && c != classify.Permanent:
				t.Errorf("Commit = %v, %v; want the rollback of a failed statement", c, err)
			case !tt.fail && (c != classify.None || err != nil):
				t.Errorf("Commit = %v, %v; want committed", c, err)
			}
			got := srv.SQL()
			if len(got) != len(tt.wantSQL) {
				t.Fatalf("the server received %q, want %q", got, tt.wantSQL)
			}
			for i, want := range tt.wantSQL {
				if got[i] != want && !(strings.HasSuffix(want, "= ") && strings.HasPrefix(got[i], want)) {
					t.Fatalf("the server received %q, want %q", got, tt.wantSQL)
				}
			}
			if st.RestoreTimeout {
				t.Error("the session's statement_timeout is left set for the next acquire to restore")
			}
		})
	}
}
