package pgtx

import (
	"context"
	"math/rand/v2"
	"time"

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

func (c RetryConfig) validate() error {
	if c.BudgetRatio != c.BudgetRatio || c.BudgetMinPerSecond != c.BudgetMinPerSecond {
		return invalidArg("Retry: BudgetRatio and BudgetMinPerSecond must be numbers")
	}
	return nil
}

func (c RetryConfig) withDefaults() RetryConfig {
	c.MaxRetries = defaultOrNone(c.MaxRetries, defaultMaxRetries)
	c.MaxAdaptiveRetries = defaultOrNone(c.MaxAdaptiveRetries, defaultMaxAdaptiveRetries)
	c.BaseBackoff = defaultOrNone(c.BaseBackoff, defaultBaseBackoff)
	c.MaxBackoff = defaultOrNone(c.MaxBackoff, defaultMaxBackoff)
	c.ConflictBaseBackoff = defaultOrNone(c.ConflictBaseBackoff, defaultConflictBaseBackoff)
	c.ConflictMaxBackoff = defaultOrNone(c.ConflictMaxBackoff, defaultConflictMaxBackoff)
	c.UnavailableTimeout = defaultOrNone(c.UnavailableTimeout, defaultUnavailableTimeout)
	if c.Jitter == nil {
		c.Jitter = rand.Float64
	}
	return c
}

// policy is c, its defaults applied ([RetryConfig.withDefaults]), as the
// retry loop reads it: every call's, before its [Options] override it.
func (c *RetryConfig) policy() retry.Policy {
	return retry.Policy{
		MaxRetries: c.MaxRetries, MaxAdaptiveRetries: c.MaxAdaptiveRetries,
		UnavailableTimeout: c.UnavailableTimeout, Jitter: c.Jitter,
		BaseBackoff: c.BaseBackoff, MaxBackoff: c.MaxBackoff,
		ConflictBaseBackoff: c.ConflictBaseBackoff, ConflictMaxBackoff: c.ConflictMaxBackoff,
	}
}

// override returns the pool's policy p with the call's overrides of o,
// each under the package's rule: 0 keeps the pool's, negative is off.
func (o *Options) override(p retry.Policy) retry.Policy {
	if o.MaxRetries != 0 {
		p.MaxRetries = defaultOrNone(o.MaxRetries, 0)
	}
	if o.MaxAdaptiveRetries != 0 {
		p.MaxAdaptiveRetries = defaultOrNone(o.MaxAdaptiveRetries, 0)
	}
	if o.UnavailableTimeout != 0 {
		p.UnavailableTimeout = defaultOrNone(o.UnavailableTimeout, 0)
	}
	return p
}

// Defaults of the retry budget.
const (
	defaultBudgetRatio        = 0.2
	defaultBudgetMinPerSecond = 10
	defaultBudgetWindow       = 10 * time.Second
)

// newRetryBudget returns nil when the budget is off.
func newRetryBudget(p RetryConfig, now time.Time) *retry.Budget {
	if p.BudgetRatio < 0 {
		return nil
	}
	return retry.NewBudget(defaultOrNone(p.BudgetRatio, defaultBudgetRatio), defaultOrNone(p.BudgetMinPerSecond, defaultBudgetMinPerSecond),
		durDefault(p.BudgetWindow, defaultBudgetWindow), now)
}

// clock lets unit tests fake the time.
type clock = retry.Clock

type realClock = retry.RealClock

// gaveUp is the error of a call the loop retried, or refused to retry.
func gaveUp(err error, attempts int, why retry.Why) error {
	return &RetryError{Attempts: attempts, Reason: why.Reason, Err: err, why: why}
}

// callTrace tells a [TransactionTracer] the events of one call, which the
// retry loop reports to it ([retry.Tracer]).
type callTrace struct {
	tracer    TransactionTracer
	label     string
	isolation Isolation
}

func (t *callTrace) CallStart(ctx context.Context) context.Context {
	return t.tracer.TraceTransactionStart(ctx, TraceTransactionStartData{Label: t.label, Isolation: t.isolation})
}

func (t *callTrace) AttemptStart(ctx context.Context, n int) context.Context {
	return t.tracer.TraceAttemptStart(ctx, TraceAttemptStartData{Label: t.label, Isolation: t.isolation, Attempt: n})
}

func (t *callTrace) AttemptEnd(ctx context.Context, e retry.AttemptEnd) {
	t.tracer.TraceAttemptEnd(ctx, TraceAttemptEndData{Label: t.label, Isolation: t.isolation, Attempt: e.Attempt,
		Err: e.Err, Class: Class(e.Class), Duration: e.Duration, Retry: e.Retry, Backoff: e.Backoff,
		AdmissionWait: e.Wait, Limit: e.Limit})
}

// CallEnd reports a call the context ended during a backoff as a timeout.
func (t *callTrace) CallEnd(ctx context.Context, e retry.CallEnd) {
	class := Classify(e.Err)
	if e.Interrupted {
		class = ClassTimeout
	}
	t.tracer.TraceTransactionEnd(ctx, TraceTransactionEndData{Label: t.label, Isolation: t.isolation,
		Attempts: e.Attempts, Err: e.Err, Class: class, Duration: e.Duration})
}
