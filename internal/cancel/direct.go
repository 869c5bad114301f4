package cancel

import (
	"context"
	"encoding/binary"
	"net"
)

// cancelRequestCode is the protocol's CancelRequest code.
const cancelRequestCode = 80877102

// sendTo sends the connection's own cancel request (its pid and secret
// key) straight to the server at addr, past the pooler in front of it, and
// reports whether that server acknowledged it, by closing the connection,
// before ctx ended, within a share of the grace: the request through the
// pooler still has the rest.
func (c *Canceller) sendTo(ctx context.Context, addr string, pid uint32, key []byte) bool {
	ctx, cancel := context.WithTimeout(ctx, c.share())
	defer cancel()
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
