package pgtx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/pgtx-go/pgtx/internal/fakeclock"
)

// refusedErr is a connection refused while the server restarts or a standby
// is promoted: ClassUnavailable.
func refusedErr() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// TestUnavailableRetriedUntilDeadline: a server that stays unreachable is
// retried until the context's deadline, never given up on before it. The
// pauses are jitter * min(MaxBackoff, BaseBackoff * 2^n), n counting the
// unavailable retries from 1, cut to half the time left; once half the time
// left is under BaseBackoff the call waits for the deadline, which ends it
// with an error matching context.DeadlineExceeded and the refusal.
func TestUnavailableRetriedUntilDeadline(t *testing.T) {
	tests := []struct {
		name       string
		policy     RetryConfig
		deadline   time.Duration
		wantSleeps []time.Duration
	}{
		{
			name: "jitter 1, 10s: the formula, then half the time left, then the wait", policy: RetryConfig{Jitter: constJitter(1)}, deadline: 10 * time.Second,
			wantSleeps: []time.Duration{ms(200), ms(400), ms(800), ms(1600), ms(3200), // 2^n * 100ms
				ms(1900), ms(950), ms(475), ms(237.5), ms(118.75), // half the time left
				ms(118.75)}, // half of it is under 100ms: wait for the deadline
		},
		{
			name: "jitter 0.5, 3s", policy: RetryConfig{Jitter: constJitter(0.5)}, deadline: 3 * time.Second,
			wantSleeps: []time.Duration{ms(100), ms(200), ms(400), ms(800), ms(750), ms(375), ms(187.5), ms(187.5)},
		},
		{
			name: "a deadline shorter than the first pause: the call waits for it", policy: RetryConfig{Jitter: constJitter(1)}, deadline: 150 * time.Millisecond,
			wantSleeps: []time.Duration{ms(150)},
		},
		{
			name: "MaxBackoff caps the pause", policy: RetryConfig{Jitter: constJitter(1), MaxBackoff: 300 * time.Millisecond}, deadline: 2 * time.Second,
			wantSleeps: []time.Duration{ms(200), ms(300), ms(300), ms(300), ms(300), ms(300), ms(150), ms(150)},
		},
		{
			name: "MaxRetries and MaxAdaptiveRetries off cap nothing", policy: RetryConfig{Jitter: constJitter(1), MaxRetries: -1, MaxAdaptiveRetries: -1}, deadline: time.Second,
			wantSleeps: []time.Duration{ms(200), ms(400), ms(200), ms(100), ms(100)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeclock.Clock{T: time.Unix(1000, 0)}
			start := clk.T
			ctx := fakeclock.Deadline(clk, tt.deadline)
			calls := 0
			refused := refusedErr()
			err := newLoop(tt.policy, clk).run(ctx, scripted(&calls, repeat(refused, 1000)...))
			if fmt.Sprint(clk.Sleeps) != fmt.Sprint(tt.wantSleeps) {
				t.Errorf("sleeps %v\nwant   %v", clk.Sleeps, tt.wantSleeps)
			}
			if calls != len(tt.wantSleeps) {
				t.Errorf("attempts %d, want %d: one per pause but the last, which the deadline ends", calls, len(tt.wantSleeps))
			}
			if got := clk.T.Sub(start); got != tt.deadline {
				t.Errorf("the call ended after %v, want at its deadline %v", got, tt.deadline)
			}
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, refused) || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("err = %v: want it to match context.DeadlineExceeded and keep the refusal", err)
			}
			// A single attempt whose retry the deadline ended is a
			// *RetryError too: the message says the server is unreachable.
			var re *RetryError
			if !errors.As(err, &re) || re.Attempts != calls {
				t.Fatalf("err = %v: want a *RetryError of %d attempts", err, calls)
			}
			attempts := "attempts"
			if calls == 1 {
				attempts = "attempt"
			}
			want := fmt.Sprintf("pgtx: the server is unreachable: gave up after %d %s in %v (the context ended): context deadline exceeded: ", calls, attempts, tt.deadline)
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("message %q\nwant it to begin %q", err, want)
			}
		})
	}
}

// TestUnavailableBound: without a deadline UnavailableTimeout (default 15s,
// from the call's first unavailable error) ends the retries, after one last
// attempt at the bound; with a deadline the earlier of the two ends them;
// negative: not retried at all, whatever the other caps.
func TestUnavailableBound(t *testing.T) {
	tests := []struct {
		name         string
		policy       RetryConfig
		before       []error       // errors of the attempts before the first refusal
		deadline     time.Duration // 0: none
		wantAttempts int
		wantEnd      time.Duration // when the call ends, from its start
		wantMsg      string
	}{
		{name: "no deadline: the default bound, 15s", policy: RetryConfig{Jitter: constJitter(1)}, wantAttempts: 13, wantEnd: 15 * time.Second,
			wantMsg: "pgtx: the server is unreachable: gave up after 13 attempts in 15s (UnavailableTimeout 15s): "},
		{name: "no deadline: a bound of 2s", policy: RetryConfig{Jitter: constJitter(1), UnavailableTimeout: 2 * time.Second}, wantAttempts: 7, wantEnd: 2 * time.Second,
			wantMsg: "pgtx: the server is unreachable: gave up after 7 attempts in 2s (UnavailableTimeout 2s): "},
		{name: "a deadline later than the bound: the bound", policy: RetryConfig{Jitter: constJitter(1), UnavailableTimeout: 2 * time.Second}, deadline: time.Minute,
			wantAttempts: 7, wantEnd: 2 * time.Second, wantMsg: "pgtx: the server is unreachable: gave up after 7 attempts in 2s (UnavailableTimeout 2s): "},
		{name: "a deadline earlier than the bound: the deadline", policy: RetryConfig{Jitter: constJitter(1), UnavailableTimeout: 20 * time.Second}, deadline: 2 * time.Second,
			wantAttempts: 6, wantEnd: 2 * time.Second, wantMsg: "pgtx: the server is unreachable: gave up after 6 attempts in 2s (the context ended): context deadline exceeded: "},
		{name: "counted from the first unavailable error", policy: RetryConfig{Jitter: constJitter(1), UnavailableTimeout: 2 * time.Second},
			before: repeat(pgErr(pgerrcode.SerializationFailure), 3), wantAttempts: 10, wantEnd: 2*time.Second + ms(10+20+40),
			wantMsg: "pgtx: the server is unreachable: gave up after 10 attempts in 2s (UnavailableTimeout 2s): "},
		{name: "negative: not retried", policy: RetryConfig{UnavailableTimeout: -1}, wantAttempts: 1,
			wantMsg: "pgtx: the server is unreachable: gave up after 1 attempt (UnavailableTimeout off): "},
		{name: "negative, with a deadline: not retried", policy: RetryConfig{UnavailableTimeout: -1}, deadline: time.Minute, wantAttempts: 1,
			wantMsg: "pgtx: the server is unreachable: gave up after 1 attempt (UnavailableTimeout off): "},
		{name: "negative, after conflicts: not retried", policy: RetryConfig{UnavailableTimeout: -1, Jitter: constJitter(1)},
			before: repeat(pgErr(pgerrcode.SerializationFailure), 2), wantAttempts: 3, wantEnd: ms(10 + 20),
			wantMsg: "pgtx: the server is unreachable: gave up after 3 attempts (UnavailableTimeout off): "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeclock.Clock{T: time.Unix(1000, 0)}
			start := clk.T
			var ctx context.Context = context.Background()
			if tt.deadline > 0 {
				ctx = fakeclock.Deadline(clk, tt.deadline)
			}
			calls := 0
			refused := refusedErr()
			err := newLoop(tt.policy, clk).run(ctx, scripted(&calls, append(tt.before, repeat(refused, 1000)...)...))
			if calls != tt.wantAttempts {
				t.Errorf("attempts %d, want %d (sleeps %v)", calls, tt.wantAttempts, clk.Sleeps)
			}
			if got := clk.T.Sub(start); got != tt.wantEnd {
				t.Errorf("the call ended after %v, want %v (sleeps %v)", got, tt.wantEnd, clk.Sleeps)
			}
			if !errors.Is(err, refused) {
				t.Errorf("err = %v: the refusal must stay reachable", err)
			}
			if got := errors.Is(err, context.DeadlineExceeded); got != (tt.deadline > 0 && tt.deadline == tt.wantEnd) {
				t.Errorf("err = %v: matches context.DeadlineExceeded %v, want it only when the deadline ended the call", err, got)
			}
			if Classify(err) != ClassUnavailable && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v classified %v, want unavailable", err, Classify(err))
			}
			if !strings.HasPrefix(err.Error(), tt.wantMsg) {
				t.Errorf("message %q\nwant it to begin %q", err, tt.wantMsg)
			}
			wantReason := "UnavailableTimeout"
			if strings.Contains(tt.wantMsg, "(the context ended)") {
				wantReason = "context"
			}
			if re := (*RetryError)(nil); !errors.As(err, &re) || re.Reason != wantReason {
				t.Errorf("err = %v: want a *RetryError whose Reason is %q", err, wantReason)
			}
		})
	}
}

// TestUnavailableOutsideTheCaps: unavailable retries count against neither
// MaxRetries nor MaxAdaptiveRetries and do not set the sticky overload cap,
// so a conflict after a restart keeps its MaxRetries; an overload still
// makes MaxAdaptiveRetries the cap of the call's later retries (an
// unavailable server's excepted), and a class switched off stays off.
func TestUnavailableOutsideTheCaps(t *testing.T) {
	conflict, overload := pgErr(pgerrcode.SerializationFailure), pgErr(pgerrcode.TooManyConnections)
	lost := fmt.Errorf("read: %w", net.ErrClosed)
	refused := refusedErr()
	tests := []struct {
		name         string
		policy       RetryConfig
		errs         []error
		wantAttempts int
		wantLast     error // nil: success
		wantMsg      string
	}{
		{name: "a restart, then conflicts: retried, then success", errs: append(repeat(refused, 6), repeat(conflict, 8)...), wantAttempts: 15},
		{name: "a restart, then conflicts: MaxRetries still 10", errs: append(repeat(refused, 6), repeat(conflict, 20)...), wantAttempts: 6 + 11, wantLast: conflict,
			wantMsg: "pgtx: gave up after 17 attempts (MaxRetries 10): "},
		{name: "conflicts, a restart, conflicts: MaxRetries counts the conflicts only", errs: append(append(repeat(conflict, 5), repeat(refused, 6)...), repeat(conflict, 20)...),
			wantAttempts: 5 + 6 + 6, wantLast: conflict, wantMsg: "pgtx: gave up after 17 attempts (MaxRetries 10): "},
		{name: "a restart, then lost connections: MaxRetries", policy: RetryConfig{MaxRetries: 3}, errs: append(repeat(refused, 4), repeat(lost, 20)...), wantAttempts: 4 + 4, wantLast: lost},
		{name: "a restart, then 53300 while the server is full: two overload retries", errs: append(repeat(refused, 6), overload, overload), wantAttempts: 9},
		{name: "a restart, then 53300 three times: MaxAdaptiveRetries 2", errs: append(repeat(refused, 6), repeat(overload, 5)...), wantAttempts: 6 + 3, wantLast: overload,
			wantMsg: "pgtx: gave up after 9 attempts (MaxAdaptiveRetries 2): "},
		{name: "overload is sticky: a refusal is still retried, a conflict is capped", errs: append(append([]error{overload}, repeat(refused, 6)...), repeat(conflict, 5)...),
			wantAttempts: 1 + 6 + 2, wantLast: conflict, wantMsg: "pgtx: gave up after 9 attempts (MaxAdaptiveRetries 2): "},
		{name: "MaxAdaptiveRetries off: refusals retried, the 53300 is not", policy: RetryConfig{MaxAdaptiveRetries: -1}, errs: append(repeat(refused, 3), overload),
			wantAttempts: 4, wantLast: overload, wantMsg: "pgtx: gave up after 4 attempts (MaxAdaptiveRetries off): "},
		{name: "MaxRetries off: refusals retried, the conflict is not", policy: RetryConfig{MaxRetries: -1}, errs: append(repeat(refused, 3), conflict),
			wantAttempts: 4, wantLast: conflict, wantMsg: "pgtx: gave up after 4 attempts (MaxRetries off): "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			p := tt.policy
			p.Jitter = constJitter(0.5)
			l := newLoop(p, &fakeclock.Clock{T: time.Unix(1000, 0)})
			err := l.run(context.Background(), scripted(&calls, tt.errs...))
			if calls != tt.wantAttempts {
				t.Errorf("attempts %d, want %d", calls, tt.wantAttempts)
			}
			switch {
			case tt.wantLast == nil && err != nil:
				t.Errorf("err = %v, want success", err)
			case tt.wantLast != nil && !errors.Is(err, tt.wantLast):
				t.Errorf("err = %v, want the last attempt's %v", err, tt.wantLast)
			}
			if tt.wantMsg != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantMsg)) {
				t.Errorf("message %v\nwant it to begin %q", err, tt.wantMsg)
			}
		})
	}
}

// TestUnavailableBudget: the pool's retry budget paces the retries of a
// server that cannot be reached and never ends the call: with the budget
// spent (no successes, no floor) the call is retried until its deadline,
// whose error it matches with the refusal, never ErrRetryBudgetExhausted;
// with a floor of one retry a second, the pauses wait for its tokens.
func TestUnavailableBudget(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name       string
		budget     RetryConfig
		wantSleeps []time.Duration
	}{
		{"spent, no floor: the backoff", RetryConfig{BudgetMinPerSecond: -1},
			[]time.Duration{ms(200), ms(400), ms(800), ms(1600), ms(3200), ms(1900), ms(950), ms(475), ms(237.5), ms(118.75), ms(118.75)}},
		// A bucket of one token: the first retry takes it, the next two wait
		// for the one they borrow (800ms, 1s), longer than their backoff.
		{"a floor of 1/s: its tokens", RetryConfig{BudgetMinPerSecond: 1},
			[]time.Duration{ms(200), ms(800), ms(1000), ms(1600), ms(3200), ms(1600), ms(800), ms(400), ms(400)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeclock.Clock{T: t0}
			l := newLoop(RetryConfig{Jitter: constJitter(1)}, clk)
			l.budget = newRetryBudget(tt.budget, t0)
			calls := 0
			refused := refusedErr()
			err := l.run(fakeclock.Deadline(clk, 10*time.Second), scripted(&calls, repeat(refused, 100)...))
			if fmt.Sprint(clk.Sleeps) != fmt.Sprint(tt.wantSleeps) {
				t.Errorf("sleeps %v\nwant   %v", clk.Sleeps, tt.wantSleeps)
			}
			if errors.Is(err, ErrRetryBudgetExhausted) || !errors.Is(err, refused) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v: want the deadline and the refusal, not ErrRetryBudgetExhausted", err)
			}
		})
	}
}

// TestUnavailableContextEnds: a caller that goes away while the server is
// unreachable ends the call at once with its context's error and the
// refusal; a deadline the clock saw pass before the context reported it
// ends the call the same way, without another attempt.
func TestUnavailableContextEnds(t *testing.T) {
	refused := refusedErr()
	t.Run("cancelled during a pause", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		clk := &fakeclock.Clock{T: time.Unix(1000, 0)}
		calls := 0
		try := func(context.Context) (Class, error) {
			calls++
			if calls == 3 {
				cancel()
			}
			return ClassUnavailable, refused
		}
		err := newLoop(RetryConfig{Jitter: constJitter(1)}, clk).run(ctx, try)
		if calls != 3 || !errors.Is(err, context.Canceled) || !errors.Is(err, refused) {
			t.Errorf("attempts %d, err %v: want 3 and both context.Canceled and the refusal", calls, err)
		}
		if want := "pgtx: the server is unreachable: gave up after 3 attempts in 600ms (the context ended): context canceled: "; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("message %q\nwant it to begin %q", err, want)
		}
	})
	t.Run("the deadline passed by the clock first", func(t *testing.T) {
		// A real deadline an hour away, and a clock that reaches it during
		// an attempt: the context has not said so yet.
		deadline := time.Now().Add(time.Hour)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		clk := &fakeclock.Clock{T: deadline.Add(-time.Second)}
		calls := 0
		try := func(context.Context) (Class, error) {
			calls++
			if calls == 2 {
				clk.T = deadline.Add(time.Millisecond)
			}
			return ClassUnavailable, refused
		}
		err := newLoop(RetryConfig{Jitter: constJitter(1)}, clk).run(ctx, try)
		if calls != 2 || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, refused) {
			t.Errorf("attempts %d, err %v: want 2 and both context.DeadlineExceeded and the refusal", calls, err)
		}
	})
}

// TestOptionsRetryConfig: the per-call overrides of Options, each under the
// package's rule (0 keeps the pool's, negative is off).
func TestOptionsRetryConfig(t *testing.T) {
	c := RetryConfig{}.withDefaults()
	pool := c.policy()
	if got := (&Options{}).override(pool); got.MaxRetries != pool.MaxRetries || got.MaxAdaptiveRetries != pool.MaxAdaptiveRetries ||
		got.UnavailableTimeout != pool.UnavailableTimeout {
		t.Errorf("no override: %+v, want the pool's policy %+v", got, pool)
	}
	tests := []struct {
		opts                 Options
		wantRetries          int
		wantAdaptive         int
		wantUnavailableBound time.Duration
	}{
		{Options{UnavailableTimeout: 3 * time.Second}, 10, 2, 3 * time.Second},
		{Options{UnavailableTimeout: -1}, 10, 2, 0},
		{Options{MaxAdaptiveRetries: -1}, 10, 0, 15 * time.Second},
		{Options{MaxAdaptiveRetries: 5, UnavailableTimeout: -1}, 10, 5, 0},
		{Options{MaxRetries: 3}, 3, 2, 15 * time.Second},
		{Options{MaxRetries: -1}, 0, 2, 15 * time.Second},
	}
	for _, tt := range tests {
		got := tt.opts.override(pool)
		if got.MaxRetries != tt.wantRetries || got.MaxAdaptiveRetries != tt.wantAdaptive || got.UnavailableTimeout != tt.wantUnavailableBound {
			t.Errorf("%+v: MaxRetries %d, MaxAdaptiveRetries %d, UnavailableTimeout %v; want %d, %d, %v", tt.opts,
				got.MaxRetries, got.MaxAdaptiveRetries, got.UnavailableTimeout, tt.wantRetries, tt.wantAdaptive, tt.wantUnavailableBound)
		}
	}
	if pool.UnavailableTimeout != 15*time.Second || pool.MaxAdaptiveRetries != 2 || pool.MaxRetries != 10 {
		t.Errorf("the pool's policy changed: %+v", pool)
	}
}

// TestUnreachableSaidFirst: however a call that ends on a server it cannot
// connect to ends — UnavailableTimeout, the deadline (after retries or
// before the first pause ended), the context during the first attempt, the
// deadline with an empty retry budget (which paces, never ends it),
// UnavailableTimeout off, or an overload cap when the last connect found a
// host refusing — its error is a *RetryError whose message
// begins with "the server is unreachable", not with the cap; it keeps the
// refusal (and the context's error when the context ended the call), and
// Classify returns what it returns for the last attempt's error.
func TestUnreachableSaidFirst(t *testing.T) {
	refused := refusedErr()
	// A connect to two hosts: one refused, the other full (53300).
	refusedAndFull := errors.Join(refused, pgErr(pgerrcode.TooManyConnections))
	tests := []struct {
		name         string
		policy       RetryConfig
		deadline     time.Duration // 0: none
		cancelAt     int           // the attempt during which the context is cancelled; 0: none
		budget       bool          // an empty retry budget
		errs         []error
		wantAttempts int
		wantMsg      string
		wantClass    Class
		wantCtx      error // the context's error the call must match, nil: none
	}{
		{name: "UnavailableTimeout", policy: RetryConfig{UnavailableTimeout: 2 * time.Second}, errs: repeat(refused, 100), wantAttempts: 7,
			wantMsg: "pgtx: the server is unreachable: gave up after 7 attempts in 2s (UnavailableTimeout 2s): ", wantClass: ClassUnavailable},
		{name: "the deadline, after retries", deadline: 2 * time.Second, errs: repeat(refused, 100), wantAttempts: 6,
			wantMsg: "pgtx: the server is unreachable: gave up after 6 attempts in 2s (the context ended): context deadline exceeded: ", wantClass: ClassTimeout, wantCtx: context.DeadlineExceeded},
		{name: "the deadline, before the first pause ended", deadline: 150 * time.Millisecond, errs: repeat(refused, 100), wantAttempts: 1,
			wantMsg: "pgtx: the server is unreachable: gave up after 1 attempt in 150ms (the context ended): context deadline exceeded: ", wantClass: ClassTimeout, wantCtx: context.DeadlineExceeded},
		{name: "the context, during the first attempt", cancelAt: 1, errs: repeat(refused, 100), wantAttempts: 1,
			wantMsg: "pgtx: the server is unreachable: gave up after 1 attempt (the context ended): context canceled: ", wantClass: ClassTimeout, wantCtx: context.Canceled},
		{name: "an empty retry budget paces, the deadline ends it", budget: true, deadline: 2 * time.Second, errs: repeat(refused, 100), wantAttempts: 6,
			wantMsg: "pgtx: the server is unreachable: gave up after 6 attempts in 2s (the context ended): context deadline exceeded: ", wantClass: ClassTimeout, wantCtx: context.DeadlineExceeded},
		{name: "UnavailableTimeout off", policy: RetryConfig{UnavailableTimeout: -1}, errs: repeat(refused, 100), wantAttempts: 1,
			wantMsg: "pgtx: the server is unreachable: gave up after 1 attempt (UnavailableTimeout off): ", wantClass: ClassUnavailable},
		{name: "UnavailableTimeout off, after conflicts", policy: RetryConfig{UnavailableTimeout: -1}, errs: append(repeat(pgErr(pgerrcode.SerializationFailure), 2), refused), wantAttempts: 3,
			wantMsg: "pgtx: the server is unreachable: gave up after 3 attempts (UnavailableTimeout off): ", wantClass: ClassUnavailable},
		{name: "MaxAdaptiveRetries, a host refusing", errs: repeat(refusedAndFull, 100), wantAttempts: 3,
			wantMsg: "pgtx: the server is unreachable: gave up after 3 attempts (MaxAdaptiveRetries 2): ", wantClass: ClassOverload},
		{name: "MaxAdaptiveRetries off, a host refusing", policy: RetryConfig{MaxAdaptiveRetries: -1}, errs: repeat(refusedAndFull, 100), wantAttempts: 1,
			wantMsg: "pgtx: the server is unreachable: gave up after 1 attempt (MaxAdaptiveRetries off): ", wantClass: ClassOverload},
		{name: "refusals, then an overload from a server that answers: the cap", errs: append(repeat(refused, 3), repeat(pgErr(pgerrcode.TooManyConnections), 10)...), wantAttempts: 6,
			wantMsg: "pgtx: gave up after 6 attempts (MaxAdaptiveRetries 2): ", wantClass: ClassOverload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.policy
			p.Jitter = constJitter(1)
			clk := &fakeclock.Clock{T: time.Unix(1000, 0)}
			l := newLoop(p, clk)
			if tt.budget {
				l.budget = newRetryBudget(RetryConfig{BudgetMinPerSecond: -1}, clk.T)
			}
			var ctx context.Context = context.Background()
			if tt.deadline > 0 {
				ctx = fakeclock.Deadline(clk, tt.deadline)
			}
			cancel := func() {}
			if tt.cancelAt > 0 {
				// Not on the fake deadline's context, whose pauses end at
				// the deadline on the fake clock only as it is.
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
			}
			calls := 0
			script := scripted(&calls, tt.errs...)
			err := l.run(ctx, func(ctx context.Context) (Class, error) {
				c, err := script(ctx)
				if calls == tt.cancelAt {
					cancel()
				}
				return c, err
			})
			if !strings.HasPrefix(fmt.Sprint(err), tt.wantMsg) {
				t.Errorf("message %q\nwant it to begin %q", err, tt.wantMsg)
			}
			var re *RetryError
			if !errors.As(err, &re) || re.Attempts != tt.wantAttempts || calls != tt.wantAttempts {
				t.Fatalf("err = %v after %d attempts: want a *RetryError of %d attempts", err, calls, tt.wantAttempts)
			}
			last := tt.errs[calls-1]
			if !errors.Is(err, last) || errors.Is(err, syscall.ECONNREFUSED) != errors.Is(last, syscall.ECONNREFUSED) {
				t.Errorf("err = %v: want it to match the last attempt's error, and the refusal when there was one", err)
			}
			if got := Classify(err); got != tt.wantClass || got != Classify(re.Err) {
				t.Errorf("Classify = %v, want %v, as for the last attempt's error (%v)", got, tt.wantClass, Classify(re.Err))
			}
			if tt.wantCtx != nil && !errors.Is(err, tt.wantCtx) {
				t.Errorf("err = %v: want it to match %v", err, tt.wantCtx)
			}
			if errors.Is(err, ErrRetryBudgetExhausted) {
				t.Errorf("err = %v matches ErrRetryBudgetExhausted: the budget never ends a call on an unreachable server", err)
			}
		})
	}
}
