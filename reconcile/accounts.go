package reconcile

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/idemops/idemops/errs"
)

// A channel account is the channel name recon jobs, statements, runs and findings carry (one
// merchant id at one channel). It belongs to a set of tenants (channel_accounts, migration
// 00016); everything reconciled under it inherits that set, and matching looks only at keys of
// those tenants. AllTenants ("*") is every tenant; a channel without a row is AllTenants only.

// AllTenants is the tenant entry that stands for every tenant.
const AllTenants = "*"

// ChannelAccount is one channel account and its tenants.
type ChannelAccount struct {
	Channel string   `json:"channel"`
	Tenants []string `json:"tenants"`
	// Kind is which fetcher gets its statements (KindGeneric, KindWechatPay, …) and Settings
	// what that fetcher needs that is not secret.
	Kind     string          `json:"kind"`
	Settings AccountSettings `json:"settings"`
	// Credentials are the account's secrets, described without their values (ChannelAccount
	// fills them; listings leave them nil).
	Credentials []CredentialInfo `json:"credentials,omitempty"`
	UpdatedAt   time.Time        `json:"updated_at"`
	UpdatedBy   string           `json:"updated_by"`
}

var tenantName = regexp.MustCompile(`^[^\x00-\x1f|,]{1,128}$`)

// NormalizeTenants validates a channel account's tenant list: 1–100 names without control
// characters, '|' or ','; "*" alone stands for every tenant. The result is sorted, without
// duplicates. Errors: ErrInvalid naming the field "tenants".
func NormalizeTenants(tenants []string) ([]string, error) {
	var out []string
	for _, t := range tenants {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if !tenantName.MatchString(t) {
			return nil, errs.Errorf("tenants: %q is not a tenant name: %w", truncateName(t), ErrInvalid)
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	switch {
	case len(out) == 0:
		return nil, errs.Errorf("tenants: name at least one tenant, or * for every tenant: %w", ErrInvalid)
	case len(out) > 100:
		return nil, errs.Errorf("tenants: at most 100 tenants per channel account: %w", ErrInvalid)
	case slices.Contains(out, AllTenants):
		return []string{AllTenants}, nil
	}
	sort.Strings(out)
	return out, nil
}

func truncateName(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func checkChannel(channel string) error {
	if channel == "" || len(channel) > 64 || strings.ContainsAny(channel, "\x00\r\n") {
		return errs.Errorf("channel: name the channel account (1–64 characters): %w", ErrInvalid)
	}
	return nil
}

// ChannelTenants returns the tenants of each of channels; a channel without an account row is
// AllTenants only. Served by the primary key.
func ChannelTenants(ctx context.Context, db *gorm.DB, channels []string) (map[string][]string, error) {
	out := make(map[string][]string, len(channels))
	for _, c := range channels {
		out[c] = []string{AllTenants}
	}
	if len(channels) == 0 {
		return out, nil
	}
	var rows []channelAccountModel
	if err := db.WithContext(ctx).Select("channel", "tenants").Where("channel IN ?", channels).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("channel tenants: %w", err)
	}
	for _, r := range rows {
		out[r.Channel] = r.Tenants
	}
	return out, nil
}

// ChannelTenants returns the tenants of one channel account (AllTenants only when it has none).
func (r *Reconciler) ChannelTenants(ctx context.Context, channel string) ([]string, error) {
	m, err := ChannelTenants(ctx, r.db, []string{channel})
	if err != nil {
		return nil, err
	}
	return m[channel], nil
}

// SetChannelTenants sets the tenants of a channel account on tx (the caller's transaction, so
// its audit row commits with it), creating the account when it has no row yet. Errors:
// ErrInvalid for a bad channel name or tenant list.
func SetChannelTenants(ctx context.Context, tx *gorm.DB, channel string, tenants []string, actor string) ([]string, error) {
	if err := checkChannel(channel); err != nil {
		return nil, err
	}
	tenants, err := NormalizeTenants(tenants)
	if err != nil {
		return nil, err
	}
	row := channelAccountModel{Channel: channel, Tenants: tenants, UpdatedBy: actor}
	if err := upsertAccount(ctx, tx, &row, "tenants"); err != nil {
		return nil, fmt.Errorf("set tenants of channel %s: %w", channel, err)
	}
	return tenants, nil
}

// upsertAccount creates the channel account row, or sets columns (and updated_by, updated_at)
// of the one that exists; the columns it does not name keep their defaults (kind generic, no
// settings) or their stored values.
func upsertAccount(ctx context.Context, tx *gorm.DB, row *channelAccountModel, columns ...string) error {
	set := clause.AssignmentColumns(append(slices.Clone(columns), "updated_by"))
	set = append(set, clause.Assignment{Column: clause.Column{Name: "updated_at"}, Value: gorm.Expr("now()")})
	insert := []string{"channel", "tenants", "updated_by"}
	for _, c := range columns {
		if !slices.Contains(insert, c) {
			insert = append(insert, c)
		}
	}
	return tx.WithContext(ctx).Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "channel"}}, DoUpdates: set}).
		Select(insert).Create(row).Error
}

// textArray writes a PostgreSQL text[] literal.
func textArray(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = `"` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`) + `"`
	}
	return "{" + strings.Join(q, ",") + "}"
}

// ListChannelAccounts returns every channel account with its tenants, by channel, including
// channels named by a recon job, statement or run that have no row yet (AllTenants only).
// Bounded to 1000.
func (r *Reconciler) ListChannelAccounts(ctx context.Context) ([]ChannelAccount, error) {
	var rows []struct {
		Channel   string
		Tenants   string
		Kind      string
		UpdatedAt *time.Time
		UpdatedBy *string
	}
	if err := r.db.WithContext(ctx).Raw(`SELECT c.channel, coalesce(array_to_string(a.tenants, '|'), '*') AS tenants,
		coalesce(a.kind, 'generic') AS kind, a.updated_at, a.updated_by
		FROM (SELECT channel FROM channel_accounts UNION SELECT channel FROM recon_jobs
		      UNION SELECT channel FROM statements UNION SELECT channel FROM recon_runs) c
		LEFT JOIN channel_accounts a ON a.channel = c.channel
		ORDER BY c.channel LIMIT 1000`).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("list channel accounts: %w", err)
	}
	out := make([]ChannelAccount, len(rows))
	for i, row := range rows {
		out[i] = ChannelAccount{Channel: row.Channel, Tenants: strings.Split(row.Tenants, "|"), Kind: row.Kind}
		if row.UpdatedAt != nil {
			out[i].UpdatedAt = *row.UpdatedAt
		}
		if row.UpdatedBy != nil {
			out[i].UpdatedBy = *row.UpdatedBy
		}
	}
	return out, nil
}

// ChannelKinds returns the kind of each named channel account that has one set (a channel
// without a row is generic, and absent from the map): how pages name a channel by what it is
// (a WeChat Pay account) rather than by what it was called. One query, bounded by the names.
func (r *Reconciler) ChannelKinds(ctx context.Context, channels []string) (map[string]string, error) {
	out := make(map[string]string, len(channels))
	if len(channels) == 0 {
		return out, nil
	}
	var rows []struct{ Channel, Kind string }
	if err := r.db.WithContext(ctx).Raw(`SELECT channel, kind FROM channel_accounts WHERE channel = ANY(?::text[])`,
		textArray(channels)).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("channel kinds: %w", err)
	}
	for _, row := range rows {
		out[row.Channel] = row.Kind
	}
	return out, nil
}
