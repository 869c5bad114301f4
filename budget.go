package pgtx

import (
	"errors"
	"time"

	"github.com/pgtx-go/pgtx/internal/retry"
)

// ErrRetryBudgetExhausted is matched (errors.Is) by the error [Transaction]
// returns when an overload or lost-connection retry was refused because the
// pool's retry budget was spent (the retries of a server that cannot be
// reached wait for the budget instead). The error also wraps the last database
// error, which stays reachable with errors.As.
var ErrRetryBudgetExhausted = errors.New("pgtx: retry budget exhausted")

// Defaults of the retry budget ([RetryConfig].BudgetRatio and the fields
// after it).
const (
	defaultBudgetRatio        = 0.2
	defaultBudgetMinPerSecond = 10
	defaultBudgetWindow       = 10 * time.Second
)

// newRetryBudget returns the budget p configures, its defaults applied, or
// nil when it is off.
func newRetryBudget(p RetryConfig, now time.Time) *retry.Budget {
	if p.BudgetRatio < 0 {
		return nil
	}
	return retry.NewBudget(defaultOrNone(p.BudgetRatio, defaultBudgetRatio), defaultOrNone(p.BudgetMinPerSecond, defaultBudgetMinPerSecond),
		durDefault(p.BudgetWindow, defaultBudgetWindow), now)
}
