// Package mqtest gives tests the RabbitMQ broker named by AMQP_URL — `make test` (cmd/withpg)
// starts one private broker for the whole run — and a name prefix per test, so that tests
// sharing the broker never see each other's queues and exchanges.
package mqtest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// URL returns AMQP_URL. Without it the test is skipped with one line, or fails under CI=true.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("AMQP_URL")
	if u == "" {
		t.Fatal("mqtest: AMQP_URL is unset; run the tests through `make test` (cmd/withpg starts a private broker)")
	}
	return u
}

var unsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// Prefix is a name prefix unique to this test run of t: "t.<test name>.<random>.".
func Prefix(t testing.TB) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := unsafe.ReplaceAllString(t.Name(), "_")
	if len(name) > 80 {
		name = name[:80]
	}
	return "t." + strings.ToLower(name) + "." + hex.EncodeToString(b) + "."
}

// Dial connects to the test broker and closes the connection when the test ends.
func Dial(t testing.TB) *amqp.Connection {
	t.Helper()
	conn, err := amqp.DialConfig(URL(t), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Fatalf("mqtest: dial %s: %v", os.Getenv("AMQP_URL"), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
