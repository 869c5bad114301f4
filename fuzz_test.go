package pgtx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/fakeclock"
	"github.com/pgtx-go/pgtx/internal/retry"
)

// FuzzClassify feeds random SQLSTATEs, messages and severities, wrapped,
// joined and marked in random ways, and checks the classification's
// invariants: it never panics; wrapping keeps the class; NonRetryable makes
// anything permanent; a context error joined in makes it a timeout; an
// ambiguous commit is never retryable; SQLState finds the code through any
// wrapping.
func FuzzClassify(f *testing.F) {
	for _, seed := range []struct {
		code, msg, sev string
		depth          uint8
		shape          uint8
	}{
		{"40001", "could not serialize access", "ERROR", 0, 0},
		{"40P01", "deadlock detected", "ERROR", 2, 1},
		{"53300", "sorry, too many clients already", "FATAL", 1, 2},
		{"57P03", "the database system is starting up", "FATAL", 0, 3},
		{"08P01", "no more connections allowed (max_client_conn)", "FATAL", 3, 0},
		{"08P01", "query_wait_timeout", "ERROR", 0, 4},
		{"57014", "canceling statement due to statement timeout", "ERROR", 1, 5},
		{"23505", "duplicate key value", "ERROR", 0, 6},
		{"", "", "", 0, 7},
		{"XX000", "(EMAXCONN) max client connections reached, limit: 10", "FATAL", 0, 0},
	} {
		f.Add(seed.code, seed.msg, seed.sev, seed.depth, seed.shape)
	}
	f.Fuzz(func(t *testing.T, code, msg, sev string, depth, shape uint8) {
		base := &pgconn.PgError{Code: code, Message: msg, Severity: sev, SeverityUnlocalized: sev}
		want := Classify(base)
		if want == classNone || want == ClassAmbiguous {
			t.Fatalf("a server error classified %v", want)
		}
		var err error = base
		for i := range int(depth % 8) {
			err = fmt.Errorf("layer %d: %w", i, err)
		}
		if got := Classify(err); got != want {
			t.Fatalf("wrapping changed the class: %v -> %v", want, got)
		}
		if sqlState(err) != code {
			t.Fatalf("sqlState(%v) = %q, want %q", err, sqlState(err), code)
		}
		switch shape % 8 {
		case 1: // joined with a caller error that is not a database error
			if got := Classify(errors.Join(errors.New("caller"), err)); got != want {
				t.Fatalf("joining a caller error changed the class: %v -> %v", want, got)
			}
		case 2:
			if got := Classify(NonRetryable(err)); got != ClassPermanent {
				t.Fatalf("NonRetryable: %v", got)
			}
		case 3:
			if got := Classify(errors.Join(err, context.DeadlineExceeded)); got != ClassTimeout {
				t.Fatalf("a deadline joined in: %v", got)
			}
		case 4:
			ce := lostCommit(err)
			if Classify(ce) != ClassAmbiguous || Classify(ce).Retryable() || !errors.Is(ce, ErrCommitUnknown) {
				t.Fatalf("an ambiguous commit must stay ambiguous and not retryable")
			}
		case 5:
			be := &RetryError{Attempts: 1, Err: err, why: retry.Why{Stop: retry.BudgetSpent}}
			if !errors.Is(be, ErrRetryBudgetExhausted) || sqlState(be) != code {
				t.Fatalf("a budget-refused error must match ErrRetryBudgetExhausted and keep its code")
			}
		case 6:
			if got := Classify(withContextErr(cancelledCtx, err)); got != ClassTimeout {
				t.Fatalf("a call ended by its context: %v", got)
			}
		case 7:
			if got := Classify(errors.Join(io.EOF, err)); got != want {
				t.Fatalf("a server error wins over a joined EOF: %v -> %v", want, got)
			}
		}
	})
}

var cancelledCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// errFromByte maps a fuzzed byte to an attempt's error: a byte from 0xC0
// up is a refused connection (an unavailable server), the others cycle
// through the classes the caps count.
func errFromByte(b byte) error {
	if b >= 0xC0 {
		return refusedErr()
	}
	switch b % 6 {
	case 0:
		return pgErr(pgerrcode.SerializationFailure)
	case 1:
		return pgErr(pgerrcode.DeadlockDetected)
	case 2:
		return pgErr(pgerrcode.TooManyConnections)
	case 3:
		return pgconn.ErrConnClosed
	case 4:
		return pgErr(pgerrcode.CannotConnectNow)
	}
	return nil // success
}

// FuzzRetryDecision runs the retry loop over random sequences of attempt
// outcomes, caps, jitters, deadlines and unavailable bounds on a fake clock
// (whose deadline ends a pause as a real one does), and checks the
// contract: the retries after conflicts, lost connections and overloads
// never exceed the caps (MaxRetries while no overload has been seen,
// MaxAdaptiveRetries for every such retry after one was), and the retries
// after an unavailable server count against neither; a class switched off
// is never retried; no pause ends past the deadline; every retry is paired
// with exactly one pause; a call that stops early returns the last error;
// and a call that stops on an unavailable server says so first (a
// *RetryError, after one attempt as after many) and stops only at its end:
// at the deadline, with an error matching context.DeadlineExceeded, or once
// UnavailableTimeout has passed since the first unavailable error.
func FuzzRetryDecision(f *testing.F) {
	f.Add([]byte{0, 0, 0, 5}, int8(0), int8(0), 0.5, uint16(0), int16(0))
	f.Add([]byte{2, 0, 0, 0, 0}, int8(0), int8(0), 1.0, uint16(0), int16(0))
	f.Add([]byte{0, 0, 0, 0, 2, 2}, int8(3), int8(4), 0.9, uint16(250), int16(0))
	f.Add([]byte{2, 2, 2, 2, 2, 2, 2}, int8(-1), int8(6), 0.99, uint16(1000), int16(0))
	f.Add([]byte{3, 3, 1, 4, 0}, int8(1), int8(-1), 0.1, uint16(30), int16(0))
	f.Add([]byte{0xC0, 0xC0, 0xC0, 0, 0, 0}, int8(0), int8(0), 1.0, uint16(0), int16(0))
	f.Add([]byte{0xC0, 0xC0, 0xC0, 0xC0, 0xC0, 0xC0, 0xC0, 0xC0, 0xC0, 0xC0, 0xC0, 0xC0, 0xC0, 0xC0, 0xC0}, int8(0), int8(0), 0.7, uint16(2500), int16(0))
	f.Add([]byte{2, 0xC0, 0xC0, 0, 0, 0, 0xC1}, int8(0), int8(0), 0.9, uint16(0), int16(1500))
	f.Add([]byte{0xC0, 0xC0, 4, 4, 4}, int8(0), int8(-1), 0.5, uint16(900), int16(-1))
	f.Fuzz(func(t *testing.T, seq []byte, maxRetries, maxAdaptive int8, jitter float64, deadlineMs uint16, unavailableMs int16) {
		if len(seq) > 64 {
			seq = seq[:64]
		}
		policy := RetryConfig{MaxRetries: int(maxRetries), MaxAdaptiveRetries: int(maxAdaptive), Jitter: constJitter(jitter),
			UnavailableTimeout: time.Duration(unavailableMs) * time.Millisecond}.withDefaults()
		start := time.Unix(1000, 0)
		clk := &fakeclock.Clock{T: start}
		var ctx context.Context = context.Background()
		deadline := start.Add(time.Duration(deadlineMs) * time.Millisecond)
		if deadlineMs > 0 {
			ctx = fakeclock.Deadline(clk, deadline.Sub(start))
		}
		l := &retryLoop{policy: &policy, clock: clk, maxRetries: policy.MaxRetries}
		var (
			outcomes         []error
			counted          int // retries the caps count
			overloadSeen     bool
			unavailableSince time.Time
		)
		err := l.run(ctx, func(context.Context) (Class, error) {
			i := len(outcomes)
			var e error
			if i < len(seq) {
				e = errFromByte(seq[i])
			}
			if i > 0 { // this attempt is retry number i, after outcomes[i-1]
				switch prev := Classify(outcomes[i-1]); {
				case prev == ClassUnavailable:
					if policy.UnavailableTimeout == 0 {
						t.Fatalf("retry %d after an unavailable server with UnavailableTimeout off", i)
					}
					if clk.T.After(unavailableSince.Add(policy.UnavailableTimeout)) {
						t.Fatalf("retry %d at %v, past UnavailableTimeout %v after the first unavailable error (%v)",
							i, clk.T.Sub(start), policy.UnavailableTimeout, unavailableSince.Sub(start))
					}
					if deadlineMs > 0 && !clk.T.Before(deadline) {
						t.Fatalf("retry %d started at the deadline", i)
					}
				case prev == ClassOverload && policy.MaxAdaptiveRetries == 0, prev != ClassOverload && l.maxRetries == 0:
					t.Fatalf("retry %d after %v, a class switched off", i, prev)
				default:
					counted++
					cap := policy.MaxRetries
					if overloadSeen {
						cap = policy.MaxAdaptiveRetries
					}
					if counted > cap {
						t.Fatalf("retry %d (%d counted) exceeds the cap %d (overload seen %v, sequence %v)", i, counted, cap, overloadSeen, seq[:i])
					}
				}
			}
			switch Classify(e) {
			case ClassOverload:
				overloadSeen = true
			case ClassUnavailable:
				if unavailableSince.IsZero() {
					unavailableSince = clk.T
				}
			}
			outcomes = append(outcomes, e)
			return Classify(e), e
		})
		// A pause the deadline ended is followed by no attempt.
		endedInPause := deadlineMs > 0 && clk.T.Equal(deadline) && errors.Is(err, context.DeadlineExceeded)
		if len(clk.Sleeps) != len(outcomes)-1 && !(endedInPause && len(clk.Sleeps) == len(outcomes)) {
			t.Fatalf("%d attempts but %d pauses", len(outcomes), len(clk.Sleeps))
		}
		if deadlineMs > 0 && clk.T.After(deadline) {
			t.Fatalf("slept past the deadline: %v > %v", clk.T.Sub(start), deadline.Sub(start))
		}
		last := outcomes[len(outcomes)-1]
		if (err == nil) != (last == nil) || (err != nil && !errors.Is(err, last)) {
			t.Fatalf("returned %v, last attempt ended with %v", err, last)
		}
		if err != nil && Classify(last) == ClassUnavailable {
			// However the call ended, it says first that the server is
			// unreachable, after one attempt as after many.
			var re *RetryError
			if !errors.As(err, &re) || re.Attempts != len(outcomes) || !strings.HasPrefix(err.Error(), "pgtx: the server is unreachable: ") {
				t.Fatalf("ended on an unavailable server after %d attempts with %v; want a *RetryError that says so first", len(outcomes), err)
			}
		}
		if Classify(last) != ClassUnavailable || policy.UnavailableTimeout == 0 {
			return
		}
		// The call gave up on an unavailable server: only at its end.
		end := unavailableSince.Add(policy.UnavailableTimeout)
		if deadlineMs > 0 && !deadline.After(end) {
			if !clk.T.Equal(deadline) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("gave up at %v with %v; want at the deadline %v, matching context.DeadlineExceeded",
					clk.T.Sub(start), err, deadline.Sub(start))
			}
			return
		}
		// At the end, or later when a retry of another class took the
		// call past it.
		var re *RetryError
		if clk.T.Before(end) || !errors.As(err, &re) || re.why.Stop != retry.Unreachable {
			t.Fatalf("gave up at %v with %v; want at UnavailableTimeout's end %v", clk.T.Sub(start), err, end.Sub(start))
		}
	})
}
