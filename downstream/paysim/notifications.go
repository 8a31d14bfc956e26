package paysim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// createNotification handles POST /notifications: idempotent on the Idempotency-Key header;
// every delivery is counted, so tests can see an outbox relay's redeliveries.
func (s *Server) createNotification(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(HeaderIdempotencyKey)
	if err := validKey(HeaderIdempotencyKey, key); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error()+" (notifications require one)")
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if mb := (*http.MaxBytesError)(nil); errors.As(err, &mb) {
		writeError(w, http.StatusRequestEntityTooLarge, "invalid_request", fmt.Sprintf("body: larger than %d bytes", maxBodyBytes))
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "body: unreadable")
		return
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "body: must be a JSON object")
		return
	}
	var compact bytes.Buffer
	json.Compact(&compact, raw)
	f, err := s.decideFaults(r, "notification", key)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	f.wait(r)
	if f.err {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "paysim injected a failure; nothing was received")
		return
	}
	// Canonical: re-marshalled maps have sorted keys, so whitespace and key order do not count.
	canon, _ := json.Marshal(obj)
	fp := sha256Sum(canon)

	s.mu.Lock()
	status := http.StatusCreated
	n, ok := s.st.notes[key]
	switch {
	case ok && n.Fingerprint != fp:
		s.mu.Unlock()
		writeError(w, http.StatusUnprocessableEntity, "idempotency_key_reused",
			"this Idempotency-Key was used with a different notification")
		return
	case ok:
		status = http.StatusOK
		n.Deliveries++
	case len(s.st.Notifications) >= s.cfg.MaxNotifications:
		s.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "state_full", "paysim holds its maximum number of notifications")
		return
	default:
		n = &notificationRecord{Fingerprint: fp, Notification: Notification{
			Key: key, Body: json.RawMessage(compact.Bytes()), FirstReceivedAt: s.cfg.Now().UTC(), Deliveries: 1}}
		s.st.Notifications = append(s.st.Notifications, n)
		s.st.notes[key] = n
	}
	out := n.Notification
	s.changed()
	s.mu.Unlock()

	if f.drop {
		dropResponse(w)
		return
	}
	if status == http.StatusOK {
		w.Header().Set(HeaderReplayed, "true")
	}
	writeJSON(w, status, out)
}

// getNotification handles GET /notifications/{key}.
func (s *Server) getNotification(w http.ResponseWriter, r *http.Request) {
	n, ok := s.Notification(r.PathValue("key"))
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "no notification under this key")
		return
	}
	writeJSON(w, http.StatusOK, n)
}
