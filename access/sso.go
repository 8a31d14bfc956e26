package access

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/errs"
)

// Single sign-on decides who a person is from the identity provider's verified email and what
// they may do from one of two places, in this order:
//  1. the group mapping: when the token's groups claim holds a mapped group, the operator named
//     by the email is created or brought in line with the mapping (highest mapped role, union of
//     mapped tenants) — the mapping is authoritative for such people;
//  2. otherwise the existing operator whose name is the email (case-insensitive), with its own
//     role and tenants.
//
// Anyone else is refused. The console runs the OpenID Connect flow and asks SignInSSO.

// GroupGrant is what one mapped group gives.
type GroupGrant struct {
	Role    Role
	Tenants []string
}

// GroupMap maps an identity provider's groups to what they grant.
type GroupMap map[string]GroupGrant

// ParseGroupMap reads "group=role:tenants;group=role:tenants", tenants comma-separated or "*",
// e.g. "idemops-admins=admin:*;finance-acme=viewer:acme,globex".
func ParseGroupMap(s string) (GroupMap, error) {
	out := GroupMap{}
	for _, entry := range strings.Split(s, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		group, grant, ok := strings.Cut(entry, "=")
		role, tenants, ok2 := strings.Cut(grant, ":")
		group = strings.TrimSpace(group)
		if !ok || !ok2 || group == "" {
			return nil, fieldErr("group map", "%q is not group=role:tenants", entry)
		}
		r, err := ParseRole(role)
		if err != nil {
			return nil, fieldErr("group map", "%q: %q is not one of viewer, operator, admin", entry, role)
		}
		ts, err := ParseTenants(tenants)
		if err != nil {
			return nil, fieldErr("group map", "%q: %v", entry, err)
		}
		if _, dup := out[group]; dup {
			return nil, fieldErr("group map", "group %q is mapped twice", group)
		}
		out[group] = GroupGrant{Role: r, Tenants: ts}
	}
	return out, nil
}

// Grant combines the mapped groups of a person: the highest role, the union of tenants, and
// the groups that matched; ok is false when none did.
func (m GroupMap) Grant(groups []string) (g GroupGrant, matched []string, ok bool) {
	for _, name := range groups {
		gg, ok := m[name]
		if !ok || slices.Contains(matched, name) {
			continue
		}
		matched = append(matched, name)
		g.Role = max(g.Role, gg.Role)
		for _, t := range gg.Tenants {
			if !slices.Contains(g.Tenants, t) {
				g.Tenants = append(g.Tenants, t)
			}
		}
	}
	if len(matched) == 0 {
		return g, nil, false
	}
	if slices.Contains(g.Tenants, AllTenants) {
		g.Tenants = []string{AllTenants}
	}
	sort.Strings(g.Tenants)
	sort.Strings(matched)
	return g, matched, true
}

// SignInSSO returns the operator a person with a verified email and the groups claim groups
// signs in as, by the mapping m or else by email, and adds to detail what decided it (mapping,
// groups, role, tenants) for the audit row of the sign-in. A refusal is an *errs.RefusedError
// of ErrSSORefused saying why. A mapped person is created or brought in line with the mapping,
// audited as changes by "sso" from ip.
func (d *Operators) SignInSSO(ctx context.Context, ip, email string, groups []string, m GroupMap, detail map[string]any) (*Operator, error) {
	if grant, matched, ok := m.Grant(groups); ok {
		detail["mapping"] = "groups"
		detail["groups"], detail["role"], detail["tenants"] = matched, grant.Role.String(), grant.Tenants
		return d.ssoMapped(ctx, ip, email, grant, matched)
	}
	detail["mapping"] = "email"
	op, err := d.byEmail(ctx, email)
	if errors.Is(err, ErrNotFound) {
		return nil, ssoRefused("no operator is named %s and none of its groups is mapped", email)
	}
	if err != nil {
		return nil, err
	}
	if op.Disabled {
		return nil, ssoRefused("operator %s is disabled", op.Name)
	}
	detail["role"], detail["tenants"] = op.Role.String(), op.Tenants
	return op, nil
}

// ssoMapped returns the operator named email with the mapping's role and tenants, creating it
// (with no usable password) or updating it when it differs. Both are audited as changes by
// "sso".
func (d *Operators) ssoMapped(ctx context.Context, ip, email string, g GroupGrant, groups []string) (*Operator, error) {
	ch := Change{Actor: "sso", IP: ip}
	op, err := d.byEmail(ctx, email)
	switch {
	case errors.Is(err, ErrNotFound):
		if !operatorName.MatchString(email) {
			return nil, ssoRefused("email %s cannot be an operator name (1–64 letters, digits, '.', '_', '@', '-')", truncate(email, 80))
		}
		return d.addSSO(ctx, ch, email, g, groups)
	case err != nil:
		return nil, err
	case op.Disabled:
		return nil, ssoRefused("operator %s is disabled", op.Name)
	case op.Role == g.Role && slices.Equal(op.Tenants, g.Tenants):
		return op, nil
	}
	if err := d.SetAccess(ctx, ch, op.Name, g.Role, g.Tenants); err != nil {
		if fe := (*errs.FieldError)(nil); errors.Is(err, ErrConflict) || errors.As(err, &fe) {
			return nil, ssoRefused("the mapping cannot be applied to %s: %v", op.Name, err)
		}
		return nil, err
	}
	return d.ByID(ctx, op.ID)
}

// byEmail returns the operator whose name is email, ignoring case. Names are unique ignoring
// case (migration 00115), so two matches mean the index is gone: single sign-on is then refused
// rather than signing the person in as whichever row came first.
func (d *Operators) byEmail(ctx context.Context, email string) (*Operator, error) {
	var rows []operatorModel
	if err := operators(d.db.WithContext(ctx)).Where(byNameSQL, email).Order("id").Limit(2).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("read operator: %w", err)
	}
	switch len(rows) {
	case 0:
		return nil, fmt.Errorf("operator: %w", ErrNotFound)
	case 1:
		return rows[0].operator(), nil
	}
	return nil, ssoRefused("more than one operator is named %s (ignoring case): an administrator must rename all but one", truncate(email, 80))
}

// ssoNoPassword is the password hash of operators made by single sign-on: no password matches it.
const ssoNoPassword = "sso:no-password"

// addSSO creates an operator for a person the group mapping let in; it has no password.
func (d *Operators) addSSO(ctx context.Context, ch Change, name string, g GroupGrant, groups []string) (*Operator, error) {
	m := operatorModel{Name: name, PasswordHash: ssoNoPassword, Role: g.Role.String()}
	err := d.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Omit("Tenants").Create(&m).Error; err != nil {
			return fmt.Errorf("add operator: %w", err)
		}
		if err := setTenants(tx, m.ID, g.Tenants); err != nil {
			return err
		}
		return d.audit.Append(ctx, tx, audit.Entry{Actor: ch.Actor, IP: ch.IP, Action: "operator.add", Target: "operator:" + name,
			Tenants: g.Tenants, Detail: map[string]any{"role": g.Role.String(), "tenants": g.Tenants, "groups": groups, "via": "sso"}})
	})
	if err != nil {
		return nil, err
	}
	return d.ByID(ctx, m.ID)
}
