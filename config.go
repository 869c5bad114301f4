package pgtx

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/params"
)

// The defaults of Config, stated on each field.
const (
	defaultAcquireTimeout           = 2 * time.Second
	defaultStatementTimeout         = 5 * time.Second
	defaultIdleInTransactionTimeout = 10 * time.Second
	defaultCommitTimeout            = 5 * time.Second
	defaultRollbackTimeout          = 2 * time.Second
	defaultResolveTimeout           = 5 * time.Second
)

// Config configures a [Pool]. For every pgtx field, 0 means the default
// stated on the field and a negative value switches it off; a setting off
// by default (Breaker, Tracer, MaxWaiters) is on while set. The embedded
// [pgxpool.Config] must come from [pgxpool.ParseConfig]; adopt one as
// &pgtx.Config{Config: pc}. See the [configuration guide].
//
// [configuration guide]: https://github.com/pgtx-go/pgtx/blob/main/docs/configuration.md
type Config struct {
	*pgxpool.Config

	// AcquireTimeout bounds the wait for a pool connection in
	// [Transaction]; the error then matches [ErrAcquireTimeout] and is not
	// retried. Default 2s; negative: only the caller's context bounds it.
	AcquireTimeout time.Duration

	// StatementTimeout is the server's statement_timeout, sent when each
	// connection starts. Default 5s, or the connection string's; negative:
	// not sent (as PgBouncer needs).
	StatementTimeout time.Duration

	// IdleInTransactionTimeout is the server's
	// idle_in_transaction_session_timeout, sent as StatementTimeout is.
	// Default 10s; negative: not sent.
	IdleInTransactionTimeout time.Duration

	// CommitTimeout bounds COMMIT, which the caller's cancellation cannot
	// interrupt. Default 5s; negative: no bound of its own.
	CommitTimeout time.Duration

	// RollbackTimeout bounds ROLLBACK, which the caller's cancellation
	// cannot interrupt either. Default 2s; negative: no bound of its own.
	RollbackTimeout time.Duration

	// Retry says how [Transaction] runs transactions again.
	Retry RetryConfig

	// CancelMode is how a running statement is stopped when its context
	// ends; it replaces ConnConfig.BuildContextWatcherHandler.
	CancelMode CancelMode

	// CancelGrace bounds a cancellation: after it the call returns and the
	// connection is discarded. Default 2s; negative: no bound of its own.
	CancelGrace time.Duration

	// CancelConnString, when set, connects the cancel pool to the same
	// server as a role of its own. Default: the main pool's role.
	CancelConnString string

	// CancelConnectTimeout bounds a connect of the cancel pool, which also
	// resolves ambiguous COMMITs. Default 1s; negative: no bound of its own.
	CancelConnectTimeout time.Duration

	// MaxWaiters, when positive, bounds the callers of [Transaction]
	// waiting for a connection; beyond it the call fails at once with
	// [ErrQueueFull]. Default: no bound; negative is an error.
	MaxWaiters int

	// ResolveTimeout bounds asking the server what became of a lost COMMIT
	// (docs/ambiguous-commits.md). Default 5s, plus
	// [RetryConfig].UnavailableTimeout while no server can be reached;
	// negative: every lost COMMIT is [ErrCommitUnknown].
	ResolveTimeout time.Duration

	// RecentCommits is how many recent commits a pool keeps to report
	// those a failover lost to a [failover.Tracer] (docs/lost-commits.md).
	// Default 1024; negative, or a negative ResolveTimeout: none.
	RecentCommits int

	// Breaker, when set, puts a circuit breaker in front of Transaction.
	Breaker *BreakerConfig

	// Contention configures the contention manager, on by default.
	Contention ContentionConfig

	// Tracer, when set, receives every call's and attempt's events, and
	// those of the optional tracer interfaces it implements.
	Tracer TransactionTracer
}

// ParseConfig parses connString as pgxpool does, into a [Config] with
// every pgtx field at its default.
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
		return invalidArg("nil Config")
	case c.Config == nil:
		return invalidArg("Config.Config is nil: create the Config with ParseConfig, or set Config to a *pgxpool.Config from pgxpool.ParseConfig")
	case c.ConnConfig == nil:
		return invalidArg("Config.ConnConfig is nil")
	case c.MaxConns < 1:
		return invalidArg(fmt.Sprintf("MaxConns must be at least 1, got %d", c.MaxConns))
	case c.MinConns < 0 || c.MinConns > c.MaxConns:
		return invalidArg(fmt.Sprintf("MinConns must be between 0 and MaxConns (%d), got %d", c.MaxConns, c.MinConns))
	case c.MinIdleConns < 0 || c.MinIdleConns > c.MaxConns:
		return invalidArg(fmt.Sprintf("MinIdleConns must be between 0 and MaxConns (%d), got %d", c.MaxConns, c.MinIdleConns))
	case c.MaxWaiters < 0:
		return invalidArg(fmt.Sprintf("MaxWaiters must be 0 (no bound, the default) or a bound, got %d", c.MaxWaiters))
	case c.CancelMode < CancelModePool || c.CancelMode > CancelModeClose:
		return invalidArg("unknown " + c.CancelMode.String() +
			": use CancelModePool (the default), CancelModeProtocol or CancelModeClose")
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

// settings is a Config resolved to its effective values.
type settings struct {
	acquireTimeout  time.Duration // 0: no bound of its own
	commitTimeout   time.Duration // 0: no bound of its own
	rollbackTimeout time.Duration // 0: no bound of its own
	tracer          TransactionTracer
	resolveCommits  bool
	resolveTimeout  time.Duration
	// statementTimeout is the one pgtx sent (0: none): a deadline carried
	// to the server never raises it.
	statementTimeout time.Duration
}

// newSettings resolves cfg's settings to their effective values; pc is
// the main pool's config, whose statement_timeout pgtx sends.
func newSettings(cfg *Config, pc *pgxpool.Config) settings {
	return settings{
		acquireTimeout:   defaultOrNone(cfg.AcquireTimeout, defaultAcquireTimeout),
		commitTimeout:    defaultOrNone(cfg.CommitTimeout, defaultCommitTimeout),
		rollbackTimeout:  defaultOrNone(cfg.RollbackTimeout, defaultRollbackTimeout),
		tracer:           cfg.Tracer,
		resolveCommits:   cfg.ResolveTimeout >= 0,
		resolveTimeout:   durDefault(cfg.ResolveTimeout, defaultResolveTimeout),
		statementTimeout: params.Duration(pc.ConnConfig.RuntimeParams["statement_timeout"]),
	}
}
