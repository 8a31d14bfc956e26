package downstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/inputcheck"
)

// Config is an operations file.
type Config struct {
	// File is the path the config was loaded from; errors name it.
	File       string            `yaml:"-"`
	Operations []OperationConfig `yaml:"operations"`
}

// OperationConfig configures one HTTPOperation; the package doc shows every field.
type OperationConfig struct {
	Name      string         `yaml:"name"`
	Intent    IntentConfig   `yaml:"intent"`
	KeyHeader string         `yaml:"key_header"`
	Execute   ExecuteConfig  `yaml:"execute"`
	Lookup    LookupConfig   `yaml:"lookup"`
	Statuses  StatusConfig   `yaml:"statuses"`
	Timeouts  TimeoutConfig  `yaml:"timeouts"`
	Response  ResponseConfig `yaml:"response"`
	Redrive   bool           `yaml:"redrive"`
}

// IntentConfig says which request fields carry intent (see claim.IntentSpec).
type IntentConfig struct {
	Ignore        []string `yaml:"ignore"`
	Only          []string `yaml:"only"`
	AmountField   string   `yaml:"amount_field"`
	CurrencyField string   `yaml:"currency_field"`
	// NaturalKey is refused at load: a natural key is a claim.DomainKey on the domain's own
	// table (kept here only to name the field in that refusal).
	NaturalKey []string `yaml:"natural_key"`
}

// ExecuteConfig is the call that performs the action.
type ExecuteConfig struct {
	Method string `yaml:"method"`
	URL    string `yaml:"url"`
	// KeyField, when set, is a top-level body field set to the downstream key.
	KeyField string `yaml:"key_field"`
}

// LookupConfig is the read-only GET that finds the document under a downstream key.
type LookupConfig struct {
	URL string `yaml:"url"`
}

// StatusConfig sorts downstream HTTP statuses.
type StatusConfig struct {
	Found           []int `yaml:"found"`
	NotFound        []int `yaml:"not_found"`
	FailedFinal     []int `yaml:"failed_final"`
	FailedRetryable []int `yaml:"failed_retryable"`
}

// TimeoutConfig bounds each call.
type TimeoutConfig struct {
	Execute time.Duration `yaml:"execute"`
	Lookup  time.Duration `yaml:"lookup"`
}

// ResponseConfig says where things are in the downstream's response JSON.
type ResponseConfig struct {
	ResourceID    string   `yaml:"resource_id"`
	Status        string   `yaml:"status"`
	FailedValues  []string `yaml:"failed_values"`
	FailureStatus int      `yaml:"failure_status"`
}

// Defaults and limits of an OperationConfig.
const (
	DefaultKeyHeader      = "Idempotency-Key"
	DefaultExecuteTimeout = 10 * time.Second
	DefaultLookupTimeout  = 5 * time.Second
	maxTimeout            = 5 * time.Minute
	maxConfigBytes        = 1 << 20
	placeholder           = "{downstream_key}"
)

var (
	defaultFound           = []int{200, 201}
	defaultNotFound        = []int{404}
	defaultFailedFinal     = []int{400, 402, 403, 409, 422}
	defaultFailedRetryable = []int{408, 425, 429, 500, 502, 503, 504}
)

// LoadConfig reads and validates an operations file. Any problem is a *ConfigError naming
// the file, the field and the problem; nothing is half-loaded.
func LoadConfig(path string) (*Config, error) {
	data, err := inputcheck.ReadFile(path, maxConfigBytes)
	if err != nil {
		return nil, &ConfigError{File: path, Problem: err.Error()}
	}
	return ParseConfig(path, data)
}

// ParseConfig validates an operations file's contents; name is used in errors.
func ParseConfig(name string, data []byte) (*Config, error) {
	fail := func(err *ConfigError) (*Config, error) {
		err.File = name
		return nil, err
	}
	cfg := &Config{File: name}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true) // an unknown field is an error, as a repeated one always is
	if err := dec.Decode(cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return fail(configErr("operations", "must list at least one operation (the file is empty)"))
		}
		return fail(configErr("", "%s", yamlProblem(err)))
	}
	cfg.File = name
	if len(cfg.Operations) == 0 {
		return fail(configErr("operations", "must list at least one operation"))
	}
	seen := map[string]int{}
	for i := range cfg.Operations {
		oc := &cfg.Operations[i]
		if err := oc.normalize(); err != nil {
			err.Field = fmt.Sprintf("operations[%d].%s", i, err.Field)
			return fail(err)
		}
		if j, dup := seen[oc.Name]; dup {
			return fail(configErr(fmt.Sprintf("operations[%d].name", i), "%q is already defined by operations[%d]", oc.Name, j))
		}
		seen[oc.Name] = i
	}
	return cfg, nil
}

var headerToken = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
var placeholders = regexp.MustCompile(`\{[^{}]*\}`)

// normalize fills the defaults and validates; the error's Field is relative to the operation.
func (oc *OperationConfig) normalize() *ConfigError {
	switch {
	case oc.Name == "":
		return configErr("name", "required")
	case len(oc.Name) > 128:
		return configErr("name", "longer than 128 characters")
	case strings.ContainsAny(oc.Name, "|\x00\r\n"):
		return configErr("name", "must not contain '|' or control characters")
	}
	for _, list := range []struct {
		name  string
		items []string
	}{{"intent.ignore", oc.Intent.Ignore}, {"intent.only", oc.Intent.Only}, {"intent.natural_key", oc.Intent.NaturalKey}} {
		for j, s := range list.items {
			if strings.TrimSpace(s) == "" {
				return configErr(fmt.Sprintf("%s[%d]", list.name, j), "must not be empty")
			}
		}
	}
	spec := claim.IntentSpec{Ignore: oc.Intent.Ignore, Only: oc.Intent.Only, AmountField: oc.Intent.AmountField,
		CurrencyField: oc.Intent.CurrencyField}
	if fe := (*errs.FieldError)(nil); errors.As(spec.Check(), &fe) {
		return configErr("intent."+fe.Name, "%s", fe.Why.String())
	}
	if len(oc.Intent.NaturalKey) > 0 {
		return configErr("intent.natural_key", "is not supported: a natural key is a unique constraint on the domain table "+
			"(claim.DomainKey), which outlives any purge of the keys table and is freed by the business undo; put it on the "+
			"downstream's table and send a client idempotency key here")
	}
	if oc.KeyHeader == "" {
		oc.KeyHeader = DefaultKeyHeader
	}
	if !headerToken.MatchString(oc.KeyHeader) {
		return configErr("key_header", "%q is not a valid HTTP header name", oc.KeyHeader)
	}
	if oc.Execute.Method == "" {
		oc.Execute.Method = http.MethodPost
	}
	oc.Execute.Method = strings.ToUpper(oc.Execute.Method)
	if !slices.Contains([]string{http.MethodPost, http.MethodPut, http.MethodPatch}, oc.Execute.Method) {
		return configErr("execute.method", "must be POST, PUT or PATCH, got %q", oc.Execute.Method)
	}
	if err := checkURL("execute.url", oc.Execute.URL, false); err != nil {
		return err
	}
	if err := checkURL("lookup.url", oc.Lookup.URL, true); err != nil {
		return err
	}
	if err := oc.Statuses.normalize(); err != nil {
		return err
	}
	for _, t := range []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{{"timeouts.execute", &oc.Timeouts.Execute, DefaultExecuteTimeout}, {"timeouts.lookup", &oc.Timeouts.Lookup, DefaultLookupTimeout}} {
		if *t.d == 0 {
			*t.d = t.def
		}
		if *t.d < time.Millisecond || *t.d > maxTimeout {
			return configErr(t.name, "must be between 1ms and %v, got %v", maxTimeout, *t.d)
		}
	}
	switch r := &oc.Response; {
	case r.ResourceID == "":
		return configErr("response.resource_id", "required: the dotted path of the resource id in the response JSON")
	case len(r.FailedValues) > 0 && r.Status == "":
		return configErr("response.failed_values", "needs response.status, the path of the value to compare")
	case r.FailureStatus == 0:
		r.FailureStatus = http.StatusBadRequest
	case r.FailureStatus < 400 || r.FailureStatus > 599:
		return configErr("response.failure_status", "must be an HTTP error status (400-599), got %d", r.FailureStatus)
	}
	return nil
}

func checkURL(field, raw string, needKey bool) *ConfigError {
	if raw == "" {
		return configErr(field, "required")
	}
	for _, p := range placeholders.FindAllString(raw, -1) {
		if p != placeholder {
			return configErr(field, "unknown placeholder %s (only %s is replaced)", p, placeholder)
		}
	}
	if needKey && !strings.Contains(raw, placeholder) {
		return configErr(field, "must contain %s", placeholder)
	}
	u, err := url.Parse(strings.ReplaceAll(raw, placeholder, "k"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return configErr(field, "must be an absolute http or https URL, got %q", raw)
	}
	return nil
}

func (s *StatusConfig) normalize() *ConfigError {
	lists := []struct {
		name string
		l    *[]int
		def  []int
	}{
		{"found", &s.Found, defaultFound}, {"not_found", &s.NotFound, defaultNotFound},
		{"failed_final", &s.FailedFinal, defaultFailedFinal}, {"failed_retryable", &s.FailedRetryable, defaultFailedRetryable},
	}
	// A list left out takes its default, minus the codes the lists written out claim.
	explicit := map[int]bool{}
	for _, list := range lists {
		for _, code := range *list.l {
			explicit[code] = true
		}
	}
	for _, list := range lists {
		if *list.l == nil {
			*list.l = slices.DeleteFunc(slices.Clone(list.def), func(c int) bool { return explicit[c] })
		}
	}
	owner := map[int]string{}
	for _, list := range lists {
		for j, code := range *list.l {
			field := fmt.Sprintf("statuses.%s[%d]", list.name, j)
			if code < 100 || code > 599 {
				return configErr(field, "must be an HTTP status between 100 and 599, got %d", code)
			}
			if other, dup := owner[code]; dup {
				return configErr(field, "%d is also listed in statuses.%s", code, other)
			}
			owner[code] = list.name
		}
	}
	if len(s.Found) == 0 {
		return configErr("statuses.found", "must not be empty")
	}
	return nil
}

var (
	yamlUnknown   = regexp.MustCompile(`^(line \d+): field (\S+) not found in type \S+$`)
	yamlDuplicate = regexp.MustCompile(`^(line \d+): mapping key "(.*)" already defined at (line \d+)$`)
	yamlType      = regexp.MustCompile("^(line \\d+): cannot unmarshal !!(\\w+) (?:`(.*)` )?into (\\S+)$")
)

// yamlKinds says in words what each Go type of the config needs.
var yamlKinds = map[string]string{
	"int": "an integer", "bool": "true or false", "string": "a string", "time.Duration": "a duration like 5s",
}

// yamlProblem turns a yaml error into one line starting with the line number. yaml.TypeError
// lists every problem on lines of its own; the first is reported, in words, with the field where
// yaml names it.
func yamlProblem(err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return strings.TrimPrefix(strings.ReplaceAll(err.Error(), "\n", "; "), "yaml: ")
	}
	s := strings.TrimSpace(te.Errors[0])
	if m := yamlUnknown.FindStringSubmatch(s); m != nil {
		return fmt.Sprintf("%s: unknown field %s", m[1], m[2])
	}
	if m := yamlDuplicate.FindStringSubmatch(s); m != nil {
		return fmt.Sprintf("%s: field %s appears twice (first at %s)", m[1], m[2], m[3])
	}
	if m := yamlType.FindStringSubmatch(s); m != nil {
		want, ok := yamlKinds[m[4]]
		switch {
		case strings.HasPrefix(m[4], "[]"):
			want, ok = "a list", true
		case strings.HasPrefix(m[4], "downstream."):
			want, ok = "a mapping", true
		}
		if ok {
			got := "a " + m[2]
			if m[3] != "" {
				got = strconv.Quote(m[3])
			}
			return fmt.Sprintf("%s: must be %s, got %s", m[1], want, got)
		}
	}
	return s
}
