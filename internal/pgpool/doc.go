// Package pgpool knows Pgpool-II in front of a server: it tells a
// connection through one from a direct one by asking which backends answer
// it, reads the Pgpool-II settings pgtx's guarantees depend on, and keeps a
// pool's verdict, so that each pool asks Pgpool-II once.
package pgpool
