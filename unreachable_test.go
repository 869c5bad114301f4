package pgtx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// closedPort returns a port of 127.0.0.1 that refuses connections: one a
// listener had, closed.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// unreachableWhy is the part of an unreachable server's message that says
// why the call stopped: "(UnavailableTimeout 200ms)", "(the context ended)".
var unreachableWhy = regexp.MustCompile(`^pgtx: the server is unreachable: gave up after \d+ attempts?(?: in [^ ]+)? (\([^)]*\)): `)

// TestPlainStatementsSayTheServerIsUnreachable: with a wrong port in the
// connection string, the pool's query methods wait for the server as a
// Transaction does and say so the same way: a *RetryError whose message
// begins "pgtx: the server is unreachable: gave up after …" with the same
// reason, of the same class, matching the refusal and, when the deadline
// ended the wait, context.DeadlineExceeded.
func TestPlainStatementsSayTheServerIsUnreachable(t *testing.T) {
	tests := []struct {
		name        string
		unavailable time.Duration // RetryConfig.UnavailableTimeout
		deadline    time.Duration // 0: none
		wantWhy     string
		wantCtx     error
	}{
		{"UnavailableTimeout first", 200 * time.Millisecond, 0, "(UnavailableTimeout 200ms)", nil},
		{"the deadline first", 0, 300 * time.Millisecond, "(the context ended)", context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, fmt.Sprintf("postgres://nobody@127.0.0.1:%d/none?sslmode=disable&connect_timeout=1", closedPort(t)))
			cfg.Retry.UnavailableTimeout = tt.unavailable
			p, err := NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			calls := []struct {
				name string
				run  func(ctx context.Context) error
			}{
				{"Transaction", func(ctx context.Context) error {
					return Transaction(ctx, p, ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
				}},
				{"Exec", func(ctx context.Context) error { _, err := p.Exec(ctx, "select 1"); return err }},
				{"Query", func(ctx context.Context) error { _, err := p.Query(ctx, "select 1"); return err }},
				{"QueryRow", func(ctx context.Context) error { var n int; return p.QueryRow(ctx, "select 1").Scan(&n) }},
			}
			var txClass Class
			for _, c := range calls {
				ctx := context.Background()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				err := c.run(ctx)
				m := unreachableWhy.FindStringSubmatch(fmt.Sprint(err))
				if m == nil || m[1] != tt.wantWhy {
					t.Errorf("%s: %v\nwant \"pgtx: the server is unreachable: gave up after … %s: …\"", c.name, err, tt.wantWhy)
				}
				var re *RetryError
				if !errors.As(err, &re) {
					t.Errorf("%s: %T, want a *RetryError", c.name, err)
				}
				if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("%s: %v does not match ECONNREFUSED", c.name, err)
				}
				if tt.wantCtx != nil && !errors.Is(err, tt.wantCtx) {
					t.Errorf("%s: %v does not match %v", c.name, err, tt.wantCtx)
				}
				if c.name == "Transaction" {
					txClass = Classify(err)
				} else if got := Classify(err); got != txClass {
					t.Errorf("%s: Classify = %v, want %v as Transaction's", c.name, got, txClass)
				}
			}
		})
	}
}
