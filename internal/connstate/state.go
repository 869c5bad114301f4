package connstate

import (
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/cancel"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// State is everything pgtx keeps per connection of the main pool: how its
// statements are cancelled and what resolving its lost COMMITs needs. It
// is made with the connection ([Attach], from BuildContextWatcherHandler),
// filled in by AfterConnect before the connection is first handed out
// (Res before its first transaction), and found again with [Of].
type State struct {
	// Cancel is the connection's context watcher handler.
	Cancel cancel.Handler
	// Res is what resolution needs of the connection's server, captured
	// before its first transaction ([resolve.Conn.Prepare]).
	Res resolve.Conn
	// Tracer is the connection's pgx QueryTracer (nil: none), which sees
	// fn's first statement as pgx would show it: pgtx sends that one
	// itself, with BEGIN.
	Tracer pgx.QueryTracer
	// Named says that the connection's exec mode
	// (QueryExecModeCacheStatement) prepares named statements on the
	// server, and XidPrepared that the id reads are prepared on it
	// (PREPARE pgtx_xid...), for the first statements sent in the simple
	// protocol and for COMMIT's write.
	Named       bool
	XidPrepared bool
	// Pgpool says that the connection goes through Pgpool-II, which sends
	// each statement to a node of its choosing ([pgpool.Verdict]), and
	// PinReadOnly that it may send each statement of a session to another
	// node, so that a read-only transaction too is kept on the primary.
	// Retire, that the connection names its statements behind Pgpool-II
	// (made before the pool knew): Pgpool-II binds a named statement on the
	// node that parsed it, so the pool replaces it after its first use.
	Pgpool, PinReadOnly, Retire bool
	// RestoreTimeout says that a balanced read-only transaction behind
	// Pgpool-II set the session's statement_timeout, which has yet to be
	// restored (RESET) before the connection's next use.
	RestoreTimeout bool

	idle idle // what [State.Spoke] peeks with

	described map[string]*pgconn.StatementDescription // [State.Described]
	named     int                                     // deferred statements named so far
}

// maxDescribed bounds the texts of deferred statements a connection keeps
// a description of (named prepared statements, in the mode that names
// them): those beyond go unnamed, their arguments encoded by Go type.
const maxDescribed = 256

// Described returns the description of sql that [State.Describe] kept,
// or nil.
func (s *State) Described(sql string) *pgconn.StatementDescription { return s.described[sql] }

// ForgetDescribed forgets every description kept: a deferred statement
// failed, perhaps for one the schema changed since, or one deallocated.
// The statements named stay prepared on the server, unused.
func (s *State) ForgetDescribed() { s.described = nil }

// CanDescribe reports whether [State.Describe] keeps another text.
func (s *State) CanDescribe() bool { return len(s.described) < maxDescribed }

// Describe keeps sd, sql's description, for the deferred statements sent
// in COMMIT's write, which encode their arguments with it (and run it by
// its name, when it has one).
func (s *State) Describe(sql string, sd *pgconn.StatementDescription) {
	if s.described == nil {
		s.described = make(map[string]*pgconn.StatementDescription)
	}
	s.described[sql] = sd
}

// DeferredName returns the name of the next deferred statement prepared
// on the connection.
func (s *State) DeferredName() string {
	s.named++
	return "pgtx_deferred_" + strconv.Itoa(s.named)
}

// SetMode records the connection's exec mode.
func (s *State) SetMode(mode pgx.QueryExecMode) { s.Named = mode == pgx.QueryExecModeCacheStatement }

// Forget notes a statement's error: a prepared statement that no longer
// exists (26000, after a DEALLOCATE ALL or DISCARD ALL of fn's) means the
// id reads and the deferred statements are prepared no more.
func (s *State) Forget(err error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "26000" {
		s.XidPrepared = false
		s.described = nil
	}
}

// key is where a connection's state is kept in PgConn.CustomData.
const key = "pgtx"

// Attach makes pgConn's state and keeps it in the connection's CustomData
// (when the connection has one), where [Of] finds it.
func Attach(pgConn *pgconn.PgConn) *State {
	st := &State{}
	if data := pgConn.CustomData(); data != nil {
		data[key] = st
	}
	return st
}

// Of returns the state pgtx keeps for pgConn, or nil for a connection
// that is not one of a pgtx pool's.
func Of(pgConn *pgconn.PgConn) *State {
	st, _ := pgConn.CustomData()[key].(*State)
	return st
}
