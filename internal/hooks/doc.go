// Package hooks installs on a main pool's config the pgxpool hooks pgtx
// needs, each wrapping the caller's own so that it keeps working.
package hooks
