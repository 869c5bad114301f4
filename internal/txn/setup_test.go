package txn

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/internal/connstate"
	"github.com/pgtx-go/pgtx/internal/fakepg"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// TestSetUpOnce: a resolving pool's connection captures what resolution
// needs at its first transaction, once: the server's identity, then, on a
// connection that names its statements and reaches its backend directly,
// the prepared id reads; later transactions send nothing more. A pool that
// does not resolve sends nothing, and a cancelled capture is an error,
// asked again at the next transaction. A capture on a primary tells the
// pool the server's run, once.
func TestSetUpOnce(t *testing.T) {
	const pid = 1001 // the fake server's pid of its first connection
	columns := []fakepg.Column{{Name: "sys", OID: 20}, {Name: "rec", OID: 16}, {Name: "ok", OID: 16}, {Name: "pid", OID: 23},
		{Name: "tl", OID: 23}, {Name: "st", OID: 20}, {Name: "ep", OID: 20}, {Name: "fl", OID: 20}, {Name: "bs", OID: 20}, {Name: "em", OID: 16}}
	system := func(pid int) fakepg.Answer {
		return fakepg.Answer{Columns: columns, Rows: [][]any{{7, false, true, pid, 1, 1000, 2000, 4096, 99, true}}}
	}
	standby := fakepg.Answer{Columns: columns, Rows: [][]any{{7, true, true, 4242, 0, 1000, 2000, 0, 99, true}}}
	const systemPrefix = "select (select system_identifier from pg_control_system())"
	tests := []struct {
		name      string
		resolving bool
		mode      pgx.QueryExecMode
		answers   []fakepg.Answer // to the identity question, in turn
		// sent, per SetUp call, are the statements it sends: "system" for
		// the identity question, "prepare" for each id read's.
		sent     [][]string
		errs     []bool
		direct   bool
		prepared bool
		told     int // captures of a primary's run told to Captured
	}{
		{name: "direct, named statements: the identity, then the id reads", resolving: true, mode: pgx.QueryExecModeCacheStatement,
			answers: []fakepg.Answer{system(pid)}, sent: [][]string{{"system", "prepare", "prepare"}, nil}, errs: []bool{false, false},
			direct: true, prepared: true, told: 1},
		{name: "behind a pooler: the identity only", resolving: true, mode: pgx.QueryExecModeCacheStatement,
			answers: []fakepg.Answer{system(4242)}, sent: [][]string{{"system"}, nil}, errs: []bool{false, false}, told: 1},
		{name: "unnamed statements: the identity only", resolving: true, mode: pgx.QueryExecModeExec,
			answers: []fakepg.Answer{system(pid)}, sent: [][]string{{"system"}, nil}, errs: []bool{false, false}, direct: true, told: 1},
		{name: "a standby: captured, no run told", resolving: true, mode: pgx.QueryExecModeCacheStatement,
			answers: []fakepg.Answer{standby}, sent: [][]string{{"system"}, nil}, errs: []bool{false, false}},
		{name: "not resolving: nothing", resolving: false, mode: pgx.QueryExecModeCacheStatement,
			sent: [][]string{nil, nil}, errs: []bool{false, false}},
		{name: "cancelled: an error, asked again", resolving: true, mode: pgx.QueryExecModeCacheStatement,
			answers: []fakepg.Answer{{Code: "57014"}, system(pid)}, sent: [][]string{{"system"}, {"system", "prepare", "prepare"}, nil},
			errs: []bool{true, false, false}, direct: true, prepared: true, told: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			srv := &fakepg.Server{Answer: func(_ int, sql string) fakepg.Answer {
				if !strings.HasPrefix(sql, systemPrefix) || len(tt.answers) == 0 {
					return fakepg.Answer{}
				}
				n++
				return tt.answers[min(n, len(tt.answers))-1]
			}}
			conn := srv.Connect(t, tt.mode)
			st := connstate.Attach(conn.PgConn())
			st.SetMode(tt.mode)
			told := 0
			s := &Settings{Resolving: tt.resolving, Captured: func(system int64, run resolve.Run) {
				told++
				if system != 7 || run != (resolve.Run{Timeline: 1, Start: 1000, Epoch: 2000}) {
					t.Errorf("told system %d, run %+v; want the capture's", system, run)
				}
			}}
			for i, want := range tt.sent {
				before := len(srv.SQL())
				err := SetUp(context.Background(), conn, s)
				if (err != nil) != tt.errs[i] {
					t.Errorf("SetUp %d: %v, want an error: %v", i+1, err, tt.errs[i])
				}
				var sent []string
				for _, q := range srv.SQL()[before:] {
					switch {
					case strings.HasPrefix(q, systemPrefix):
						sent = append(sent, "system")
					case strings.HasPrefix(q, "prepare pgtx_xid"):
						sent = append(sent, "prepare")
					default:
						sent = append(sent, q)
					}
				}
				if !slices.Equal(sent, want) {
					t.Errorf("SetUp %d sent %q, want %q", i+1, sent, want)
				}
			}
			if st.Res.Asked != tt.resolving || st.Res.Capable != tt.resolving || st.Res.Direct != tt.direct || st.XidPrepared != tt.prepared {
				t.Errorf("state %+v, reads prepared %v; want asked and capable %v, direct %v, prepared %v",
					st.Res, st.XidPrepared, tt.resolving, tt.direct, tt.prepared)
			}
			if told != tt.told {
				t.Errorf("Captured told %d times, want %d", told, tt.told)
			}
		})
	}
}
