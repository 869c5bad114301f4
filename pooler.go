package pgtx

import (
	"strings"

	"github.com/jackc/pgerrcode"

	"github.com/jackc/pgx/v5/pgconn"
)

// Connection poolers in front of PostgreSQL shed load with errors of their
// own. They carry no SQLSTATE that says so — PgBouncer sends FATAL 08P01
// (protocol_violation; ERROR 08P01 before 1.17, some versions no code),
// Supavisor FATAL XX000, pgcat FATAL 58000 — so the message is the only
// signal. pgtx matches these poolers' own texts, as prefixes, and only under
// those codes; it never matches on its own errors' text.

// SQLSTATEs poolers send their own errors with.
const (
	codeProtocolViolation = pgerrcode.ProtocolViolation // PgBouncer
	codeInternalError     = pgerrcode.InternalError     // Supavisor
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
	{"no more connections allowed (max_client_conn)", ClassOverload},             // all
	{"client connections exceeded (max_db_client_connections)", ClassOverload},   // 1.24+
	{"client connections exceeded (max_user_client_connections)", ClassOverload}, // 1.24+
	{"query_wait_timeout", ClassOverload},                                        // all
	// The server's own overload errors (53300, 57P03), relayed by PgBouncer
	// to the clients waiting for a server login (kill_pool_logins), in
	// PostgreSQL's words (12 to 17).
	{"sorry, too many clients already", ClassOverload},
	{"remaining connection slots are reserved for", ClassOverload},
	{"too many connections for role", ClassOverload},
	{"too many connections for database", ClassOverload},
	{"the database system is starting up", ClassOverload},
	{"the database system is shutting down", ClassOverload},
	{"the database system is in recovery mode", ClassOverload},
	{"the database system is not yet accepting connections", ClassOverload},
	{"the database system is not accepting connections", ClassOverload},
	// PgBouncer: the server cannot be reached, or PgBouncer itself is
	// going away: a server that may come back.
	{"server login has been failing", ClassUnavailable},      // 1.17+ (the cached login error follows in 1.19+)
	{"pgbouncer cannot connect to server", ClassUnavailable}, // up to 1.16
	{"client_login_timeout (server down)", ClassUnavailable}, // all
	{"server shutting down", ClassUnavailable},               // 1.23+
	{"suspend_timeout", ClassUnavailable},                    // all
	// PgBouncer: its query_timeout / transaction timeouts: a timeout, never
	// retried.
	{"query_timeout", ClassTimeout},            // all
	{"query timeout", ClassTimeout},            // all
	{"idle transaction timeout", ClassTimeout}, // all
	{"transaction timeout", ClassTimeout},      // 1.25+
	// PgBouncer: the client's connection was closed under it; nothing of an
	// unfinished transaction was kept. Before COMMIT, run it again on a new
	// connection.
	{"server conn crashed?", ClassConnectionLost},           // all
	{"database removed", ClassConnectionLost},               // all: admin KILL, or the database left the config
	{"database configuration changed", ClassConnectionLost}, // all: RELOAD with a new connect string
	{"admin forced disconnect", ClassConnectionLost},        // 1.24+: admin KILL_CLIENT
	{"client_idle_timeout", ClassConnectionLost},            // all
	// Supavisor: client limits and pool checkout timeouts.
	{"(EMAXCONN)", ClassOverload},
	{"(EMAXCONNSESSION)", ClassOverload},
	{"(EMAXCLIENTCONN)", ClassOverload},
	{"(EMAXCLIENTSESSION)", ClassOverload},
	{"(ECHECKOUTTIMEOUT)", ClassOverload},
	{"Max client connections reached", ClassOverload},
	{"Unable to check out process from the pool due to timeout", ClassOverload},
	// pgcat: no server connection could be checked out.
	{"could not get connection from the pool", ClassOverload},
}

// endedIdle reports a session the server (25P03) or a pooler ended while it
// was idle inside a transaction: a COMMIT sent after it never ran, so at
// COMMIT it is a definitive "not committed", not an unknown outcome.
func endedIdle(e *pgconn.PgError) bool {
	if e.Code == pgerrcode.IdleInTransactionSessionTimeout {
		return true
	}
	return (e.Code == codeProtocolViolation || e.Code == "") && strings.HasPrefix(e.Message, "idle transaction timeout")
}

// classifyPoolerError recognises a pooler's error; ok is false for anything
// else.
func classifyPoolerError(e *pgconn.PgError) (c Class, ok bool) {
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
