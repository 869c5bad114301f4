// Package params writes the session parameters pgtx sends at connect and
// reads the settings of the caller's connection string that win over its
// defaults.
package params
