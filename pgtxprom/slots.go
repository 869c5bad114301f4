package pgtxprom

import (
	"github.com/pgtx-go/pgtx/slots"
	"github.com/prometheus/client_golang/prometheus"
)

// slotDescs are the descriptors of a pool's [slots.Stats]: the main
// pool's, named pool_slot_*, or the cancel pool's, cancel_pool_slot_*, as
// pool_connections and cancel_pool_connections are.
type slotDescs struct {
	refused, limit, probes, raises, waits, waitSeconds *prometheus.Desc
}

// newSlotDescs returns the descriptors named prefix+..., made by desc, of
// the pool called which in their help.
func newSlotDescs(desc func(name, help string, labels ...string) *prometheus.Desc, prefix, which string) slotDescs {
	return slotDescs{
		refused: desc(prefix+"refused_connects_total",
			"Connects of the "+which+" the server or a pooler refused for lack of connection slots (53300, too many clients)."),
		limit: desc(prefix+"limit",
			"Connections the "+which+" lets itself hold: its maximum until a connect is refused for lack of slots while it holds some, then what it held, raised by each probe that connects."),
		probes: desc(prefix+"probes_total",
			"Connects of the "+which+" let through beyond its slot limit, about one every 2s while the limit is below the maximum."),
		raises: desc(prefix+"raises_total",
			"Probes of the "+which+" that connected and raised its slot limit."),
		waits: desc(prefix+"waits_total",
			"Acquires of the "+which+" that waited for a connection it held, instead of connecting, because the server had no slot."),
		waitSeconds: desc(prefix+"wait_seconds_total",
			"Total time the acquires of the "+which+" waited for a connection it held because the server had no slot."),
	}
}

// collect sends the metrics of s.
func (d slotDescs) collect(gauge, counter func(*prometheus.Desc, float64, ...string), s slots.Stats) {
	counter(d.refused, float64(s.RefusedCount))
	gauge(d.limit, float64(s.Limit))
	counter(d.probes, float64(s.ProbeCount))
	counter(d.raises, float64(s.RaisedCount))
	counter(d.waits, float64(s.WaitCount))
	counter(d.waitSeconds, s.WaitDuration.Seconds())
}
