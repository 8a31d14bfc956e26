package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/idemops/idemops/errs"
)

// Statement sources are on an allow-list (issue 35 item 1): a recon job's source, a channel
// account's API base, every redirect and every download URL a channel answers with must be an
// origin the deployment names, and the address it resolves to must not be loopback, private,
// link-local, multicast or unspecified unless the allow-list names that exact address. A job's
// source is checked when the job is saved (an error naming the rule) and again at every fetch;
// the dialer checks the address it actually connects to, so a name that resolves elsewhere
// later (DNS rebinding) is refused at the connection. Local files are read only under a
// configured root, and only * administrators may point a job at one.

// SourcePolicy is where statements may be fetched from.
type SourcePolicy struct {
	// Allow are origins (scheme://host[:port]) besides DefaultSourceAllow: the demo's paysim,
	// a test server. An origin whose host is an IP address is the only way to reach a
	// loopback or private address.
	Allow []string
	// FileRoot is the directory file sources must be under; "" refuses every file source.
	FileRoot string
}

// ErrSourceRefused: a source the policy refuses (its text names the rule).
var ErrSourceRefused = errs.New(errs.Forbidden, "refused by the statement-source policy")

type sourcePolicy struct {
	origins   map[string]bool // normalized scheme://host:port
	hostPorts map[string]bool // host:port of every origin: what the dialer may connect to
	fileRoot  string          // cleaned, symlinks resolved; "" for none
	// lookup resolves a name (net.DefaultResolver's; tests make names resolve elsewhere).
	lookup func(ctx context.Context, host string) ([]net.IPAddr, error)
}

func newSourcePolicy(sp SourcePolicy) (*sourcePolicy, error) {
	p := &sourcePolicy{origins: map[string]bool{}, hostPorts: map[string]bool{}, lookup: net.DefaultResolver.LookupIPAddr}
	for _, o := range append(append([]string{}, DefaultSourceAllow...), sp.Allow...) {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return nil, fmt.Errorf("reconcile: source allow-list: %q is not an origin (scheme://host[:port])", o)
		}
		origin, hostPort, err := normalizeOrigin(u)
		if err != nil {
			return nil, fmt.Errorf("reconcile: source allow-list: %q: %v", o, err)
		}
		p.origins[origin] = true
		p.hostPorts[hostPort] = true
	}
	if sp.FileRoot != "" {
		root, err := filepath.Abs(sp.FileRoot)
		if err != nil {
			return nil, fmt.Errorf("reconcile: file source root %q: %v", sp.FileRoot, err)
		}
		if real, err := filepath.EvalSymlinks(root); err == nil {
			root = real
		} else if !isNotExist(err) {
			return nil, fmt.Errorf("reconcile: file source root %q: %v", sp.FileRoot, err)
		}
		p.fileRoot = root // a root that does not exist yet holds no file yet
	}
	return p, nil
}

// normalizeOrigin is u's scheme://host:port with the port always written, and its host:port.
// Hosts written as numbers other than a dotted quad or a plain IPv6 address (2130706433,
// 0x7f000001, 0177.1, 127.1, ::ffff:127.0.0.1) are refused: resolvers read them as addresses
// the allow-list would not recognise.
func normalizeOrigin(u *url.URL) (origin, hostPort string, err error) {
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", "", fmt.Errorf("only http and https are fetched")
	}
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return "", "", fmt.Errorf("no host")
	}
	if ambiguousHost(host) {
		return "", "", fmt.Errorf("the host %q is a number that is not a plain IP address", host)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", "", fmt.Errorf("port %q", port)
	}
	hostPort = net.JoinHostPort(host, port)
	return scheme + "://" + hostPort, hostPort, nil
}

// ambiguousHost: a host that is all digits, dots, x and hex letters in number-like labels but
// not a canonical IPv4 address, or an IPv6 address that embeds an IPv4 one.
func ambiguousHost(h string) bool {
	if ip := net.ParseIP(h); ip != nil {
		if strings.Contains(h, ":") && strings.Contains(h, ".") {
			return true // ::ffff:127.0.0.1 and the like
		}
		if ip.To4() != nil && !strings.Contains(h, ":") {
			return ip.String() != h // 127.000.0.1
		}
		return strings.HasPrefix(h, "::ffff:") || strings.Contains(h, "::ffff:")
	}
	labels := strings.Split(h, ".")
	numeric := true
	for _, l := range labels {
		if l == "" {
			continue
		}
		s := strings.TrimPrefix(l, "0x")
		if s == "" {
			continue
		}
		if _, err := strconv.ParseUint(s, 16, 64); err != nil {
			numeric = false
			break
		}
		if s == l && !isDigits(l) { // hex letters without 0x: a name like "cafe" or "dead.beef"
			numeric = false
			break
		}
	}
	return numeric
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// allowURL checks an http(s) URL against the allow-list. Errors: ErrSourceRefused naming the
// rule.
func (p *sourcePolicy) allowURL(u *url.URL) error {
	origin, _, err := normalizeOrigin(u)
	if err != nil {
		return errs.Errorf("%w: %s", ErrSourceRefused, errs.Verbatim(err.Error()))
	}
	if !p.origins[origin] {
		return errs.Errorf("%w: %s is not on the statement-source allow-list (--recon-source-allow)", ErrSourceRefused, origin)
	}
	return nil
}

// checkSource checks a job's source pattern with a sample date: an allowed http(s) origin, or a
// path under the file root. Errors: an *errs.FieldError on "source" naming the rule.
func (p *sourcePolicy) checkSource(src string) error {
	sample := ExpandSource(src, "2006-01-02")
	if isHTTPSource(sample) {
		u, err := url.Parse(sample)
		if err != nil || u.Host == "" {
			return invalidf("source", "%q is not a valid URL template", RedactSource(src))
		}
		if err := p.allowURL(u); err != nil {
			return invalidWhy("source", phraseOf(err))
		}
		return nil
	}
	if strings.Contains(sample, "://") {
		return invalidf("source", "only http(s) URLs and file paths are sources")
	}
	if _, err := p.filePath(sample); err != nil {
		return invalidWhy("source", phraseOf(err))
	}
	return nil
}

// filePath checks a local path is under the file root and returns it absolute and cleaned; a
// path that exists is checked again with its symlinks resolved. Errors: ErrSourceRefused.
func (p *sourcePolicy) filePath(path string) (string, error) {
	if p.fileRoot == "" {
		return "", errs.Errorf("%w: file sources are off (set --recon-file-root)", ErrSourceRefused)
	}
	if !filepath.IsAbs(path) {
		return "", errs.Errorf("%w: a file source must be an absolute path under the file root", ErrSourceRefused)
	}
	clean := filepath.Clean(path)
	if !within(p.fileRoot, clean) {
		return "", errs.Errorf("%w: file sources must be under the file root (--recon-file-root)", ErrSourceRefused)
	}
	if real, err := filepath.EvalSymlinks(clean); err == nil && !within(p.fileRoot, real) {
		return "", errs.Errorf("%w: file sources must be under the file root (--recon-file-root)", ErrSourceRefused)
	} else if err == nil {
		clean = real
	}
	return clean, nil
}

func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// specialAddr says why an address must not be reached through a name: "" for a public one.
func specialAddr(ip net.IP) string {
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "link-local"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	case ip.IsPrivate():
		return "private"
	case ip.Equal(net.IPv4bcast), len(ip) == net.IPv4len && ip[0] == 0:
		return "unspecified"
	case len(ip) == net.IPv4len && ip[0] == 100 && ip[1]&0xc0 == 64:
		return "private" // 100.64.0.0/10, carrier-grade NAT
	}
	return ""
}

// dialContext connects only to host:port pairs of the allow-list, at an address it resolved
// and checked itself: a loopback, private, link-local, multicast or unspecified address only
// when the allow-list names that address (or localhost) itself. It never dials a name, so what
// was checked is what is connected to.
func (p *sourcePolicy) dialContext(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		host = strings.ToLower(host)
		if !p.hostPorts[net.JoinHostPort(host, port)] {
			return nil, errs.Errorf("%w: %s is not on the statement-source allow-list (--recon-source-allow)", ErrSourceRefused, addr)
		}
		literal := net.ParseIP(host)
		var ips []net.IP
		if literal != nil {
			ips = []net.IP{literal}
		} else {
			addrs, err := p.lookup(ctx, host)
			if err != nil {
				return nil, err
			}
			for _, a := range addrs {
				ips = append(ips, a.IP)
			}
		}
		var lastErr error
		for _, ip := range ips {
			if why := specialAddr(ip); why != "" && literal == nil && !(host == "localhost" && ip.IsLoopback()) {
				lastErr = errs.Errorf("%w: %s resolves to a %s address", ErrSourceRefused, host, why)
				continue
			}
			conn, err := d.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
			if err == nil {
				return conn, nil
			}
			lastErr = err
		}
		if lastErr == nil {
			lastErr = fmt.Errorf("%s resolves to no address", host)
		}
		return nil, lastErr
	}
}

// maxRedirects bounds how many redirects one fetch follows.
const maxRedirects = 3

// client is the HTTP client every fetch goes through: no proxy from the environment (a proxy
// would connect for us, unchecked), the guarded dialer, each redirect checked against the
// allow-list.
func (p *sourcePolicy) client(timeout time.Duration, base http.RoundTripper) *http.Client {
	if base == nil {
		d := &net.Dialer{Timeout: 15 * time.Second, KeepAlive: 30 * time.Second}
		base = &http.Transport{Proxy: nil, DialContext: p.dialContext(d), ForceAttemptHTTP2: true, MaxIdleConns: 16,
			IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 15 * time.Second, ResponseHeaderTimeout: timeout,
			MaxResponseHeaderBytes: 64 << 10}
	}
	return &http.Client{Timeout: timeout, Transport: base, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirects {
			return errs.Errorf("%w: more than %d redirects", ErrSourceRefused, maxRedirects)
		}
		return p.allowURL(req.URL)
	}}
}

// readError turns a failure to read a source into the generic line an operator is shown —
// refused, timed out, unreachable, HTTP status — never a dial error naming addresses and ports.
// what names the source (an origin, a channel's API). The detailed error goes to the log.
func (r *Reconciler) readError(what string, err error) error {
	// unwrapURL: net/url's frame names the whole URL, query (and a token in it) included.
	r.cfg.Logger.Warn("reconcile: statement source could not be read", "source", what, "err", unwrapURL(err))
	var ue *url.Error
	switch {
	case errors.Is(err, ErrSourceRefused):
		return errs.Errorf("%w: the source could not be read: refused (%s)", ErrFetch, phraseOf(unwrapURL(err)))
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ue) && ue.Timeout():
		return errs.Errorf("%w: the source could not be read: timed out (%s)", ErrNotReady, what)
	case errors.Is(err, context.Canceled):
		return errs.Errorf("%w: the source could not be read: cancelled (%s)", ErrFetch, what)
	}
	return errs.Errorf("%w: the source could not be read: unreachable (%s)", ErrNotReady, what)
}

// unwrapURL drops net/url's "Get URL:" frame, which names the whole URL and its query.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// phraseOf is an error's text as a phrase (its own when it has one).
func phraseOf(err error) errs.Phrase {
	var p errs.Phrased
	if errors.As(err, &p) {
		return p.Phrasing()
	}
	return errs.Verbatim(err.Error())
}

// isNotExist reports a missing file.
func isNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }
