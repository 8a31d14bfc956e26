package demo

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// LikeKey is the like operation's identity: the unique constraint on demo_likes, one like per
// user per article within a tenant.
var LikeKey = claim.DomainKey{Table: "demo_likes", Constraint: "demo_likes_one_per_user",
	Columns: []string{"tenant", "article_id", "user_id"}}

// Like is a row of demo_likes and its API shape.
type Like struct {
	ID        int64     `json:"like_id"`
	Tenant    string    `json:"-"`
	ArticleID string    `json:"article_id"`
	UserID    string    `json:"user_id"`
	CreatedAt time.Time `json:"created_at"`
}

// Likes is the demo's natural-key API: POST /v1/articles/{article}/likes {"user_id"} and
// DELETE /v1/articles/{article}/likes/{user}. A tenant's likes live in its cell when the
// service routes by tenant (Service.RouteByTenant), else in DB.
type Likes struct {
	DB  *gorm.DB
	Svc *Service
}

// dbOf is the database holding tenant's likes.
func (l *Likes) dbOf(tenant string) (*gorm.DB, error) {
	if l.Svc == nil || l.Svc.stores == nil {
		return l.DB, nil
	}
	return l.Svc.dbOf(tenant)
}

// Handler serves the likes routes (tenant from the bearer key, like the payments API).
func (l *Likes) Handler() http.Handler {
	r := gin.New()
	r.Use(gin.Recovery())
	r.POST("/v1/articles/:article/likes", l.like)
	r.DELETE("/v1/articles/:article/likes/:user", l.unlike)
	return r
}

// like inserts the like or answers the existing one (200, Idempotent-Replayed: true): the
// constraint's violation is the duplicate signal, so no key row is read or written.
func (l *Likes) like(c *gin.Context) {
	tenant, err := l.Svc.tenant(c)
	if err != nil {
		c.JSON(http.StatusUnauthorized, gin.H{"error": "unauthenticated"})
		return
	}
	var body struct {
		UserID string `json:"user_id"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(c.Writer, c.Request.Body, 4<<10))
	if err := dec.Decode(&body); err != nil {
		c.JSON(http.StatusBadRequest, gin.H{"error": "body: must be a JSON object with user_id (at most 4096 bytes)"})
		return
	}
	article := c.Param("article")
	for field, v := range map[string]string{"user_id": body.UserID, "article": article} {
		if err := printable(field, v); err != nil {
			c.JSON(http.StatusBadRequest, gin.H{"error": err.Error()})
			return
		}
	}
	if _, err := l.dbOf(tenant); err != nil {
		c.JSON(http.StatusServiceUnavailable, gin.H{"error": "tenant-unavailable"})
		return
	}
	like, created, err := l.Like(c.Request.Context(), tenant, article, body.UserID)
	if err != nil {
		c.JSON(http.StatusInternalServerError, gin.H{"error": "internal"})
		return
	}
	if !created {
		c.Header("Idempotent-Replayed", "true")
		c.JSON(http.StatusOK, like)
		return
	}
	c.JSON(http.StatusCreated, like)
}

// Like records one like, or returns the existing one (created false). A concurrent unlike may
// remove the row between the conflict and the read; then it inserts once more.
func (l *Likes) Like(ctx context.Context, tenant, article, user string) (Like, bool, error) {
	db, err := l.dbOf(tenant)
	if err != nil {
		return Like{}, false, err
	}
	row := map[string]any{"tenant": tenant, "article_id": article, "user_id": user}
	for range 2 {
		var like Like
		created, err := LikeKey.Insert(ctx, db, row, &like)
		if errors.Is(err, claim.ErrGuardConflict) {
			continue
		}
		return like, created, err
	}
	return Like{}, false, errors.New("like: the existing like keeps disappearing")
}

func (l *Likes) unlike(c *gin.Context) {
	tenant, err := l.Svc.tenant(c)
	if err != nil {
		c.JSON(http.StatusUnauthorized, gin.H{"error": "unauthenticated"})
		return
	}
	db, err := l.dbOf(tenant)
	if err != nil {
		c.JSON(http.StatusServiceUnavailable, gin.H{"error": "tenant-unavailable"})
		return
	}
	res := db.WithContext(c.Request.Context()).Exec(`DELETE FROM demo_likes WHERE tenant = ? AND article_id = ? AND user_id = ?`,
		tenant, c.Param("article"), c.Param("user"))
	switch {
	case res.Error != nil:
		c.JSON(http.StatusInternalServerError, gin.H{"error": "internal"})
	case res.RowsAffected == 0:
		c.JSON(http.StatusNotFound, gin.H{"error": "no such like"})
	default:
		c.Status(http.StatusNoContent)
	}
}
