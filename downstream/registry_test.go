package downstream_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/idemops/idemops/downstream"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestRegistry_RegisterGetNames(t *testing.T) {
	t.Parallel()
	r := downstream.NewRegistry()
	charge := downstream.NewPaysimCharge(nil)
	other := mustHTTPOp(t, "order.create")
	if err := r.Register(charge); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(other); err != nil {
		t.Fatal(err)
	}
	if got := r.Names(); !slices.Equal(got, []string{"order.create", "payment.charge"}) {
		t.Fatalf("names = %v", got)
	}
	op, err := r.Get("payment.charge")
	if err != nil || op != charge {
		t.Fatalf("get = %v, %v", op, err)
	}
	if _, err := r.Get("nope"); !errors.Is(err, downstream.ErrUnknownOperation) {
		t.Fatalf("unknown: %v", err)
	}
}

func TestRegistry_DuplicateNameIsAnError(t *testing.T) {
	t.Parallel()
	r := downstream.NewRegistry()
	if err := r.Register(downstream.NewPaysimCharge(nil)); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(downstream.NewPaysimCharge(nil)); !errors.Is(err, downstream.ErrDuplicateOperation) {
		t.Fatalf("second register: %v, want ErrDuplicateOperation", err)
	}
	cfg, err := downstream.ParseConfig("ops.yaml", []byte(`
operations:
  - name: refund.create
    execute: {url: "http://127.0.0.1:1/r"}
    lookup: {url: "http://127.0.0.1:1/r/{downstream_key}"}
    response: {resource_id: id}
  - name: payment.charge
    execute: {url: "http://127.0.0.1:1/c"}
    lookup: {url: "http://127.0.0.1:1/c/{downstream_key}"}
    response: {resource_id: id}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterConfig(cfg, nil); !errors.Is(err, downstream.ErrDuplicateOperation) {
		t.Fatalf("config clashing with a registered name: %v", err)
	}
	if slices.Contains(r.Names(), "refund.create") {
		t.Fatal("a failed RegisterConfig registered part of the file")
	}
}

func mustHTTPOp(t *testing.T, name string) *downstream.HTTPOperation {
	t.Helper()
	op, err := downstream.NewHTTPOperation(downstream.OperationConfig{
		Name:     name,
		Execute:  downstream.ExecuteConfig{URL: "http://127.0.0.1:1/x"},
		Lookup:   downstream.LookupConfig{URL: "http://127.0.0.1:1/x/{downstream_key}"},
		Response: downstream.ResponseConfig{ResourceID: "id"},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return op
}
