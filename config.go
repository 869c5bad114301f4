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

// Config configures a [Pool]. For every pgtx field, 0 means the default
// stated on the field and a negative value switches it off; a setting off
// by default (Breaker, Tracer, MaxWaiters) is on while set. The embedded
// [pgxpool.Config] must come from [pgxpool.ParseConfig]. See the
// [configuration guide].
//
// [configuration guide]: https://github.com/pgtx-go/pgtx/blob/main/docs/configuration.md
type Config struct {
	*pgxpool.Config

	// AcquireTimeout bounds the wait for a pool connection in
	// [Transaction]; the error then matches [ErrAcquireTimeout] and is not
	// retried. Default 2s; negative: only the caller's context bounds it.
	AcquireTimeout time.Duration

	// StatementTimeout is the server's statement_timeout, sent as a session
	// parameter when each connection starts; one in the connection string
	// wins over the default. Default 5s; negative: not sent (as PgBouncer
	// needs). Rounded up to milliseconds.
	StatementTimeout time.Duration

	// IdleInTransactionTimeout is the server's
	// idle_in_transaction_session_timeout, sent as StatementTimeout is.
	// Default 10s; negative: not sent.
	IdleInTransactionTimeout time.Duration

	// CommitTimeout bounds COMMIT, which the caller's cancellation cannot
	// interrupt (an interrupted COMMIT has an unknown outcome). Default 5s;
	// negative: no bound of its own.
	CommitTimeout time.Duration

	// RollbackTimeout bounds ROLLBACK, which the caller's cancellation
	// cannot interrupt either. Default 2s; negative: no bound of its own.
	RollbackTimeout time.Duration

	// Retry says how [Transaction] runs transactions again.
	Retry RetryConfig

	// CancelMode is how a running statement is stopped when its context
	// ends. Default [CancelModePool]. It replaces any
	// ConnConfig.BuildContextWatcherHandler set here.
	CancelMode CancelMode

	// CancelGrace bounds a cancellation: after it the call returns and the
	// connection is discarded. Default 2s; negative: no bound of its own.
	CancelGrace time.Duration

	// CancelConnString, when set, is the connection string of the cancel
	// pool, for a role of its own; it must reach the same server. Default:
	// the main pool's server and role.
	CancelConnString string

	// CancelConnectTimeout bounds a connect of the cancel pool, which also
	// resolves ambiguous COMMITs. Default 1s; negative: no bound of its own.
	CancelConnectTimeout time.Duration

	// MaxWaiters, when positive, bounds the callers of [Transaction]
	// waiting for a connection; beyond it the call fails at once with
	// [ErrQueueFull]. Default: no bound; negative is an error.
	MaxWaiters int

	// ResolveTimeout bounds the resolution of an ambiguous COMMIT: pgtx
	// asks the server what became of the transaction instead of returning
	// [ErrCommitUnknown]. Default 5s, plus up to
	// [RetryConfig].UnavailableTimeout while no server can be reached;
	// negative: every lost COMMIT is [ErrCommitUnknown]. See
	// docs/ambiguous-commits.md.
	ResolveTimeout time.Duration

	// RecentCommits is how many of its latest writing commits (of the last
	// 5 minutes) a pool keeps, to ask a later run of its server about them
	// and report those a failover lost to a [failover.Tracer]. Default
	// 1024; negative (or a negative ResolveTimeout): none. See
	// docs/lost-commits.md.
	RecentCommits int

	// Breaker, when set, puts a circuit breaker in front of the pool's
	// Transaction calls: for a database the application can do without,
	// never the primary.
	Breaker *BreakerConfig

	// Contention configures the contention manager, on by default.
	Contention ContentionConfig

	// Tracer, when set, receives the start and end of every Transaction
	// call and attempt, and [CancelTracer] or [BreakerTracer] events when
	// it implements them.
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

// Copy returns a deep copy of c, the embedded [pgxpool.Config] and the
// Breaker included. The Tracer and the hooks are shared, as in pgxpool.
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

func durDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}
