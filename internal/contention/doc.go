// Package contention is a pool's contention manager: while the
// transactions of one label keep failing with conflicts, it lets only as
// many run at once as commit most, and lets the others in oldest call
// first as running ones end.
package contention
