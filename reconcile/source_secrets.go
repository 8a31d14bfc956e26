package reconcile

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/idemops/idemops/errs"
)

// A generic job's source URL may carry secrets: a token in its query, a user and password before
// its host (issue 35 item 5). They are kept apart from the source: sealed with the Keyring in
// recon_jobs.source_secret, with "***" written in their place in recon_jobs.source, so the
// source as stored, listed, audited and shown never holds them. Saving a source whose secret
// reads "***" keeps the secret saved before; the fetch puts the secrets back. Operators who are
// not * administrators are shown sources without their query and user info at all
// (RedactSource); * administrators see the query with its secrets as "***" (MaskSource).

// secretMark stands for a secret in a stored or shown source.
const secretMark = "***"

// secretParam matches query parameter names that carry secrets.
var secretParam = regexp.MustCompile(`(?i)(token|secret|key|sig|signature|password|passwd|pwd|auth|credential|session|access|bearer)`)

// sourceSecrets are a source's secrets by place: "userinfo", or "query:NAME".
type sourceSecrets map[string]string

func sourceSecretWhere(jobID int64) string { return fmt.Sprintf("recon_jobs|%d|source_secret", jobID) }

// splitSource takes the secrets out of an http(s) source: it returns the source with "***" in
// their place and the secrets found ("***" values are not secrets but references to saved
// ones, listed in refs). A file source has none.
func splitSource(src string) (public string, found sourceSecrets, refs []string) {
	if !isHTTPSource(src) {
		return src, nil, nil
	}
	found = sourceSecrets{}
	scheme, rest, _ := strings.Cut(src, "://")
	authority, path := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		if authority[:at] == secretMark {
			refs = append(refs, "userinfo")
		} else {
			found["userinfo"] = authority[:at]
		}
		authority = secretMark + "@" + authority[at+1:]
	}
	base, query, hasQuery := strings.Cut(path, "?")
	if hasQuery {
		query, frag, hasFrag := strings.Cut(query, "#")
		parts := strings.Split(query, "&")
		for i, p := range parts {
			name, value, ok := strings.Cut(p, "=")
			if !ok || !secretParam.MatchString(name) || value == "" {
				continue
			}
			if value == secretMark {
				refs = append(refs, "query:"+name)
			} else {
				found["query:"+name] = value
			}
			parts[i] = name + "=" + secretMark
		}
		base += "?" + strings.Join(parts, "&")
		if hasFrag {
			base += "#" + frag
		}
	}
	if len(found) == 0 {
		found = nil
	}
	return scheme + "://" + authority + base, found, refs
}

// joinSource puts a source's secrets back in place of their "***".
func joinSource(public string, secrets sourceSecrets) string {
	if len(secrets) == 0 || !isHTTPSource(public) {
		return public
	}
	scheme, rest, _ := strings.Cut(public, "://")
	authority, path := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	if ui, ok := secrets["userinfo"]; ok && strings.HasPrefix(authority, secretMark+"@") {
		authority = ui + "@" + strings.TrimPrefix(authority, secretMark+"@")
	}
	base, query, hasQuery := strings.Cut(path, "?")
	if hasQuery {
		query, frag, hasFrag := strings.Cut(query, "#")
		parts := strings.Split(query, "&")
		for i, p := range parts {
			name, value, _ := strings.Cut(p, "=")
			if v, ok := secrets["query:"+name]; ok && value == secretMark {
				parts[i] = name + "=" + v
			}
		}
		base += "?" + strings.Join(parts, "&")
		if hasFrag {
			base += "#" + frag
		}
	}
	return scheme + "://" + authority + base
}

// sealSourceSecrets seals a job's source secrets: previous are the job's saved ones (nil for a
// new job), which "***" in the source refers to. Errors: ErrInvalid naming the source.
func (r *Reconciler) sealSourceSecrets(jobID int64, found sourceSecrets, refs []string, previous sourceSecrets) ([]byte, error) {
	all := sourceSecrets{}
	for _, ref := range refs {
		v, ok := previous[ref]
		if !ok {
			return nil, invalidf("source", "*** stands for a secret of the saved source, and this job has none there")
		}
		all[ref] = v
	}
	for k, v := range found {
		all[k] = v
	}
	if len(all) == 0 {
		return nil, nil
	}
	if r.cfg.Keyring == nil {
		return nil, invalidf("source", "this deployment has no key to seal the source's secrets with")
	}
	b, _ := json.Marshal(all)
	return r.cfg.Keyring.Seal(b, sourceSecretWhere(jobID)), nil
}

// openSourceSecrets opens a job's sealed source secrets (nil when it has none).
func (r *Reconciler) openSourceSecrets(job *ReconJob) (sourceSecrets, error) {
	if len(job.sourceSecret) == 0 {
		return nil, nil
	}
	if r.cfg.Keyring == nil {
		return nil, fmt.Errorf("%w (this process has no keyring)", ErrSealed)
	}
	plain, _, err := r.cfg.Keyring.Open(job.sourceSecret, sourceSecretWhere(job.ID))
	if err != nil {
		return nil, err
	}
	var s sourceSecrets
	if err := json.Unmarshal(plain, &s); err != nil {
		return nil, fmt.Errorf("%w (the job's source secret is not JSON)", ErrSealed)
	}
	return s, nil
}

// jobSourceURL is a generic job's source for billDate with its secrets in place.
func (r *Reconciler) jobSourceURL(job *ReconJob, billDate string) (string, error) {
	secrets, err := r.openSourceSecrets(job)
	if err != nil {
		return "", errs.Errorf("%w: %s", ErrFetch, phraseOf(err))
	}
	return ExpandSource(joinSource(job.Source, secrets), billDate), nil
}

// MaskSource is a source as a * administrator is shown it: its secrets (even one stored before
// they were kept apart) as "***".
func MaskSource(src string) string {
	public, _, _ := splitSource(src)
	return public
}

// RedactSource is a source as anyone else is shown it: without its query and user info.
func RedactSource(src string) string {
	if !isHTTPSource(src) {
		return src
	}
	scheme, rest, _ := strings.Cut(src, "://")
	authority, path := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		authority = authority[at+1:]
	}
	base, _, hasQuery := strings.Cut(path, "?")
	base, _, _ = strings.Cut(base, "#")
	if hasQuery {
		base += "?…"
	}
	return scheme + "://" + authority + base
}
