package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"
)

// listenAndServe serves h on addr (port 0: any free port) until stop is called, returning the
// URL it listens on; flag names the flag that sets addr, for the error when the port is taken.
func listenAndServe(addr, flag string, h http.Handler) (url string, stop func(), err error) {
	ln, err := listen(addr, flag)
	if err != nil {
		return "", nil, err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("http server stopped", "addr", addr, "err", err)
		}
	}()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}, nil
}

// listen opens addr for the server whose address flag sets: a malformed address is bad input,
// and a port another program holds says which flag moves it.
func listen(addr, flag string) (net.Listener, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, usagef("--%s %q: %v", flag, addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, listenFailed(err, addr, flag)
	}
	return ln, nil
}

// listenFailed words a failure to listen on addr, naming the flag that moves it.
func listenFailed(err error, addr, flag string) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("listen %s: the address is already in use (another program, or another idemops): choose another with --%s (port 0: any free port)", addr, flag)
	}
	return fmt.Errorf("listen %s (set by --%s): %w", addr, flag, err)
}
