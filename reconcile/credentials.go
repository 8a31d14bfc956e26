package reconcile

import (
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/idemops/idemops/chanproto"
	"github.com/idemops/idemops/errs"
)

// Channel credentials are the secrets a channel account's fetcher signs or authenticates with:
// WeChat Pay's merchant private key (labelled with its certificate's serial), Alipay's
// application private key, Stripe's secret key, Adyen's API key or report user and password.
// They are saved by * administrators only (the console's rule), sealed with the Keyring (or
// kept as the name of a file read at each fetch), and never given back: a listing shows each
// one's name, label, a short digest and who saved it when. Replacing one is one statement, so a
// rotation has no moment without a valid key; the channel-side keys (WeChat Pay's platform
// certificates) are settings, several at once during their rotation.

// CredentialInfo describes a saved credential without its value.
type CredentialInfo struct {
	Name  string `json:"name"`
	Label string `json:"label,omitempty"`
	// File is the file the value is read from ("" when it is stored sealed).
	File string `json:"file,omitempty"`
	// Digest is the first 12 hex digits of the value's SHA-256 (of the file's name for a file):
	// enough to tell two values apart, nothing to guess one from.
	Digest    string    `json:"digest"`
	KeyID     string    `json:"key_id,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
	UpdatedBy string    `json:"updated_by"`
}

// CredentialInput is a credential to save: its value, or the absolute path of a file holding
// it, and the label the channel knows it by.
type CredentialInput struct {
	Value string `json:"value,omitempty"`
	File  string `json:"file,omitempty"`
	Label string `json:"label,omitempty"`
}

// credentialWhere binds a sealed credential to its row.
func credentialWhere(channel, name string) string {
	return "channel_credentials|" + channel + "|" + name
}

func secretDigest(v []byte) string {
	sum := sha256.Sum256(v)
	return hex.EncodeToString(sum[:6])
}

// SetCredential saves credential name of channel's account on tx (the caller's transaction, so
// its audit row commits with it). The account must exist with a kind that takes that
// credential. Errors: ErrInvalid (naming the field; also when the deployment has no keyring to
// seal a value with), ErrNotFound (no account).
func (r *Reconciler) SetCredential(ctx context.Context, tx *gorm.DB, channel, name string, in CredentialInput, actor string) (*CredentialInfo, error) {
	kind, err := accountKind(ctx, tx, channel)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(KindCredentials(kind), name) {
		if len(KindCredentials(kind)) == 0 {
			return nil, invalidf("credential", "a %s account takes no credentials", kind)
		}
		return nil, invalidf("credential", "a %s account takes %s", kind, strings.Join(KindCredentials(kind), ", "))
	}
	if len(in.Label) > 128 || strings.ContainsAny(in.Label, "\x00\r\n") {
		return nil, invalidf("label", "at most 128 characters on one line")
	}
	info := &CredentialInfo{Name: name, Label: strings.TrimSpace(in.Label), UpdatedBy: actor}
	var sealed []byte
	var file *string
	switch {
	case in.Value != "" && in.File != "":
		return nil, invalidf("value", "give the value or a file, not both")
	case in.File != "":
		path := filepath.Clean(in.File)
		if !filepath.IsAbs(path) || len(path) > 1024 || !utf8.ValidString(path) {
			return nil, invalidf("file", "an absolute path")
		}
		if _, err := os.Stat(path); err != nil {
			return nil, invalidf("file", "%s cannot be read by this process", path)
		}
		file, info.File, info.Digest = &path, path, secretDigest([]byte(path))
	case in.Value != "":
		if len(in.Value) > 16<<10 || !utf8.ValidString(in.Value) || strings.ContainsRune(in.Value, 0) {
			return nil, invalidf("value", "at most 16 KiB of text")
		}
		if r.cfg.Keyring == nil {
			return nil, invalidf("value", "this deployment has no key to seal credentials with; name a file instead")
		}
		if err := checkCredential(name, in.Value); err != nil {
			return nil, err
		}
		sealed = r.cfg.Keyring.Seal([]byte(in.Value), credentialWhere(channel, name))
		info.Digest, info.KeyID = secretDigest([]byte(in.Value)), r.cfg.Keyring.KeyID()
	default:
		return nil, invalidf("value", "give the credential's value, or the file that holds it")
	}
	err = tx.WithContext(ctx).Raw(`INSERT INTO channel_credentials (channel, name, label, sealed, file, key_id, digest, updated_by)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (channel, name) DO UPDATE SET label = EXCLUDED.label, sealed = EXCLUDED.sealed, file = EXCLUDED.file,
			key_id = EXCLUDED.key_id, digest = EXCLUDED.digest, updated_by = EXCLUDED.updated_by, updated_at = now()
		RETURNING updated_at`, channel, name, info.Label, sealed, file, info.KeyID, info.Digest, actor).Scan(&info.UpdatedAt).Error
	if err != nil {
		return nil, fmt.Errorf("save credential %s of %s: %w", name, channel, err)
	}
	return info, nil
}

// checkCredential refuses a value that cannot be what its name says, before it is sealed away
// where nobody can look at it again.
func checkCredential(name, v string) error {
	switch name {
	case CredMerchantPrivateKey, CredAppPrivateKey:
		if _, err := chanproto.ParsePrivateKey([]byte(v)); err != nil {
			return invalidf("value", "not an RSA private key in PEM (PKCS #8 or PKCS #1)")
		}
	case CredSecretKey:
		if !strings.HasPrefix(v, "sk_") && !strings.HasPrefix(v, "rk_") {
			return invalidf("value", "a Stripe secret key starts sk_ (or rk_ for a restricted one)")
		}
	}
	return nil
}

// DeleteCredential removes a credential (none is no error: the outcome is the same).
func DeleteCredential(ctx context.Context, tx *gorm.DB, channel, name string) error {
	if err := tx.WithContext(ctx).Exec(`DELETE FROM channel_credentials WHERE channel = ? AND name = ?`, channel, name).Error; err != nil {
		return fmt.Errorf("delete credential: %w", err)
	}
	return nil
}

// Credentials lists an account's credentials, without their values.
func (r *Reconciler) Credentials(ctx context.Context, channel string) ([]CredentialInfo, error) {
	var rows []struct {
		Name, Label, KeyID, Digest, UpdatedBy string
		File                                  *string
		UpdatedAt                             time.Time
	}
	if err := r.db.WithContext(ctx).Raw(`SELECT name, label, key_id, digest, updated_by, file, updated_at
		FROM channel_credentials WHERE channel = ? ORDER BY name`, channel).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("credentials of %s: %w", channel, err)
	}
	out := make([]CredentialInfo, len(rows))
	for i, row := range rows {
		out[i] = CredentialInfo{Name: row.Name, Label: row.Label, KeyID: row.KeyID, Digest: row.Digest,
			UpdatedAt: row.UpdatedAt, UpdatedBy: row.UpdatedBy}
		if row.File != nil {
			out[i].File = *row.File
		}
	}
	return out, nil
}

// credential opens one credential for a fetch: its value and label. Errors: ErrFetch naming the
// missing credential, ErrSealed.
func (r *Reconciler) credential(ctx context.Context, channel, name string) (value []byte, label string, err error) {
	var rows []struct {
		Label  string
		Sealed []byte
		File   *string
	}
	if err := r.db.WithContext(ctx).Raw(`SELECT label, sealed, file FROM channel_credentials WHERE channel = ? AND name = ?`,
		channel, name).Scan(&rows).Error; err != nil {
		return nil, "", fmt.Errorf("credential %s of %s: %w", name, channel, err)
	}
	if len(rows) == 0 {
		return nil, "", errs.Errorf("%w: the channel account %s has no %s credential", ErrFetch, channel, name)
	}
	row := rows[0]
	if row.File != nil {
		b, err := os.ReadFile(*row.File)
		if err != nil {
			r.cfg.Logger.Warn("reconcile: credential file", "channel", channel, "credential", name, "err", err)
			return nil, "", errs.Errorf("%w: the %s credential's file cannot be read", ErrFetch, name)
		}
		return b, row.Label, nil
	}
	if r.cfg.Keyring == nil {
		return nil, "", fmt.Errorf("%w (this process has no keyring)", ErrSealed)
	}
	plain, _, err := r.cfg.Keyring.Open(row.Sealed, credentialWhere(channel, name))
	if err != nil {
		return nil, "", err
	}
	return plain, row.Label, nil
}

// privateKey is the channel's RSA private key credential name, with its label (a WeChat Pay
// merchant certificate's serial). ErrFetch when the credential is not an RSA private key.
func (r *Reconciler) privateKey(ctx context.Context, channel, name string) (*rsa.PrivateKey, string, error) {
	pemKey, label, err := r.credential(ctx, channel, name)
	if err != nil {
		return nil, "", err
	}
	key, err := chanproto.ParsePrivateKey(pemKey)
	if err != nil {
		return nil, "", errs.Errorf("%w: the %s credential is not an RSA private key", ErrFetch, name)
	}
	return key, label, nil
}

// RekeyCredentials seals again, under the keyring's current key, every credential and job
// source secret sealed under a previous one: after it, the previous deployment secret can go.
// It returns how many values it sealed again.
func (r *Reconciler) RekeyCredentials(ctx context.Context) (int, error) {
	k := r.cfg.Keyring
	if k == nil {
		return 0, nil
	}
	n := 0
	err := r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var creds []struct {
			Channel, Name string
			Sealed        []byte
		}
		if err := tx.Raw(`SELECT channel, name, sealed FROM channel_credentials WHERE sealed IS NOT NULL AND key_id <> ?
			ORDER BY channel, name LIMIT 10000 FOR UPDATE`, k.KeyID()).Scan(&creds).Error; err != nil {
			return err
		}
		for _, c := range creds {
			where := credentialWhere(c.Channel, c.Name)
			plain, _, err := k.Open(c.Sealed, where)
			if err != nil {
				return fmt.Errorf("credential %s of %s: %w", c.Name, c.Channel, err)
			}
			if err := tx.Exec(`UPDATE channel_credentials SET sealed = ?, key_id = ? WHERE channel = ? AND name = ?`,
				k.Seal(plain, where), k.KeyID(), c.Channel, c.Name).Error; err != nil {
				return err
			}
			n++
		}
		var jobs []struct {
			ID           int64
			SourceSecret []byte
		}
		if err := tx.Raw(`SELECT id, source_secret FROM recon_jobs WHERE source_secret IS NOT NULL ORDER BY id LIMIT 10000 FOR UPDATE`).
			Scan(&jobs).Error; err != nil {
			return err
		}
		for _, j := range jobs {
			where := sourceSecretWhere(j.ID)
			plain, id, err := k.Open(j.SourceSecret, where)
			if err != nil {
				return fmt.Errorf("recon job %d's source secret: %w", j.ID, err)
			}
			if id == k.KeyID() {
				continue
			}
			if err := tx.Model(&reconJobModel{ID: j.ID}).Update("source_secret", k.Seal(plain, where)).Error; err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("rekey credentials: %w", err)
	}
	return n, nil
}

// accountKind is a channel account's kind. Errors: ErrNotFound (no account row).
func accountKind(ctx context.Context, tx *gorm.DB, channel string) (string, error) {
	var kinds []string
	if err := tx.WithContext(ctx).Model(&channelAccountModel{}).Where("channel = ?", channel).Pluck("kind", &kinds).Error; err != nil {
		return "", fmt.Errorf("channel account %s: %w", channel, err)
	}
	if len(kinds) == 0 {
		return "", fmt.Errorf("channel account %q: %w", channel, ErrNotFound)
	}
	return kinds[0], nil
}

// SetChannelSettings sets a channel account's kind and settings on tx, creating the account
// ("*" only) when it has no row yet. Credentials the new kind does not take are removed.
// Errors: ErrInvalid naming the setting.
func (r *Reconciler) SetChannelSettings(ctx context.Context, tx *gorm.DB, channel, kind string, s AccountSettings, actor string) (*AccountSettings, error) {
	if err := checkChannel(channel); err != nil {
		return nil, err
	}
	if err := r.sources.validateSettings(kind, &s); err != nil {
		return nil, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	row := channelAccountModel{Channel: channel, Tenants: textList{AllTenants}, Kind: kind, Settings: string(b), UpdatedBy: actor}
	if err := upsertAccount(ctx, tx, &row, "kind", "settings"); err != nil {
		return nil, fmt.Errorf("set settings of channel %s: %w", channel, err)
	}
	keep := append([]string{""}, KindCredentials(kind)...)
	if err := tx.WithContext(ctx).Exec(`DELETE FROM channel_credentials WHERE channel = ? AND name <> ALL (?::text[])`,
		channel, textArray(keep)).Error; err != nil {
		return nil, err
	}
	return &s, nil
}

// channelAccount reads one account's kind and settings (a channel without a row is generic).
func (r *Reconciler) channelAccount(ctx context.Context, channel string) (*ChannelAccount, error) {
	m, err := ChannelTenants(ctx, r.db, []string{channel})
	if err != nil {
		return nil, err
	}
	a := &ChannelAccount{Channel: channel, Tenants: m[channel], Kind: KindGeneric}
	var rows []channelAccountModel
	if err := r.db.WithContext(ctx).Select("kind", "settings").Where("channel = ?", channel).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("channel account %s: %w", channel, err)
	}
	if len(rows) == 1 {
		a.Kind = rows[0].Kind
		if err := json.Unmarshal([]byte(rows[0].Settings), &a.Settings); err != nil {
			return nil, fmt.Errorf("channel account %s settings: %w", channel, err)
		}
	}
	return a, nil
}

// ChannelAccount reads one channel account with its kind, settings and credentials (without
// their values).
func (r *Reconciler) ChannelAccount(ctx context.Context, channel string) (*ChannelAccount, error) {
	a, err := r.channelAccount(ctx, channel)
	if err != nil {
		return nil, err
	}
	if a.Credentials, err = r.Credentials(ctx, channel); err != nil {
		return nil, err
	}
	return a, nil
}
