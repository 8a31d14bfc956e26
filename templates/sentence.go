package templates

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/a-h/templ"
)

// ts translates a format message and fills it in as fmt does — no digit grouping, so ids and
// line numbers read as written ("replay request #12345"): ts(ctx, "line %d", n). A translation
// may reorder the arguments with explicit indexes (%[2]s).
func ts(ctx context.Context, format string, args ...any) string {
	return fmt.Sprintf(t(ctx, format), args...)
}

// sentence is one catalog sentence with markup inside it — a link, a code sample, a number in
// bold: the translation is looked up whole and each %s (or %[n]s, when the translation puts
// them in another order) is replaced by the part of that number, so no sentence is cut into
// pieces around its link. The text between the parts is escaped; "%%" is a percent sign.
func sentence(ctx context.Context, format string, parts ...templ.Component) templ.Component {
	return templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		s, next := t(ctx, format), 0
		for {
			i := strings.IndexByte(s, '%')
			if i < 0 {
				_, err := io.WriteString(w, templ.EscapeString(s))
				return err
			}
			if _, err := io.WriteString(w, templ.EscapeString(s[:i])); err != nil {
				return err
			}
			s = s[i+1:]
			if strings.HasPrefix(s, "%") {
				if _, err := io.WriteString(w, "%"); err != nil {
					return err
				}
				s = s[1:]
				continue
			}
			n := next
			if strings.HasPrefix(s, "[") {
				j := strings.IndexByte(s, ']')
				k, err := strconv.Atoi(s[1:max(j, 1)])
				if j < 0 || err != nil {
					return fmt.Errorf("sentence %q: bad argument index", format)
				}
				n, s = k-1, s[j+1:]
			}
			if !strings.HasPrefix(s, "s") || n < 0 || n >= len(parts) {
				return fmt.Errorf("sentence %q: %%s %d of %d parts", format, n+1, len(parts))
			}
			if err := parts[n].Render(ctx, w); err != nil {
				return err
			}
			s, next = s[1:], n+1
		}
	})
}
