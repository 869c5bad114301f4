package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// Launch is one run of a program the kit starts in the foreground (postgres,
// pgbouncer, pgpool), its output appended to a log file of its own.
type Launch struct {
	Name  string              // what messages call it: "pgpool"
	Port  int                 // the port it is to listen on
	Log   string              // the path of its log file
	Cmd   *exec.Cmd           // its command; Run sets Env, Stdout, Stderr and SysProcAttr
	Cred  *syscall.Credential // the user it runs as; nil: this process's
	Group bool                // in a process group of its own, with its children

	// Ready waits until the program is ready, the process exits or ctx
	// ends; from is where this run's lines begin in the log.
	Ready func(ctx context.Context, p *Process, from int64) error
	// Stop stops the process when Ready failed.
	Stop func(p *Process) error
}

// Run starts l's program and waits until it is ready. It returns the process
// and where this run's lines begin in the log. When the program is not
// ready, Run stops it and says why with the tail of this run's log; the
// error is ErrPortTaken too when another process holds the port.
func (l Launch) Run(ctx context.Context) (*Process, int64, error) {
	out, err := os.OpenFile(l.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("pgtxtest: open %s log: %w", l.Name, err)
	}
	defer out.Close() // the child has its own copy of the descriptor
	var from int64
	if st, err := out.Stat(); err == nil {
		from = st.Size()
	}
	l.Cmd.Env = Env()
	l.Cmd.Stdout = out
	l.Cmd.Stderr = out
	l.Cmd.SysProcAttr = SysProcAttr(l.Cred)
	l.Cmd.SysProcAttr.Setpgid = l.Group
	p, err := Start(l.Cmd)
	if err != nil {
		return nil, 0, fmt.Errorf("pgtxtest: start %s: %w", l.Name, err)
	}
	if err := l.Ready(ctx, p, from); err != nil {
		stopErr := l.Stop(p)
		logTail := Tail(l.Log, from, 4096)
		if strings.Contains(logTail, "Address already in use") {
			err = errors.Join(ErrPortTaken, err)
		}
		return nil, 0, errors.Join(fmt.Errorf("pgtxtest: %s on port %d did not start: %w\n%s log:\n%s", l.Name, l.Port, err, l.Name, logTail), stopErr)
	}
	return p, from, nil
}
