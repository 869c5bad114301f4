package pgtx

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/internal/fakepg"
	"github.com/pgtx-go/pgtx/internal/pgpool"
)

// TestConnectAsksLittle: a new connection of a resolving pool sends, of
// pgtx's own, only the probe of which backends answer it (one round trip,
// in every mode: it tells a pooler in front), before the caller's first
// statement: what resolving COMMITs needs is asked at the connection's
// first transaction, once.
func TestConnectAsksLittle(t *testing.T) {
	for _, mode := range []CancelMode{CancelModePool, CancelModeProtocol, CancelModeClose} {
		t.Run(mode.String(), func(t *testing.T) {
			srv := &fakepg.Server{Answer: func(conn int, sql string) fakepg.Answer {
				pid := 1000 + conn // the fake server's pid of the connection
				switch {
				case pgpool.IsProbe(sql):
					return fakepg.Answer{Columns: []fakepg.Column{{Name: "pid", OID: 23}, {Name: "backend_start", OID: 20}},
						Rows: [][]any{{pid, 1764756000000000}}}
				case strings.Contains(sql, "system_identifier"):
					return fakepg.Answer{
						Columns: []fakepg.Column{{Name: "sys", OID: 20}, {Name: "rec", OID: 16}, {Name: "ok", OID: 16}, {Name: "pid", OID: 23},
							{Name: "tl", OID: 23}, {Name: "st", OID: 20}, {Name: "ep", OID: 20}, {Name: "fl", OID: 20}, {Name: "bs", OID: 20}, {Name: "em", OID: 16}},
						Rows: [][]any{{7, false, true, pid, 1, 1000, 2000, 4096, 99, true}},
					}
				case strings.Contains(sql, "pg_current_xact_id"):
					return fakepg.Answer{Columns: []fakepg.Column{{Name: "pgtx_xid", OID: 20}}, Rows: [][]any{{nil}}}
				}
				return fakepg.Answer{}
			}}
			pool := fakePool(t, srv, func(c *Config) {
				c.CancelMode = mode
				c.ResolveTimeout = 0 // the default: on
				c.MaxConns = 1
			})
			ctx := context.Background()
			// pgtx's statements on the main pool's connection (the one that
			// ran select 1; the cancel pool's may be made first), "system"
			// for the server's identity.
			ours := func() []string {
				log := srv.Log()
				i := slices.IndexFunc(log, func(s fakepg.Statement) bool { return s.SQL == "select 1" })
				var got []string
				for _, s := range log {
					switch {
					case i < 0 || s.Conn != log[i].Conn:
					case strings.Contains(s.SQL, "system_identifier"):
						got = append(got, "system")
					case pgpool.IsProbe(s.SQL):
						got = append(got, "identity")
					}
				}
				return got
			}
			if _, err := pool.Exec(ctx, "select 1"); err != nil {
				t.Fatal(err)
			}
			want := []string{"identity", "identity"}
			if got := ours(); !slices.Equal(got, want) {
				t.Errorf("before the first transaction pgtx sent %q, want %q", got, want)
			}
			for range 2 {
				if err := Transaction(ctx, pool, ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "select 1")
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			if got := ours(); !slices.Equal(got, append(want, "system")) {
				t.Errorf("after two transactions pgtx sent %q, want %q", got, append(want, "system"))
			}
		})
	}
}
