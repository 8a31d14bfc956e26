package downstream_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/downstream"
)

// baseOps is a valid operations file; the error cases below each break one field of it.
const baseOps = `operations:
  - name: payment.charge
    execute:
      url: http://127.0.0.1:8090/charges
    lookup:
      url: http://127.0.0.1:8090/charges/{downstream_key}
    response:
      resource_id: id
`

// variant replaces old with new in baseOps (pairs).
func variant(t *testing.T, pairs ...string) string {
	t.Helper()
	s := baseOps
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("baseOps lacks %q", pairs[i])
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return s
}

func TestLoadConfig_EachBadFieldIsNamed(t *testing.T) {
	t.Parallel()
	const rid = "    response:\n      resource_id: id\n"
	cases := []struct {
		name, yaml, want string
	}{
		{"lookup url lacks the key", variant(t, "/charges/{downstream_key}", "/charges"),
			"operations[0].lookup.url: must contain {downstream_key}"},
		{"lookup url missing", variant(t, "    lookup:\n      url: http://127.0.0.1:8090/charges/{downstream_key}\n", ""),
			"operations[0].lookup.url: required"},
		{"execute url relative", variant(t, "url: http://127.0.0.1:8090/charges\n", "url: /charges\n"),
			`operations[0].execute.url: must be an absolute http or https URL, got "/charges"`},
		{"unknown placeholder", variant(t, "url: http://127.0.0.1:8090/charges\n", "url: http://127.0.0.1:8090/charges/{id}\n"),
			"operations[0].execute.url: unknown placeholder {id} (only {downstream_key} is replaced)"},
		{"execute method", variant(t, "    execute:\n", "    execute:\n      method: GET\n"),
			`operations[0].execute.method: must be POST, PUT or PATCH, got "GET"`},
		{"name missing", variant(t, "  - name: payment.charge\n    execute", "  - execute"),
			"operations[0].name: required"},
		{"name with a bar", variant(t, "name: payment.charge", "name: a|b"),
			"operations[0].name: must not contain '|' or control characters"},
		{"duplicate name", baseOps + strings.TrimPrefix(baseOps, "operations:\n"),
			`operations[1].name: "payment.charge" is already defined by operations[0]`},
		{"natural key in the keys table", variant(t, rid, rid+"    intent:\n      natural_key: [user_id, article_id]\n"),
			"operations[0].intent.natural_key: is not supported: a natural key is a unique constraint on the domain table (claim.DomainKey), which outlives any purge of the keys table and is freed by the business undo; put it on the downstream's table and send a client idempotency key here"},
		{"ignores the payee", variant(t, rid, rid+"    intent:\n      ignore: [trace_id, payee]\n"),
			"operations[0].intent.ignore[1]: payee carries intent (amount, currency, payee, items and quantities always count); it cannot be ignored"},
		{"ignores a nested quantity", variant(t, rid, rid+"    intent:\n      ignore: [items.qty]\n"),
			"operations[0].intent.ignore[0]: items.qty carries intent (amount, currency, payee, items and quantities always count); it cannot be ignored"},
		{"ignores the declared amount", variant(t, rid, rid+"    intent:\n      amount_field: total_minor\n      ignore: [total_minor]\n"),
			"operations[0].intent.ignore[0]: total_minor carries intent (amount, currency, payee, items and quantities always count); it cannot be ignored"},
		{"only without the declared currency", variant(t, rid, rid+"    intent:\n      currency_field: ccy\n      only: [amount_minor, payee]\n"),
			"operations[0].intent.only: must keep ccy, the declared currency field"},
		{"key header", variant(t, rid, rid+"    key_header: Idem Key\n"),
			`operations[0].key_header: "Idem Key" is not a valid HTTP header name`},
		{"status out of range", variant(t, rid, rid+"    statuses:\n      found: [200, 42]\n"),
			"operations[0].statuses.found[1]: must be an HTTP status between 100 and 599, got 42"},
		{"status listed twice", variant(t, rid, rid+"    statuses:\n      not_found: [404]\n      failed_final: [404]\n"),
			"operations[0].statuses.failed_final[0]: 404 is also listed in statuses.not_found"},
		{"found empty", variant(t, rid, rid+"    statuses:\n      found: []\n"),
			"operations[0].statuses.found: must not be empty"},
		{"status not an integer", variant(t, rid, rid+"    statuses:\n      found: [ok]\n"),
			`line 10: must be an integer, got "ok"`},
		{"statuses not a list", variant(t, rid, rid+"    statuses:\n      found: 200\n"),
			`line 10: must be a list, got "200"`},
		{"timeout not a duration", variant(t, rid, rid+"    timeouts:\n      execute: ten\n"),
			`line 10: must be a duration like 5s, got "ten"`},
		{"timeout too long", variant(t, rid, rid+"    timeouts:\n      lookup: 1h\n"),
			"operations[0].timeouts.lookup: must be between 1ms and 5m0s, got 1h0m0s"},
		{"resource id missing", variant(t, rid, "    response:\n      status: status\n"),
			"operations[0].response.resource_id: required: the dotted path of the resource id in the response JSON"},
		{"failed values without status", variant(t, rid, rid+"      failed_values: [failed]\n"),
			"operations[0].response.failed_values: needs response.status, the path of the value to compare"},
		{"failure status not an error", variant(t, rid, rid+"      failure_status: 200\n"),
			"operations[0].response.failure_status: must be an HTTP error status (400-599), got 200"},
		{"empty ignore entry", variant(t, rid, rid+"    intent:\n      ignore: [client_ts, \"\"]\n"),
			"operations[0].intent.ignore[1]: must not be empty"},
		{"unknown field", variant(t, rid, rid+"    lookup_method: GET\n"),
			"line 9: unknown field lookup_method"},
		{"field twice", variant(t, rid, rid+"    name: again\n"),
			"line 9: field name appears twice (first at line 2)"},
		{"redrive not a bool", variant(t, rid, rid+"    redrive: sometimes\n"),
			`line 9: must be true or false, got "sometimes"`},
		{"no operations", "operations: []\n", "operations: must list at least one operation"},
		{"empty file", "", "operations: must list at least one operation (the file is empty)"},
		{"operations not a list", "operations: {}\n", "line 1: must be a list, got a map"},
		{"not yaml", "operations:\n  - name: [\n", "line 2: did not find expected node content"},
	}
	dir := t.TempDir()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := downstream.LoadConfig(path)
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.yaml)
			}
			if !errors.Is(err, downstream.ErrInvalidConfig) {
				t.Errorf("error %v does not wrap ErrInvalidConfig", err)
			}
			if want := path + ": " + tc.want; err.Error() != want {
				t.Errorf("error\n got %s\nwant %s", err, want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestLoadConfig_MissingFileNamesIt(t *testing.T) {
	t.Parallel()
	_, err := downstream.LoadConfig("no/such/ops.yaml")
	if err == nil || err.Error() != "no/such/ops.yaml: no such file or directory" {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadConfig_FillsDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := downstream.ParseConfig("ops.yaml", []byte(variant(t,
		"    response:\n      resource_id: id\n",
		"    response:\n      resource_id: data.id\n    statuses:\n      found: [200, 201, 409]\n    intent:\n      ignore: [client_ts]\n      amount_field: amount_minor\n")))
	if err != nil {
		t.Fatal(err)
	}
	oc := cfg.Operations[0]
	switch {
	case oc.KeyHeader != "Idempotency-Key", oc.Execute.Method != "POST",
		oc.Timeouts.Execute != 10*time.Second, oc.Timeouts.Lookup != 5*time.Second,
		oc.Response.FailureStatus != 400, oc.Response.ResourceID != "data.id":
		t.Fatalf("defaults not filled: %+v", oc)
	case !slices.Equal(oc.Statuses.NotFound, []int{404}):
		t.Fatalf("not_found = %v", oc.Statuses.NotFound)
	case slices.Contains(oc.Statuses.FailedFinal, 409):
		t.Fatalf("409 is claimed by found but stayed in the default failed_final: %v", oc.Statuses.FailedFinal)
	case !slices.Equal(oc.Intent.Ignore, []string{"client_ts"}) || oc.Intent.AmountField != "amount_minor":
		t.Fatalf("intent = %+v", oc.Intent)
	}
}
