package claim_test

import (
	"reflect"
	"testing"

	"github.com/idemops/idemops/claim"
)

func TestSummaryOf_ReadsOnlyDeclaredFieldsInOrder(t *testing.T) {
	spec := claim.IntentSpec{Summary: []string{"payee", "amount", "order.no", "absent"}}
	got := spec.SummaryOf([]byte(`{"amount":100,"payee":"Ann","card":"4111","order":{"no":"MO-1"}}`))
	want := []claim.SummaryField{{Path: "payee", Value: "Ann"}, {Path: "amount", Value: "100"}, {Path: "order.no", Value: "MO-1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SummaryOf = %v, want %v", got, want)
	}
	if got := (claim.IntentSpec{}).SummaryOf([]byte(`{"payee":"Ann"}`)); got != nil {
		t.Errorf("no declaration: %v, want none", got)
	}
	if got := spec.SummaryOf([]byte(`[1]`)); got != nil {
		t.Errorf("not an object: %v, want none", got)
	}
}
