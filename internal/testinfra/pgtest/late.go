package pgtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// Late stands for the server of dbURL (a URL from URL) on a loopback port of its own that
// resets every connection until up is called and passes them through to the server after: a
// database that is down when a process starts and answers later. It returns dbURL with that
// port. The port and its connections close when the test ends.
func Late(t testing.TB, dbURL string) (lateURL string, up func()) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	upstream := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var open atomic.Bool
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c)
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			cli, err := ln.Accept()
			if err != nil {
				return
			}
			if !open.Load() { // reset, as a port nothing listens on answers
				cli.(*net.TCPConn).SetLinger(0)
				cli.Close()
				continue
			}
			srv, err := net.Dial("tcp", upstream)
			if err != nil {
				cli.Close()
				continue
			}
			track(cli)
			track(srv)
			go func() { io.Copy(srv, cli); srv.Close() }()
			go func() { io.Copy(cli, srv); cli.Close() }()
		}
	}()
	u.Host = ln.Addr().String()
	return u.String(), func() { open.Store(true) }
}
