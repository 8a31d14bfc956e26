package templates

import (
	"context"
	_ "embed"
	"encoding/json"
	"strings"

	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"golang.org/x/text/message/catalog"

	"github.com/idemops/idemops/money"
)

// The console speaks English and Simplified Chinese. Messages are keyed by their English text
// (gettext style): templates call t(ctx, "Keys"), and handlers may keep setting notices and errors
// in English, which the templates translate at render time. The catalog is
// locales/messages.json, one entry per message with both languages; golang.org/x/text/message
// does the lookup, the Accept-Language matching and the locale's number formatting.

// Language codes the console offers, as written in <html lang>, the operators table and the
// idemops_lang cookie.
const (
	LangEnglish = "en"
	LangChinese = "zh-CN"
)

// Langs are the offered languages, English first (the fallback).
var Langs = []string{LangEnglish, LangChinese}

var (
	tagEnglish = language.English
	tagChinese = language.MustParse(LangChinese)
	matcher    = language.NewMatcher([]language.Tag{tagEnglish, tagChinese})
)

// Message is one catalog entry: the English text (also its id) and its Chinese translation.
type Message struct {
	En   string `json:"en"`
	ZhCN string `json:"zh-CN"`
}

//go:embed locales/messages.json
var messagesJSON []byte

var (
	// Catalog is every entry of locales/messages.json, in file order.
	Catalog  []Message
	zh       = map[string]string{}
	printers = map[string]*message.Printer{}
)

func init() {
	if err := json.Unmarshal(messagesJSON, &Catalog); err != nil {
		panic("templates: locales/messages.json: " + err.Error())
	}
	b := catalog.NewBuilder(catalog.Fallback(tagEnglish))
	for _, m := range Catalog {
		zh[m.En] = m.ZhCN
		_ = b.SetString(tagChinese, m.En, m.ZhCN)
		_ = b.SetString(tagEnglish, m.En, m.En)
	}
	printers[LangEnglish] = message.NewPrinter(tagEnglish, message.Catalog(b))
	printers[LangChinese] = message.NewPrinter(tagChinese, message.Catalog(b))
}

// ParseLang reads an offered language code ("en", "zh-CN", case-insensitive, "zh" too); ok is
// false for anything else, including "" (no preference).
func ParseLang(s string) (code string, ok bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "en":
		return LangEnglish, true
	case "zh-cn", "zh", "zh-hans":
		return LangChinese, true
	}
	return "", false
}

// MatchAcceptLanguage picks the offered language an Accept-Language header prefers, English
// when it names none of them (or is empty or malformed).
func MatchAcceptLanguage(header string) string {
	tags, _, err := language.ParseAcceptLanguage(header)
	if err != nil || len(tags) == 0 {
		return LangEnglish
	}
	_, i, conf := matcher.Match(tags...)
	if conf == language.No {
		return LangEnglish
	}
	return Langs[i]
}

type langKey struct{}

// WithLang returns ctx carrying the language pages render in (an offered code; others mean en).
func WithLang(ctx context.Context, code string) context.Context {
	return context.WithValue(ctx, langKey{}, code)
}

// LangOf is the language ctx carries, English by default.
func LangOf(ctx context.Context) string {
	if code, ok := ctx.Value(langKey{}).(string); ok && code == LangChinese {
		return LangChinese
	}
	return LangEnglish
}

func zhCtx(ctx context.Context) bool { return LangOf(ctx) == LangChinese }

// Translate is s in lang: the catalog's Chinese for zh-CN when it has an entry, else s itself
// (English, or text such as a key or a tenant name that is not a message).
func Translate(lang, s string) string {
	if lang == LangChinese {
		if z, ok := zh[s]; ok && z != "" {
			return z
		}
	}
	return s
}

// t translates a message for the context's language; it is how templates write words.
func t(ctx context.Context, s string) string { return Translate(LangOf(ctx), s) }

// tf translates a format message and fills it in, numbers formatted for the language
// ("%d" groups digits): tf(ctx, "%d keys", n).
func tf(ctx context.Context, format string, args ...any) string {
	return printers[LangOf(ctx)].Sprintf(format, args...)
}

// num is an integer with the language's digit grouping (1,234,567).
func num(ctx context.Context, n int64) string {
	return printers[LangOf(ctx)].Sprint(n)
}

// numi is num of an int.
func numi(ctx context.Context, n int) string { return num(ctx, int64(n)) }

// channelKindNames are the payment channels' names as their users know them, by the kind of
// the channel account (reconcile.AccountKinds); a generic account has none.
var channelKindNames = map[string]string{"wechatpay_v3": "WeChat Pay", "alipay": "Alipay", "stripe": "Stripe", "adyen": "Adyen"}

// channelKindName is the name of a channel account's kind in the context's language, "" for a
// generic account (or an unknown kind).
func channelKindName(ctx context.Context, kind string) string {
	if n, ok := channelKindNames[kind]; ok {
		return t(ctx, n)
	}
	return ""
}

// amountText is an amount for people in the context's language, through the money package:
// digits grouped, the currency kept with the number by a no-break space so a line never splits
// them ("50,000 KRW", "1,234.50 USD"), in Chinese the yuan as 元 ("1,234.50 元"). An unknown
// currency is never guessed at: "42 minor units of "XX1"".
func amountText(ctx context.Context, minor int64, currency string) string {
	if _, ok := money.Exponent(currency); !ok {
		return tf(ctx, "%s minor units of %q", money.Grouped(minor, currency), currency)
	}
	unit := currency
	if currency == "CNY" && zhCtx(ctx) {
		unit = "元"
	}
	return money.Grouped(minor, currency) + "\u00a0" + unit
}

// displayedAmount reads back an amount the money package displayed ("1234.50 CNY"); ok is false
// for anything else.
func displayedAmount(displayed string) (minor int64, currency string, ok bool) {
	amount, code, found := strings.Cut(displayed, " ")
	if !found || !money.Known(code) {
		return 0, "", false
	}
	minor, err := money.Parse(amount, code)
	return minor, code, err == nil
}

// LocalizeMoney rewrites an amount the money package displayed ("1234.50 CNY") for lang, as
// amountText writes it; anything else is returned unchanged.
func LocalizeMoney(lang, displayed string) string {
	minor, code, ok := displayedAmount(displayed)
	if !ok {
		return displayed
	}
	return amountText(WithLang(context.Background(), lang), minor, code)
}
