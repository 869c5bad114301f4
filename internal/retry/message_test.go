package retry

import (
	"errors"
	"testing"
	"time"
)

// TestWhyMessage: the message says an unreachable server first, then the
// attempts, how long the server was unreachable (to the millisecond, or the
// 10 milliseconds from a second up), why the retries stopped, and the last
// error.
func TestWhyMessage(t *testing.T) {
	last := errors.New("boom")
	class := func(error) string { return "permanent" }
	tests := []struct {
		name     string
		why      Why
		attempts int
		want     string
	}{
		{"cap", Why{Stop: CapReached, Limit: "MaxRetries", Cap: 10}, 11, "pgtx: gave up after 11 attempts (MaxRetries 10): boom"},
		{"cap off", Why{Stop: CapReached, Limit: "MaxAdaptiveRetries"}, 1, "pgtx: gave up after 1 attempt (MaxAdaptiveRetries off): boom"},
		{"not retryable", Why{Stop: NotRetryable}, 3, "pgtx: failed after 3 attempts (not retryable: permanent): boom"},
		{"deadline", Why{Stop: Deadline}, 2, "pgtx: gave up after 2 attempts (the next retry would end past the context's deadline): boom"},
		{"budget", Why{Stop: BudgetSpent}, 1, "pgtx: gave up after 1 attempt (retry budget exhausted): boom"},
		{"context", Why{Stop: ContextEnded}, 2, "pgtx: gave up after 2 attempts (the context ended): boom"},
		{"unreachable, bound", Why{Stop: Unreachable, Unreachable: true, UnreachableFor: 15*time.Second + 4*time.Millisecond, Bound: 15 * time.Second}, 13,
			"pgtx: the server is unreachable: gave up after 13 attempts in 15s (UnavailableTimeout 15s): boom"},
		{"unreachable, under a second", Why{Stop: ContextEnded, Unreachable: true, UnreachableFor: 250*time.Millisecond + 400*time.Microsecond}, 3,
			"pgtx: the server is unreachable: gave up after 3 attempts in 250ms (the context ended): boom"},
		{"unreachable at once", Why{Stop: NotRetryable, Unreachable: true}, 1, "pgtx: the server is unreachable: failed after 1 attempt (not retryable: permanent): boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.why.Message(tt.attempts, last, class); got != tt.want {
				t.Errorf("Message = %q, want %q", got, tt.want)
			}
		})
	}
}
