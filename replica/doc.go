// Package replica runs read-only transactions on PostgreSQL replicas and
// falls back to the primary when a replica cannot serve them.
//
// A [Router] holds a primary [pgtx.Pool] and any number of replica pools. Its
// Read runs a READ ONLY transaction on the next replica in turn, through
// [pgtx.TransactionWithOptions], so the read is retried, bounded and
// cancelled as any pgtx transaction is. When the replica fails (a lost or
// refused connection, an overload, a timeout), is slower than
// [Config].ReplicaTimeout, or its circuit breaker is open, the read runs
// again on the primary. The caller's own errors and the query's errors are
// returned as they are: the primary would say the same.
//
//	router, err := replica.New(primary, []*pgtx.Pool{replica1, replica2}, nil)
//	if err != nil {
//		return err
//	}
//	err = router.Read(ctx, func(ctx context.Context, tx pgx.Tx) error {
//		return tx.QueryRow(ctx, "select name from items where id = $1", id).Scan(&name)
//	})
//
// Give each replica pool a circuit breaker ([pgtx.Config].Breaker): while a
// replica's breaker is open the router skips it at no cost, and without one
// a failing replica costs every read its ReplicaTimeout. Writes do not go
// through a Router: run them with [pgtx.Transaction] on the primary.
//
// The fields of [Config] follow the rule of package [pgtx] for every
// configuration field: 0 means the field's documented default, and a
// negative value switches the setting off.
package replica
