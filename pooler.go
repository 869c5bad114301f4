package pgtx

import (
	"strings"

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
	CodeProtocolViolation = "08P01" // PgBouncer
	codeInternalError     = "XX000" // Supavisor
	codeSystemError       = "58000" // pgcat
)

// poolerMessage is one pooler error text and what it means.
type poolerMessage struct {
	prefix string
	class  Class
}

// poolerMessages are the texts of PgBouncer (1.x up to 1.24), Supavisor and
// pgcat, by what they mean for a retry.
var poolerMessages = [...]poolerMessage{
	// PgBouncer: a client limit is reached, or a queued client waited too
	// long for a server connection: load shedding, try again later.
	{"no more connections allowed (max_client_conn)", ClassOverload},
	{"client connections exceeded (max_db_client_connections)", ClassOverload},
	{"client connections exceeded (max_user_client_connections)", ClassOverload},
	{"query_wait_timeout", ClassOverload},
	// PgBouncer: the server cannot be reached or is shutting down; back off
	// as for an overloaded server (the cached login error of
	// server_login_retry is in the message).
	{"server login has been failing", ClassOverload},
	{"pgbouncer cannot connect to server", ClassOverload},
	{"client_login_timeout (server down)", ClassOverload},
	{"server shutting down", ClassOverload},
	{"suspend_timeout", ClassOverload},
	// PgBouncer: its query_timeout / transaction timeouts: a timeout, never
	// retried.
	{"query_timeout", ClassTimeout},
	{"query timeout", ClassTimeout},
	{"idle transaction timeout", ClassTimeout},
	{"transaction timeout", ClassTimeout},
	// PgBouncer: the server connection died under the client.
	{"server conn crashed?", ClassConnectionLost},
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

// classifyPoolerError recognises a pooler's error; ok is false for anything
// else.
func classifyPoolerError(e *pgconn.PgError) (c Class, ok bool) {
	switch e.Code {
	case "", CodeProtocolViolation, codeInternalError, codeSystemError:
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
