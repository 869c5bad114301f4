// Package connstate holds what pgtx keeps per connection of the main pool
// (its cancel handler, what resolving its lost COMMITs needs, its query
// tracer, its prepared id reads, and how to see that the server ended it
// while it was idle), kept once in the connection's CustomData and found
// again from the connection.
package connstate
