package pgtx

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/internal/fakepg"
)

// TestAcquireTimeoutNamesANestedCall: fn calls Transaction on the same
// one-connection pool with a context other than fn's, so the inner call
// waits out AcquireTimeout for the connection its caller holds. Its error
// names the likely cause where it can be known: the holder's context is
// the waiter's, or both are never done (context.Background(), the
// likeliest in a script), which a Done channel cannot tell apart. A waiter
// whose context is another request's is not told so.
func TestAcquireTimeoutNamesANestedCall(t *testing.T) {
	const (
		sameHint       = "held by a call with the same context"
		backgroundHint = "held by a call whose context is never done"
	)
	tests := []struct {
		name     string
		outer    func(t *testing.T) context.Context
		inner    func(outer context.Context) context.Context // the inner call's, made inside fn
		wantHint string                                      // "": none
	}{
		{"the request's ctx, captured", cancellable, func(outer context.Context) context.Context { return outer }, sameHint},
		{"context.Background() outside and inside", background, func(context.Context) context.Context { return context.Background() }, backgroundHint},
		{"context.TODO() inside a Background call", background, func(context.Context) context.Context { return context.TODO() }, backgroundHint},
		{"another request's ctx", cancellable, func(context.Context) context.Context { return cancellable(t) }, ""},
		{"a cancellable ctx inside a Background call", background, func(context.Context) context.Context { return cancellable(t) }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := fakePool(t, &fakepg.Server{}, func(c *Config) {
				c.MaxConns = 1
				c.AcquireTimeout = 50 * time.Millisecond
			})
			outer := tt.outer(t)
			var innerErr error
			err := Transaction(outer, pool, ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "select 1"); err != nil {
					return err
				}
				innerErr = Transaction(tt.inner(outer), pool, ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
				return nil
			})
			if err != nil {
				t.Fatalf("the outer call: %v", err)
			}
			if !errors.Is(innerErr, ErrAcquireTimeout) {
				t.Fatalf("the inner call: %v, want ErrAcquireTimeout", innerErr)
			}
			for _, hint := range []string{sameHint, backgroundHint} {
				if got, want := strings.Contains(innerErr.Error(), hint), hint == tt.wantHint; got != want {
					t.Errorf("the inner call's error %q says %q: %v, want %v", innerErr, hint, got, want)
				}
			}
		})
	}
}

func background(*testing.T) context.Context { return context.Background() }

func cancellable(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// TestUnknownCountWithResolutionOff: with ResolveTimeout -1 a lost COMMIT
// ends its call with ErrCommitUnknown unasked, and ResolveStats, which
// counts resolutions, stays at zero, as its doc says.
func TestUnknownCountWithResolutionOff(t *testing.T) {
	srv := &fakepg.Server{Answer: on("commit", 1, fakepg.Answer{Close: true})}
	pool := fakePool(t, srv, nil) // ResolveTimeout -1
	err := Transaction(context.Background(), pool, ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, update)
		return err
	})
	if !errors.Is(err, ErrCommitUnknown) {
		t.Fatalf("err = %v, want ErrCommitUnknown", err)
	}
	if got := pool.Stats().Resolved; got != (ResolveStats{}) {
		t.Errorf("Stats().Resolved = %+v, want zeros: nothing was resolved", got)
	}
}
