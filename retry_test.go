package pgtx

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/fakeclock"
	"github.com/pgtx-go/pgtx/internal/retry"
)

func pgErr(code string) error { return &pgconn.PgError{Code: code, Message: "test " + code} }

// attemptFunc is a scripted attempt of the tests' loop.
type attemptFunc func(ctx context.Context) (Class, error)

// retryLoop is the tests' handle on one call's retry loop, built as a
// call builds it: the policy resolved (policy), the call's MaxRetries, the
// tracer adapter.
type retryLoop struct {
	policy     *RetryConfig // defaults applied
	clock      clock
	maxRetries int
	budget     *retry.Budget     // nil: no budget
	tracer     TransactionTracer // nil: no events
	label      string
	isolation  Isolation
}

func (l *retryLoop) run(ctx context.Context, try attemptFunc) error {
	loop := retry.Loop{Policy: l.policy.policy(), Clock: l.clock, Budget: l.budget, GaveUp: gaveUp}
	loop.Policy.MaxRetries = l.maxRetries
	if l.tracer != nil {
		loop.Tracer = &callTrace{tracer: l.tracer, label: l.label, isolation: l.isolation}
	}
	return loop.Run(ctx, func(ctx context.Context) (classify.Class, error) {
		c, err := try(ctx)
		return classify.Class(c), err
	})
}

// scripted returns an attemptFunc that fails with errs in order, then
// succeeds, and counts its calls.
func scripted(calls *int, errs ...error) attemptFunc {
	return func(context.Context) (Class, error) {
		i := *calls
		*calls++
		if i < len(errs) {
			return Classify(errs[i]), errs[i]
		}
		return classNone, nil
	}
}

func repeat(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

func constJitter(j float64) func() float64 { return func() float64 { return j } }

func newLoop(p RetryConfig, clk clock) *retryLoop {
	p = p.withDefaults()
	return &retryLoop{policy: &p, clock: clk, maxRetries: p.MaxRetries}
}

func TestRetryLoopAttempts(t *testing.T) {
	conflict, deadlock, overload := pgErr(pgerrcode.SerializationFailure), pgErr(pgerrcode.DeadlockDetected), pgErr(pgerrcode.TooManyConnections)
	lost := fmt.Errorf("read: %w", pgconn.ErrConnClosed)
	tests := []struct {
		name         string
		policy       RetryConfig
		errs         []error
		wantAttempts int
		wantErr      error // nil: success
	}{
		{"success first time", RetryConfig{}, nil, 1, nil},
		{"conflict retried then succeeds", RetryConfig{}, repeat(conflict, 3), 4, nil},
		{"deadlock retried", RetryConfig{}, []error{deadlock}, 2, nil},
		{"conflicts capped at MaxRetries default 10", RetryConfig{}, repeat(conflict, 20), 11, conflict},
		{"conflicts capped at MaxRetries 3", RetryConfig{MaxRetries: 3}, repeat(conflict, 20), 4, conflict},
		{"negative MaxRetries: no conflict retry", RetryConfig{MaxRetries: -1}, repeat(conflict, 20), 1, conflict},
		{"lost connection retried", RetryConfig{}, []error{lost, lost}, 3, nil},
		{"overload tried 3 times by default", RetryConfig{}, repeat(overload, 20), 3, overload},
		{"overload MaxAdaptiveRetries 5", RetryConfig{MaxAdaptiveRetries: 5}, repeat(overload, 20), 6, overload},
		{"negative MaxAdaptiveRetries: no overload retry", RetryConfig{MaxAdaptiveRetries: -1}, repeat(overload, 20), 1, overload},
		{"overload then conflicts stops at 3 attempts", RetryConfig{}, append([]error{overload}, repeat(conflict, 20)...), 3, conflict},
		{"conflicts then overload: the cap applies to all retries", RetryConfig{}, append(repeat(conflict, 4), overload, overload), 5, overload},
		{"overload cap sticks after a conflict", RetryConfig{MaxAdaptiveRetries: 3}, []error{overload, conflict, conflict, conflict, conflict}, 4, conflict},
		{"unique violation not retried", RetryConfig{}, []error{pgErr("23505")}, 1, pgErr("23505")},
		{"statement timeout not retried", RetryConfig{}, []error{pgErr(pgerrcode.QueryCanceled)}, 1, pgErr(pgerrcode.QueryCanceled)},
		{"NonRetryable conflict not retried", RetryConfig{}, []error{NonRetryable(conflict)}, 1, conflict},
		{"ambiguous commit not retried", RetryConfig{}, []error{lostCommit(pgconn.ErrConnClosed)}, 1, ErrCommitUnknown},
		{"acquire timeout not retried", RetryConfig{}, []error{&acquireTimeoutError{timeout: time.Second}}, 1, ErrAcquireTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeclock.Clock{T: time.Unix(1000, 0)}
			calls := 0
			err := newLoop(tt.policy, clk).run(context.Background(), scripted(&calls, tt.errs...))
			if calls != tt.wantAttempts {
				t.Errorf("attempts = %d, want %d", calls, tt.wantAttempts)
			}
			switch {
			case tt.wantErr == nil && err != nil:
				t.Errorf("err = %v, want nil", err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr) && sqlState(err) != sqlState(tt.wantErr):
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if got, want := len(clk.Sleeps), tt.wantAttempts-1; got != want {
				t.Errorf("sleeps = %d, want one per retry (%d)", got, want)
			}
		})
	}
}

func TestRetryConfigValidate(t *testing.T) {
	if err := (RetryConfig{BaseBackoff: -1}).validate(); err != nil {
		t.Errorf("negative BaseBackoff means no pause and is valid: %v", err)
	}
	if p := (RetryConfig{BaseBackoff: -1, ConflictMaxBackoff: -1}).withDefaults(); retry.Backoff(1, p.BaseBackoff, p.MaxBackoff, 3) != 0 ||
		retry.Backoff(1, p.ConflictBaseBackoff, p.ConflictMaxBackoff, 3) != 0 {
		t.Errorf("a negative backoff must mean no pause: %+v", p)
	}
	if err := (RetryConfig{MaxRetries: -1, MaxAdaptiveRetries: -5}).validate(); err != nil {
		t.Errorf("negative caps mean none and are valid: %v", err)
	}
}
