package txn

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/connstate"
	"github.com/pgtx-go/pgtx/internal/errs"
	"github.com/pgtx-go/pgtx/internal/fakeclock"
	"github.com/pgtx-go/pgtx/internal/fakepg"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// The fake server's system and run, as the resolver's server reports them.
var (
	fakeSystem = int64(7)
	fakeRun    = resolve.Run{Timeline: 1, Start: 1_700_000_000_000_000, Epoch: 1_700_000_000_500_000}
	// fakeLSN is the end of the record each id read writes.
	fakeLSN = int64(50436736)
)

// fakeResolver answers what became of a transaction as the fake server
// would, the same system in the same run: status (committed or aborted)
// for every id. BackendXid tells backendXid (0: the backend runs no
// transaction with an id). It records the ids it was asked about.
type fakeResolver struct {
	status     string
	backendXid uint64
	conn       *releaser // the attempt's connection, which must be given back first

	mu    sync.Mutex
	asked []resolve.ID
	held  bool // asked while the connection was still held
}

// releaser counts how often the attempt's connection is given back.
type releaser struct{ n int }

func (r *releaser) Release() { r.n++ }

func (r *fakeResolver) Ask(_ context.Context, id resolve.ID, _ resolve.End, _ int64) resolve.Answer {
	r.mu.Lock()
	r.asked = append(r.asked, id)
	r.held = r.held || r.conn.n == 0
	r.mu.Unlock()
	return resolve.Answer{View: resolve.View{System: fakeSystem, Run: fakeRun, Status: r.status}, Synced: true}
}

func (r *fakeResolver) BackendXid(context.Context, uint32, int64, func(context.Context) error) (uint64, bool) {
	return r.backendXid, r.backendXid != 0
}

// idReads answers the reads of the transaction's id with xids in turn (nil:
// NULL, no id), with the server's run after it when the read asks for it,
// and every other statement by answer (nil: success).
func idReads(answer func(string) fakepg.Answer, xids ...any) func(int, string) fakepg.Answer {
	var mu sync.Mutex
	return func(_ int, sql string) fakepg.Answer {
		if !strings.HasPrefix(sql, "select pg_current_xact_id") {
			if answer != nil {
				return answer(sql)
			}
			return fakepg.Answer{}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(xids) == 0 {
			return fakepg.Answer{Close: true} // more reads than scripted: the connection is lost
		}
		xid := xids[0]
		if len(xids) > 1 { // the last one answers every later read
			xids = xids[1:]
		}
		if xid == "lost" {
			return fakepg.Answer{Close: true}
		}
		var lsn any // NULL: no id, or the read writes no record
		if xid != nil && strings.Contains(sql, "pg_logical_emit_message") {
			lsn = fakeLSN
		}
		a := fakepg.Answer{Columns: []fakepg.Column{{Name: "pgtx_xid", OID: 20}, {Name: "lsn", OID: 20}}, Rows: [][]any{{xid, lsn}}}
		if strings.Contains(sql, "pg_walfile_name") { // the run too: behind a pooler
			a.Columns = append(a.Columns, fakepg.Column{Name: "timeline", OID: 23}, fakepg.Column{Name: "start", OID: 20},
				fakepg.Column{Name: "epoch", OID: 20}, fakepg.Column{Name: "flushed", OID: 20})
			a.Rows[0] = append(a.Rows[0], fakeRun.Timeline, fakeRun.Start, fakeRun.Epoch, 4096)
		}
		return a
	}
}

// commitLost loses the answer of every COMMIT.
func commitLost(sql string) fakepg.Answer {
	if sql == "commit" {
		return fakepg.Answer{Close: true}
	}
	return fakepg.Answer{}
}

// TestResolvingOverTheWire: in a resolving pool, each way a first write
// goes (the simple protocol, pgx's batch in each exec mode, the id read
// prepared in SQL) reads the transaction's id with fn's
// statements, and behind a pooler the server's run with it; writes pgtx
// does not see make COMMIT's write read it. A COMMIT whose answer is lost
// is then decided by the id read: the resolver asked about that id and run
// (committed → success; aborted → run again), no id → run again without
// asking, an id that never arrived → asked of the backend, or unknown.
func TestResolvingOverTheWire(t *testing.T) {
	write := func(ctx context.Context, tx *Tx) error { _, err := tx.Exec(ctx, stmt); return err }
	writeArgs := func(ctx context.Context, tx *Tx) error {
		_, err := tx.Exec(ctx, "update acct set balance = $1 where id = 1", "0")
		return err
	}
	unseen := func(ctx context.Context, tx *Tx) error {
		var n int64
		if err := tx.QueryRow(ctx, "select count(*) from acct where id > $1", "0").Scan(&n); err != nil {
			return err
		}
		_, err := tx.Conn().Exec(ctx, "insert into acct values (3, 0)", pgx.QueryExecModeSimpleProtocol)
		return err
	}
	count := func(sql string) fakepg.Answer {
		if strings.HasPrefix(sql, "select count(*)") {
			return fakepg.Answer{Columns: []fakepg.Column{{Name: "count", OID: 20}}, Rows: [][]any{{2}}}
		}
		return commitLost(sql)
	}
	tests := []struct {
		name       string
		mode       pgx.QueryExecMode
		pooler     bool // the connection does not reach its backend directly
		revoked    bool // the role may not call pg_logical_emit_message
		fn         func(context.Context, *Tx) error
		other      func(string) fakepg.Answer // the answer to statements other than the id reads
		xids       []any                      // the id reads' answers, in turn (idReads)
		status     string                     // the resolver's answer
		backendXid uint64                     // what the backend tells
		want       classify.Class
		wantErr    func(error) bool
		wantAsked  []uint64
		unanswered bool
	}{
		{name: "simple protocol: committed", mode: pgx.QueryExecModeSimpleProtocol, fn: write,
			other: commitLost, xids: []any{742}, status: "committed",
			want: classify.None, wantErr: isNil, wantAsked: []uint64{742}},
		{name: "simple protocol: aborted, run again", mode: pgx.QueryExecModeSimpleProtocol, fn: write,
			other: commitLost, xids: []any{742}, status: "aborted",
			want: classify.ConnectionLost, wantErr: notUnknown, wantAsked: []uint64{742}},
		{name: "simple protocol: no id, nothing changed, run again", mode: pgx.QueryExecModeSimpleProtocol,
			fn: write, other: commitLost, xids: []any{nil}, status: "committed",
			want: classify.ConnectionLost, wantErr: notUnknown},
		{name: "pgx's batch behind a pooler: the run read with the id", mode: pgx.QueryExecModeExec, pooler: true,
			fn: writeArgs, other: commitLost, xids: []any{742}, status: "committed",
			want: classify.None, wantErr: isNil, wantAsked: []uint64{742}},
		{name: "pgx's batch, named statements", mode: pgx.QueryExecModeCacheStatement, fn: writeArgs,
			other: commitLost, xids: []any{742}, status: "committed",
			want: classify.None, wantErr: isNil, wantAsked: []uint64{742}},
		{name: "pgx's batch, described statements, behind a pooler", mode: pgx.QueryExecModeCacheDescribe, pooler: true,
			fn: writeArgs, other: commitLost, xids: []any{742}, status: "aborted",
			want: classify.ConnectionLost, wantErr: notUnknown, wantAsked: []uint64{742}},
		{name: "the id read prepared in SQL", mode: pgx.QueryExecModeCacheStatement, fn: write,
			other: commitLost, xids: []any{742}, status: "committed",
			want: classify.None, wantErr: isNil, wantAsked: []uint64{742}},
		{name: "simple protocol, the message revoked: no record's end", mode: pgx.QueryExecModeSimpleProtocol, fn: write,
			revoked: true, other: commitLost, xids: []any{742}, status: "committed",
			want: classify.None, wantErr: isNil, wantAsked: []uint64{742}},
		{name: "the id read prepared in SQL, the message revoked", mode: pgx.QueryExecModeCacheStatement, fn: write,
			revoked: true, other: commitLost, xids: []any{742}, status: "committed",
			want: classify.None, wantErr: isNil, wantAsked: []uint64{742}},
		{name: "pgx's batch behind a pooler, the message revoked", mode: pgx.QueryExecModeExec, pooler: true, fn: writeArgs,
			revoked: true, other: commitLost, xids: []any{742}, status: "committed",
			want: classify.None, wantErr: isNil, wantAsked: []uint64{742}},
		{name: "unseen writes: the id read in COMMIT's write", mode: pgx.QueryExecModeExec, fn: unseen,
			other: count, xids: []any{nil, 743}, status: "committed",
			want: classify.None, wantErr: isNil, wantAsked: []uint64{743}},
		{name: "unseen writes, prepared read in COMMIT's write", mode: pgx.QueryExecModeCacheStatement, fn: unseen,
			other: count, xids: []any{nil, 743}, status: "committed",
			want: classify.None, wantErr: isNil, wantAsked: []uint64{743}},
		{name: "unseen writes, the id lost: the backend tells it", mode: pgx.QueryExecModeExec, fn: unseen,
			other: count, xids: []any{nil, "lost"}, status: "committed", backendXid: 744,
			want: classify.None, wantErr: isNil, wantAsked: []uint64{744}},
		{name: "unseen writes, the id lost, the backend gone: unknown", mode: pgx.QueryExecModeExec, fn: unseen,
			other: count, xids: []any{nil, "lost"}, status: "committed",
			want: classify.Ambiguous, wantErr: is(errs.ErrCommitUnknown), unanswered: true},
		{name: "behind a pooler, the id lost: unknown, no backend to ask", mode: pgx.QueryExecModeExec, pooler: true,
			fn: unseen, other: count, xids: []any{nil, "lost"}, status: "committed", backendXid: 744,
			want: classify.Ambiguous, wantErr: is(errs.ErrCommitUnknown), unanswered: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &fakepg.Server{Answer: idReads(tt.other, tt.xids...)}
			conn := srv.Connect(t, tt.mode)
			ctx := context.Background()
			st := connstate.Attach(conn.PgConn())
			if st == nil || connstate.Of(conn.PgConn()) != st {
				t.Fatal("the connection keeps no state")
			}
			st.Res = resolve.Conn{Capable: true, Direct: !tt.pooler, System: fakeSystem, Run: fakeRun, BackendStart: 99, Emit: !tt.revoked}
			if tt.pooler {
				st.Res.Run = resolve.Run{} // captured per transaction, with its id
			}
			st.SetMode(tt.mode)
			if err := PrepareReads(ctx, conn, st); err != nil {
				t.Fatal(err)
			}
			slot := &releaser{}
			res := &fakeResolver{status: tt.status, backendXid: tt.backendXid, conn: slot}
			counters := &resolve.Counters{}
			s := &Settings{Resolving: true, ResolveTimeout: 5 * time.Second, Resolver: res,
				Clock: &fakeclock.Clock{T: time.Unix(1_700_000_000, 0)}, Counters: counters}
			var tx Tx
			tx.Start(ctx, conn, s, begin, 0)
			if err := tt.fn(ctx, &tx); err != nil {
				t.Fatalf("fn: %v", err)
			}
			c, err := Commit(ctx, &tx, slot)
			tx.End()
			if c != tt.want || !tt.wantErr(err) {
				t.Errorf("Commit = %v, %v; want class %v", c, err, tt.want)
			}
			var asked []uint64
			for _, id := range res.asked {
				asked = append(asked, id.Xid)
				if id.System != fakeSystem || id.Run != fakeRun {
					t.Errorf("asked about %d of system %d, run %+v; want system %d, run %+v", id.Xid, id.System, id.Run, fakeSystem, fakeRun)
				}
				wantLSN := fakeLSN
				if tt.backendXid != 0 || tt.revoked {
					wantLSN = 0 // from the backend, or no record written
				}
				if id.LSN != wantLSN {
					t.Errorf("asked about %d with its record's end at %d, want %d", id.Xid, id.LSN, wantLSN)
				}
			}
			if res.held || slot.n > 1 {
				t.Errorf("the resolver was asked while the dead connection was held (%v), or it was given back %d times", res.held, slot.n)
			}
			if !slices.Equal(asked, tt.wantAsked) {
				t.Errorf("the resolver was asked about %v, want %v (the server received %q)", asked, tt.wantAsked, srv.SQL())
			}
			if got := counters.Unanswered.Load(); got != b2i64(tt.unanswered) {
				t.Errorf("%d unanswered, want %d", got, b2i64(tt.unanswered))
			}
			if tt.want == classify.ConnectionLost && len(tt.wantAsked) == 0 && counters.NotApplied.Load() != 1 {
				t.Errorf("%d not applied, want 1", counters.NotApplied.Load())
			}
		})
	}
}

// notUnknown: an error, and not ErrCommitUnknown: the attempt may run again.
func notUnknown(err error) bool { return err != nil && !errors.Is(err, errs.ErrCommitUnknown) }

func b2i64(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
