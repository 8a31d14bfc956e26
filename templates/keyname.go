package templates

import "unicode/utf8"

// KeyName is a key as people know it: its tenant, operation and the client's key. Key is empty
// when the operator may not see the key (then only its id is shown). The key never goes into a
// URL: the link names the key by id.
type KeyName struct {
	ID                     int64
	Tenant, Operation, Key string
}

// keyShown is how many characters of a key a list shows before "…".
const keyShown = 24

// Href is the key's page.
func (k KeyName) Href() string { return "/keys/" + itoa(k.ID) }

// Short is the key truncated to keyShown characters (whole runes) with "…".
func (k KeyName) Short() string {
	if utf8.RuneCountInString(k.Key) <= keyShown {
		return k.Key
	}
	n := 0
	for i := range k.Key {
		if n == keyShown {
			return k.Key[:i] + "…"
		}
		n++
	}
	return k.Key
}
