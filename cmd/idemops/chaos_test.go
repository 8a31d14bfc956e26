package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad flags of `idemops chaos` are usage errors (exit 2) naming the flag, on one line, and
// nothing is started (the checks run before any part of the world).
func TestChaosFlags_BadValuesAreUsageErrorsNamingTheFlag(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--duration", "1s"}, "--duration"},
		{[]string{"--duration", "25h"}, "--duration"},
		{[]string{"--duration", "soon"}, "duration"},
		{[]string{"--seed", "-3"}, "--seed"},
		{[]string{"--seed", "x"}, "seed"},
		{[]string{"--out", " "}, "--out"},
		{[]string{"--out", file}, "--out"},
		{[]string{"--rate", "0"}, "--rate"},
		{[]string{"--rate", "1000"}, "--rate"},
		{[]string{"--out", "a\x00b"}, "--out"},
		{[]string{"--cells", "0"}, "--cells"},
		{[]string{"--cells", "3"}, "--cells"},
		{[]string{"--cells", "two"}, "cells"},
	} {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"chaos"}, tc.args...))
		err := root.Execute()
		if exitCode(err) != 2 || !strings.Contains(err.Error(), tc.flag) || strings.Contains(oneLine(err), "\n") {
			t.Errorf("%q: %v (exit %d), want exit 2 naming %s", tc.args, err, exitCode(err), tc.flag)
		}
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: %v is not a usage error", tc.args, err)
		}
	}
}
