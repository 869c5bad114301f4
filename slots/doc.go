// Package slots holds what a pgtx pool reports of its server's connection
// slots: the tracer interface told when the server refuses a connect for
// lack of slots, the statistics of what the pool learned, and [ErrNoSlot].
// It imports nothing of pgtx: a tracer implements [Tracer] beside pgtx's
// own interfaces, and a pool whose Config.Tracer does is told.
//
// A fleet of processes, each with its own pool, can want more connections
// than the server's max_connections. When the server (or a pooler in front
// of it) refuses a pool's connect for lack of slots while the pool holds
// connections, the pool stops growing at what it holds, and the caller
// waits for one of those, within its AcquireTimeout and deadline, instead
// of failing. It tries one connection more 250ms later, then after a
// delay that doubles with each refusal up to two seconds. The
// [fleets guide] says what to set instead: a pooler, or pools sized to the
// server.
//
// [fleets guide]: https://github.com/pgtx-go/pgtx/blob/main/docs/fleets.md
package slots
