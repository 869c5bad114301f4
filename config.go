package pgtx

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The defaults of Config, stated on each field.
const (
	defaultAcquireTimeout           = 2 * time.Second
	defaultStatementTimeout         = 5 * time.Second
	defaultIdleInTransactionTimeout = 10 * time.Second
	defaultCommitTimeout            = 5 * time.Second
	defaultRollbackTimeout          = 2 * time.Second
)

// Config configures a [Pool]. Every pgtx field follows one rule: 0 means
// the default stated on the field; a setting that is on by default is
// switched off by a negative value; one that is off by default (Breaker,
// Tracer, MaxWaiters) is on while set, and has no negative value. The embedded
// [pgxpool.Config] works as in pgxpool; it must come from
// [pgxpool.ParseConfig] (a *pgxpool.Config built elsewhere is adopted as
// &pgtx.Config{Config: poolConfig}), and [NewWithConfig] reports one that
// did not as an error.
type Config struct {
	*pgxpool.Config

	// AcquireTimeout bounds the wait for a pool connection in
	// [Transaction]: the call then returns an error matching
	// [ErrAcquireTimeout] and does not retry, unless the caller's context
	// ended first. Default 2s; negative: only the caller's context bounds it.
	AcquireTimeout time.Duration

	// StatementTimeout is the server's statement_timeout, sent as a session
	// parameter when each connection starts, so every statement has a
	// server-side limit at no per-transaction cost. One given in the
	// connection string (or its "-c" options) wins over the default, not
	// over an explicit value here. Default 5s; negative: no parameter is
	// sent at all, as a pooler that refuses startup parameters (PgBouncer)
	// needs. Rounded up to milliseconds.
	StatementTimeout time.Duration

	// IdleInTransactionTimeout is the server's
	// idle_in_transaction_session_timeout, sent as StatementTimeout is: the
	// server ends a session left idle inside a transaction after this long.
	// Default 10s; negative: not sent.
	IdleInTransactionTimeout time.Duration

	// CommitTimeout bounds COMMIT, which runs on a context the caller's
	// cancellation cannot interrupt (an interrupted COMMIT has an unknown
	// outcome). A transaction that provably wrote nothing keeps the
	// caller's deadline instead. When it fires, the outcome is resolved as
	// any lost COMMIT. Default 5s; negative: no bound of its own.
	CommitTimeout time.Duration

	// RollbackTimeout bounds ROLLBACK, which also runs on a context the
	// caller's cancellation cannot interrupt; if it fires, the connection
	// is closed. Default 2s; negative: no bound of its own.
	RollbackTimeout time.Duration

	// Retry says how [Transaction] runs transactions again; its zero value
	// is the default of every field.
	Retry RetryConfig

	// CancelMode is how a running statement is stopped when its context
	// ends; the zero value is [CancelModePool]. pgtx installs its own
	// ConnConfig.BuildContextWatcherHandler, replacing one set here.
	CancelMode CancelMode

	// CancelGrace bounds a cancellation: if the statement has not returned,
	// or its cancel was not confirmed finished, this long after its context
	// ended, the call returns and the connection is discarded. Default 2s;
	// negative: no bound of its own.
	CancelGrace time.Duration

	// CancelConnString, when set, is the connection string of the cancel
	// pool, for a role of its own (see [CancelModePool]); it must reach the
	// same server. By default the cancel pool reaches the main pool's server
	// as the same role, running the Config's BeforeConnect too.
	CancelConnString string

	// CancelConnectTimeout bounds a connect of the cancel pool, over which
	// ambiguous COMMITs are resolved too: raise it where a connection
	// takes longer to make. Default 1s; negative: no bound of its own.
	CancelConnectTimeout time.Duration

	// MaxWaiters, when positive, bounds the callers of [Transaction]
	// waiting for a connection: when that many already wait, the call
	// fails at once with [ErrQueueFull] (a bulkhead's bounded queue). The
	// query methods are not counted. Default: no bound; negative is an
	// error.
	MaxWaiters int

	// ResolveTimeout bounds the resolution of an ambiguous COMMIT: when the
	// connection is lost (or the session ends) while COMMIT is in flight,
	// pgtx asks the server, over the cancel pool or a connection made for
	// it, what became of the transaction instead of returning
	// [ErrCommitUnknown]. Committed means success; aborted means the whole
	// transaction runs again; one still in progress has its backend ended
	// first. The transaction's id is read, at no extra round trip, with the
	// statements that write; a transaction without one wrote nothing and
	// runs again. An answer from another system or timeline, a server
	// without pg_xact_status, or an id that never arrived leaves
	// [ErrCommitUnknown]; docs/ambiguous-commits.md has every case, and
	// [Stats].Resolved counts each outcome. It bounds the time servers
	// answer; while none can be reached (a restart, a failover), the
	// resolution waits up to [RetryConfig].UnavailableTimeout more. Default
	// 5s; negative: resolution is off, and every lost COMMIT is
	// [ErrCommitUnknown].
	ResolveTimeout time.Duration

	// RecentCommits is how many of its latest writing commits a resolving
	// pool keeps (those of the last 5 minutes), with each call's label, so
	// that when it meets a later run of its server (a standby promoted
	// after a failover, or the server after a restart) it asks that run
	// about them, once, and names each one the run's history provably
	// lacks to a [failover.Tracer] ([Stats].LostCommitCount). The same
	// question tells that tracer when the server acknowledges commits that
	// no standby has. docs/lost-commits.md says how to reconcile, and
	// how to make failover lossless. Default 1024; negative: none are kept
	// and nothing is asked, as when ResolveTimeout is negative.
	RecentCommits int

	// Breaker, when set, puts a circuit breaker in front of the pool's
	// Transaction calls: for a database the application can do without (a
	// read replica, an analytics store), never the primary. See
	// [BreakerConfig].
	Breaker *BreakerConfig

	// Contention configures the contention manager, which limits how many
	// attempts of a kind of transaction run at once while they conflict
	// with each other; its zero value is on, with the defaults of
	// [ContentionConfig].
	Contention ContentionConfig

	// Tracer, when set, receives an event at the start and end of every
	// Transaction call and every attempt; one that also implements
	// [CancelTracer] or [BreakerTracer] receives those events too.
	Tracer TransactionTracer
}

// ParseConfig parses connString (a URL or keyword/value DSN, as pgxpool)
// into a [Config] with every pgtx field at its default.
func ParseConfig(connString string) (*Config, error) {
	pc, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	return &Config{Config: pc}, nil
}

// Copy returns a deep copy of c: the embedded [pgxpool.Config] copied as
// its own Copy copies it, and every pgtx field, the Breaker's config
// included. (pgxpool.Config's Copy, which Config would otherwise promote,
// returns a *pgxpool.Config and drops every pgtx field.) The Tracer and
// the hooks are shared, as pgxpool shares its own.
func (c *Config) Copy() *Config {
	if c == nil {
		return nil
	}
	cp := *c
	if c.Config != nil {
		cp.Config = c.Config.Copy()
	}
	if c.Breaker != nil {
		b := *c.Breaker
		cp.Breaker = &b
	}
	return &cp
}

// validate reports a Config NewWithConfig cannot use.
func (c *Config) validate() error {
	switch {
	case c == nil:
		return &invalidArgError{Msg: "nil Config"}
	case c.Config == nil:
		return &invalidArgError{Msg: "Config.Config is nil: create the Config with ParseConfig, or set Config to a *pgxpool.Config from pgxpool.ParseConfig"}
	case c.ConnConfig == nil:
		return &invalidArgError{Msg: "Config.ConnConfig is nil"}
	case c.MaxConns < 1:
		return &invalidArgError{Msg: fmt.Sprintf("MaxConns must be at least 1, got %d", c.MaxConns)}
	case c.MinConns < 0 || c.MinConns > c.MaxConns:
		return &invalidArgError{Msg: fmt.Sprintf("MinConns must be between 0 and MaxConns (%d), got %d", c.MaxConns, c.MinConns)}
	case c.MinIdleConns < 0 || c.MinIdleConns > c.MaxConns:
		return &invalidArgError{Msg: fmt.Sprintf("MinIdleConns must be between 0 and MaxConns (%d), got %d", c.MaxConns, c.MinIdleConns)}
	case c.MaxWaiters < 0:
		return &invalidArgError{Msg: fmt.Sprintf("MaxWaiters must be 0 (no bound, the default) or a bound, got %d", c.MaxWaiters)}
	case c.CancelMode < CancelModePool || c.CancelMode > CancelModeClose:
		return &invalidArgError{Msg: "unknown " + c.CancelMode.String()}
	case c.Breaker != nil && c.Breaker.validate() != nil:
		return c.Breaker.validate()
	case c.Contention.validate() != nil:
		return c.Contention.validate()
	}
	return c.Retry.validate()
}

// defaultOrNone maps 0 to def and a negative value to 0 (off).
func defaultOrNone[T int | int32 | float64 | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// durDefault maps 0 to def and keeps every other value.
func durDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}
