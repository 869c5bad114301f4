package cancel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/cancelquery"
	"github.com/pgtx-go/pgtx/internal/classify"
)

// Querier is the connection as [Handler.Capture] queries it: *pgx.Conn.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	IsClosed() bool
}

// Capture is a step of setting the connection up, when it is made: in
// ModePool it captures the backend's identity (its pid and start time) and
// finds out whether the connection reaches its backend directly, as
// pg_cancel_backend needs. The identity query runs in the simple protocol,
// which is safe behind a transaction-pooling PgBouncer whatever the
// application's exec mode. A server that cannot tell the identity leaves
// the protocol cancel the way to reach the backend; only a connection that
// failed is an error.
func (h *Handler) Capture(ctx context.Context, conn Querier) error {
	if h.c.s.Mode != ModePool {
		return nil
	}
	var pid uint32
	var start time.Time
	err := conn.QueryRow(ctx, cancelquery.Identity, pgx.QueryExecModeSimpleProtocol).Scan(&pid, &start)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		h.backendStart.Store(start.UnixMicro())
		h.direct.Store(pid == h.conn.PID())
	case errors.Is(err, pgx.ErrNoRows) || (errors.As(err, &pgErr) && !classify.EndsSession(pgErr) && !conn.IsClosed()):
		// A server without pg_stat_get_activity as PostgreSQL has it:
		// the protocol cancel is the way to reach this backend.
	default:
		return fmt.Errorf("pgtx: capture backend identity: %w", err)
	}
	return nil
}
