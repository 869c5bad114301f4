package slots

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// ErrNoSlot is the error of a connect a pool held back without reaching
// the server: the server refused the pool a connect for lack of slots, and
// the pool holds the connections it has until a probe finds one more.
// pgtx's own acquires wait for a held connection instead; an acquire of
// the underlying pgxpool.Pool (pgtx's Pool.Pgxpool) gets it at once.
var ErrNoSlot = errors.New("pgtx: no connection slot: the server refused the pool a connect for lack of slots, and the pool holds the connections it has")

// Tracer is an optional interface of a pgtx Config.Tracer, told when the
// server refuses a pool a connect for lack of slots, when the pool's limit
// rises, and when an acquire waited for a connection the pool held.
type Tracer interface {
	// TraceSlots is called with the acquire's context (the connect's, for
	// [Raised]). It must return quickly: it runs on the acquire's path.
	TraceSlots(ctx context.Context, data Data)
}

// Event is what a [Data] reports.
type Event int

const (
	// Refused: the server, or a pooler, refused a connect for lack of
	// slots (53300, or a pooler's client limit).
	Refused Event = iota + 1
	// Raised: a connection beyond the pool's limit was made, and the limit
	// rose.
	Raised
	// Waited: an acquire waited for a connection the pool held, instead of
	// connecting.
	Waited
)

// String returns the event's name.
func (e Event) String() string {
	switch e {
	case Refused:
		return "refused"
	case Raised:
		return "raised"
	case Waited:
		return "waited"
	}
	return "Event(" + strconv.Itoa(int(e)) + ")"
}

// Data describes an [Event].
type Data struct {
	Event Event
	// CancelPool reports an event of the cancel pool, not the main pool.
	CancelPool bool
	// Limit is the pool's limit after the event ([Stats].Limit), and Held
	// the connections it held then, those connecting included.
	Limit, Held int32
	// Err is the refusal (Refused).
	Err error
	// Wait is how long the acquire waited (Waited).
	Wait time.Duration
}

// Stats is what a pool learned of its server's connection slots, part of
// pgtx's Stats.
type Stats struct {
	// RefusedCount counts connects refused for lack of slots.
	RefusedCount int64
	// Limit is how many connections the pool lets itself hold: MaxConns
	// until a refusal while it held some, then what it held, raised by each
	// connection a probe made beyond it.
	Limit int32
	// ProbeCount counts connects let through beyond Limit, about one every
	// two seconds while Limit is below MaxConns; RaisedCount, those that
	// connected and raised it.
	ProbeCount, RaisedCount int64
	// WaitCount counts acquires that waited for a connection the pool held
	// instead of connecting; WaitDuration is their total.
	WaitCount    int64
	WaitDuration time.Duration
}
