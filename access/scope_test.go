package access

import "testing"

// Every kind of configuration names itself in a refusal (configNouns), or the refusal would read
// "  belongs to tenants you are not allowed".
func TestScope_EveryConfigKindHasANoun(t *testing.T) {
	for kind := range configKinds {
		if configNouns[kind].Format == "" {
			t.Errorf("config kind %s has no noun for its refusals", kind)
		}
	}
}
