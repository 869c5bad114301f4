package txn

// levels are the SQL names of the isolation levels, numbered as
// pgtx.Isolation's.
var levels = [...]string{1: "READ COMMITTED", 2: "REPEATABLE READ", 3: "SERIALIZABLE"}

// beginSQLs holds every BEGIN statement, indexed by isolation level,
// read-only and deferrable, so that a transaction does not build its own.
var beginSQLs = func() (s [len(levels)][2][2]string) {
	for iso := 1; iso < len(levels); iso++ {
		for ro := range 2 {
			for def := range 2 {
				q := "begin isolation level " + levels[iso]
				if ro == 1 {
					q += " read only"
				}
				if def == 1 {
					q += " deferrable"
				}
				s[iso][ro][def] = q
			}
		}
	}
	return s
}()

// BeginSQL returns the BEGIN statement of the isolation level iso (a
// valid pgtx.Isolation), read only and deferrable as asked.
func BeginSQL(iso int, readOnly, deferrable bool) string {
	return beginSQLs[iso][b2i(readOnly)][b2i(deferrable)]
}
