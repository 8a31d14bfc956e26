package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// docCommand finds an idemops command line in a code block line or a code span: the text after
// "idemops " (or "go run ./cmd/idemops "), up to a comment.
var docCommand = regexp.MustCompile(`(?:^|[\s|;(])(?:go run \./cmd/idemops|idemops)\s+([^#]*)`)

// docCommandWord is a word that names a subcommand (lowercase, digits, dashes), possibly several
// as alternatives ("search|show|find").
var docCommandWord = regexp.MustCompile(`^[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)*$`)

// TestDocs_EveryIdemopsLineIsACommand runs every `idemops …` line of README.md and docs/*.md —
// in code blocks and in code spans — with --help: each names commands that exist (each of
// "a|b" alternatives, each command after " | "), and their help prints. A documented command
// that was renamed or never written fails here.
func TestDocs_EveryIdemopsLineIsACommand(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../../README.md"}, files...)
	seen := map[string]bool{}
	checked := 0
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		inBlock := false
		for n, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inBlock = !inBlock
				continue
			}
			var texts []string
			if inBlock {
				texts = []string{line}
			} else {
				parts := strings.Split(line, "`")
				for i := 1; i < len(parts); i += 2 {
					texts = append(texts, parts[i])
				}
			}
			for _, text := range texts {
				m := docCommand.FindStringSubmatch(text)
				if m == nil || strings.TrimSpace(m[1]) == "" {
					continue // "idemops" as a word (a client id), not a command
				}
				where := filepath.Base(file) + ":" + itoa(n+1)
				for _, path := range docCommandPaths(t, where, m[1]) {
					if seen[path] {
						continue
					}
					seen[path] = true
					checked++
					out, err := runIdemops(t, append(strings.Fields(path), "--help")...)
					if err != nil || !strings.Contains(out, "Usage:") {
						t.Errorf("%s: idemops %s --help: %v\n%s", where, path, err, out)
					}
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d documented commands found: the scan is broken", checked)
	}
}

// docCommandPaths resolves the words after "idemops" to command paths ("keys search"), one per
// alternative, failing the test for a word that should name a subcommand and does not.
func docCommandPaths(t *testing.T, where, rest string) []string {
	t.Helper()
	root := newRoot()
	var paths []string
	for i, segment := range strings.Split(rest, " | ") {
		words := strings.Fields(segment)
		if i == 0 && (len(words) == 0 || !docCommandWord.MatchString(words[0])) {
			break // "idemops …" in prose: no command named
		}
		if i > 0 && (len(words) == 0 || !hasSubcommand(root, strings.Split(words[0], "|")[0])) {
			break // a pipe into another program
		}
		paths = append(paths, walkDocWords(t, where, root, nil, words)...)
	}
	return paths
}

func walkDocWords(t *testing.T, where string, c *cobra.Command, path, words []string) []string {
	t.Helper()
	if len(words) == 0 || !docCommandWord.MatchString(words[0]) || (!c.HasSubCommands() && len(path) > 0) {
		if len(path) == 0 {
			t.Errorf("%s: %q names no idemops command", where, strings.Join(words, " "))
		}
		return []string{strings.Join(path, " ")}
	}
	var out []string
	for _, alt := range strings.Split(words[0], "|") {
		sub, ok := subcommand(c, alt)
		if !ok {
			t.Errorf("%s: idemops %s has no subcommand %q", where, strings.Join(path, " "), alt)
			continue
		}
		out = append(out, walkDocWords(t, where, sub, append(append([]string(nil), path...), alt), words[1:])...)
	}
	return out
}

func subcommand(c *cobra.Command, name string) (*cobra.Command, bool) {
	for _, sub := range c.Commands() {
		if sub.Name() == name || sub.HasAlias(name) {
			return sub, true
		}
	}
	return nil, false
}

func hasSubcommand(c *cobra.Command, name string) bool {
	_, ok := subcommand(c, name)
	return ok
}

func itoa(n int) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return itoa(n/10) + digits[n%10:n%10+1]
}
