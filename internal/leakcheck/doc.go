// Package leakcheck finds goroutines that outlived a test binary's tests,
// on the model of go.uber.org/goleak, for the root module's test packages,
// which take no test dependency: goleak would put testify into the module
// graph of every consumer of pgtx.
package leakcheck
