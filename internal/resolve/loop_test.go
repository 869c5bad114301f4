package resolve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// fakeClock advances by each Sleep and ends the resolution once limit has
// passed, as ResolveTimeout's context would.
type fakeClock struct {
	now, end time.Time
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(_ context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	if !c.now.Before(c.end) {
		return context.DeadlineExceeded
	}
	return nil
}

// question is what the resolution asked.
type question struct {
	end     End
	changed int64
	at      time.Duration
}

// scriptedAsker answers from a function of the question's number and
// records the questions.
type scriptedAsker struct {
	clk       *fakeClock
	start     time.Time
	answer    func(n int) Answer
	questions []question
}

func (a *scriptedAsker) Ask(_ context.Context, _ ID, end End, changed int64) Answer {
	a.questions = append(a.questions, question{end: end, changed: changed, at: a.clk.now.Sub(a.start)})
	return a.answer(len(a.questions) - 1)
}

// TestResolve drives the resolution loop with scripted answers: every way
// it ends, and when it ends the transaction's backend.
func TestResolve(t *testing.T) {
	const timeout = time.Second
	run := Run{Timeline: 1, Start: 100, Epoch: 200}
	id := ID{Xid: 730, System: 7, Run: run, Flushed: 10}
	same := func(status string) View { return View{System: 7, Run: run, Status: status} }
	errRefused := errors.New("connection refused")
	inProgress := func(state string, changed int64) Answer {
		return Answer{View: same("in progress"), State: state, Changed: changed, Synced: true}
	}
	tests := []struct {
		name       string
		answer     func(n int) Answer
		want       Status
		unanswered bool
		whyHas     string
		wantErr    error
		check      func(t *testing.T, qs []question, c *Counters)
	}{
		{
			name:   "committed at once",
			answer: func(int) Answer { return Answer{View: same("committed"), Synced: true} },
			want:   Committed,
			check: func(t *testing.T, qs []question, c *Counters) {
				if len(qs) != 1 || c.Committed.Load() != 1 {
					t.Errorf("questions %d, committed %d", len(qs), c.Committed.Load())
				}
			},
		},
		{
			name: "unreachable, then aborted",
			answer: func(n int) Answer {
				if n < 3 {
					return Answer{Err: errRefused}
				}
				return Answer{View: same("aborted"), Synced: true}
			},
			want: Aborted,
			check: func(t *testing.T, qs []question, c *Counters) {
				if len(qs) != 4 || qs[3].at != 3*Poll || c.Aborted.Load() != 1 || c.Lost.Load() != 0 {
					t.Errorf("questions %v, aborted %d, lost %d", qs, c.Aborted.Load(), c.Lost.Load())
				}
			},
		},
		{
			name: "a restart lost the id",
			answer: func(int) Answer {
				return Answer{View: View{System: 7, Run: Run{Timeline: 1, Start: 300, Epoch: 400}, Status: "not yet assigned"}, Synced: true}
			},
			want: Aborted,
			check: func(t *testing.T, _ []question, c *Counters) {
				if c.Lost.Load() != 1 {
					t.Errorf("lost %d, want 1", c.Lost.Load())
				}
			},
		},
		{
			name:   "another system",
			answer: func(int) Answer { return Answer{View: View{System: 8, Run: run, Status: "committed"}, Synced: true} },
			want:   Unknown, whyHas: "another system",
			check: func(t *testing.T, _ []question, c *Counters) {
				if c.Unknown.Load() != 1 || c.Elsewhere.Load() != 1 {
					t.Errorf("unknown %d, elsewhere %d", c.Unknown.Load(), c.Elsewhere.Load())
				}
			},
		},
		{
			name:   "no answer in time",
			answer: func(int) Answer { return Answer{Err: errRefused} },
			want:   Unknown, unanswered: true, whyHas: "no answer within ResolveTimeout 1s", wantErr: errRefused,
			check: func(t *testing.T, _ []question, c *Counters) {
				if c.Unanswered.Load() != 1 {
					t.Errorf("unanswered %d", c.Unanswered.Load())
				}
			},
		},
		{
			name:   "only a standby answered",
			answer: func(int) Answer { return Answer{View: View{System: 7, Run: Run{Start: 9}}, Synced: true} },
			want:   Unknown, unanswered: true, whyHas: "a server that answered was in recovery",
		},
		{
			name:   "committed, the synchronous standbys never acknowledged",
			answer: func(int) Answer { return Answer{View: same("committed")} },
			want:   Unknown, unanswered: true, whyHas: "its synchronous standbys had not acknowledged it", wantErr: errNotSynced,
		},
		{
			name: "committed once the standbys acknowledged",
			answer: func(n int) Answer {
				return Answer{View: same("committed"), Synced: n >= 2}
			},
			want: Committed,
		},
		{
			name: "idle in the transaction: ended after lingerAfter, if still idle",
			answer: func(n int) Answer {
				switch {
				case n < 6:
					return inProgress("idle in transaction", 555)
				case n == 6:
					return Answer{View: same("in progress"), State: "idle in transaction", Changed: 555, Terminated: true, Synced: true}
				}
				return Answer{View: same("aborted"), Synced: true}
			},
			want: Aborted,
			check: func(t *testing.T, qs []question, c *Counters) {
				// Seen idle at the first question; after 50ms (five polls)
				// the questions from the seventh on may end it, since the
				// same change (the one after it ended finds it gone).
				for i, q := range qs {
					want := Keep
					if i >= 6 {
						want = EndIfStillIdle
					}
					if q.end != want || (want == EndIfStillIdle && q.changed != 555) {
						t.Errorf("question %d: end %v changed %d, want %v", i, q.end, q.changed, want)
					}
				}
				if c.Terminated.Load() != 1 {
					t.Errorf("terminated %d, want 1", c.Terminated.Load())
				}
			},
		},
		{
			name: "a new state change restarts the linger",
			answer: func(n int) Answer {
				if n < 4 {
					return inProgress("idle in transaction", 1)
				}
				return inProgress("idle in transaction", 2) // it received something
			},
			want: Unknown, unanswered: true, whyHas: "still in progress after ResolveTimeout",
			check: func(t *testing.T, qs []question, _ *Counters) {
				for i, q := range qs {
					if q.end == EndIfStillIdle && (i < 9 || q.changed != 2) {
						t.Errorf("question %d ends an idle backend (changed %d) before it stayed idle 50ms since its last change", i, q.changed)
					}
				}
			},
		},
		{
			name:   "busy in the transaction: ended after half the timeout",
			answer: func(int) Answer { return inProgress("active", 0) },
			want:   Unknown, unanswered: true, whyHas: "still in progress after ResolveTimeout 1s",
			check: func(t *testing.T, qs []question, _ *Counters) {
				for _, q := range qs {
					if (q.end == EndNow) != (q.at > timeout/2) {
						t.Errorf("question at %v: end %v; want EndNow only past %v", q.at, q.end, timeout/2)
					}
				}
			},
		},
		{
			name: "in progress after a crash recovery in place: never ended",
			answer: func(int) Answer {
				return Answer{View: View{System: 7, Run: Run{Timeline: 1, Start: 100, Epoch: 999}, Status: "in progress"}, State: "idle in transaction", Synced: true}
			},
			want: Unknown, unanswered: true, whyHas: "still in progress",
			check: func(t *testing.T, qs []question, _ *Counters) {
				for i, q := range qs {
					if q.end != Keep {
						t.Errorf("question %d ends a backend not provably the transaction's", i)
					}
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Unix(1000, 0)
			clk := &fakeClock{now: start, end: start.Add(timeout)}
			a := &scriptedAsker{clk: clk, start: start, answer: tt.answer}
			var c Counters
			r := Resolve(context.Background(), a, clk, &c, id, timeout, 0)
			if r.Status != tt.want || r.Unanswered != tt.unanswered || !strings.Contains(r.Why, tt.whyHas) {
				t.Errorf("Resolve = %+v, want status %v, unanswered %v, why containing %q", r, tt.want, tt.unanswered, tt.whyHas)
			}
			if tt.wantErr != nil && !errors.Is(r.Err, tt.wantErr) {
				t.Errorf("Err = %v, want %v", r.Err, tt.wantErr)
			}
			if tt.want == Unknown && c.Unknown.Load() != 1 {
				t.Errorf("unknown counted %d times, want 1", c.Unknown.Load())
			}
			if tt.check != nil {
				tt.check(t, a.questions, &c)
			}
		})
	}
}

// TestCountUnknown: every reason is counted under its own count, and all
// under Unknown.
func TestCountUnknown(t *testing.T) {
	var c Counters
	for _, r := range []Reason{Unsupported, Elsewhere, Restarted, Forgotten, Unanswered, ReasonNone} {
		c.CountUnknown(r)
	}
	if c.Unknown.Load() != 6 || c.Unsupported.Load() != 1 || c.Elsewhere.Load() != 1 || c.Restarted.Load() != 1 ||
		c.Forgotten.Load() != 1 || c.Unanswered.Load() != 2 {
		t.Errorf("counts: unknown %d unsupported %d elsewhere %d restarted %d forgotten %d unanswered %d",
			c.Unknown.Load(), c.Unsupported.Load(), c.Elsewhere.Load(), c.Restarted.Load(), c.Forgotten.Load(), c.Unanswered.Load())
	}
}

// TestResolveRidesOutUnreachable: while no server can be reached (refused
// connects, 57P03, only a server in recovery), a resolution keeps asking
// beyond ResolveTimeout, up to UnavailableTimeout of unreachability, its
// questions paced; the time servers answer stays bounded by ResolveTimeout.
func TestResolveRidesOutUnreachable(t *testing.T) {
	const (
		timeout     = time.Second
		unavailable = 3 * time.Second
	)
	run := Run{Timeline: 1, Start: 100, Epoch: 200}
	id := ID{Xid: 730, System: 7, Run: run, Flushed: 10, LSN: 4000}
	promoted := View{System: 7, Run: Run{Timeline: 2, Start: 50, Epoch: 60}, Status: "committed", Replay: 4100, Replayed: true,
		Last: Checkpoint{Timeline: 2, LSN: 5000, NextXid: 800}}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	startingUp := &pgconn.PgError{Severity: "FATAL", Code: "57P03", Message: "the database system is starting up"}
	inRecovery := Answer{View: View{System: 7, Run: Run{Start: 50, Epoch: 60}}, Synced: true}
	tests := []struct {
		name       string
		answer     func(n int, at time.Duration) Answer
		want       Status
		unanswered bool
		whyHas     string
		// lastAt bounds when the last question was asked.
		lastFrom, lastTo time.Duration
	}{
		{
			name: "refused, 57P03, in recovery for 2s, then the promoted server proves committed",
			answer: func(_ int, at time.Duration) Answer {
				switch {
				case at < 700*time.Millisecond:
					return Answer{Err: refused}
				case at < 1400*time.Millisecond:
					return Answer{Err: startingUp}
				case at < 2*time.Second:
					return inRecovery
				}
				return Answer{View: promoted, Synced: true}
			},
			want: Committed, lastFrom: 2 * time.Second, lastTo: 2*time.Second + paceUnreachable + paceJitter,
		},
		{
			name:   "never reached: unknown once UnavailableTimeout of unreachability has passed",
			answer: func(int, time.Duration) Answer { return Answer{Err: refused} },
			want:   Unknown, unanswered: true, whyHas: "UnavailableTimeout 3s",
			lastFrom: unavailable - paceUnreachable - paceJitter, lastTo: unavailable,
		},
		{
			name: "reached and not proven: ResolveTimeout still bounds the time it answers",
			answer: func(int, time.Duration) Answer {
				return Answer{View: View{System: 7, Run: Run{Timeline: 1, Start: 100, Epoch: 999}, Status: "in progress"}, Synced: true}
			},
			want: Unknown, unanswered: true, whyHas: "still in progress after ResolveTimeout 1s",
			lastFrom: timeout - 2*Poll, lastTo: timeout,
		},
		{
			name:   "a server that answers with an error of its own was reached",
			answer: func(int, time.Duration) Answer { return Answer{Err: &pgconn.PgError{Severity: "ERROR", Code: "42501"}} },
			want:   Unknown, unanswered: true, whyHas: "no answer within ResolveTimeout 1s",
			lastFrom: timeout - 2*Poll, lastTo: timeout,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Unix(1000, 0)
			clk := &fakeClock{now: start, end: start.Add(timeout + unavailable)}
			a := &scriptedAsker{clk: clk, start: start}
			a.answer = func(n int) Answer { return tt.answer(n, clk.now.Sub(start)) }
			var c Counters
			r := Resolve(context.Background(), a, clk, &c, id, timeout, unavailable)
			if r.Status != tt.want || r.Unanswered != tt.unanswered || !strings.Contains(r.Why, tt.whyHas) {
				t.Errorf("Resolve = %+v, want status %v, unanswered %v, why containing %q", r, tt.want, tt.unanswered, tt.whyHas)
			}
			qs := a.questions
			if last := qs[len(qs)-1].at; last < tt.lastFrom || last > tt.lastTo {
				t.Errorf("the last question was asked at %v, want within [%v, %v]", last, tt.lastFrom, tt.lastTo)
			}
			for i := 1; i < len(qs); i++ {
				gap := qs[i].at - qs[i-1].at
				if gap != Poll && (gap < paceUnreachable || gap >= paceUnreachable+paceJitter) {
					t.Errorf("questions %d and %d are %v apart: want Poll, or paced while unreachable", i-1, i, gap)
				}
			}
		})
	}
}

// TestUnreached: the errors of a question that reached no server able to
// answer, and those of a server that answered.
func TestUnreached(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"57P03 starting up", &pgconn.PgError{Severity: "FATAL", Code: "57P03"}, true},
		{"57P01 shutting down", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}, true},
		{"the question timed out", fmt.Errorf("dial: %w", context.DeadlineExceeded), true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"a privilege", &pgconn.PgError{Severity: "ERROR", Code: "42501"}, false},
		{"bad password", &pgconn.PgError{Severity: "FATAL", Code: "28P01"}, false},
		{"too many connections", &pgconn.PgError{Severity: "FATAL", Code: "53300"}, true},
		{"PgBouncer, its server down", &pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "server login has been failing, try again later (server_login_retry)"}, true},
		{"anything else", errors.New("pgtx: something"), false},
	}
	for _, tt := range tests {
		if got := Unreached(tt.err); got != tt.want {
			t.Errorf("%s: Unreached = %v, want %v", tt.name, got, tt.want)
		}
	}
}
