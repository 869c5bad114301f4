package pgtx

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of Config; a zero field means the default.
const (
	DefaultAcquireTimeout           = 2 * time.Second
	DefaultStatementTimeout         = 5 * time.Second
	DefaultIdleInTransactionTimeout = 10 * time.Second
	DefaultCommitTimeout            = 5 * time.Second
	DefaultRollbackTimeout          = 2 * time.Second
)

// Config configures a Pool. It must be created by ParseConfig; the zero value
// of each pgtx field means its documented default, and the embedded
// pgxpool.Config works as in pgxpool (MaxConns, ConnConfig, hooks...).
type Config struct {
	*pgxpool.Config

	// AcquireTimeout bounds the wait for a pool connection in Transaction.
	// When it fires while the caller's context is still live, Transaction
	// returns an error matching ErrAcquireTimeout and does not retry. When the
	// caller's context ends first, its error wins. 0 means
	// DefaultAcquireTimeout (2s); negative means only the caller's context
	// bounds the wait. A caller whose deadline comes first pays nothing for
	// the bound.
	AcquireTimeout time.Duration

	// StatementTimeout is the server's statement_timeout, sent as a session
	// parameter when each connection starts, so every statement (plain pool
	// queries too) has a server-side limit at no per-transaction cost. A
	// statement_timeout given in the connection string (as a parameter, or
	// as "-c statement_timeout=..." in its options) wins over the default
	// but not over an explicit value here. 0 means DefaultStatementTimeout
	// (5s); negative leaves the server's setting alone and sends no startup
	// parameter at all, on the cancel pool either: set it so behind a pooler
	// that refuses them (PgBouncer). Round to milliseconds.
	StatementTimeout time.Duration

	// IdleInTransactionTimeout is the server's
	// idle_in_transaction_session_timeout, a session parameter: the server
	// ends a session left idle inside a transaction (by a caller that died
	// between statements) after this long. One given in the connection
	// string wins over the default, as for StatementTimeout. 0 means
	// DefaultIdleInTransactionTimeout (10s); negative leaves the server's
	// setting alone.
	IdleInTransactionTimeout time.Duration

	// CommitTimeout bounds COMMIT. COMMIT runs on a context the caller's
	// cancellation cannot interrupt (an interrupted COMMIT has an unknown
	// outcome); this is its own limit. When it fires, the outcome is unknown
	// and the error matches ErrCommitUnknown. 0 means DefaultCommitTimeout
	// (5s); negative is refused.
	CommitTimeout time.Duration

	// RollbackTimeout bounds ROLLBACK, which also runs on a context the
	// caller's cancellation cannot interrupt, so a dead request context does
	// not cost the pool its connection. If it fires, the connection is
	// closed. 0 means DefaultRollbackTimeout (2s); negative is refused.
	RollbackTimeout time.Duration

	// Retry says how Transaction runs transactions again; its zero value is
	// the documented default of every field.
	Retry RetryPolicy

	// CancelMode is how a running statement is stopped when its context
	// ends; the zero value is CancelModePool. See CancelMode for the
	// trade-offs. pgtx installs its own ConnConfig.BuildContextWatcherHandler
	// on every connection; one set on the Config is replaced.
	CancelMode CancelMode

	// CancelGrace bounds a cancellation: if the statement has not returned
	// this long after its context ended (the cancel was lost, the server is
	// unreachable, a pooler queues the statement and drops its cancel), the
	// connection's socket deadline passes, the call returns and the
	// connection is discarded; so is one whose cancel was not confirmed
	// finished by then. Nothing waits longer. 0 means DefaultCancelGrace
	// (2s); negative is refused.
	CancelGrace time.Duration

	// CancelPoolSize is the maximum size of the cancel pool
	// (CancelModePool), which keeps one connection open from the start. 0
	// means DefaultCancelPoolSize (2); negative is refused.
	CancelPoolSize int32

	// CancelConnString, when set, is the connection string of the cancel
	// pool; by default it reaches the main pool's server as the same role.
	// Set it to use a role of its own (a member of pg_signal_backend and
	// pg_read_all_stats: see CancelModePool). It must reach the same
	// server: backends are matched by pid and backend_start.
	CancelConnString string

	// CancelConnectTimeout bounds a connect of the cancel pool, over which
	// ambiguous COMMITs are resolved too (ResolveCommits): raise it where a
	// connection takes longer to make. 0 means DefaultCancelConnectTimeout
	// (1s); negative is refused.
	CancelConnectTimeout time.Duration

	// MaxWaiters bounds the callers of Transaction waiting for a
	// connection: when that many are already in the pool's acquire, the
	// call fails at once with ErrQueueFull instead of joining the queue (a
	// bulkhead's bounded queue). The bound is hard: a place is reserved
	// before the wait begins. It counts Transaction's callers only; the
	// query methods wait unbounded (Stats.Waiters counts both). 0 means no
	// bound; negative is refused.
	MaxWaiters int

	// ResolveCommits resolves ambiguous COMMITs: when the connection is
	// lost (or the session ends) while COMMIT is in flight, pgtx asks the
	// server what became of the transaction instead of returning
	// ErrCommitUnknown. Committed means success; aborted means the whole
	// transaction runs again; a transaction still in progress (its backend
	// has not noticed its client is gone) has its backend ended, after which
	// the answer is definitive. ParseConfig sets it to true; false switches
	// resolution off, and every lost COMMIT is ErrCommitUnknown.
	//
	// The transaction id is captured in BEGIN's round trip ("select
	// pg_current_xact_id()" after BEGIN), so it is known before COMMIT is
	// sent, costs no round trip, and exists for every transaction: also one
	// that writes no row but notifies or takes sequence values, and a READ
	// ONLY one. The price is an id for every transaction, including those
	// that write nothing: it adds a commit record to WAL, but no WAL flush
	// at COMMIT (PostgreSQL commits a transaction that wrote nothing else
	// asynchronously), and consumes ids (so anti-wraparound vacuums come
	// sooner for a read-mostly workload).
	//
	// The question goes over the cancel pool (CancelModePool), whose
	// connections the main pool's exhaustion cannot hold, or else over a
	// connection made for it; a question whose server is a different system
	// or timeline (after a failover, where the id may have been given to
	// another transaction) is not answered: ErrCommitUnknown. A server
	// without pg_xact_status (PostgreSQL before 13, CockroachDB, YugabyteDB)
	// is detected when each connection is made; there every lost COMMIT is
	// ErrCommitUnknown and nothing else changes. On a hot standby, where a
	// transaction can change nothing, no id is captured and a lost COMMIT
	// runs again. Stats.Resolved counts each outcome.
	ResolveCommits bool

	// ResolveTimeout bounds a resolution. 0 means DefaultResolveTimeout
	// (5s); negative is refused.
	ResolveTimeout time.Duration

	// Breaker, when set, puts a circuit breaker in front of the pool's
	// Transaction calls: for a database the application can do without (a
	// read replica, an analytics store), never the primary. See
	// BreakerConfig.
	Breaker *BreakerConfig

	// Tracer, when set, receives an event at the start and end of every
	// attempt of every Transaction call.
	Tracer Tracer

	// parsed is the pgxpool.Config ParseConfig made, to tell a Config that
	// came from ParseConfig from one that did not.
	parsed *pgxpool.Config
}

// ParseConfig parses connString (a URL or keyword/value DSN, as pgxpool)
// into a Config with every pgtx field at its default: zero, except
// ResolveCommits, which is true.
func ParseConfig(connString string) (*Config, error) {
	pc, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	return &Config{Config: pc, parsed: pc, ResolveCommits: true}, nil
}

// New creates a Pool from connString with the default configuration. Like
// pgxpool.New it does not connect until a connection is needed.
func New(ctx context.Context, connString string) (*Pool, error) {
	cfg, err := ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	return NewWithConfig(ctx, cfg)
}

// settings is a Config resolved to its effective values.
type settings struct {
	acquireTimeout  time.Duration // <= 0: none
	commitTimeout   time.Duration
	rollbackTimeout time.Duration
	retry           RetryPolicy
	tracer          Tracer
	resolveCommits  bool
	resolveTimeout  time.Duration
}

// validate reports a Config NewWithConfig cannot use.
func (c *Config) validate() error {
	switch {
	case c == nil:
		return &invalidArgError{msg: "nil Config"}
	case c.Config == nil || c.parsed == nil:
		return &invalidArgError{msg: "Config must be created by ParseConfig"}
	case c.Config != c.parsed:
		return &invalidArgError{msg: "Config.Config was replaced; create the Config with ParseConfig and change its fields"}
	case c.ConnConfig == nil:
		return &invalidArgError{msg: "Config.ConnConfig is nil"}
	case c.MaxConns < 1:
		return &invalidArgError{msg: fmt.Sprintf("MaxConns must be at least 1, got %d", c.MaxConns)}
	case c.MinConns < 0 || c.MinConns > c.MaxConns:
		return &invalidArgError{msg: fmt.Sprintf("MinConns must be between 0 and MaxConns (%d), got %d", c.MaxConns, c.MinConns)}
	case c.MinIdleConns < 0 || c.MinIdleConns > c.MaxConns:
		return &invalidArgError{msg: fmt.Sprintf("MinIdleConns must be between 0 and MaxConns (%d), got %d", c.MaxConns, c.MinIdleConns)}
	case c.CommitTimeout < 0:
		return &invalidArgError{msg: "CommitTimeout must not be negative"}
	case c.RollbackTimeout < 0:
		return &invalidArgError{msg: "RollbackTimeout must not be negative"}
	case c.CancelMode < CancelModePool || c.CancelMode > CancelModeClose:
		return &invalidArgError{msg: "unknown " + c.CancelMode.String()}
	case c.Breaker != nil && c.Breaker.validate() != nil:
		return c.Breaker.validate()
	case c.ResolveTimeout < 0:
		return &invalidArgError{msg: "ResolveTimeout must not be negative"}
	case c.MaxWaiters < 0:
		return &invalidArgError{msg: "MaxWaiters must not be negative"}
	case c.CancelGrace < 0 || c.CancelPoolSize < 0 || c.CancelConnectTimeout < 0:
		return &invalidArgError{msg: "CancelGrace, CancelPoolSize and CancelConnectTimeout must not be negative"}
	}
	return c.Retry.validate()
}

// Pool is a pgxpool.Pool with pgtx's session limits installed on every
// connection. Query, QueryRow, Exec, SendBatch, CopyFrom and Stat work as in
// pgxpool. Pool.Begin, BeginTx and Acquire on the embedded pgxpool.Pool
// bypass Transaction's guarantees (no retries, no bounded acquire, no COMMIT
// classification); use Transaction for transactions.
type Pool struct {
	*pgxpool.Pool

	settings settings
	clock    clock
	cancel   *canceller
	budget   *retryBudget
	queue    *queue
	breaker  *Breaker // nil: none
	resolved resolveCounters
	resolver *resolver
	// acquireCtxs are the reusable contexts of bounded acquires.
	acquireCtxs acquireCtxPool
}

// NewWithConfig creates a Pool from cfg, which must come from ParseConfig. An
// invalid cfg is an error matching ErrInvalidArgument, never a panic. cfg is
// not modified and may be reused.
func NewWithConfig(ctx context.Context, cfg *Config) (*Pool, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pc := cfg.Config.Copy()
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	setSessionParam(pc.ConnConfig.RuntimeParams, "statement_timeout", cfg.StatementTimeout, DefaultStatementTimeout)
	setSessionParam(pc.ConnConfig.RuntimeParams, "idle_in_transaction_session_timeout", cfg.IdleInTransactionTimeout, DefaultIdleInTransactionTimeout)

	q := &queue{maxWaiters: int64(cfg.MaxWaiters)}
	installPoolTracer(pc, q)
	markSharedInShouldPing(pc)
	var breaker *Breaker
	if cfg.Breaker != nil {
		bc := *cfg.Breaker
		if bt, ok := cfg.Tracer.(BreakerTracer); ok && bc.Tracer == nil {
			bc.Tracer = bt
		}
		var err error
		if breaker, err = NewBreaker(bc); err != nil {
			return nil, err
		}
	}
	canceller, err := newCanceller(ctx, cfg, pc)
	if err != nil {
		return nil, err
	}
	pool, err := newPgxpool(ctx, pc)
	if err != nil {
		canceller.close()
		return nil, err
	}
	return &Pool{
		Pool:     pool,
		cancel:   canceller,
		resolver: newResolver(cfg, canceller.pool),
		settings: settings{
			acquireTimeout:  durDefault(cfg.AcquireTimeout, DefaultAcquireTimeout),
			commitTimeout:   durDefault(cfg.CommitTimeout, DefaultCommitTimeout),
			rollbackTimeout: durDefault(cfg.RollbackTimeout, DefaultRollbackTimeout),
			retry:           cfg.Retry.withDefaults(),
			tracer:          cfg.Tracer,
			resolveCommits:  cfg.ResolveCommits,
			resolveTimeout:  durDefault(cfg.ResolveTimeout, DefaultResolveTimeout),
		},
		clock:   realClock{},
		budget:  newRetryBudget(cfg.Retry.Budget, time.Now()),
		queue:   q,
		breaker: breaker,
	}, nil
}

// newPgxpool calls pgxpool.NewWithConfig, turning a panic on a config it
// rejects into an error.
func newPgxpool(ctx context.Context, pc *pgxpool.Config) (pool *pgxpool.Pool, err error) {
	defer func() {
		if r := recover(); r != nil {
			pool, err = nil, &invalidArgError{msg: fmt.Sprintf("pgxpool rejected the config: %v", r)}
		}
	}()
	return pgxpool.NewWithConfig(ctx, pc)
}

// Close closes the pool, waits for its connections to close and for
// in-flight cancels to finish, then closes the cancel pool.
func (p *Pool) Close() {
	if p == nil || p.Pool == nil {
		return // a Pool not made by New or NewWithConfig: nothing to close
	}
	p.Pool.Close()
	if p.cancel != nil {
		p.cancel.close()
	}
}
