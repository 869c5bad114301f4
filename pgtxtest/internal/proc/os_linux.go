package proc

import "syscall"

// SysProcAttr runs a child as cred (nil: as ourselves) and has the kernel kill
// it when the thread that started it exits, so a killed test binary leaves no server
// behind. (The signal follows the starting OS thread, not the process: Go keeps its
// threads for the life of the process unless a goroutine that locked one exits.)
func SysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
}

// FastDir returns a memory-backed directory for clusters, /dev/shm, when it has room
// for a good number of them; creating files there is much faster than on a disk.
func FastDir() (string, bool) {
	const dir, need = "/dev/shm", 2 << 30
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Bavail*uint64(st.Bsize) < need {
		return "", false
	}
	if syscall.Access(dir, 2 /* W_OK */) != nil {
		return "", false
	}
	return dir, true
}
