package resolve

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/classify"
)

// Poll is the pause between two questions about a transaction.
const Poll = 10 * time.Millisecond

// While no server answers, questions are paced: paceUnreachable apart,
// plus up to paceJitter at random, so that the resolutions of the many
// COMMITs a failover cut spread out.
const (
	paceUnreachable = 100 * time.Millisecond
	paceJitter      = 150 * time.Millisecond
)

// lingerAfter is how long a backend must be seen idle in the transaction,
// receiving nothing, before resolution ends it: a COMMIT that reached its
// socket would have been read within microseconds, so after this long the
// backend is waiting for a client that is gone.
const lingerAfter = 50 * time.Millisecond

// End says whether a question ends the backend that runs a transaction in
// progress.
type End int

// The ways a question treats the transaction's backend.
const (
	Keep           End = iota // end no backend
	EndIfStillIdle            // end it if it is still idle in the transaction since the same change
	EndNow                    // end it
)

// Answer is what one question found.
type Answer struct {
	View View
	// State and Changed are the backend's state and the time of its last
	// change (unix microseconds), while it runs the transaction in the run
	// that gave its id.
	State   string
	Changed int64
	// Terminated: the question ended the backend.
	Terminated bool
	// Synced: a "committed" is as durable as the transaction's COMMIT would
	// have made it (the question's own commit waited for the server's
	// synchronous standbys, or there were none to wait for).
	Synced bool
	// Err kept the question from an answer.
	Err error
}

// Asker asks a server, once, what became of a transaction; end says
// whether to end its backend, and since when (changed) that backend must
// have been idle for EndIfStillIdle.
type Asker interface {
	Ask(ctx context.Context, id ID, end End, changed int64) Answer
}

// Clock is the time of a resolution.
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx ends, and returns ctx.Err() in that case.
	Sleep(ctx context.Context, d time.Duration) error
}

// Counters count what became of a pool's ambiguous COMMITs. Its zero value
// counts from zero; it is safe for concurrent use.
type Counters struct {
	Committed, Aborted, Lost, NotApplied, Terminated                  atomic.Int64
	Unknown, Unsupported, Elsewhere, Restarted, Forgotten, Unanswered atomic.Int64
}

// CountUnknown counts an unknown outcome and its reason.
func (c *Counters) CountUnknown(r Reason) {
	c.Unknown.Add(1)
	switch r {
	case Unsupported:
		c.Unsupported.Add(1)
	case Elsewhere:
		c.Elsewhere.Add(1)
	case Restarted:
		c.Restarted.Add(1)
	case Forgotten:
		c.Forgotten.Add(1)
	default:
		c.Unanswered.Add(1)
	}
}

// errNotSynced is a question's error when the server says the transaction
// committed and its synchronous standbys have not acknowledged it yet.
var errNotSynced = errors.New("pgtx: the transaction committed on the server, and its synchronous standbys had not acknowledged it")

// Result is the outcome of a resolution: Committed, Aborted (run the
// transaction again), or Unknown with Why. Unanswered says that no answer
// came within the time: Err is then the last question's error, if any.
type Result struct {
	Status     Status
	Why        string
	Unanswered bool
	Err        error
}

// Resolve asks, until ctx ends, what became of transaction id whose COMMIT
// lost its answer: committed → Committed; aborted → Aborted; still in
// progress → wait, and end the backend that holds it (it is provably ours:
// it runs our transaction id) once it has stayed idle in the transaction
// for lingerAfter (its client is gone, COMMIT never reached it), or stayed
// in progress for half of timeout; then ask again. Another system or
// timeline, a server that no longer knows, or no answer in time → Unknown.
// The time is counted in two budgets: while servers answer, timeout (the
// ResolveTimeout); while none can be reached ([Unreached], or only a
// server in recovery answers: a failover or a restart under way),
// unavailable (the UnavailableTimeout), with the questions paced; an
// unavailable of 0 counts that time against timeout too. c counts the
// outcome.
func Resolve(ctx context.Context, a Asker, clk Clock, c *Counters, id ID, timeout, unavailable time.Duration) Result {
	r := resolution{ctx: ctx, asker: a, clk: clk, c: c, id: id, timeout: timeout, unavailable: unavailable, start: clk.Now()}
	for {
		asked := clk.Now()
		ans, j, unreached := r.ask()
		if res, done := r.settled(j); done {
			return res
		}
		r.note(ans, j)
		if !r.wait(asked, unreached) {
			return r.unanswered(j.Status)
		}
	}
}

// resolution is one run of Resolve: what it asks about, its budgets, and
// what its questions have found so far.
type resolution struct {
	ctx                  context.Context
	asker                Asker
	clk                  Clock
	c                    *Counters
	id                   ID
	timeout, unavailable time.Duration

	start     time.Time
	down      time.Duration // time no server could be reached
	end       End           // what the next question does to the backend
	idleSince int64         // the backend's last state change, while idle in the transaction
	idleSeen  time.Time     // when it was first seen idle since idleSince
	busySeen  time.Time     // when the transaction was first seen in progress
	last      error         // the last question's error
	standby   bool          // a server that answered was in recovery
	unsynced  bool          // a server said committed, its synchronous standbys had not acknowledged it
}

// ask asks once and judges the answer. unreached: no server able to
// answer was reached, and the time counts against unavailable. A
// "committed" its synchronous standbys have not acknowledged yet is judged
// unreachable: it is asked again.
func (r *resolution) ask() (ans Answer, j Judgement, unreached bool) {
	ans = r.asker.Ask(r.ctx, r.id, r.end, r.idleSince)
	if ans.Terminated {
		r.c.Terminated.Add(1)
	}
	j = Judgement{Status: Unreachable}
	if ans.Err == nil {
		j = Judge(r.id, ans.View)
	}
	unreached = r.unavailable > 0 && j.Status == Unreachable && (ans.Err == nil || Unreached(ans.Err))
	if j.Status == Committed && !ans.Synced {
		j = Judgement{Status: Unreachable}
		ans.Err, r.unsynced = errNotSynced, true
	}
	return ans, j, unreached
}

// settled counts and returns the result of a definitive judgement:
// committed, aborted or unknown.
func (r *resolution) settled(j Judgement) (Result, bool) {
	switch j.Status {
	case Committed:
		r.c.Committed.Add(1)
		return Result{Status: Committed}, true
	case Aborted:
		r.c.Aborted.Add(1)
		if j.Lost {
			r.c.Lost.Add(1)
		}
		return Result{Status: Aborted}, true
	case Unknown:
		r.c.CountUnknown(j.Reason)
		return Result{Status: Unknown, Why: j.Why}, true
	}
	return Result{}, false
}

// note records what an answer that settled nothing says, and decides what
// the next question does to the backend.
func (r *resolution) note(ans Answer, j Judgement) {
	r.end = Keep
	switch j.Status {
	case Unreachable:
		if ans.Err != nil {
			r.last = ans.Err
		} else {
			r.standby = true
		}
	case InProgress:
		if j.SameRun {
			r.inProgress(ans)
		}
		// Otherwise not provably this transaction's backend: wait, end
		// none.
	}
}

// inProgress watches the backend that runs the transaction in the run
// that gave its id, and ends it once it has stayed idle in the transaction
// for lingerAfter, or in progress for half of timeout.
func (r *resolution) inProgress(ans Answer) {
	now := r.clk.Now()
	if r.busySeen.IsZero() {
		r.busySeen = now
	}
	switch {
	case !strings.HasPrefix(ans.State, "idle in transaction"):
		r.idleSince, r.idleSeen = 0, time.Time{}
	case ans.Changed != r.idleSince || r.idleSeen.IsZero():
		r.idleSince, r.idleSeen = ans.Changed, now
	}
	switch {
	case now.Sub(r.busySeen) >= r.timeout/2:
		r.end = EndNow
	case !r.idleSeen.IsZero() && now.Sub(r.idleSeen) >= lingerAfter:
		r.end = EndIfStillIdle
	}
}

// wait pauses before the next question, paced while no server is reached
// (a question asked at asked), and reports whether time is left.
func (r *resolution) wait(asked time.Time, unreached bool) bool {
	pause := Poll
	if unreached {
		pause = paceUnreachable + rand.N(paceJitter)
	}
	err := r.clk.Sleep(r.ctx, pause)
	now := r.clk.Now()
	if unreached {
		r.down += now.Sub(asked)
	}
	outOfTime := now.Sub(r.start)-r.down >= r.timeout || (r.unavailable > 0 && r.down >= r.unavailable)
	return err == nil && !outOfTime
}

// unanswered counts and returns the result of a resolution that ran out
// of time; status is what the last answer was judged.
func (r *resolution) unanswered(status Status) Result {
	r.c.CountUnknown(Unanswered)
	why := "no answer within ResolveTimeout " + r.timeout.String()
	if r.unavailable > 0 {
		why += " (and UnavailableTimeout " + r.unavailable.String() + " while no server could be reached)"
	}
	switch {
	case status == InProgress:
		why = "the transaction was still in progress after ResolveTimeout " + r.timeout.String()
	case r.unsynced:
		why += "; the server said committed, and its synchronous standbys had not acknowledged it"
	case r.standby:
		// A standby's answer may lag the primary's: never used.
		why += "; a server that answered was in recovery"
	}
	return Result{Status: Unknown, Why: why, Unanswered: true, Err: r.last}
}

// Unreached reports the error of a question that reached no server able
// to answer: a connection that could not be made (refused, reset, timed
// out, refused by a server starting up, shutting down or in recovery,
// 57P03, or no host taking writes while a standby is promoted), one lost
// before the answer, or a server or pooler that cannot take the question
// now (too many connections, a pooler whose server is down). A server that
// answers with an error of its own (a privilege, a login refused) was
// reached.
func Unreached(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch classify.PgError(pgErr) {
		case classify.Unavailable, classify.ConnectionLost, classify.Overload:
			return true
		}
		return pgErr.Code == pgerrcode.CannotConnectNow
	}
	var connectErr *pgconn.ConnectError
	switch {
	case errors.As(err, &connectErr), errors.Is(err, context.DeadlineExceeded):
		return true
	}
	switch classify.Err(err) {
	case classify.Unavailable, classify.ConnectionLost, classify.Overload:
		return true
	}
	return false
}
