package main

import (
	"sync"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
)

// faults is a loop's fault proxy (pgtxtest's), through which all of the
// loop's connections reach the server, and the schedule on which it loses
// the answer of a COMMIT: every so often the next COMMIT reaches the server
// and is applied, then the proxy drops the server's answer and cuts the
// connection, as a network failure at that moment would.
type faults struct {
	proxy *faultproxy.Proxy
	every time.Duration

	stop chan struct{}
	wg   sync.WaitGroup
}

// newFaults starts a fault proxy in front of upstream (host:port). Nothing
// is cut until start.
func newFaults(upstream string, every time.Duration) (*faults, error) {
	p, err := faultproxy.Start(upstream)
	if err != nil {
		return nil, err
	}
	return &faults{proxy: p, every: every, stop: make(chan struct{})}, nil
}

// start arms a lost COMMIT answer every f.every until halt.
func (f *faults) start() {
	f.wg.Go(func() {
		t := time.NewTicker(f.every)
		defer t.Stop()
		for {
			select {
			case <-f.stop:
				return
			case <-t.C:
				f.proxy.CutOnCommitReply(1)
			}
		}
	})
}

// halt stops the schedule and disarms what it armed and did not fire. It
// must be called once.
func (f *faults) halt() {
	close(f.stop)
	f.wg.Wait()
	f.proxy.Reset()
}

// cuts is how many COMMIT answers the proxy lost.
func (f *faults) cuts() int64 {
	return f.proxy.Stats().CutsOnCommitReply
}

// close closes the proxy and every connection through it.
func (f *faults) close() error {
	return f.proxy.Close()
}
