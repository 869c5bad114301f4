package classify

import (
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// Connection poolers in front of PostgreSQL shed load with errors of their
// own. They carry no SQLSTATE that says so — PgBouncer sends FATAL 08P01
// (protocol_violation; ERROR 08P01 before 1.17, some versions no code),
// Supavisor FATAL XX000, pgcat FATAL 58000, Pgpool-II XX000 (ERROR or
// FATAL: either ends the session) — so the message is the only signal. pgtx matches these poolers' own texts, as prefixes, and only under
// those codes; it never matches on its own errors' text.

// SQLSTATEs poolers send their own errors with.
const (
	codeProtocolViolation = pgerrcode.ProtocolViolation // PgBouncer
	codeInternalError     = pgerrcode.InternalError     // Supavisor, Pgpool-II
	codeSystemError       = pgerrcode.SystemError       // pgcat
)

// poolerMessage is one pooler error text and what it means.
type poolerMessage struct {
	prefix string
	class  Class
}

// poolerMessages are the texts of PgBouncer, Supavisor and pgcat, by what
// they mean for a retry. PgBouncer's were checked against its source
// (src/*.c) at the tags pgbouncer_1_12_0 to pgbouncer_1_25_1; the versions
// that send each are noted, and "all" means every one of those. PgBouncer
// sends all of them as FATAL 08P01, the server connection's errors it
// relays at login included.
var poolerMessages = [...]poolerMessage{
	// PgBouncer: a client limit is reached, or a queued client waited too
	// long for a server connection: load shedding, try again later.
	{"no more connections allowed (max_client_conn)", Overload},             // all
	{"client connections exceeded (max_db_client_connections)", Overload},   // 1.24+
	{"client connections exceeded (max_user_client_connections)", Overload}, // 1.24+
	{"query_wait_timeout", Overload},                                        // all
	// The server's own errors at login, relayed by PgBouncer to the
	// clients waiting for a server login (kill_pool_logins), in
	// PostgreSQL's words (12 to 17): its overload (53300), and its
	// lifecycle (57P03: a server that comes back).
	{"sorry, too many clients already", Overload},
	{"remaining connection slots are reserved for", Overload},
	{"too many connections for role", Overload},
	{"too many connections for database", Overload},
	{"the database system is starting up", Unavailable},
	{"the database system is shutting down", Unavailable},
	{"the database system is in recovery mode", Unavailable},
	{"the database system is not yet accepting connections", Unavailable},
	{"the database system is not accepting connections", Unavailable},
	// PgBouncer: the server cannot be reached, or PgBouncer itself is
	// going away: a server that may come back.
	{"server login has been failing", Unavailable},      // 1.17+ (the cached login error follows in 1.19+)
	{"pgbouncer cannot connect to server", Unavailable}, // up to 1.16
	{"client_login_timeout (server down)", Unavailable}, // all
	{"server shutting down", Unavailable},               // 1.23+
	{"suspend_timeout", Unavailable},                    // all
	// PgBouncer: its query_timeout / transaction timeouts: a timeout, never
	// retried.
	{"query_timeout", Timeout},            // all
	{"query timeout", Timeout},            // all
	{"idle transaction timeout", Timeout}, // all
	{"transaction timeout", Timeout},      // 1.25+
	// PgBouncer: the client's connection was closed under it; nothing of an
	// unfinished transaction was kept. Before COMMIT, run it again on a new
	// connection.
	{"server conn crashed?", ConnectionLost},           // all
	{"database removed", ConnectionLost},               // all: admin KILL, or the database left the config
	{"database configuration changed", ConnectionLost}, // all: RELOAD with a new connect string
	{"admin forced disconnect", ConnectionLost},        // 1.24+: admin KILL_CLIENT
	{"client_idle_timeout", ConnectionLost},            // all
	// Supavisor: client limits and pool checkout timeouts.
	{"(EMAXCONN)", Overload},
	{"(EMAXCONNSESSION)", Overload},
	{"(EMAXCLIENTCONN)", Overload},
	{"(EMAXCLIENTSESSION)", Overload},
	{"(ECHECKOUTTIMEOUT)", Overload},
	{"Max client connections reached", Overload},
	{"Unable to check out process from the pool due to timeout", Overload},
	// pgcat: no server connection could be checked out.
	{"could not get connection from the pool", Overload},
	// Pgpool-II (checked against its source, src/, at V4_3_5): all XX000,
	// its default code, and each ends the client's session, a child's
	// ERROR too (child.c closes the frontend after it). A backend it
	// cannot connect to (a server restarting or down): unavailable.
	{"failed to create a backend", Unavailable},                               // pool_connection_pool.c: FATAL "... %d connection"; "... connection" when it fails over
	{"all backend nodes are down, pgpool requires at least one", Unavailable}, // child.c: every node down or detached
	// Pgpool-II: a backend's connection broke under the session (a server
	// restarting, a node failing over): before COMMIT run it again on a
	// new connection; at COMMIT the outcome is unknown.
	{"unable to read data", ConnectionLost},                  // utils/pool_stream.c: "... from DB node %d", ERROR, or FATAL for a node not the main one; pool_process_query.c: FATAL, select() failed
	{"unable to read from backend socket", ConnectionLost},   // pool_process_query.c: FATAL
	{"unable to write data to backend", ConnectionLost},      // utils/pool_stream.c: ERROR or FATAL
	{"unable to flush data to backend", ConnectionLost},      // utils/pool_stream.c: ERROR or FATAL
	{"unable to forward message to backend", ConnectionLost}, // pool_process_query.c: FATAL
	{"failed to read kind from backend", ConnectionLost},     // pool_process_query.c: FATAL
	{"unable to read message kind", ConnectionLost},          // pool_proto_modules.c: ERROR, the nodes answered differently
	{"Backend throw an error message", ConnectionLost},       // pool_process_query.c: FATAL, a query of Pgpool-II's own failed on a backend (one shutting down)
	{"connection to postmaster on DB node", ConnectionLost},  // pool_process_query.c: FATAL, "... was lost due to pg_terminate_backend"
}

// EndedIdle reports a session the server (25P03) or a pooler ended while it
// was idle inside a transaction: a COMMIT sent after it never ran, so at
// COMMIT it is a definitive "not committed", not an unknown outcome.
func EndedIdle(e *pgconn.PgError) bool {
	if e.Code == pgerrcode.IdleInTransactionSessionTimeout {
		return true
	}
	return (e.Code == codeProtocolViolation || e.Code == "") && strings.HasPrefix(e.Message, "idle transaction timeout")
}

// pooler recognises a pooler's error; ok is false for anything else.
func pooler(e *pgconn.PgError) (c Class, ok bool) {
	switch e.Code {
	case "", codeProtocolViolation, codeInternalError, codeSystemError:
	default:
		return 0, false
	}
	for _, m := range poolerMessages {
		if strings.HasPrefix(e.Message, m.prefix) {
			return m.class, true
		}
	}
	return 0, false
}
