package pgtxslog

import (
	"log/slog"
	"math"
	"strconv"
)

// Event is a kind of line a [Tracer] writes. Each kind has a default level,
// chosen by severity; [WithLevels] changes it.
type Event int

// The kinds of line of a [Tracer], with their messages.
const (
	// RetryConflict is a retry after a serialization failure or a deadlock
	// ([pgtx.ClassConflict]), routine under SERIALIZABLE: "retrying
	// transaction".
	// Default level: Debug.
	RetryConflict Event = iota
	// RetryOverload is a retry after the server or a pooler shed load
	// ([pgtx.ClassOverload]) or could not be reached
	// ([pgtx.ClassUnavailable]): "retrying transaction".
	// Default level: Warn.
	RetryOverload
	// RetryConnectionLost is a retry after the connection was lost before
	// COMMIT was sent ([pgtx.ClassConnectionLost]): "retrying transaction".
	// Default level: Warn.
	RetryConnectionLost
	// BudgetExhausted is a retry the retry budget refused; the call fails
	// with an error matching [pgtx.ErrRetryBudgetExhausted]: "retry budget
	// exhausted". The call's end is not logged again.
	// Default level: Warn.
	BudgetExhausted
	// CommitUnknown is a call whose error matches [pgtx.ErrCommitUnknown]:
	// the transaction may or may not have committed: "commit outcome
	// unknown".
	// Default level: Error.
	CommitUnknown
	// FailedRetryable is a call that failed with a retryable error
	// (conflict, overload, lost connection) because its retries ran out or
	// its deadline left no room for another: "transaction failed".
	// Default level: Warn.
	FailedRetryable
	// FailedTimeout is a call that failed with a timeout: 57014, 25P03,
	// 25P04, the context's deadline or [pgtx.ErrAcquireTimeout]:
	// "transaction failed".
	// Default level: Warn.
	FailedTimeout
	// FailedCanceled is a call that ended because its caller cancelled its
	// context ([context.Canceled]): "transaction failed".
	// Default level: Debug.
	FailedCanceled
	// FailedServer is a call that failed with an error saying the server is
	// in trouble: SQLSTATE class 53 other than 53300 (disk full, out of
	// memory), class 58 (system error) and class XX (internal error):
	// "transaction failed".
	// Default level: Error.
	FailedServer
	// FailedPermanent is a call that failed with any other error:
	// constraint violations, data and syntax errors, the caller's own errors
	// and errors wrapped by [pgtx.NonRetryable]. The caller gets the error
	// and decides what it means: "transaction failed".
	// Default level: Debug.
	FailedPermanent
	// Cancel is a statement cancelled as configured: signalled over the
	// cancel pool, found already gone, cancelled with the protocol cancel
	// request, or its connection closed in [pgtx.CancelModeClose]:
	// "statement cancelled".
	// Default level: Debug.
	Cancel
	// CancelFallback is a cancel that fell back: the cancel pool failed, or
	// the connection was closed although the pool's mode is not
	// [pgtx.CancelModeClose] (the cancel was not confirmed, or the statement
	// did not return within [pgtx.Config].CancelGrace): "statement
	// cancelled".
	// Default level: Warn.
	CancelFallback
	// BreakerOpened is a circuit breaker's change to [pgtx.BreakerOpen]:
	// calls now fail at once with [pgtx.ErrCircuitOpen]: "circuit breaker
	// state changed".
	// Default level: Warn.
	BreakerOpened
	// BreakerChanged is a circuit breaker's other changes of state, to
	// [pgtx.BreakerHalfOpen] or [pgtx.BreakerClosed]: "circuit breaker
	// state changed".
	// Default level: Info.
	BreakerChanged
	// ContentionSwitched is the contention manager starting or stopping to
	// limit a label's attempts: "contention limit changed".
	// Default level: Info.
	ContentionSwitched
	// ContentionChanged is the contention manager changing the limit of a
	// label it keeps limiting, as it probes for the limit that commits
	// most: "contention limit changed".
	// Default level: Debug.
	ContentionChanged
	// Committed is a call that committed: "transaction committed". It is
	// off by default.
	Committed
	// Attempt is the last attempt of a call, so that with the retries every
	// attempt has a line: "attempt finished". It is off by default.
	Attempt
	// CommitLost is a commit a call reported that a later run of the
	// server (a standby promoted after a failover, or the server after a
	// restart) provably does not have ([failover.Tracer]): "commit
	// lost".
	// Default level: Error.
	CommitLost
	// ReplicationAsync is the server starting to acknowledge commits that
	// no standby has: standbys stream from it and synchronous_standby_names
	// is empty. A failover to one of them can lose acknowledged commits:
	// "replication changed".
	// Default level: Warn.
	ReplicationAsync
	// ReplicationChanged is the server no longer acknowledging commits
	// that no standby has (a standby became synchronous, or none streams):
	// "replication changed".
	// Default level: Info.
	ReplicationChanged
	// PoolerFound is a pooler the pool found in front of its server, once
	// per pool ([pooler.Tracer]), when pgtx needs none of its settings
	// otherwise: "pooler found".
	// Default level: Info.
	PoolerFound
	// PoolerSetting is a setting of the pooler the pool found that a
	// guarantee of pgtx's needs otherwise, one line each, once per pool:
	// "pooler setting".
	// Default level: Warn.
	PoolerSetting

	// SlotRefused is a connect the server or a pooler refused for lack of
	// connection slots (53300, too many clients) ([slots.Tracer]): the
	// fleet's pools want more connections than the server has. With
	// connections held, the pool stops growing and its callers wait for
	// one; with none, the call backs off as from any overload: "connect
	// refused for lack of slots".
	// Default level: Warn.
	SlotRefused
	// SlotRaised is a pool's slot limit raised by a connect beyond it that
	// succeeded: "slot limit raised".
	// Default level: Info.
	SlotRaised
	// SlotWaited is an acquire that waited for a connection the pool held
	// instead of connecting, because the server had no slot for another:
	// "waited for a held connection".
	// Default level: Debug.
	SlotWaited

	numEvents = iota
)

// LevelOff is a level that turns a kind of line off: a [Tracer] never
// writes a line whose level is LevelOff, whatever the handler enables.
const LevelOff = slog.Level(math.MaxInt)

// events holds the name, default level and message of every Event.
var events = [numEvents]struct {
	name  string
	level slog.Level
	msg   string
}{
	RetryConflict:       {"retry_conflict", slog.LevelDebug, "retrying transaction"},
	RetryOverload:       {"retry_overload", slog.LevelWarn, "retrying transaction"},
	RetryConnectionLost: {"retry_connection_lost", slog.LevelWarn, "retrying transaction"},
	BudgetExhausted:     {"budget_exhausted", slog.LevelWarn, "retry budget exhausted"},
	CommitUnknown:       {"commit_unknown", slog.LevelError, "commit outcome unknown"},
	FailedRetryable:     {"failed_retryable", slog.LevelWarn, "transaction failed"},
	FailedTimeout:       {"failed_timeout", slog.LevelWarn, "transaction failed"},
	FailedCanceled:      {"failed_canceled", slog.LevelDebug, "transaction failed"},
	FailedServer:        {"failed_server", slog.LevelError, "transaction failed"},
	FailedPermanent:     {"failed_permanent", slog.LevelDebug, "transaction failed"},
	Cancel:              {"cancel", slog.LevelDebug, "statement cancelled"},
	CancelFallback:      {"cancel_fallback", slog.LevelWarn, "statement cancelled"},
	BreakerOpened:       {"breaker_opened", slog.LevelWarn, "circuit breaker state changed"},
	BreakerChanged:      {"breaker_changed", slog.LevelInfo, "circuit breaker state changed"},
	ContentionSwitched:  {"contention_switched", slog.LevelInfo, "contention limit changed"},
	ContentionChanged:   {"contention_changed", slog.LevelDebug, "contention limit changed"},
	Committed:           {"committed", LevelOff, "transaction committed"},
	Attempt:             {"attempt", LevelOff, "attempt finished"},
	CommitLost:          {"commit_lost", slog.LevelError, "commit lost"},
	ReplicationAsync:    {"replication_async", slog.LevelWarn, "replication changed"},
	ReplicationChanged:  {"replication_changed", slog.LevelInfo, "replication changed"},
	PoolerFound:         {"pooler_found", slog.LevelInfo, "pooler found"},
	PoolerSetting:       {"pooler_setting", slog.LevelWarn, "pooler setting"},
	SlotRefused:         {"slot_refused", slog.LevelWarn, "connect refused for lack of slots"},
	SlotRaised:          {"slot_raised", slog.LevelInfo, "slot limit raised"},
	SlotWaited:          {"slot_waited", slog.LevelDebug, "waited for a held connection"},
}

// String returns the kind's name in snake case, such as "retry_conflict",
// or "Event(n)" for a value that is none of the kinds.
func (e Event) String() string {
	if e < 0 || e >= numEvents {
		return "Event(" + strconv.Itoa(int(e)) + ")"
	}
	return events[e].name
}
