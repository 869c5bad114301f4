package classify

import (
	"errors"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// slotMessages are the texts, among poolerMessages, of a pooler that
// refused a client for lack of slots: its own client limits, and the
// server's 53300 it relays at login.
var slotMessages = [...]string{
	"no more connections allowed (max_client_conn)",
	"client connections exceeded (max_db_client_connections)",
	"client connections exceeded (max_user_client_connections)",
	"sorry, too many clients already",
	"remaining connection slots are reserved for",
	"too many connections for role",
	"too many connections for database",
	"(EMAXCONN)",
	"(EMAXCLIENTCONN)",
	"Max client connections reached",
}

// NoSlot reports the error of a connect that the server, or a pooler in
// front of it, refused for lack of connection slots: 53300 (too many
// clients, slots reserved, a role's or a database's connection limit), or
// a pooler's client limit.
func NoSlot(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	if pgErr.Code == pgerrcode.TooManyConnections {
		return true
	}
	switch pgErr.Code {
	case "", codeProtocolViolation, codeInternalError, codeSystemError:
	default:
		return false
	}
	for _, m := range slotMessages {
		if strings.HasPrefix(pgErr.Message, m) {
			return true
		}
	}
	return false
}
