package pgtx

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/cancel"
	"github.com/pgtx-go/pgtx/internal/contention"
	"github.com/pgtx-go/pgtx/internal/hooks"
	"github.com/pgtx-go/pgtx/internal/params"
	"github.com/pgtx-go/pgtx/internal/resolve"
	"github.com/pgtx-go/pgtx/internal/retry"
	"github.com/pgtx-go/pgtx/internal/txn"
)

// The defaults of Config, stated on each field.
const (
	defaultAcquireTimeout           = 2 * time.Second
	defaultStatementTimeout         = 5 * time.Second
	defaultIdleInTransactionTimeout = 10 * time.Second
	defaultCommitTimeout            = 5 * time.Second
	defaultRollbackTimeout          = 2 * time.Second
)

// Config configures a [Pool]. Every pgtx field follows the package's rule: 0
// means the default stated on the field, a negative value switches the
// setting off, and an optional feature is off while nil. The embedded
// [pgxpool.Config] works as in pgxpool (MaxConns, ConnConfig, hooks...).
//
// [ParseConfig] makes a Config from a connection string. A *pgxpool.Config
// built elsewhere (with a BeforeConnect hook for IAM tokens, a custom TLS
// configuration or a tracer, say) is adopted as it is:
//
//	cfg := &pgtx.Config{Config: poolConfig} // poolConfig from pgxpool.ParseConfig
//
// pgxpool requires that its Config come from [pgxpool.ParseConfig];
// [NewWithConfig] reports one that did not as an error.
type Config struct {
	*pgxpool.Config

	// AcquireTimeout bounds the wait for a pool connection in
	// [Transaction]. When it fires while the caller's context is still
	// live, the call returns an error matching [ErrAcquireTimeout] and does
	// not retry; when the caller's context ends first, its error wins. A
	// caller whose deadline comes first pays nothing for the bound. Default
	// 2s; negative: no bound of its own, only the caller's context.
	AcquireTimeout time.Duration

	// StatementTimeout is the server's statement_timeout, sent as a session
	// parameter when each connection starts, so every statement (plain pool
	// queries too) has a server-side limit at no per-transaction cost. A
	// statement_timeout given in the connection string (as a parameter, or
	// as "-c statement_timeout=..." in its options) wins over the default
	// but not over an explicit value here. Default 5s; negative: no
	// parameter is sent at all (on the cancel pool either) and the server's
	// setting applies, as a pooler that refuses startup parameters
	// (PgBouncer) needs. Rounded up to milliseconds.
	StatementTimeout time.Duration

	// IdleInTransactionTimeout is the server's
	// idle_in_transaction_session_timeout, a session parameter: the server
	// ends a session left idle inside a transaction (by a caller that died
	// between statements) after this long. One given in the connection
	// string wins over the default, as for StatementTimeout. Default 10s;
	// negative: not sent, the server's setting applies.
	IdleInTransactionTimeout time.Duration

	// CommitTimeout bounds COMMIT. COMMIT runs on a context the caller's
	// cancellation cannot interrupt (an interrupted COMMIT has an unknown
	// outcome); this is its own limit. The COMMIT of a transaction that
	// provably wrote nothing (it has no id, or it ran on a hot standby)
	// keeps the caller's deadline instead: it changes nothing either way. When it fires, the outcome is
	// unknown and resolved as any lost COMMIT. Default 5s; negative: no
	// bound of its own.
	CommitTimeout time.Duration

	// RollbackTimeout bounds ROLLBACK, which also runs on a context the
	// caller's cancellation cannot interrupt, so a dead request context
	// does not cost the pool its connection. If it fires, the connection
	// is closed. Default 2s; negative: no bound of its own.
	RollbackTimeout time.Duration

	// Retry says how [Transaction] runs transactions again; its zero value
	// is the default of every field.
	Retry RetryConfig

	// CancelMode is how a running statement is stopped when its context
	// ends; the zero value is [CancelModePool]. See [CancelMode] for the
	// trade-offs. pgtx installs its own ConnConfig.BuildContextWatcherHandler
	// on every connection; one set on the Config is replaced.
	CancelMode CancelMode

	// CancelGrace bounds a cancellation: if the statement has not returned
	// this long after its context ended (the cancel was lost, the server is
	// unreachable, a pooler queues the statement and drops its cancel),
	// the connection's socket deadline passes, the call returns and the
	// connection is discarded; so is one whose cancel was not confirmed
	// finished by then. Default 2s; negative: no bound of its own (the
	// call waits for the server's answer however long it takes).
	CancelGrace time.Duration

	// CancelConnString, when set, is the connection string of the cancel
	// pool; by default it reaches the main pool's server as the same role,
	// running the Config's BeforeConnect as the main pool does (so
	// credentials fetched per connection work there too).
	// Set it to use a role of its own (a member of pg_signal_backend and
	// pg_read_all_stats: see [CancelModePool]). It must reach the same
	// server: backends are matched by pid and backend_start.
	CancelConnString string

	// CancelConnectTimeout bounds a connect of the cancel pool, over which
	// ambiguous COMMITs are resolved too: raise it where a connection
	// takes longer to make. Default 1s; negative: no bound of its own.
	CancelConnectTimeout time.Duration

	// MaxWaiters bounds the callers of [Transaction] waiting for a
	// connection: when that many are already in the pool's acquire, the
	// call fails at once with [ErrQueueFull] instead of joining the queue
	// (a bulkhead's bounded queue). The bound is hard: a place is reserved
	// before the wait begins. It counts Transaction's callers only; the
	// query methods wait unbounded ([Stats].Waiting counts both). Default
	// and negative: no bound.
	MaxWaiters int

	// ResolveTimeout bounds the resolution of an ambiguous COMMIT: when the
	// connection is lost (or the session ends) while COMMIT is in flight,
	// pgtx asks the server what became of the transaction instead of
	// returning [ErrCommitUnknown]. Committed means success; aborted means
	// the whole transaction runs again; a transaction still in progress
	// (its backend has not noticed its client is gone) has its backend
	// ended, after which the answer is definitive. Default 5s; negative:
	// resolution is off, and every lost COMMIT is [ErrCommitUnknown].
	//
	// The transaction's id is read without giving it one
	// (pg_current_xact_id_if_assigned()) in the write of fn's first
	// statement, and of each statement after it until the transaction has
	// one, so it is known before COMMIT is sent, at no round trip. A
	// transaction that writes nothing takes no id and writes no WAL: when
	// its COMMIT's answer is lost it runs again, which is harmless. What
	// pgtx does not see (statements on tx.Conn(), in a savepoint, a COPY,
	// large objects) and a notification (its statements mention NOTIFY or
	// pg_notify: it takes its id only at COMMIT) make COMMIT's write read
	// the id, with one given, and a protocol Flush that makes it arrive
	// before COMMIT runs. When that id never arrived, the backend, while it
	// still runs the transaction, tells it; after that nothing can, and the
	// call returns [ErrCommitUnknown].
	//
	// The question goes over the cancel pool ([CancelModePool]), whose
	// connections the main pool's exhaustion cannot hold, or else over a
	// connection made for it; a question whose server is a different
	// system or timeline (after a failover, where the id may have been
	// given to another transaction) is not answered: [ErrCommitUnknown]. A
	// server without pg_xact_status (PostgreSQL before 13, CockroachDB,
	// YugabyteDB) is detected when each connection is made; there every
	// lost COMMIT is [ErrCommitUnknown] and nothing else changes. On a hot
	// standby, where a transaction can change nothing, no id is read and
	// a lost COMMIT runs again. [Stats].Resolved counts each outcome.
	ResolveTimeout time.Duration

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

// New creates a [Pool] from connString with the default configuration. Like
// [pgxpool.New] it does not connect until a connection is needed.
func New(ctx context.Context, connString string) (*Pool, error) {
	cfg, err := ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	return NewWithConfig(ctx, cfg)
}

// validate reports a Config NewWithConfig cannot use.
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
	case c.CancelMode < CancelModePool || c.CancelMode > CancelModeClose:
		return &invalidArgError{Msg: "unknown " + c.CancelMode.String()}
	case c.Breaker != nil && c.Breaker.validate() != nil:
		return c.Breaker.validate()
	case c.Contention.validate() != nil:
		return c.Contention.validate()
	}
	return c.Retry.validate()
}

// Pool is a pool of connections whose every method carries pgtx's
// guarantees: [Transaction] runs transactions on it, and its query methods
// (Exec, Query, QueryRow, SendBatch, CopyFrom) cancel a statement on the
// server when its context ends. It has no Begin or Acquire: a transaction
// of its own would bypass the retries, the bounded acquire and the
// classification of COMMIT. [Pool.Pgxpool] is the one way around it.
//
// A Pool satisfies the DBTX interface sqlc generates, as [pgx.Tx] does, so
// one set of generated queries serves both.
type Pool struct {
	pool       *pgxpool.Pool
	cfg        *Config // a copy of the Config it was made from
	settings   settings
	clock      clock
	cancel     *cancel.Canceller
	budget     *retry.Budget
	queue      *queue
	breaker    *breaker            // nil: none
	contention *contention.Manager // nil: none
	resolved   resolve.Counters
	resolver   *resolve.Resolver
	txn        txn.Settings // what its transactions need of it (txnSettings)
}

// NewWithConfig creates a [Pool] from cfg. An invalid cfg is an error
// matching [ErrInvalidArgument], never a panic. cfg is not modified and may
// be reused.
func NewWithConfig(ctx context.Context, cfg *Config) (*Pool, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	own := cfg.Copy()
	pc := cfg.Config.Copy()
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	params.Set(pc.ConnConfig.RuntimeParams, "statement_timeout", cfg.StatementTimeout, defaultStatementTimeout)
	params.Set(pc.ConnConfig.RuntimeParams, "idle_in_transaction_session_timeout", cfg.IdleInTransactionTimeout, defaultIdleInTransactionTimeout)
	params.AskUTF8(pc.ConnConfig.RuntimeParams)

	q := newQueue(cfg)
	resolving := cfg.ResolveTimeout >= 0 // "resolution on", derived here only
	canceller, err := newCanceller(ctx, cfg, pc)
	if err != nil {
		return nil, err
	}
	hooks.Install(pc, canceller, &q.Queue, resolving)
	pool, err := newPgxpool(ctx, pc)
	if err != nil {
		canceller.Close()
		return nil, err
	}
	p := &Pool{
		pool:     pool,
		cfg:      own,
		cancel:   canceller,
		resolver: resolve.NewResolver(durDefault(cfg.ResolveTimeout, defaultResolveTimeout), canceller.Pool(), cfg.ConnConfig, cfg.BeforeConnect),
		settings: settings{
			acquireTimeout:   defaultOrNone(cfg.AcquireTimeout, defaultAcquireTimeout),
			commitTimeout:    defaultOrNone(cfg.CommitTimeout, defaultCommitTimeout),
			rollbackTimeout:  defaultOrNone(cfg.RollbackTimeout, defaultRollbackTimeout),
			retry:            cfg.Retry.withDefaults(),
			tracer:           cfg.Tracer,
			resolveCommits:   resolving,
			resolveTimeout:   durDefault(cfg.ResolveTimeout, defaultResolveTimeout),
			statementTimeout: params.Duration(pc.ConnConfig.RuntimeParams["statement_timeout"]),
		},
		clock:      realClock{},
		budget:     newRetryBudget(cfg.Retry, time.Now()),
		queue:      q,
		breaker:    newBreaker(cfg.Breaker, cfg.Tracer, realClock{}),
		contention: newContention(cfg.Contention, realClock{}, int(cfg.MaxConns), defaultOrNone(cfg.AcquireTimeout, defaultAcquireTimeout), cfg.Tracer),
	}
	p.txn = p.txnSettings()
	return p, nil
}

// newPgxpool calls pgxpool.NewWithConfig, turning a panic on a config it
// rejects (one not made by pgxpool.ParseConfig) into an error.
func newPgxpool(ctx context.Context, pc *pgxpool.Config) (pool *pgxpool.Pool, err error) {
	defer func() {
		if r := recover(); r != nil {
			pool, err = nil, &invalidArgError{Msg: fmt.Sprintf("pgxpool rejected the config: %v", r)}
		}
	}()
	return pgxpool.NewWithConfig(ctx, pc)
}

// Close closes the pool, waits for its connections to close and for
// in-flight cancels to finish, then closes the cancel pool.
func (p *Pool) Close() {
	if p == nil || p.pool == nil {
		return // a Pool not made by New or NewWithConfig: nothing to close
	}
	if p.contention != nil {
		p.contention.Close()
	}
	p.pool.Close()
	if p.cancel != nil {
		p.cancel.Close()
	}
}

// Ping acquires a connection and checks that the server answers, as
// [pgxpool.Pool.Ping]; when the context ends it, the error matches
// ctx.Err().
func (p *Pool) Ping(ctx context.Context) error {
	if p == nil || p.pool == nil {
		return errPoolNotOpened
	}
	return withContextErr(ctx, p.pool.Ping(ctx))
}

// Config returns a copy of the [Config] the pool was made with. Changing it
// changes nothing in the pool.
func (p *Pool) Config() *Config {
	if p == nil {
		return nil
	}
	return p.cfg.Copy()
}

// Pgxpool returns the underlying [pgxpool.Pool]. It bypasses every guarantee
// of pgtx: a transaction begun on it is not retried, its acquire is not
// bounded, its COMMIT is not classified or resolved, and a statement it
// runs is cancelled as the connection's [CancelMode] says but its errors do
// not match the context's. It is there for what pgtx does not wrap (LISTEN on an acquired connection, say); do not use it for
// transactions.
func (p *Pool) Pgxpool() *pgxpool.Pool {
	if p == nil {
		return nil
	}
	return p.pool
}

// BreakerState returns the state of the pool's circuit breaker
// ([Config].Breaker), or [BreakerClosed] when it has none.
func (p *Pool) BreakerState() BreakerState {
	if p == nil || p.breaker == nil {
		return BreakerClosed
	}
	return p.breaker.State()
}
