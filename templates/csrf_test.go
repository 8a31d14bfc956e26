package templates

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCSRFField_RendersTheHiddenToken(t *testing.T) {
	var b strings.Builder
	if err := CSRFField(`tok"en`).Render(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), `<input type="hidden" name="csrf" value="tok&#34;en">`; got != want {
		t.Fatalf("CSRFField = %s, want %s", got, want)
	}
}

// Every POST form in every template carries the token through the one component, and no
// template writes the hidden input by hand.
func TestTemplates_EveryPostFormUsesTheCSRFComponent(t *testing.T) {
	files, _ := filepath.Glob("*.templ")
	forms := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := string(src)
		if f != "csrf.templ" && strings.Contains(s, `name="csrf"`) {
			t.Errorf("%s writes the csrf input by hand; use @CSRFField", f)
		}
		for _, chunk := range strings.Split(s, "<form")[1:] {
			form, _, _ := strings.Cut(chunk, "</form>")
			if !strings.Contains(strings.SplitN(form, ">", 2)[0], `method="post"`) {
				continue
			}
			forms++
			if !strings.Contains(form, "@CSRFField(") {
				t.Errorf("%s: a POST form has no @CSRFField: <form%s", f, strings.SplitN(form, "\n", 2)[0])
			}
		}
	}
	if forms < 30 {
		t.Fatalf("found only %d POST forms; the scan is broken", forms)
	}
}
