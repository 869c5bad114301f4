package resolve

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/internal/fakepg"
)

// fakeConfig returns the connection config of srv.
func fakeConfig(t *testing.T, srv *fakepg.Server) *pgx.ConnConfig {
	t.Helper()
	cc, err := pgx.ParseConfig(fakepg.URL)
	if err != nil {
		t.Fatal(err)
	}
	srv.Reach(&cc.Config)
	t.Cleanup(srv.Wait)
	return cc
}

// askColumns are the columns of askSQL's row.
var askColumns = []fakepg.Column{{Name: "sys", OID: 20}, {Name: "tl", OID: 23}, {Name: "st", OID: 20}, {Name: "ep", OID: 20},
	{Name: "status", OID: 25}, {Name: "prepared", OID: 16}, {Name: "timeline_id", OID: 23}, {Name: "lsn", OID: 20},
	{Name: "next", OID: 20}, {Name: "shutdown", OID: 16}, {Name: "state", OID: 25}, {Name: "changed", OID: 20},
	{Name: "synced", OID: 16}, {Name: "replay", OID: 20}, {Name: "replayed", OID: 16},
	{Name: "pid", OID: 20}}

// answerSQL answers the statement sql with a in turn (the last one again
// and again), every other with success. The simple protocol's statements
// arrive on one line.
func answerSQL(sql string, a ...fakepg.Answer) func(int, string) fakepg.Answer {
	n := 0
	return func(_ int, s string) fakepg.Answer {
		if oneLine(s) != oneLine(sql) || len(a) == 0 {
			return fakepg.Answer{}
		}
		n++
		return a[min(n, len(a))-1]
	}
}

// oneLine is s with its white space runs made one space.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestResolverOverTheWire: a question sends the transaction's id, system
// and run as parameters, on a connection of its own, and reads the
// server's answer into an Answer; to end the transaction's backend it
// sends a second query, whose pid is a literal ([terminateSQL]); a server
// that refuses to end a backend (42501) is not asked to again; a lost
// answer is an error, for the loop to ask again.
func TestResolverOverTheWire(t *testing.T) {
	id := ID{Xid: 1<<32 | 742, System: 7, Run: Run{Timeline: 2, Start: 1000, Epoch: 2000}}
	row := []any{7, 2, 1000, 2000, "in progress", false, 2, 4096, 1<<32 | 900, false, "idle in transaction", 555, true, 3072, true, 4321}
	ended := fakepg.Answer{Columns: []fakepg.Column{{Name: "pg_terminate_backend", OID: 16}}, Rows: [][]any{{"t"}}} // PostgreSQL's text for true
	asks := answerSQL(askSQL,
		fakepg.Answer{Columns: askColumns, Rows: [][]any{row}},
		fakepg.Answer{Columns: askColumns, Rows: [][]any{row}},
		fakepg.Answer{Columns: askColumns, Rows: [][]any{{7, 2, 1000, 2000, nil, false, 2, 4096, 1<<32 | 900, true, "", 0, true, 0, false, 0}}},
		fakepg.Answer{Close: true},
	)
	terms := 0
	srv := &fakepg.Server{Answer: func(conn int, s string) fakepg.Answer {
		if strings.HasPrefix(s, "select pg_terminate_backend(4321)") {
			if terms++; terms == 2 {
				return fakepg.Answer{Code: "42501", Message: "permission denied to terminate process"}
			}
			return ended
		}
		return asks(conn, s)
	}}
	r := NewResolver(4*time.Second, nil, fakeConfig(t, srv), nil)
	ctx := context.Background()

	a := r.Ask(ctx, id, EndIfStillIdle, 555)
	want := Answer{View: View{System: 7, Run: id.Run, Status: "in progress",
		Last: Checkpoint{Timeline: 2, LSN: 4096, NextXid: 1<<32 | 900}, Replay: 3072, Replayed: true}, State: "idle in transaction", Changed: 555, Terminated: true, Synced: true}
	if a.Err != nil || a.View != want.View || a.State != want.State || a.Changed != want.Changed || !a.Terminated || !a.Synced {
		t.Errorf("answer %+v, want %+v", a, want)
	}
	if a = r.Ask(ctx, id, EndNow, 0); a.Err == nil || !r.cannotTerminate.Load() {
		t.Errorf("answer %+v: the termination the server refused answered, or is asked again", a)
	}
	a = r.Ask(ctx, id, EndNow, 0)
	if a.Err != nil || a.View.Status != "" || !a.View.Last.Shutdown || a.State != "" {
		t.Errorf("answer %+v, want no status (NULL), a shutdown checkpoint, no backend", a)
	}
	if a = r.Ask(ctx, id, Keep, 0); a.Err == nil {
		t.Error("a question whose answer was lost answered")
	}
	// The parameters: the id, the system, the timeline, the id's low 32
	// bits, the start and the epoch.
	var asked int
	for _, st := range srv.Log() {
		if st.SQL != askSQL {
			continue
		}
		p := func(i int) string {
			if i >= len(st.Params) || st.Params[i] == nil {
				return "NULL"
			}
			return *st.Params[i]
		}
		if len(st.Params) != 6 || p(0) != "4294968038" || p(1) != "7" || p(2) != "2" || p(3) != "742" || p(4) != "1000" || p(5) != "2000" {
			t.Errorf("question %d sent %v", asked, st.Params)
		}
		asked++
	}
	if asked != 4 || srv.Conns() != 4 || terms != 2 {
		t.Errorf("%d questions on %d connections, %d terminations; want 4 on 4 (one each), 2 (none once refused)", asked, srv.Conns(), terms)
	}
}

// TestBackendXidOverTheWire: the backend's id comes back whole (its epoch
// from the server's next id); a backend that runs none (no row) ends the
// search at once, and an error asks again after sleep, until it fails.
func TestBackendXidOverTheWire(t *testing.T) {
	cols := []fakepg.Column{{Name: "backend_xid", OID: 20}, {Name: "next", OID: 20}}
	tests := []struct {
		name    string
		answers []fakepg.Answer
		want    uint64
		ok      bool
		sleeps  int
	}{
		{"running", []fakepg.Answer{{Columns: cols, Rows: [][]any{{742, 1<<32 | 900}}}}, 1<<32 | 742, true, 0},
		{"running, before the epoch's wrap", []fakepg.Answer{{Columns: cols, Rows: [][]any{{4294967000, 1<<32 | 10}}}}, 4294967000, true, 0},
		{"no transaction", []fakepg.Answer{{Columns: cols}}, 0, false, 0},
		{"an error, then running", []fakepg.Answer{{Code: "57P03"}, {Columns: cols, Rows: [][]any{{742, 900}}}}, 742, true, 1},
		{"errors until the time is up", []fakepg.Answer{{Code: "57P03"}}, 0, false, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &fakepg.Server{Answer: answerSQL(backendXidSQL, tt.answers...)}
			r := NewResolver(4*time.Second, nil, fakeConfig(t, srv), func(context.Context, *pgx.ConnConfig) error { return nil })
			sleeps := 0
			xid, ok := r.BackendXid(context.Background(), 1234, 99, func(context.Context) error {
				if sleeps++; sleeps == 3 {
					return context.DeadlineExceeded
				}
				return nil
			})
			if xid != tt.want || ok != tt.ok || sleeps != tt.sleeps {
				t.Errorf("BackendXid = %d, %v after %d sleeps; want %d, %v after %d", xid, ok, sleeps, tt.want, tt.ok, tt.sleeps)
			}
		})
	}
}

// TestPrepareOverTheWire: what a connection captures for resolution
// before its first transaction: the server's identity and run, and whether
// the session's backend is the connection's own (its pid); a server
// without the functions leaves it unable to resolve (asked all the same),
// a lost answer fails it, and a cancelled question is no answer: it fails,
// and leaves the connection to be asked again.
func TestPrepareOverTheWire(t *testing.T) {
	cols := []fakepg.Column{{Name: "sys", OID: 20}, {Name: "rec", OID: 16}, {Name: "ok", OID: 16}, {Name: "pid", OID: 23},
		{Name: "tl", OID: 23}, {Name: "st", OID: 20}, {Name: "ep", OID: 20}, {Name: "fl", OID: 20}, {Name: "bs", OID: 20}, {Name: "em", OID: 16}}
	tests := []struct {
		name    string
		answer  fakepg.Answer
		want    Conn
		wantErr bool
	}{
		{"direct", fakepg.Answer{Columns: cols, Rows: [][]any{{7, false, true, 1001, 2, 1000, 2000, 4096, 99, true}}},
			Conn{Asked: true, Capable: true, Direct: true, System: 7, Run: Run{Timeline: 2, Start: 1000, Epoch: 2000}, Flushed: 4096, BackendStart: 99, Emit: true}, false},
		{"behind a pooler (another pid), on a standby", fakepg.Answer{Columns: cols, Rows: [][]any{{7, true, true, 4242, 0, 1000, 2000, 0, 0, true}}},
			Conn{Asked: true, Capable: true, Standby: true, System: 7, Run: Run{Start: 1000, Epoch: 2000}, Emit: true}, false},
		{"the message revoked from the role", fakepg.Answer{Columns: cols, Rows: [][]any{{7, false, true, 1001, 2, 1000, 2000, 4096, 99, false}}},
			Conn{Asked: true, Capable: true, Direct: true, System: 7, Run: Run{Timeline: 2, Start: 1000, Epoch: 2000}, Flushed: 4096, BackendStart: 99}, false},
		{"without pg_xact_status: not capable (the rest is read, and means nothing)",
			fakepg.Answer{Columns: cols, Rows: [][]any{{7, false, false, 1001, 2, 1000, 2000, 4096, 99, true}}},
			Conn{Asked: true, System: 7, Run: Run{Timeline: 2, Start: 1000, Epoch: 2000}, Flushed: 4096, BackendStart: 99, Emit: true}, false},
		{"not PostgreSQL's functions", fakepg.Answer{Code: "42883"}, Conn{Asked: true}, false},
		{"cancelled: asked again next time", fakepg.Answer{Code: "57014"}, Conn{}, true},
		{"the answer lost", fakepg.Answer{Close: true}, Conn{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &fakepg.Server{Answer: answerSQL(systemSQL, tt.answer)}
			conn := srv.Connect(t, pgx.QueryExecModeExec)
			var c Conn
			err := c.Prepare(context.Background(), conn)
			if c != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("Prepare: %+v, %v; want %+v, error %v", c, err, tt.want, tt.wantErr)
			}
			if c.InRecovery(conn.PgConn()) || StillInRecovery(conn.PgConn()) {
				t.Error("in recovery, while the server says in_hot_standby off")
			}
		})
	}
}

// TestResolveOverTheWire: a resolution asks a server that answers 57P03
// (FATAL, the session ended), then loses an answer, then answers as a
// standby promoted from the transaction's timeline whose replay went past
// the transaction's record: the first two are unreachable, paced, and the
// third proves the "committed" the transaction's.
func TestResolveOverTheWire(t *testing.T) {
	id := ID{Xid: 742, System: 7, Run: Run{Timeline: 1, Start: 1000, Epoch: 2000}, Flushed: 100, LSN: 3000}
	promoted := []any{7, 2, 5000, 6000, "committed", false, 2, 4096, 900, false, "", 0, true, 3072, true, 0}
	srv := &fakepg.Server{Answer: answerSQL(askSQL,
		fakepg.Answer{Code: "57P03", Message: "the database system is starting up", Fatal: true},
		fakepg.Answer{Close: true},
		fakepg.Answer{Columns: askColumns, Rows: [][]any{promoted}},
	)}
	r := NewResolver(4*time.Second, nil, fakeConfig(t, srv), nil)
	start := time.Unix(1000, 0)
	clk := &fakeClock{now: start, end: start.Add(time.Minute)}
	var c Counters
	res := Resolve(context.Background(), r, clk, &c, id, time.Second, 15*time.Second)
	if res.Status != Committed || c.Committed.Load() != 1 {
		t.Errorf("Resolve = %+v, committed %d; want committed", res, c.Committed.Load())
	}
	if took := clk.now.Sub(start); took < 2*paceUnreachable {
		t.Errorf("three questions in %v: the unreachable ones were not paced", took)
	}
}

// TestResolverWithoutTheMessage: a role refused pg_logical_emit_message
// (42501 as the question starts, though it ends no backend) asks from then
// on without the message, and is answered.
func TestResolverWithoutTheMessage(t *testing.T) {
	id := ID{Xid: 742, System: 7, Run: Run{Timeline: 2, Start: 1000, Epoch: 2000}}
	row := []any{7, 2, 1000, 2000, "committed", false, 2, 4096, 900, false, "", 0, false, 0, false, 0}
	srv := &fakepg.Server{Answer: func(_ int, s string) fakepg.Answer {
		switch oneLine(s) {
		case oneLine(askSQL):
			return fakepg.Answer{Code: "42501", Message: "permission denied for function pg_logical_emit_message"}
		case oneLine(askNoMessageSQL):
			return fakepg.Answer{Columns: askColumns, Rows: [][]any{row}}
		}
		return fakepg.Answer{}
	}}
	r := NewResolver(4*time.Second, nil, fakeConfig(t, srv), nil)
	if a := r.Ask(context.Background(), id, Keep, 0); a.Err == nil {
		t.Fatal("a question the server refused answered")
	}
	a := r.Ask(context.Background(), id, Keep, 0)
	if a.Err != nil || a.View.Status != "committed" || a.Synced {
		t.Errorf("answer %+v: want committed, not known durable (the question could not wait for the standbys)", a)
	}
	if r.cannotTerminate.Load() {
		t.Error("a refused message taken for a refused termination")
	}
}

// TestResolverEndsTheBackendByItsPid: a question that is to end the
// transaction's backend asks without ending it, then ends it with a simple
// query of its own that names the pid as a literal (which Pgpool-II, in
// front unseen or not, recognises: it sends it to that backend's node and
// does not take the backend's end for the node's failure), keeping the
// condition that it still runs the transaction and, for EndIfStillIdle, is
// still idle since the same change; a question that ends nothing sends
// none.
func TestResolverEndsTheBackendByItsPid(t *testing.T) {
	id := ID{Xid: 1<<32 | 742, System: 7, Run: Run{Timeline: 2, Start: 1000, Epoch: 2000}}
	row := []any{7, 2, 1000, 2000, "in progress", false, 2, 4096, 1<<32 | 900, false, "idle in transaction", 555, true, 3072, true, 4321}
	ended := fakepg.Answer{Columns: []fakepg.Column{{Name: "pg_terminate_backend", OID: 16}}, Rows: [][]any{{"t"}}} // PostgreSQL's text for true
	srv := &fakepg.Server{Answer: func(_ int, s string) fakepg.Answer {
		switch {
		case oneLine(s) == oneLine(askSQL):
			return fakepg.Answer{Columns: askColumns, Rows: [][]any{row}}
		case strings.HasPrefix(s, "select pg_terminate_backend(4321)"):
			return ended
		}
		return fakepg.Answer{}
	}}
	r := NewResolver(4*time.Second, nil, fakeConfig(t, srv), nil)
	ctx := context.Background()
	for _, tt := range []struct {
		end      End
		wantTerm bool
		wantSQL  string // the termination's condition, "" for none sent
	}{
		{Keep, false, ""},
		{EndIfStillIdle, true, "backend_xid = '742'::xid and (false or"},
		{EndNow, true, "backend_xid = '742'::xid and (true or"},
	} {
		before := len(srv.Log())
		a := r.Ask(ctx, id, tt.end, 555)
		if a.Err != nil || a.Terminated != tt.wantTerm {
			t.Errorf("end %d: answer %+v, want terminated %v", tt.end, a, tt.wantTerm)
		}
		var terms []string
		for _, st := range srv.Log()[before:] {
			switch {
			case strings.Contains(st.SQL, "pg_terminate_backend(4321)"):
				terms = append(terms, st.SQL)
			}
		}
		switch {
		case tt.wantSQL == "" && len(terms) != 0:
			t.Errorf("end %d: sent %q, want no termination", tt.end, terms)
		case tt.wantSQL != "" && (len(terms) != 1 || !strings.Contains(oneLine(terms[0]), tt.wantSQL) || !strings.Contains(terms[0], "= 555")):
			t.Errorf("end %d: sent %q, want one termination with %q since 555", tt.end, terms, tt.wantSQL)
		}
	}
}
