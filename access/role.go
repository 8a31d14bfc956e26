package access

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// Role orders what an operator may do: viewer < operator < admin.
type Role int

const (
	// RoleNone is the role of an anonymous request (public routes only).
	RoleNone Role = iota
	// RoleViewer browses keys (redacted), the dashboard.
	RoleViewer
	// RoleOperator may also reveal request and response bodies and check downstream.
	RoleOperator
	// RoleAdmin may also manage operators and read the audit log.
	RoleAdmin
)

// Roles lists the assignable roles, lowest first.
var Roles = []Role{RoleViewer, RoleOperator, RoleAdmin}

func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleOperator:
		return "operator"
	case RoleAdmin:
		return "admin"
	}
	return "anonymous"
}

// ParseRole reads a role name.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if r.String() == strings.TrimSpace(s) {
			return r, nil
		}
	}
	return RoleNone, fieldErr("role", "%q is not one of viewer, operator, admin", s)
}

// AllTenants is the tenant entry that grants every tenant.
const AllTenants = "*"

// Operator is a person (or automation, through a token) using the console.
type Operator struct {
	ID          int64
	Name        string
	Role        Role
	Tenants     []string // sorted; ["*"] for every tenant
	Disabled    bool
	CreatedAt   time.Time
	LastLoginAt *time.Time
	TimeZone    string // IANA zone the console shows this operator's times in
	Language    string // console language chosen in the header ("en", "zh-CN"; "" = the browser's)
}

// SeesAllTenants reports whether o may see every tenant.
func (o *Operator) SeesAllTenants() bool { return slices.Contains(o.Tenants, AllTenants) }

// MaySee reports whether o may see keys of tenant.
func (o *Operator) MaySee(tenant string) bool {
	return o.SeesAllTenants() || slices.Contains(o.Tenants, tenant)
}

// Actor is how o appears in key events and the audit log.
func (o *Operator) Actor() string { return "operator:" + o.Name }

var operatorName = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)

// ParseTenants reads a comma-separated tenant list ("*" for all).
func ParseTenants(s string) ([]string, error) {
	var out []string
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if len(t) > 128 || strings.ContainsAny(t, "|\x00\n\r") {
			return nil, fieldErr("tenants", "%q is not a tenant name", t)
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, fieldErr("tenants", "name at least one tenant, or * for all")
	}
	if slices.Contains(out, AllTenants) {
		return []string{AllTenants}, nil
	}
	sort.Strings(out)
	return out, nil
}
