// Package faultproxy puts a fault-injecting proxy between a client and a
// PostgreSQL server, so that a test can see what the client does when a COMMIT
// fails, a connection is cut or the network is slow.
//
// A [Proxy] ([New], or [Start] for a program) sits between a client and the server and forwards the
// PostgreSQL protocol, message by message, until told to inject a fault:
//
//   - [Proxy.FailCommits] and [Proxy.FailEveryCommitOnce] make COMMITs fail with a
//     serialization failure (40001) or a deadlock (40P01) that the server itself
//     raises, so the transaction is really rolled back. With FailEveryCommitOnce
//     every transaction's first COMMIT fails and its retry passes: a function run
//     by [pgtx.Transaction] runs twice, and a test sees whether what it does
//     outside the transaction (a message sent, a counter, an e-mail) is safe to
//     repeat. The options pgtxtest.WithFailEveryCommitOnce and pgtxtest.WithProxy
//     put a proxy in front of a pool of pgtxtest.NewPool.
//   - [Proxy.CutOnCommit], [Proxy.CutOnCommitReply], [Proxy.CutBeforeForward],
//     [Proxy.CutAfterForward] and [Proxy.CutAll] cut connections, before or after a
//     statement reaches the server, or drop the answer to a COMMIT that was applied.
//   - [Proxy.StallOnCommit] and [Proxy.StallAll] stall connections as a network
//     partition would, until [Proxy.ReleaseStalled].
//   - [Proxy.SlowStatements], [Proxy.SetLatency] and [Proxy.SetConnLatency] slow
//     statements or every message down; [Proxy.RefuseNew] refuses new connections.
//
// [Proxy.Stats] counts what the proxy did; [Proxy.Reset] turns every fault off.
//
// [IsCommit] and [MatchPrefix] are the statement matchers the rules use.
package faultproxy
