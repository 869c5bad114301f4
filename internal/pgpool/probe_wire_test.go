package pgpool

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/internal/fakepg"
)

// identity answers the probe: pid from the balanced query, primary from
// the primary's, both started at 77.
func identity(pid, primary int) func(string) (fakepg.Answer, bool) {
	cols := []fakepg.Column{{Name: "pid", OID: 23}, {Name: "start", OID: 20}}
	return func(sql string) (fakepg.Answer, bool) {
		switch sql {
		case balancedSQL:
			return fakepg.Answer{Columns: cols, Rows: [][]any{{pid, 77}}}, true
		case primarySQL:
			return fakepg.Answer{Columns: cols, Rows: [][]any{{primary, 77}}}, true
		}
		return fakepg.Answer{}, false
	}
}

// TestIdentifyAndDecide: a connection whose backends both answer with its
// own pid is direct; one where either is another's is pooled, and the
// pool then asks SHOW POOL_VERSION once, and Pgpool-II's settings only
// when it answered; a server that cannot tell its backends is neither.
func TestIdentifyAndDecide(t *testing.T) {
	nodes := fakepg.Answer{Columns: []fakepg.Column{{Name: "node_id", OID: 25}, {Name: "hostname", OID: 25}, {Name: "port", OID: 25},
		{Name: "load_balance_node", OID: 25}}, Rows: [][]any{{"0", "10.0.0.1", "5432", "false"}, {"1", "10.0.0.2", "5433", "true"}}}
	tests := []struct {
		name        string
		balanced    int // the pid each query's backend reports, -1: an error
		primary     int
		pgpool      bool // SHOW POOL_VERSION is answered
		wantOK      bool
		wantPooled  bool
		wantPgpool  bool
		wantBalance string
	}{
		{"direct", 0, 0, false, true, false, false, ""},
		{"Pgpool-II, balanced to its last node", 0, 5, true, true, true, true, "10.0.0.2:5433"},
		{"Pgpool-II, balanced to the primary", 5, 5, true, true, true, true, "10.0.0.2:5433"},
		{"another pooler", 9, 9, false, true, true, false, ""},
		{"a server that cannot tell", -1, -1, false, false, false, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked, settings atomic.Int32
			srv := &fakepg.Server{Answer: func(conn int, sql string) fakepg.Answer {
				pid := 1000 + conn // the fake server's pid of the connection
				if tt.balanced < 0 {
					return fakepg.Answer{Code: "42883"}
				}
				if a, ok := identity(pid+tt.balanced, pid+tt.primary)(sql); ok {
					return a
				}
				switch {
				case sql == "show pool_version" && tt.pgpool:
					asked.Add(1)
					return fakepg.Answer{Columns: []fakepg.Column{{Name: "pool_version", OID: 25}}, Rows: [][]any{{"4.3.5 (tamahomeboshi)"}}}
				case sql == "show pool_version":
					asked.Add(1)
					return fakepg.Answer{Code: "42704", Message: `unrecognized configuration parameter "pool_version"`}
				case sql == "pgpool show all":
					settings.Add(1)
					return fakepg.Answer{Columns: []fakepg.Column{{Name: "item", OID: 25}, {Name: "value", OID: 25}},
						Rows: [][]any{{"failover_on_backend_error", "on"}}}
				case sql == "show pool_nodes":
					return nodes
				}
				return fakepg.Answer{Code: "42601"}
			}}
			var v Verdict
			var found []Info
			v.Found = func(_ context.Context, i Info) { found = append(found, i) }
			// Two connections' probes, on one (fakepg waits for every
			// connection of a server when one closes).
			conn := srv.Connect(t, pgx.QueryExecModeSimpleProtocol)
			ctx := context.Background()
			for range 2 {
				p, err := Identify(ctx, conn.PgConn())
				if err != nil || p.OK != tt.wantOK || p.Pooled(conn.PgConn().PID()) != tt.wantPooled {
					t.Fatalf("Identify = %+v, %v; pooled %v; want OK %v, pooled %v", p, err, p.Pooled(conn.PgConn().PID()), tt.wantOK, tt.wantPooled)
				}
				if !p.Pooled(conn.PgConn().PID()) {
					continue
				}
				pg, err := v.Decide(ctx, conn.PgConn())
				if err != nil || pg != tt.wantPgpool {
					t.Fatalf("Decide = %v, %v; want %v", pg, err, tt.wantPgpool)
				}
				if pg {
					addr, err := BalancedNode(ctx, conn.PgConn())
					if err != nil || addr != tt.wantBalance {
						t.Errorf("BalancedNode = %q, %v; want %q", addr, err, tt.wantBalance)
					}
				}
				// The connection answers its next statement: nothing of the
				// probe is left to read.
				if _, err := conn.Exec(ctx, "show pool_nodes"); err != nil && !strings.Contains(err.Error(), "42601") {
					t.Errorf("the next statement: %v", err)
				}
			}
			if n := asked.Load(); n != map[bool]int32{true: 1, false: 0}[tt.wantPooled] {
				t.Errorf("SHOW POOL_VERSION asked %d times, want once per pool for a pooled one", n)
			}
			if n := settings.Load(); n != map[bool]int32{true: 1, false: 0}[tt.wantPgpool] {
				t.Errorf("PGPOOL SHOW ALL asked %d times", n)
			}
			if tt.wantPgpool && (len(found) != 1 || found[0].Version != "4.3.5 (tamahomeboshi)" || found[0].Settings["failover_on_backend_error"] != "on") {
				t.Errorf("found %+v, want Pgpool-II once, with its settings", found)
			}
			if !tt.wantPgpool && len(found) != 0 {
				t.Errorf("found %+v, want nothing", found)
			}
		})
	}
}
