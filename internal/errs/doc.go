// Package errs defines pgtx's sentinel errors and the error types that
// match them, so that the internal packages that make those errors and the
// root package that exports the sentinels share one value of each; and the
// query results whose errors match the context's error once it has ended.
package errs
