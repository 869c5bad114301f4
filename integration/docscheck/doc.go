// Package docscheck checks that what pgtx's documents name exists: every Go
// identifier written in backquotes in README.md, docs/*.md, CHANGELOG.md's
// newest section and CONTRIBUTING.md resolves against the packages' source,
// and the files and functions CONTRIBUTING.md's map and path of one call
// name are where it says. Its tests run in `go test work`; the package is
// never released.
package docscheck
