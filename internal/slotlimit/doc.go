// Package slotlimit keeps a pool within the connection slots its server gives
// it. When the server refuses a connect for lack of slots (53300, or a
// pooler's client limit) while the pool holds connections, the pool stops
// growing at what it holds, and its callers wait for one of those instead
// of failing; it tries one connection more at most about once a second, so
// that a fleet of pools sharing one server sees about one refused connect
// per pool per second. See docs/fleets.md.
package slotlimit
