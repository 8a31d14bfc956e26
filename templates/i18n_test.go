package templates

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	templparser "github.com/a-h/templ/parser/v2"
)

// Every catalog entry has both languages, is there once, and keeps the format verbs of its
// English text (a lost %d would print %!d(MISSING) in Chinese).
func TestCatalog_EveryEntryHasBothLanguages(t *testing.T) {
	if len(Catalog) < 100 {
		t.Fatalf("catalog has %d entries; locales/messages.json did not load", len(Catalog))
	}
	seen := map[string]bool{}
	verbs := regexp.MustCompile(`%[-+# 0-9.\[\]]*[a-zA-Z%]`)
	for i, m := range Catalog {
		if strings.TrimSpace(m.En) == "" || strings.TrimSpace(m.ZhCN) == "" {
			t.Errorf("entry %d (%q / %q) lacks a language", i, m.En, m.ZhCN)
		}
		if seen[m.En] {
			t.Errorf("entry %d: %q is in the catalog twice", i, m.En)
		}
		seen[m.En] = true
		if m.ZhCN == m.En && hasLetter(verbs.ReplaceAllString(m.En, "")) { // "%s" alone is no word
			t.Errorf("entry %d: %q is not translated (zh-CN equals en)", i, m.En)
		}
		en, zh := verbKinds(verbs.FindAllString(m.En, -1)), verbKinds(verbs.FindAllString(m.ZhCN, -1))
		if en != zh {
			t.Errorf("entry %d: %q has verbs %v but zh-CN %q has %v", i, m.En, en, m.ZhCN, zh)
		}
	}
}

// verbKinds is the distinct conversions of a message's verbs ("%[2]d" and "%d" are both d): a
// translation may reorder arguments (explicit indexes) or use one twice, not change its kind.
func verbKinds(vs []string) string {
	set := map[string]bool{}
	for _, v := range vs {
		set[v[len(v)-1:]] = true
	}
	var out []string
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, "")
}

// Every message the templates and their helpers ask for by literal — t(ctx, "…"), tf(ctx, "…"),
// ts(ctx, "…"), sentence(ctx, "…") and the msg("…") marker — is in the catalog.
func TestCatalog_CoversEveryLiteralMessage(t *testing.T) {
	for _, key := range literalMessages(t) {
		if _, ok := zh[key.text]; !ok {
			t.Errorf("%s: %q has no catalog entry", key.at, key.text)
		}
	}
}

type literal struct{ at, text string }

// literalMessages reads the message literals from the .templ sources and the hand-written .go
// files of this package.
func literalMessages(t *testing.T) []literal {
	t.Helper()
	var out []literal
	call := regexp.MustCompile(`\b(?:t|tf|ts|msg|sentence)\(ctx, ("(?:[^"\\]|\\.)*"|` + "`[^`]*`" + `)`)
	files, _ := filepath.Glob("*.templ")
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			s, err := strconv.Unquote(m[1])
			if err != nil {
				t.Fatalf("%s: %s: %v", f, m[1], err)
			}
			out = append(out, literal{f, s})
		}
	}
	gofiles, _ := filepath.Glob("*.go")
	for _, f := range gofiles {
		if strings.HasSuffix(f, "_templ.go") || strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			c, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			id, ok := c.Fun.(*ast.Ident)
			if !ok || (id.Name != "t" && id.Name != "tf" && id.Name != "ts" && id.Name != "msg" && id.Name != "sentence") || len(c.Args) < 2 {
				return true
			}
			if lit, ok := c.Args[1].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, _ := strconv.Unquote(lit.Value)
				out = append(out, literal{f, s})
			}
			return true
		})
	}
	if len(out) < 50 {
		t.Fatalf("found only %d message literals; the scan is broken", len(out))
	}
	return out
}

// allowedLiterals are words and symbols a template may write untranslated: the product's name,
// abbreviations the same in both languages, and the language switch, which names each language
// in itself (and its title in that language).
var allowedLiterals = map[string]bool{"idemops": true, "HTTP": true, "SSO": true, "ISO": true, "PID": true, "EUR": true, "v": true,
	"English": true, "中文": true, "Show": true, "the": true, "console": true, "in": true, "以中文显示控制台": true}

// userAttributes are the attributes people read (or hear from a screen reader).
var userAttributes = map[string]bool{"title": true, "aria-label": true, "placeholder": true, "alt": true, "label": true, "aria-description": true}

func hasLetter(s string) bool {
	for _, r := range s {
		if unicode.IsLetter(r) {
			return true
		}
	}
	return false
}

// exampleValue is a placeholder that shows the syntax of a value rather than words: "key:42",
// "payment.charge", "72h".
func exampleValue(s string) bool {
	return !strings.ContainsAny(s, " ") && strings.ContainsAny(s, ":._/*0123456789…,")
}

// untranslated reports whether a literal a template writes would reach a reader in English.
func untranslated(s string) bool {
	for _, w := range strings.FieldsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) }) {
		if !allowedLiterals[w] {
			return true
		}
	}
	return false
}

// No template writes a user-visible word as a literal: text between tags and the attributes
// people read (title, aria-label, placeholder, alt) go through t/tf. Symbols (—, ·, →, …),
// numbers, the allow-list, code samples (<code>, <pre>, <kbd>, <samp>) and placeholders that
// show a value's syntax ("key:42", "72h") pass.
func TestTemplates_HoldNoUntranslatedLiteral(t *testing.T) {
	files, _ := filepath.Glob("*.templ")
	checked := 0
	for _, f := range files {
		tf, err := templparser.Parse(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var walk func(n templparser.Node, code bool)
		walkAttr := func(a templparser.Attribute) {
			ca, ok := a.(*templparser.ConstantAttribute)
			if !ok || !userAttributes[ca.Key.String()] {
				return
			}
			if ca.Key.String() == "placeholder" && exampleValue(ca.Value) {
				return
			}
			if untranslated(ca.Value) {
				t.Errorf("%s:%d: attribute %s=%q is an untranslated literal", f, ca.Range.From.Line+1, ca.Key, ca.Value)
			}
		}
		walk = func(n templparser.Node, code bool) {
			switch n := n.(type) {
			case *templparser.Text:
				if !code && untranslated(n.Value) {
					t.Errorf("%s:%d: text %q is an untranslated literal", f, n.Range.From.Line+1, strings.TrimSpace(n.Value))
				}
			case *templparser.Element:
				checked++
				for _, a := range n.Attributes {
					if c, ok := a.(*templparser.ConditionalAttribute); ok {
						for _, a := range append(append([]templparser.Attribute{}, c.Then...), c.Else...) {
							walkAttr(a)
						}
						continue
					}
					walkAttr(a)
				}
				code := code || n.Name == "code" || n.Name == "pre" || n.Name == "kbd" || n.Name == "samp"
				for _, c := range n.Children {
					walk(c, code)
				}
			case *templparser.IfExpression:
				for _, c := range n.Then {
					walk(c, code)
				}
				for _, e := range n.ElseIfs {
					for _, c := range e.Then {
						walk(c, code)
					}
				}
				for _, c := range n.Else {
					walk(c, code)
				}
			case templparser.CompositeNode:
				for _, c := range n.ChildNodes() {
					walk(c, code)
				}
			}
		}
		for _, n := range tf.Nodes {
			if h, ok := n.(*templparser.HTMLTemplate); ok {
				for _, c := range h.Children {
					walk(c, false)
				}
			}
		}
	}
	if checked < 500 {
		t.Fatalf("checked only %d elements; the scan is broken", checked)
	}
}

func TestTranslate_FallsBackToEnglish(t *testing.T) {
	if got := Translate(LangChinese, "no such message 42"); got != "no such message 42" {
		t.Fatalf("unknown message = %q", got)
	}
	if got := t2(LangChinese, "Keys"); got == "Keys" || got == "" {
		t.Fatalf("Keys in zh-CN = %q", got)
	}
	if got := t2(LangEnglish, "Keys"); got != "Keys" {
		t.Fatalf("Keys in en = %q", got)
	}
}

func t2(lang, s string) string { return t(WithLang(context.Background(), lang), s) }

func TestMatchAcceptLanguage(t *testing.T) {
	for h, want := range map[string]string{
		"":                           LangEnglish,
		"zh-CN,zh;q=0.9,en;q=0.8":    LangChinese,
		"zh":                         LangChinese,
		"en-US,en;q=0.9":             LangEnglish,
		"fr-FR":                      LangEnglish,
		"de;q=0.9, zh-Hans-CN;q=0.8": LangChinese,
		"en;q=0.5, zh-CN;q=0.9":      LangChinese,
		"not a header;;;q=x":         LangEnglish,
	} {
		if got := MatchAcceptLanguage(h); got != want {
			t.Errorf("MatchAcceptLanguage(%q) = %q, want %q", h, got, want)
		}
	}
}

func TestLocalizeMoney(t *testing.T) {
	for _, c := range []struct{ lang, in, want string }{
		{LangEnglish, "1234567.50 CNY", "1,234,567.50\u00a0CNY"},
		{LangChinese, "1234567.50 CNY", "1,234,567.50\u00a0元"},
		{LangChinese, "-0.05 EUR", "-0.05\u00a0EUR"},
		{LangChinese, "1000000 JPY", "1,000,000\u00a0JPY"},
		{LangEnglish, "50000 KRW", "50,000\u00a0KRW"},
		{LangEnglish, `42 minor units of "XX1"`, `42 minor units of "XX1"`},
		{LangEnglish, "", ""},
	} {
		if got := LocalizeMoney(c.lang, c.in); got != c.want {
			t.Errorf("LocalizeMoney(%s, %q) = %q, want %q", c.lang, c.in, got, c.want)
		}
	}
}

// Format messages fill in their arguments in each language's order, numbers grouped.
func TestTf_FillsArgumentsPerLanguage(t *testing.T) {
	zhCtx, enCtx := WithLang(context.Background(), LangChinese), WithLang(context.Background(), LangEnglish)
	if got, want := tf(zhCtx, "line %d of the statement run %d matched", 7, 3), "对账运行 3 所匹配对账单的第 7 行"; got != want {
		t.Errorf("zh = %q, want %q", got, want)
	}
	if got, want := tf(enCtx, "line %d of the statement run %d matched", 7, 3), "line 7 of the statement run 3 matched"; got != want {
		t.Errorf("en = %q, want %q", got, want)
	}
	if got, want := tf(zhCtx, "(last hour, %d in all)", 12345), "（最近一小时，共 12,345 次）"; got != want {
		t.Errorf("zh number = %q, want %q", got, want)
	}
	if got, want := channelKindName(zhCtx, "wechatpay_v3")+"/"+channelKindName(zhCtx, "alipay")+"/"+channelKindName(enCtx, "alipay")+"/"+channelKindName(zhCtx, "generic"), "微信支付/支付宝/Alipay/"; got != want {
		t.Errorf("channel names = %q, want %q", got, want)
	}
	if got := ago(zhCtx, time.Now().Add(-90*time.Second)); got != "1 分钟前" {
		t.Errorf("ago in zh = %q", got)
	}
	if got := whenIn(zhCtx, time.Date(2026, 12, 3, 15, 4, 5, 0, time.UTC)); got != "2026年12月3日 15:04:05 UTC" {
		t.Errorf("whenIn zh = %q", got)
	}
}

// Every translation filled in with arguments for its English verbs, in their order, uses each
// argument once with a verb of its kind: no %!d(string=…), no %!(EXTRA …), no %!s(MISSING) —
// a translation that reorders its arguments says so with explicit indexes (%[2]s).
func TestCatalog_TranslationsTakeTheEnglishArguments(t *testing.T) {
	verbs := regexp.MustCompile(`%[-+# 0-9.]*[a-zA-Z%]`)
	for i, m := range Catalog {
		if strings.Contains(m.En, "%[") {
			continue // the English itself indexes its arguments
		}
		var args []any
		for _, v := range verbs.FindAllString(m.En, -1) {
			switch v[len(v)-1] {
			case '%':
			case 'd':
				args = append(args, 7)
			default:
				args = append(args, "x")
			}
		}
		if len(args) == 0 {
			continue
		}
		for _, s := range []string{m.En, m.ZhCN} {
			if got := fmt.Sprintf(s, args...); strings.Contains(got, "%!") {
				t.Errorf("entry %d: %q with the English arguments gives %q", i, s, got)
			}
		}
	}
}

// A sentence with markup inside is one catalog entry: its parts go where the language puts
// them (the Chinese here reorders them with %[n]s), and the words around them are escaped.
func TestSentence_PutsItsPartsWhereTheLanguageSaysInOneEntry(t *testing.T) {
	render := func(lang string) string {
		var b strings.Builder
		ctx := WithLang(context.Background(), lang)
		err := sentence(ctx, "%s keys picked on the %s. Nothing is stored or sent until you start it.",
			text("12"), link("/keys?state=failed_final", "mono", Translate(lang, "search"))).Render(ctx, &b)
		if err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	if got, want := render(LangEnglish), `12 keys picked on the <a href="/keys?state=failed_final" class="mono">search</a>. Nothing is stored or sent until you start it.`; got != want {
		t.Errorf("en = %q\nwant %q", got, want)
	}
	if got, want := render(LangChinese), `从<a href="/keys?state=failed_final" class="mono">搜索</a>中选出的 12 个幂等键。在您启动之前，不会保存或发送任何内容。`; got != want {
		t.Errorf("zh-CN = %q\nwant %q", got, want)
	}
	var b strings.Builder
	if err := sentence(context.Background(), "a <b> %s and %s", text("x")).Render(context.Background(), &b); err == nil {
		t.Errorf("a sentence with a placeholder but no part rendered %q", b.String())
	}
	b.Reset()
	_ = sentence(context.Background(), "100%% <b>%s</b>", code("x")).Render(context.Background(), &b)
	if got, want := b.String(), `100% &lt;b&gt;<code>x</code>&lt;/b&gt;`; got != want {
		t.Errorf("escaping = %q, want %q", got, want)
	}
}

// No table header cell is empty (axe-core's empty-table-header): a column of buttons or badges
// is named for screen readers with a visually-hidden label, in the page's language.
func TestTemplates_NoEmptyTableHeader(t *testing.T) {
	empty := regexp.MustCompile(`<th(?:\s[^>]*)?>\s*</th>`)
	files, _ := filepath.Glob("*.templ")
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, loc := range empty.FindAllIndex(src, -1) {
			t.Errorf("%s:%d: empty table header %s", f, 1+strings.Count(string(src[:loc[0]]), "\n"), src[loc[0]:loc[1]])
		}
	}
}

// Ids and line numbers are written as they are (ts), counts grouped for reading (tf).
func TestTs_WritesIdsWithoutGrouping(t *testing.T) {
	ctx := WithLang(context.Background(), LangChinese)
	if got, want := ts(ctx, "key #%d", 12345), "幂等键 #12345"; got != want {
		t.Errorf("ts = %q, want %q", got, want)
	}
	if got, want := ts(ctx, "Line %d of statement #%d", 1234, 56), "对账单 #56 第 1234 行"; got != want {
		t.Errorf("ts reordered = %q, want %q", got, want)
	}
	if got, want := tf(ctx, "(last hour, %d in all)", 12345), "（最近一小时，共 12,345 次）"; got != want {
		t.Errorf("tf = %q, want %q", got, want)
	}
}
