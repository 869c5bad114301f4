//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package connstate

import "syscall"

const canPeek = true

// peek reads what waits on the socket fd into buf without taking it. The
// runtime keeps fd non-blocking: with nothing to read it fails with
// EAGAIN at once.
func peek(fd uintptr, buf []byte) (int, error) {
	n, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK)
	return n, err
}

// retryable reports that err, a peek's, says nothing waits.
func retryable(err error) bool {
	return err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || err == syscall.EINTR
}
