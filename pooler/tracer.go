package pooler

import "context"

// Tracer is an optional interface of a pgtx Config.Tracer: it is told
// once, when a pool's first connection through a pooler that pgtx knows is
// made, what that pooler is.
type Tracer interface {
	// TracePooler is called once per pool, from the connect that found the
	// pooler, with that connect's context.
	TracePooler(ctx context.Context, data Data)
}

// Data describes a pooler a pool found in front of its server.
type Data struct {
	// Name is the pooler's name: "Pgpool-II".
	Name string
	// Version is the version it reports, such as "4.3.5 (tamahomeboshi)".
	Version string
	// Advice lists its settings that a guarantee of pgtx's needs
	// otherwise; empty when none does.
	Advice []Advice
}

// Advice is a pooler setting that a guarantee of pgtx's needs otherwise.
type Advice struct {
	// Setting is the setting's name, Value its value and Want the value
	// pgtx needs.
	Setting, Value, Want string
	// Why says what goes wrong with Value.
	Why string
}
