package access

import "time"

// The admin tables this package owns, as gorm models: gorm does their plain CRUD (the claim hot
// path and the sign-in throttle's atomic upsert stay SQL, see docs/ARCHITECTURE.md). Columns
// with a database default are not written on insert (<-:update, or <-:false when never); gorm
// drops a column it may not write from an update without a word, so every column an update sets
// must allow it.

// operatorModel is a row of operators, with its tenants (operator_tenants).
type operatorModel struct {
	ID           int64 `gorm:"primaryKey"`
	Name         string
	PasswordHash string
	Role         string
	Disabled     bool
	CreatedAt    time.Time `gorm:"<-:false"`
	UpdatedAt    time.Time `gorm:"<-:update;autoUpdateTime:false"`
	LastLoginAt  *time.Time
	TimeZone     string        `gorm:"<-:update"`
	Language     string        `gorm:"<-:update"`
	Tenants      []tenantModel `gorm:"foreignKey:OperatorID"`
}

func (operatorModel) TableName() string { return "operators" }

// tenantModel is a row of operator_tenants: one tenant an operator may see ("*": every tenant).
type tenantModel struct {
	OperatorID int64  `gorm:"primaryKey"`
	Tenant     string `gorm:"primaryKey"`
}

func (tenantModel) TableName() string { return "operator_tenants" }

// tokenModel is a row of api_tokens: only the SHA-256 of the bearer secret is stored.
type tokenModel struct {
	ID         int64 `gorm:"primaryKey"`
	OperatorID int64
	Name       string
	TokenHash  []byte
	CreatedAt  time.Time `gorm:"<-:false"`
	LastUsedAt *time.Time
	ExpiresAt  *time.Time
	RevokedAt  *time.Time
}

func (tokenModel) TableName() string { return "api_tokens" }

func (m *operatorModel) operator() *Operator {
	role, _ := ParseRole(m.Role)
	var tenants []string
	for _, t := range m.Tenants {
		tenants = append(tenants, t.Tenant)
	}
	return &Operator{ID: m.ID, Name: m.Name, Role: role, Tenants: tenants, Disabled: m.Disabled,
		CreatedAt: m.CreatedAt, LastLoginAt: m.LastLoginAt, TimeZone: m.TimeZone, Language: m.Language}
}
