package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// TestNestedWithTheRequestsCtxIsNamed: fn calls Transaction on the same
// one-connection pool with the request's context, captured in a closure,
// instead of fn's. pgtx cannot refuse it (the context carries no trace of
// the outer call), so the inner call waits out AcquireTimeout; its error
// then says that a call with the same context holds the pool's connection.
// A caller that waits behind a call of another context is not told so.
func TestNestedWithTheRequestsCtxIsNamed(t *testing.T) {
	const hint = "held by a call with the same context"
	tests := []struct {
		name     string
		same     bool // the waiting call has the holder's context
		wantHint bool
	}{
		{"nested with the request's ctx", true, true},
		{"another request waits", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reqCtx := testCtx(t)
			pool := newPool(t, newDB(t), func(c *pgtx.Config) {
				c.MaxConns = 1
				c.AcquireTimeout = 300 * time.Millisecond
			})
			var innerErr error
			err := pgtx.Transaction(reqCtx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "select 1"); err != nil {
					return err
				}
				waiter := reqCtx
				if !tc.same {
					other, cancel := context.WithCancel(context.WithoutCancel(reqCtx))
					defer cancel()
					waiter = other
				}
				innerErr = pgtx.Transaction(waiter, pool, pgtx.ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
				return nil
			})
			if err != nil {
				t.Fatalf("the outer Transaction: %v", err)
			}
			if !errors.Is(innerErr, pgtx.ErrAcquireTimeout) {
				t.Fatalf("the inner call: %v, want ErrAcquireTimeout", innerErr)
			}
			if got := strings.Contains(innerErr.Error(), hint); got != tc.wantHint {
				t.Errorf("the inner call's error %q names the same context: %v, want %v", innerErr, got, tc.wantHint)
			}
		})
	}
}
