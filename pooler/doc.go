// Package pooler tells a pgtx Config.Tracer what a pool found in front of
// its server: which pooler, and the settings of it that a guarantee of
// pgtx's needs otherwise. See the [poolers guide].
//
// [poolers guide]: https://github.com/pgtx-go/pgtx/blob/main/docs/poolers.md
package pooler
