package paysim

import (
	"crypto/subtle"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Adyen's report download: GET /reports/download/MerchantAccount/{account}/{file}, the file being
// settlement_detail_report_batch_N.csv, authenticated with a registered API key (X-API-Key) or
// report user (basic auth), else 401 in Adyen's error shape. Batch N is the UTC day N days after
// 1970-01-01 (the batch number the statement export writes); a batch whose day has not ended is
// not there yet (404) unless bills are served at any time.

// getAdyenReport handles GET /reports/download/MerchantAccount/{account}/{file}.
func (s *Server) getAdyenReport(w http.ResponseWriter, r *http.Request) {
	if !s.adyenAuthorized(r) {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"status": 401, "errorCode": "000",
			"message": "HTTP Status Response - Unauthorized", "errorType": "security"})
		return
	}
	if r.PathValue("account") != s.cfg.AdyenMerchant {
		writeJSON(w, http.StatusForbidden, map[string]any{"status": 403, "errorCode": "010",
			"message": "Not allowed", "errorType": "security"})
		return
	}
	name, ok := strings.CutSuffix(strings.TrimPrefix(r.PathValue("file"), "settlement_detail_report_batch_"), ".csv")
	batch, err := strconv.ParseInt(name, 10, 64)
	if !ok || err != nil || batch < 0 || batch > 1_000_000 || !strings.HasPrefix(r.PathValue("file"), "settlement_detail_report_batch_") {
		http.NotFound(w, r)
		return
	}
	start := time.Unix(batch*86400, 0).UTC()
	end := start.AddDate(0, 0, 1)
	if start.After(s.cfg.Now()) || (s.cfg.BillReady == ReadyNextDay10 && end.After(s.cfg.Now())) {
		http.NotFound(w, r)
		return
	}
	b, err := s.Statement(start.Format("2006-01-02"), FormatAdyen)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/csv")
	w.Write(b)
}

func (s *Server) adyenAuthorized(r *http.Request) bool {
	if key := r.Header.Get("X-API-Key"); key != "" {
		_, ok := s.findMerchant(func(m merchantKeys) bool {
			return m.AdyenAPIKey != "" && subtle.ConstantTimeCompare([]byte(m.AdyenAPIKey), []byte(key)) == 1
		})
		return ok
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		return false
	}
	_, ok = s.findMerchant(func(m merchantKeys) bool {
		return m.AdyenReportUser != "" && m.AdyenReportUser == user &&
			subtle.ConstantTimeCompare([]byte(m.AdyenReportPassword), []byte(pass)) == 1
	})
	return ok
}
