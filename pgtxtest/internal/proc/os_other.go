//go:build unix && !linux

package proc

import "syscall"

// SysProcAttr runs a child as cred (nil: as ourselves). Only Linux can have a
// child killed when its parent dies; elsewhere Main stops the servers on a normal
// exit and the next run removes the directories of dead test binaries.
func SysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}

// FastDir reports that there is no known memory-backed directory for clusters.
func FastDir() (string, bool) { return "", false }
