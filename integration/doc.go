// Package integration holds pgtx's tests against a real PostgreSQL server:
// every promise of the contract, proven end to end. The server comes from
// pgtxtest (PGTX_TEST_DATABASE_URL, Docker, or local binaries).
package integration
