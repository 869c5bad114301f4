// Package cancelquery holds the statements pgtx's cancel path sends to the
// server, so that the integration tests run the very statements pgtx runs
// against a real server.
package cancelquery
