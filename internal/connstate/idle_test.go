package connstate

import (
	"crypto/tls"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// waitReadable waits until something waits to be read on c, or c's peer
// closed it, without reading it.
func waitReadable(t *testing.T, c net.Conn) {
	t.Helper()
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	var buf [1]byte
	if err := raw.Read(func(fd uintptr) bool {
		_, err := peek(fd, buf[:])
		return err == nil || !retryable(err)
	}); err != nil {
		t.Fatalf("waiting for the peer: %v", err)
	}
}

func TestEnded(t *testing.T) {
	if !canPeek {
		t.Skipf("no peek on %s", runtime.GOOS)
	}
	tests := []struct {
		name string
		peer func(net.Conn) // what the server does
		want bool
	}{
		{"silent", func(net.Conn) {}, false},
		{"an error", func(c net.Conn) { c.Write([]byte("E\x00\x00\x00\x04")) }, true},
		{"closed", func(c net.Conn) { c.Close() }, true},
		{"an error, then closed", func(c net.Conn) { c.Write([]byte("E")); c.Close() }, true},
		{"a notification", func(c net.Conn) { c.Write([]byte("A\x00\x00\x00\x04")) }, false},
		{"a notice", func(c net.Conn) { c.Write([]byte("N\x00\x00\x00\x04")) }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client, server := tcpPair(t)
			var d idle
			if d.ended(client) {
				t.Fatal("ended before the server did anything")
			}
			tc.peer(server)
			if tc.name != "silent" {
				waitReadable(t, client)
			}
			if got := d.ended(client); got != tc.want {
				t.Fatalf("ended = %v, want %v", got, tc.want)
			}
			// A peek takes nothing: what waits is still there.
			if tc.name == "an error" {
				buf := make([]byte, 5)
				if n, err := client.Read(buf); n != 5 || err != nil {
					t.Errorf("read after the peek: %d bytes, %v; want the message's 5", n, err)
				}
			}
		})
	}
}

// A read of the connection's own in progress (pgconn's background reader,
// left blocked on an idle connection once a slow write is done) holds the
// socket's read lock: ended must not wait for it.
func TestEndedBesideABlockedRead(t *testing.T) {
	if !canPeek {
		t.Skipf("no peek on %s", runtime.GOOS)
	}
	client, _ := tcpPair(t)
	raw, err := client.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	inside, release, readDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(readDone)
		raw.Read(func(uintptr) bool { close(inside); <-release; return true })
	}()
	<-inside
	var d idle
	got := make(chan bool, 1)
	go func() { got <- d.ended(client) }()
	select {
	case ended := <-got:
		if ended {
			t.Error("ended, the server said nothing")
		}
		close(release)
	case <-time.After(10 * time.Second):
		t.Error("ended waited for another read of the socket")
		close(release)
		<-got
	}
	<-readDone
}

func TestEndedUnderTLS(t *testing.T) {
	if !canPeek {
		t.Skipf("no peek on %s", runtime.GOOS)
	}
	client, server := tcpPair(t)
	var d idle
	tc := tls.Client(client, &tls.Config{InsecureSkipVerify: true})
	if d.ended(tc) {
		t.Fatal("ended before the server did anything")
	}
	// Under TLS the message cannot be told: whatever waits counts.
	server.Write([]byte("A\x00\x00\x00\x04"))
	waitReadable(t, tc)
	if !d.ended(tc) {
		t.Fatal("what waits under TLS was not seen")
	}
}

func TestEndedWithoutSocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	b.Close()
	var d idle
	if d.ended(a) {
		t.Error("ended on a connection without a socket: it cannot be peeked at")
	}
}

func TestEndedAllocatesNothing(t *testing.T) {
	if !canPeek {
		t.Skipf("no peek on %s", runtime.GOOS)
	}
	client, _ := tcpPair(t)
	var d idle
	d.ended(client)
	if n := testing.AllocsPerRun(100, func() { d.ended(client) }); n != 0 {
		t.Errorf("ended allocates %v times per check, want 0", n)
	}
}

func BenchmarkEnded(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			var buf [1]byte
			c.Read(buf[:]) // until the client closes
		}
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	var d idle
	b.ReportAllocs()
	for b.Loop() {
		if d.ended(client) {
			b.Fatal("ended")
		}
	}
}
