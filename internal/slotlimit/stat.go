package slotlimit

import (
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolStat returns a [Settings].Stat of the pool *p will hold. pgxpool may
// connect (for MinConns) before its constructor returns the pool: until p
// is set, the pool is taken to hold nothing.
func PoolStat(p *atomic.Pointer[pgxpool.Pool]) func() (total, connecting int) {
	return func() (int, int) {
		pool := p.Load()
		if pool == nil {
			return 0, 0
		}
		st := pool.Stat()
		return int(st.TotalConns()), int(st.ConstructingConns())
	}
}
