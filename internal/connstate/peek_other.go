//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package connstate

const canPeek = false

func peek(uintptr, []byte) (int, error) { return 0, nil }

func retryable(error) bool { return true }
