// Package slotlimit keeps a pool within the connection slots its server gives
// it. When the server refuses a connect for lack of slots (53300, or a
// pooler's client limit) while the pool holds connections, the pool stops
// growing at what it holds, and its callers wait for one of those instead
// of failing; it tries one connection more soon, then less and less often,
// down to once per Every (2s in pgtx, jittered), so that a full server sees
// about one refused connect per pool every two seconds. Its connects are paced ([pacer]). See docs/fleets.md.
package slotlimit
