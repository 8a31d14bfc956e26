package templates

import (
	"context"
	_ "embed"
	"encoding/json"
	"strconv"
	"strings"

	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"golang.org/x/text/message/catalog"
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

// channelNames are the payment channels' names as their users know them.
var channelNames = map[string][2]string{
	"wechat": {"WeChat Pay", "微信支付"}, "wechatpay": {"WeChat Pay", "微信支付"}, "wxpay": {"WeChat Pay", "微信支付"},
	"alipay": {"Alipay", "支付宝"},
}

// channelName is a payment channel's name in the context's language ("wechat" → 微信支付 / WeChat
// Pay); a channel it does not know keeps its code.
func channelName(ctx context.Context, code string) string {
	n, ok := channelNames[strings.ToLower(code)]
	if !ok {
		return code
	}
	if zhCtx(ctx) {
		return n[1]
	}
	return n[0]
}

// groupDigits puts thousands separators into a plain decimal ("-1234567.50" → "-1,234,567.50").
func groupDigits(s string) string {
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	intPart, frac, hasFrac := strings.Cut(s, ".")
	if _, err := strconv.ParseUint(intPart, 10, 64); err != nil || len(intPart) <= 3 {
		return sign + s
	}
	var b strings.Builder
	for i, r := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if hasFrac {
		return sign + b.String() + "." + frac
	}
	return sign + b.String()
}

// LocalizeMoney rewrites an amount the money package displayed ("1234.50 CNY") for lang: digits
// grouped, and in Chinese the yuan written as such ("1,234.50 元"). Anything else (an unknown
// currency's minor units, an empty string) is returned unchanged.
func LocalizeMoney(lang, displayed string) string {
	amount, code, ok := strings.Cut(displayed, " ")
	if !ok || len(code) != 3 || strings.ToUpper(code) != code {
		return displayed
	}
	amount = groupDigits(amount)
	if lang == LangChinese && code == "CNY" {
		return amount + " 元"
	}
	return amount + " " + code
}

// money is LocalizeMoney for the context's language.
func money(ctx context.Context, displayed string) string {
	return LocalizeMoney(LangOf(ctx), displayed)
}
