package pgtx

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/contention"
	"github.com/pgtx-go/pgtx/internal/retry"
)

// The defaults of RetryConfig, stated on each field.
const (
	defaultMaxRetries          = 10
	defaultMaxAdaptiveRetries  = 2
	defaultBaseBackoff         = 100 * time.Millisecond
	defaultMaxBackoff          = 10 * time.Second
	defaultConflictBaseBackoff = 5 * time.Millisecond
	defaultConflictMaxBackoff  = 500 * time.Millisecond
	defaultUnavailableTimeout  = 15 * time.Second
)

// RetryConfig says how often and how far apart [Transaction] runs a
// transaction again. The zero value is the default of every field. See the
// [retries] and [overload] guides.
//
// [retries]: https://github.com/pgtx-go/pgtx/blob/main/docs/retries.md
// [overload]: https://github.com/pgtx-go/pgtx/blob/main/docs/overload.md
type RetryConfig struct {
	// MaxRetries caps the retries after conflicts and connections lost
	// before COMMIT. Default 10; negative: no such retries.
	MaxRetries int

	// MaxAdaptiveRetries caps every retry once an overload error was seen.
	// Default 2; negative: no overload retries.
	MaxAdaptiveRetries int

	// UnavailableTimeout is how long a call, a query method and a lost
	// COMMIT's resolution wait for a server they cannot connect to, unless
	// the context's deadline is sooner; outside the other caps. Default 15s;
	// negative: they do not wait.
	UnavailableTimeout time.Duration

	// Jitter returns a value in [0, 1) that scales every backoff; nil means
	// math/rand/v2. It must be safe for concurrent use.
	Jitter func() float64

	// BaseBackoff and MaxBackoff shape the overload backoff, jitter *
	// min(MaxBackoff, BaseBackoff * 2^attempt). Defaults 100ms and 10s;
	// negative: no pause.
	BaseBackoff time.Duration
	MaxBackoff  time.Duration

	// ConflictBaseBackoff and ConflictMaxBackoff shape the pause after a
	// conflict or a lost connection, with the same formula. Defaults 5ms
	// and 500ms; negative: no pause.
	ConflictBaseBackoff time.Duration
	ConflictMaxBackoff  time.Duration

	// BudgetRatio, BudgetMinPerSecond and BudgetWindow bound the pool's
	// overload and lost-connection retries, so that they cannot add up to
	// a retry storm; beyond, [ErrRetryBudgetExhausted].
	//
	// BudgetRatio is the share of recent successful calls that may be
	// retried. Default 0.2; negative: the budget is off.
	BudgetRatio float64
	// BudgetMinPerSecond is the floor of retries per second. Default 10;
	// negative: no floor.
	BudgetMinPerSecond float64
	// BudgetWindow is how far back successes and retries count. Default
	// 10s; negative: no window, only the floor allows retries.
	BudgetWindow time.Duration
}

func (p RetryConfig) validate() error {
	if p.BudgetRatio != p.BudgetRatio || p.BudgetMinPerSecond != p.BudgetMinPerSecond {
		return invalidArg("Retry: BudgetRatio and BudgetMinPerSecond must be numbers")
	}
	return nil
}

func (p RetryConfig) withDefaults() RetryConfig {
	p.MaxRetries = defaultOrNone(p.MaxRetries, defaultMaxRetries)
	p.MaxAdaptiveRetries = defaultOrNone(p.MaxAdaptiveRetries, defaultMaxAdaptiveRetries)
	p.BaseBackoff = defaultOrNone(p.BaseBackoff, defaultBaseBackoff)
	p.MaxBackoff = defaultOrNone(p.MaxBackoff, defaultMaxBackoff)
	p.ConflictBaseBackoff = defaultOrNone(p.ConflictBaseBackoff, defaultConflictBaseBackoff)
	p.ConflictMaxBackoff = defaultOrNone(p.ConflictMaxBackoff, defaultConflictMaxBackoff)
	p.UnavailableTimeout = defaultOrNone(p.UnavailableTimeout, defaultUnavailableTimeout)
	if p.Jitter == nil {
		p.Jitter = rand.Float64
	}
	return p
}

func (p *RetryConfig) decider() retry.Policy {
	return retry.Policy{
		MaxAdaptiveRetries: p.MaxAdaptiveRetries, UnavailableTimeout: p.UnavailableTimeout, Jitter: p.Jitter,
		BaseBackoff: p.BaseBackoff, MaxBackoff: p.MaxBackoff,
		ConflictBaseBackoff: p.ConflictBaseBackoff, ConflictMaxBackoff: p.ConflictMaxBackoff,
	}
}

// clock lets unit tests fake the time.
type clock = retry.Clock

type realClock = retry.RealClock

// retryLoop holds a call's settings for [retry.Loop], and is its tracer.
type retryLoop struct {
	policy     *RetryConfig
	clock      clock
	maxRetries int
	budget     *retry.Budget     // nil: no budget
	tracer     TransactionTracer // nil: no events
	label      string
	isolation  Isolation
	gate       *contention.Gate // nil: no contention manager
	wake       retry.Sleeper    // the pause after an unavailable server; nil: the clock's
}

type attemptFunc func(ctx context.Context) (Class, error)

func (l *retryLoop) run(ctx context.Context, try attemptFunc) error {
	loop := retry.Loop{Policy: l.policy.decider(), MaxRetries: l.maxRetries, Clock: l.clock,
		Budget: l.budget, Gate: l.gate, Wake: l.wake, GaveUp: gaveUp}
	if l.tracer != nil {
		loop.Tracer = l
	}
	return loop.Run(ctx, func(ctx context.Context) (classify.Class, error) {
		c, err := try(ctx)
		return classify.Class(c), err
	})
}

func gaveUp(err error, attempts int, why retry.Why) error {
	return &RetryError{Attempts: attempts, Reason: why.Reason, Err: err, why: why}
}

func (l *retryLoop) CallStart(ctx context.Context) context.Context {
	return l.tracer.TraceTransactionStart(ctx, TraceTransactionStartData{Label: l.label, Isolation: l.isolation})
}

func (l *retryLoop) AttemptStart(ctx context.Context, n int) context.Context {
	return l.tracer.TraceAttemptStart(ctx, TraceAttemptStartData{Label: l.label, Isolation: l.isolation, Attempt: n})
}

func (l *retryLoop) AttemptEnd(ctx context.Context, e retry.AttemptEnd) {
	l.tracer.TraceAttemptEnd(ctx, TraceAttemptEndData{Label: l.label, Isolation: l.isolation, Attempt: e.Attempt,
		Err: e.Err, Class: Class(e.Class), Duration: e.Duration, Retry: e.Retry, Backoff: e.Backoff,
		AdmissionWait: e.Wait, Limit: e.Limit})
}

// CallEnd reports a call the context ended during a backoff as a timeout.
func (l *retryLoop) CallEnd(ctx context.Context, e retry.CallEnd) {
	class := Classify(e.Err)
	if e.Interrupted {
		class = ClassTimeout
	}
	l.tracer.TraceTransactionEnd(ctx, TraceTransactionEndData{Label: l.label, Isolation: l.isolation,
		Attempts: e.Attempts, Err: e.Err, Class: class, Duration: e.Duration})
}
