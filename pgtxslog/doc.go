// Package pgtxslog logs the events of pgtx with log/slog.
//
// A [Tracer] adapts every tracer interface of pgtx:
// [pgtx.TransactionTracer], [pgtx.CancelTracer] and [pgtx.BreakerTracer].
// Set it as the Config's tracer, and it receives the events of the pool's
// calls, cancels and circuit breaker:
//
//	cfg, err := pgtx.ParseConfig(os.Getenv("DATABASE_URL"))
//	if err != nil {
//		return err
//	}
//	cfg.Tracer = pgtxslog.New(logger, nil)
//	pool, err := pgtx.NewWithConfig(ctx, cfg)
//
// # What is logged
//
// By default only what is worth a look is logged: retries, failed calls,
// ambiguous COMMITs, retry budget refusals, cancelled statements and the
// circuit breaker's changes of state. A call that commits logs nothing
// unless [Options].LogSuccess is set. Each kind of line has its own level,
// chosen by severity; [Options] overrides any of them:
//
//	Line                                                   Message                              Default
//	retry after 40001 / 40P01 (ClassConflict)              pgtx: retrying transaction           Debug
//	retry after an overload error (ClassOverload) or an
//	        unreachable server (ClassUnavailable)          pgtx: retrying transaction           Warn
//	retry after a lost connection (ClassConnectionLost)    pgtx: retrying transaction           Warn
//	retry refused by the retry budget                      pgtx: retry budget exhausted         Warn
//	COMMIT outcome unknown (ErrCommitUnknown)              pgtx: commit outcome unknown         Error
//	failed: retries of a retryable class ran out           pgtx: transaction failed             Warn
//	failed: timeout (57014, 25P03, 25P04, deadline,
//	        ErrAcquireTimeout)                             pgtx: transaction failed             Warn
//	failed: the caller cancelled (context.Canceled)        pgtx: transaction failed             Debug
//	failed: the server is in trouble (SQLSTATE class 53
//	        but 53300, 58, XX)                             pgtx: transaction failed             Error
//	failed: any other error (constraints, data errors,
//	        the caller's own errors, NonRetryable)         pgtx: transaction failed             Debug
//	statement cancelled as configured                      pgtx: statement cancelled            Debug
//	statement cancel fell back (FellBack, or the
//	        connection closed outside CancelModeClose)     pgtx: statement cancelled            Warn
//	circuit breaker opened                                 pgtx: circuit breaker state changed  Warn
//	circuit breaker went half-open or closed               pgtx: circuit breaker state changed  Info
//	call committed (only with Options.LogSuccess)          pgtx: transaction committed          Debug
//	last attempt of a call (only with Options.LogAttempts) pgtx: attempt finished               Debug
//
// An error that ends a call is returned to its caller, which decides what it
// means; so a constraint violation, a data error or the caller's own error is
// logged at Debug only, while what the operator must know about (a COMMIT
// that may or may not have happened, a server out of disk or memory) is
// logged at Error. A call refused by the retry budget logs the refusal only,
// not a second "transaction failed" line.
//
// [pgtx.TraceCancelData] says what stopped a statement, not which
// [pgtx.CancelMode] was configured: set [Options].CancelMode to the pools'
// mode when it is [pgtx.CancelModeClose], or every closed connection is
// logged as a fallback.
//
// # Attributes
//
// Lines carry attributes with stable keys, the Key constants: the label
// (when not empty), isolation level, attempt or attempts, error class,
// SQLSTATE (when there is one), backoff, duration and error of a call or
// attempt; the pid, mode, outcome, fallback and latency of a cancel; the
// name, states, reason and window counts of a breaker's change of state.
//
// # Cost
//
// Every line is written with [slog.Logger.LogAttrs] and the context pgtx
// passes to the hook, so a handler can take a trace id from it. The
// handler's Enabled is asked first: a line whose level is disabled costs no
// allocation. [Tracer.TraceAttemptStart] and [Tracer.TraceTransactionStart]
// return their context unchanged and do nothing else.
package pgtxslog
