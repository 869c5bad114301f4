package pgtxslog

import (
	"context"
	"log/slog"

	"github.com/pgtx-go/pgtx/slots"
)

// TraceSlots logs what a pool learns of its server's connection slots: a
// connect refused for lack of slots as [SlotRefused], its limit raised by
// a probe as [SlotRaised], and an acquire that waited for a held
// connection as [SlotWaited].
func (t *Tracer) TraceSlots(ctx context.Context, data slots.Data) {
	var e Event
	switch data.Event {
	case slots.Refused:
		e = SlotRefused
	case slots.Raised:
		e = SlotRaised
	case slots.Waited:
		e = SlotWaited
	default:
		return
	}
	logger, level := t.enabled(ctx, e)
	if logger == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 4)
	attrs = append(attrs,
		slog.Bool("cancel_pool", data.CancelPool),
		slog.Int64("limit", int64(data.Limit)),
		slog.Int64("held", int64(data.Held)))
	if data.Event == slots.Waited {
		attrs = append(attrs, slog.Duration("wait", data.Wait))
	}
	write(ctx, logger, level, e, data.Err, attrs)
}
