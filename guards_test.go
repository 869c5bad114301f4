package pgtx

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/fakeclock"
)

var errCallerOwn = errors.New("insufficient funds")

// TestRetryErrorSaysWhatHappened: the final error states the attempts and
// why the loop stopped, and keeps the identity of what it wraps.
func TestRetryErrorSaysWhatHappened(t *testing.T) {
	conflict, overload := pgErr(pgerrcode.SerializationFailure), pgErr(pgerrcode.TooManyConnections)
	tests := []struct {
		name      string
		policy    RetryConfig
		deadline  time.Duration // 0: none
		errs      []error
		budget    bool
		wantPlain bool // the error is returned as it is
		want      string
		reason    string // RetryError.Reason
		attempts  int
	}{
		{name: "cap", errs: repeat(conflict, 20), want: "pgtx: gave up after 11 attempts (MaxRetries 10): ", reason: "MaxRetries", attempts: 11},
		{name: "adaptive cap", errs: append([]error{overload}, repeat(conflict, 20)...), want: "pgtx: gave up after 3 attempts (MaxAdaptiveRetries 2): ", reason: "MaxAdaptiveRetries", attempts: 3},
		{name: "class off", policy: RetryConfig{MaxAdaptiveRetries: -1}, errs: []error{overload}, want: "pgtx: gave up after 1 attempt (MaxAdaptiveRetries off): ", reason: "MaxAdaptiveRetries", attempts: 1},
		{name: "deadline", policy: RetryConfig{ConflictBaseBackoff: time.Hour, ConflictMaxBackoff: time.Hour}, deadline: time.Minute,
			errs: []error{conflict}, want: "pgtx: gave up after 1 attempt (the next retry would end past the context's deadline): ", reason: "deadline", attempts: 1},
		{name: "budget", policy: RetryConfig{BudgetRatio: 0.1, BudgetMinPerSecond: -1}, budget: true, errs: []error{overload},
			want: "pgtx: gave up after 1 attempt (retry budget exhausted): ", reason: "budget", attempts: 1},
		{name: "not retryable after retries", errs: []error{conflict, conflict, errCallerOwn}, want: "pgtx: failed after 3 attempts (not retryable: permanent): insufficient funds", reason: "not retryable", attempts: 3},
		{name: "first attempt, not retryable", errs: []error{errCallerOwn}, wantPlain: true, attempts: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.policy
			p.Jitter = constJitter(1)
			now := time.Now()
			l := newLoop(p, &fakeclock.Clock{T: now})
			if tt.budget {
				l.budget = newRetryBudget(*l.policy, now)
			}
			ctx := context.Background()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, now.Add(tt.deadline))
				defer cancel()
			}
			calls := 0
			err := l.run(ctx, scripted(&calls, tt.errs...))
			last := tt.errs[calls-1]
			if !errors.Is(err, last) {
				t.Errorf("err %v does not match the last attempt's error", err)
			}
			if calls != tt.attempts {
				t.Errorf("attempts %d, want %d", calls, tt.attempts)
			}
			var re *RetryError
			if tt.wantPlain {
				if err != last {
					t.Errorf("err %v (%T), want the error itself", err, err)
				}
				return
			}
			if !errors.As(err, &re) || re.Attempts != tt.attempts {
				t.Fatalf("err %v: want a *RetryError with %d attempts", err, tt.attempts)
			}
			if re.Reason != tt.reason {
				t.Errorf("Reason %q, want %q", re.Reason, tt.reason)
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("message %q, want it to begin %q", err, tt.want)
			}
			var pgErr *pgconn.PgError
			if _, isPg := last.(*pgconn.PgError); isPg && !errors.As(err, &pgErr) {
				t.Error("errors.As lost the *pgconn.PgError")
			}
			if errors.Is(err, ErrRetryBudgetExhausted) != tt.budget {
				t.Errorf("errors.Is(err, ErrRetryBudgetExhausted) = %v, want %v", !tt.budget, tt.budget)
			}
		})
	}
}

// TestRetryErrorKeepsContextIdentity: a call the context ended after a
// retry matches ctx.Err() and says so.
func TestRetryErrorKeepsContextIdentity(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	l := newLoop(RetryConfig{Jitter: constJitter(1)}, &fakeclock.Clock{T: time.Unix(1000, 0)})
	err := l.run(ctx, func(ctx context.Context) (Class, error) {
		calls++
		if calls == 2 {
			cancel()
		}
		return ClassConflict, pgErr(pgerrcode.SerializationFailure)
	})
	var re *RetryError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &re) || re.Attempts != 2 || re.Reason != "context" || !strings.Contains(err.Error(), "(the context ended)") {
		t.Errorf("err = %v", err)
	}
}

func newTestPool(t *testing.T) *Pool {
	t.Helper()
	p, err := NewWithConfig(context.Background(), mustParse(t, unreachableDSN))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestNestedTransactionRefused: a Transaction inside fn of a Transaction on
// the same pool is refused before it waits for a connection; on another
// pool it is allowed, and the chain is followed through it.
func TestNestedTransactionRefused(t *testing.T) {
	a, b := newTestPool(t), newTestPool(t)
	fn := func(context.Context, pgx.Tx) error { t.Error("fn ran"); return nil }
	outer := &attempt{Context: context.Background(), pool: a, n: 1, inFn: true}
	ctx := context.Context(outer)
	err := Transaction(ctx, a, Serializable, fn)
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "nested Transaction") || !strings.Contains(err.Error(), "pass its pgx.Tx down") {
		t.Errorf("same pool: err = %v", err)
	}
	inner := &attempt{Context: ctx, pool: b, parent: outer, n: 1, inFn: true}
	if err := Transaction(inner, a, Serializable, fn); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("same pool through another pool's call: err = %v", err)
	}
	if err := validateCall(ctx, b, Serializable, fn); err != nil {
		t.Errorf("another pool: err = %v, want it allowed", err)
	}
}

// TestAfterCommitAndAttempt: AfterCommit and Attempt read the attempt from
// fn's context (and contexts derived from it); outside it they refuse
// (AfterCommit) or say 0 (Attempt); once fn returned, AfterCommit refuses.
func TestAfterCommitAndAttempt(t *testing.T) {
	bg := context.Background()
	if err := AfterCommit(bg, func(context.Context) {}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("outside a Transaction: err = %v", err)
	}
	if n := Attempt(bg); n != 0 {
		t.Errorf("Attempt outside a Transaction = %d", n)
	}
	var ran []int
	var last *attempt
	for n := 1; n <= 3; n++ {
		ac := &attempt{Context: bg, n: n, inFn: true}
		ctx := context.WithValue(ac, ctxKey{}, 1) // derived contexts carry it too
		if got := Attempt(ctx); got != n {
			t.Errorf("Attempt = %d, want %d", got, n)
		}
		for i := range 2 {
			if err := AfterCommit(ctx, func(context.Context) { ran = append(ran, n*10+i) }); err != nil {
				t.Fatal(err)
			}
		}
		ac.inFn = false
		if err := AfterCommit(ctx, func(context.Context) {}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("after fn returned: err = %v", err)
		}
		last = ac
	}
	if err := AfterCommit(last, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil fn: err = %v", err)
	}
	last.afterCommit(bg)
	if len(ran) != 2 || ran[0] != 30 || ran[1] != 31 {
		t.Errorf("ran %v: want only the committed attempt's work, once, in order", ran)
	}
	last.afterCommit(bg)
	if len(ran) != 2 {
		t.Errorf("ran %v: the work must run once", ran)
	}
}

// TestTransactionValueBadInput: the value form refuses bad input as
// Transaction does, with the zero value.
func TestTransactionValueBadInput(t *testing.T) {
	p := newTestPool(t)
	v, err := TransactionValue[int](context.Background(), p, Serializable, Options{}, nil)
	if v != 0 || !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil fn: %v, %v", v, err)
	}
	v, err = TransactionValue(context.Background(), p, 0, Options{}, func(context.Context, pgx.Tx) (int, error) { return 1, nil })
	if v != 0 || !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("zero isolation: %v, %v", v, err)
	}
}
