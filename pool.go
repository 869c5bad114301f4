package pgtx

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/acked"
	"github.com/pgtx-go/pgtx/internal/acquire"
	"github.com/pgtx-go/pgtx/internal/cancel"
	"github.com/pgtx-go/pgtx/internal/contention"
	"github.com/pgtx-go/pgtx/internal/histogram"
	"github.com/pgtx-go/pgtx/internal/hooks"
	"github.com/pgtx-go/pgtx/internal/params"
	"github.com/pgtx-go/pgtx/internal/pgpool"
	"github.com/pgtx-go/pgtx/internal/reach"
	"github.com/pgtx-go/pgtx/internal/resolve"
	"github.com/pgtx-go/pgtx/internal/retry"
	"github.com/pgtx-go/pgtx/internal/txn"
	"github.com/pgtx-go/pgtx/pooler"
)

// While calls wait for an unreachable server, one probe connects every
// probeEvery (jittered), so its return is noticed whatever their backoffs.
const (
	probeEvery   = 250 * time.Millisecond
	probeTimeout = 2 * time.Second
)

// Pool is a pool of connections whose every method carries pgtx's
// guarantees: [Transaction] runs transactions on it, and its query methods
// cancel a statement on the server when its context ends. It has no Begin
// or Acquire; [Pool.Pgxpool] is the one way around it. A Pool satisfies
// sqlc's DBTX interface, as [pgx.Tx] does.
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
	reach      *reach.Signal // wakes the calls waiting for the server
	slots      *slotted      // the pool through its slot limit: every acquire of pgtx's
	loop       retry.Loop    // every call's, before its overrides: the settings resolved once
	txn        txn.Settings  // what its transactions need of it (txnSettings)

	// acked keeps the commits a failover may lose; nil: off.
	acked *acked.Watcher
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

// NewWithConfig creates a [Pool] from cfg. An invalid cfg is an error
// matching [ErrInvalidArgument], never a panic. cfg is not modified and may
// be reused.
func NewWithConfig(ctx context.Context, cfg *Config) (*Pool, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	own := cfg.Copy()
	pc := mainConfig(cfg)
	retryConfig := cfg.Retry.withDefaults()
	st := newSettings(cfg, pc)
	q := newQueue(st.acquireTimeout, cfg.MaxWaiters)
	// made is set below; its MinConns may connect before.
	var made atomic.Pointer[pgxpool.Pool]
	var cancelPool atomic.Pointer[cancel.Limited] // set below: a limit drops only once a call runs
	sl := &slotted{}
	sl.limit = newLimit(&made, cfg, retryConfig.Jitter, func() {
		if l := cancelPool.Load(); l != nil && l.Yield() > 0 {
			sl.limit.ProbeSoon() // the slot it gave back is the work's to take
		}
	})
	canceller, err := newCanceller(ctx, cfg, pc, sl.limit.Capped)
	if err != nil {
		return nil, err
	}
	cancelPool.Store(canceller.Limited())
	signal := newReach(sl, retryConfig.Jitter)
	hooks.Install(pc, canceller, &q.Queue, newVerdict(cfg.Tracer), sl.limit, signal.Connected)
	pool, err := newPgxpool(ctx, pc)
	if err != nil {
		sl.limit.Close()
		signal.Close()
		canceller.Close()
		return nil, err
	}
	made.Store(pool)
	sl.pool = pool
	var resolvePool resolve.Pool // nil unless there is one: not a nil *cancel.Limited
	if l := canceller.Limited(); l != nil {
		resolvePool = l
	}
	resolver := resolve.NewResolver(st.resolveTimeout, resolvePool, cfg.ConnConfig, cfg.BeforeConnect)
	p := &Pool{
		pool:       pool,
		slots:      sl,
		cfg:        own,
		cancel:     canceller,
		reach:      signal,
		acked:      newAcked(cfg, resolver),
		resolver:   resolver,
		settings:   st,
		clock:      realClock{},
		budget:     newRetryBudget(cfg.Retry, time.Now()),
		queue:      q,
		breaker:    newBreaker(cfg.Breaker, cfg.Tracer, realClock{}),
		contention: newContention(cfg.Contention, realClock{}, int(cfg.MaxConns), st.acquireTimeout, cfg.Tracer),
	}
	p.loop = retry.Loop{Policy: retryConfig.policy(), Clock: p.clock, Budget: p.budget, Wake: signal, GaveUp: gaveUp}
	p.txn = p.txnSettings()
	return p, nil
}

// mainConfig returns a copy of cfg's pgxpool.Config with the session
// parameters pgtx sends at connect.
func mainConfig(cfg *Config) *pgxpool.Config {
	pc := cfg.Config.Copy()
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	params.Set(pc.ConnConfig.RuntimeParams, "statement_timeout", cfg.StatementTimeout, defaultStatementTimeout)
	params.Set(pc.ConnConfig.RuntimeParams, "idle_in_transaction_session_timeout", cfg.IdleInTransactionTimeout, defaultIdleInTransactionTimeout)
	params.AskUTF8(pc.ConnConfig.RuntimeParams)
	return pc
}

// newReach returns the signal that wakes the calls waiting for the server:
// its probe connects through pool, set before any call can wait.
func newReach(pool *slotted, jitter func() float64) *reach.Signal {
	return reach.New(reach.Settings{
		Probe: func(ctx context.Context) error {
			c, err := pool.Acquire(ctx)
			if err == nil {
				c.Release()
			}
			return err
		},
		Every: probeEvery, Jitter: jitter, Timeout: probeTimeout,
	})
}

// newVerdict returns what a pool learns of a pooler in front of its
// server, telling tracer once when it is Pgpool-II.
func newVerdict(tracer TransactionTracer) *pgpool.Verdict {
	v := &pgpool.Verdict{}
	if pt, ok := tracer.(pooler.Tracer); ok {
		v.Found = func(ctx context.Context, info pgpool.Info) {
			pt.TracePooler(ctx, pooler.Data{Name: "Pgpool-II", Version: info.Version, Advice: info.Advice()})
		}
	}
	return v
}

// newPgxpool turns pgxpool's panic on a config not made by ParseConfig
// into an error.
func newPgxpool(ctx context.Context, pc *pgxpool.Config) (pool *pgxpool.Pool, err error) {
	defer func() {
		if r := recover(); r != nil {
			pool, err = nil, invalidArg(fmt.Sprintf("pgxpool rejected the config: %v", r))
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
	if p.reach != nil {
		p.reach.Close()
	}
	p.acked.Close()
	if p.slots != nil {
		p.slots.limit.Close() // before the pool: its connects for the waiters end
	}
	p.pool.Close()
	if p.cancel != nil {
		p.cancel.Close()
	}
}

// Ping checks that the server answers, as [pgxpool.Pool.Ping]; when the
// context ends it, the error matches ctx.Err().
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

// Pgxpool returns the underlying [pgxpool.Pool], for what pgtx does not
// wrap (LISTEN, say). It bypasses every guarantee of pgtx but cancellation:
// do not use it for transactions. While the server's slots hold the pool
// below MaxConns ([Stats].Slots), its Acquire does not wait for a
// held connection: one that would connect beyond the limit fails at once.
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

// acquire takes a connection through p's queue. caller is the Done channel
// of the call's context: a timeout says when a call with the same context,
// or one never done as the caller's is, held a connection through the wait
// (a nested Transaction given the request's context, or
// context.Background(), waits for itself).
func (p *Pool) acquire(ctx context.Context, caller <-chan struct{}) (*pgxpool.Conn, time.Time, error) {
	conn, end, waited, err := p.queue.Acquire(ctx, p.slots, p.clock)
	if err == acquire.ErrFull {
		return nil, time.Time{}, ErrQueueFull
	}
	p.queue.acquireWait.Observe(waited)
	if err == acquire.ErrTimeout {
		e := &acquireTimeoutError{timeout: p.queue.Bounds().Timeout, connecting: p.connecting()}
		if p.queue.inflight.HeldBy(caller, end.Add(-waited)) {
			e.heldBy = sameContext
			if caller == nil {
				e.heldBy = neverDone
			}
		}
		err = e
	}
	return conn, end, err
}

// connecting reports whether an acquire that waits now waits for a connect.
func (p *Pool) connecting() bool {
	s := p.pool.Stat()
	return s.ConstructingConns() > 0 && s.AcquiredConns() < s.MaxConns()
}

// queue counts waiters and hold times, which pgxpool does not.
type queue struct {
	acquire.Queue
	inflight    acquire.InFlight // attempts holding a connection
	acquireWait histogram.Live   // Transaction's acquires
	calls       atomic.Int64     // Transaction calls started
}

func newQueue(timeout time.Duration, maxWaiters int) *queue {
	q := &queue{}
	q.Init(acquire.Bounds{Timeout: timeout, MaxWaiters: maxWaiters})
	return q
}
