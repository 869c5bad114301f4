package cancel

import (
	"context"
	"encoding/binary"
	"errors"
	"net"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/classify"
)

// cancelRequestCode is the protocol's CancelRequest code.
const cancelRequestCode = 80877102

// onStandby cancels the statement on s, past the pooler, within a share of
// the grace (the request through the pooler still has the rest): with the
// connection's own cancel request when its key is that backend's, else
// with the cancel query over a connection of its own to that server. ok
// reports a cancel confirmed finished; unknown, one whose signal may still
// arrive (the cancel query was sent and its answer lost).
func (c *Canceller) onStandby(ctx context.Context, s *Standby, conn Conn) (r Result, ok, unknown bool) {
	ctx, cancel := context.WithTimeout(ctx, c.share())
	defer cancel()
	if s.OwnKey {
		if !c.sendTo(ctx, s.Addr, conn.PID(), conn.SecretKey()) {
			return r, false, false
		}
		c.protocol.Add(1)
		return Result{Outcome: Protocol, FellBack: true}, true, false
	}
	if c.s.Node == nil {
		return r, false, false
	}
	a, err := c.s.Node(ctx, s.Addr, Target{PID: s.PID, Start: s.Start})
	var pgErr *pgconn.PgError
	var connectErr *pgconn.ConnectError
	switch {
	case err == nil && a.Signalled:
		c.signalled.Add(1)
		return Result{Outcome: Signalled, FellBack: true}, true, false
	case errors.Is(err, pgx.ErrNoRows), err == nil && a.Visible:
		// Gone, or its pid recycled: nothing was signalled.
		c.notFound.Add(1)
		return Result{Outcome: NotFound, FellBack: true}, true, false
	case err == nil, errors.As(err, &connectErr), pgconn.SafeToRetry(err),
		errors.As(err, &pgErr) && pgErr.Code != "57014" && !classify.EndsSession(pgErr):
		// Not sent (no connection, refused), or not visible to the role:
		// nothing was signalled.
		c.poolErrors.Add(1)
		return r, false, false
	}
	c.poolErrors.Add(1)
	return r, false, true
}

// sendTo sends the connection's own cancel request (its pid and secret
// key) straight to the server at addr, past the pooler in front of it, and
// reports whether that server acknowledged it, by closing the connection,
// before ctx ended.
func (c *Canceller) sendTo(ctx context.Context, addr string, pid uint32, key []byte) bool {
	dial := c.s.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	buf := make([]byte, 12+len(key))
	binary.BigEndian.PutUint32(buf[0:4], uint32(len(buf)))
	binary.BigEndian.PutUint32(buf[4:8], cancelRequestCode)
	binary.BigEndian.PutUint32(buf[8:12], pid)
	copy(buf[12:], key)
	if _, err := conn.Write(buf); err != nil {
		return false
	}
	// The server closes the connection once it has signalled the backend.
	_, err = conn.Read(buf[:1])
	return err != nil && !isTimeout(err) && ctx.Err() == nil
}

// isTimeout reports a deadline that ended a read.
func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
