package pgtxotel

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/slots"
	"go.opentelemetry.io/otel/attribute"
)

// TestTraceSlots: each slot event is a "pgtx.slot" event on the span in
// ctx while it records, with the event, the pool, its limit and what it
// held; a wait has its length, a refusal its SQLSTATE as error.type and
// db.response.status_code. Nothing is added to an ended span or without
// one.
func TestTraceSlots(t *testing.T) {
	refusal := &pgconn.PgError{Severity: "FATAL", Code: "53300", Message: "sorry, too many clients already"}
	tests := []struct {
		name string
		data slots.Data
		span string // "recording", "ended" or "none"
		want map[attribute.Key]attribute.Value
	}{
		{
			name: "refused",
			data: slots.Data{Event: slots.Refused, Limit: 3, Held: 3, Err: refusal},
			span: "recording",
			want: map[attribute.Key]attribute.Value{
				"pgtx.slot.event": attribute.StringValue("refused"), "pgtx.slot.pool": attribute.StringValue("main"),
				"pgtx.slot.limit": attribute.Int64Value(3), "pgtx.slot.held": attribute.Int64Value(3),
				"error.type": attribute.StringValue("53300"), "db.response.status_code": attribute.StringValue("53300"),
			},
		},
		{
			name: "cancel pool waited",
			data: slots.Data{Event: slots.Waited, CancelPool: true, Limit: 1, Held: 1, Wait: 250 * time.Millisecond},
			span: "recording",
			want: map[attribute.Key]attribute.Value{
				"pgtx.slot.event": attribute.StringValue("waited"), "pgtx.slot.pool": attribute.StringValue("cancel"),
				"pgtx.slot.limit": attribute.Int64Value(1), "pgtx.slot.held": attribute.Int64Value(1),
				"pgtx.slot.wait": attribute.Float64Value(0.25),
			},
		},
		{
			name: "raised",
			data: slots.Data{Event: slots.Raised, Limit: 4, Held: 4},
			span: "recording",
			want: map[attribute.Key]attribute.Value{
				"pgtx.slot.event": attribute.StringValue("raised"), "pgtx.slot.pool": attribute.StringValue("main"),
				"pgtx.slot.limit": attribute.Int64Value(4), "pgtx.slot.held": attribute.Int64Value(4),
			},
		},
		{name: "no span", data: slots.Data{Event: slots.Refused, Err: refusal}, span: "none"},
		{name: "ended span", data: slots.Data{Event: slots.Waited}, span: "ended"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			ev := h.eventOn(t, tt.span, "pgtx.attempt", "pgtx.slot", func(ctx context.Context) { h.tr.TraceSlots(ctx, tt.data) })
			if ev == nil {
				return
			}
			assertAttrs(t, "slot event", attrMap(ev.Attributes), tt.want)
			assertExactKeys(t, "slot event", attrMap(ev.Attributes), tt.want)
		})
	}
}
