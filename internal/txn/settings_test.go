package txn

import (
	"context"
	"testing"
	"time"
)

// TestStatementTimeout: the statement_timeout a transaction sets without
// a deadline on its context: the call's, rounded up to a millisecond, or
// none.
func TestStatementTimeout(t *testing.T) {
	tests := []struct {
		name    string
		call    time.Duration
		session time.Duration
		wantMs  int64 // -1: none set
	}{
		{"the session's", 0, 5 * time.Second, -1},
		{"the call's", 1500 * time.Millisecond, 5 * time.Second, 1500},
		{"rounded up", 10 * time.Microsecond, 5 * time.Second, 1},
		{"lifted by the call", -1, 5 * time.Second, 0},
		{"none anywhere", 0, 0, -1},
	}
	for _, tt := range tests {
		ms, ok := statementTimeout(context.Background(), tt.call, tt.session)
		if !ok {
			ms = -1
		}
		if ms != tt.wantMs {
			t.Errorf("%s: statement_timeout = %d, want %d", tt.name, ms, tt.wantMs)
		}
	}
}

// TestStatementTimeoutCarriesTheDeadline: with a deadline on ctx, the
// transaction's statement_timeout is the time left plus the margin, unless
// the timeout in force (the session's, or the call's) is shorter.
func TestStatementTimeoutCarriesTheDeadline(t *testing.T) {
	tests := []struct {
		name    string
		session time.Duration // the session's statement_timeout; 0: none
		call    time.Duration // Options.StatementTimeout
		left    time.Duration // time left before the deadline
		wantMin int64         // the statement_timeout sent, in ms, between wantMin and wantMax; -1: none sent
		wantMax int64
	}{
		{"deadline shorter than the session's", 5 * time.Second, 0, time.Second, 1000, 1100},
		{"deadline longer than the session's", 5 * time.Second, 0, time.Minute, -1, -1},
		{"no session timeout", 0, 0, time.Minute, 59000, 60100},
		{"call's timeout shorter than the deadline", 5 * time.Second, 200 * time.Millisecond, time.Second, 200, 200},
		{"deadline shorter than the call's", 5 * time.Second, 3 * time.Second, time.Second, 1000, 1100},
		{"call lifted the limit", 5 * time.Second, -1, 2 * time.Second, 2000, 2100},
		{"deadline all but passed", 5 * time.Second, 0, -time.Second, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(tt.left))
			t.Cleanup(cancel)
			ms, ok := statementTimeout(ctx, tt.call, tt.session)
			if tt.wantMin < 0 {
				if ok {
					t.Errorf("statement_timeout %d ms, want none", ms)
				}
				return
			}
			if !ok || ms < tt.wantMin || ms > tt.wantMax {
				t.Errorf("statement_timeout %d ms (set %v), want one in [%d, %d] ms", ms, ok, tt.wantMin, tt.wantMax)
			}
		})
	}
}

// TestStatementTimeoutDoesNotAllocate: working out the timeout of a
// transaction costs nothing.
func TestStatementTimeoutDoesNotAllocate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	t.Cleanup(cancel)
	if n := testing.AllocsPerRun(100, func() { _, _ = statementTimeout(ctx, 0, 5*time.Second) }); n != 0 {
		t.Errorf("statementTimeout allocates %v times", n)
	}
}

func TestDeadlineAfter(t *testing.T) {
	if !deadlineAfter(0).IsZero() || !deadlineAfter(-time.Second).IsZero() {
		t.Error("an off timeout must set no socket deadline")
	}
	if deadlineAfter(time.Second).IsZero() {
		t.Error("a timeout must set a socket deadline")
	}
}
