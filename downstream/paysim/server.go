package paysim

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Headers paysim reads and writes.
const (
	// HeaderIdempotencyKey carries the downstream key on charges (and the merchant refund number
	// on refunds, the notification key on notifications).
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderReplayed is "true" on an answer replayed for a key seen before.
	HeaderReplayed = "Idempotent-Replayed"
)

// maxBodyBytes bounds every request body.
const maxBodyBytes = 64 << 10

// Server is the simulated channel: an http.Handler over in-memory state.
type Server struct {
	cfg Config
	mux *http.ServeMux

	mu          sync.Mutex
	st          *state
	faultCounts map[string]uint64
	dirty       bool

	notifyWake chan struct{}
	// attempted signals each callback delivery attempt (see CallbacksChanged).
	attempted chan struct{}

	proto protocol // the statement protocols' keys, merchants and download URLs

	saveMu   sync.Mutex // one save at a time
	stop     chan struct{}
	saverRun sync.WaitGroup
	closed   sync.Once
}

// NewServer validates cfg, loads cfg.StateFile when set, and returns the channel. Call Close
// when done so a state file gets its final save.
func NewServer(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	st := newState()
	if cfg.StateFile != "" {
		if st, err = loadState(cfg.StateFile); err != nil {
			return nil, err
		}
	}
	s := &Server{cfg: cfg, st: st, faultCounts: map[string]uint64{}, stop: make(chan struct{}),
		notifyWake: make(chan struct{}, 1), attempted: make(chan struct{}, 1)}
	s.routes()
	s.saverRun.Add(1)
	go s.notifyLoop()
	if cfg.StateFile != "" {
		s.saverRun.Add(1)
		go s.saveLoop()
	}
	return s, nil
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("POST /charges", s.createCharge)
	m.HandleFunc("GET /charges/{key}", s.getCharge)
	m.HandleFunc("POST /charges/{key}/refunds", s.createRefund)
	m.HandleFunc("POST /notifications", s.createNotification)
	m.HandleFunc("GET /notifications/{key}", s.getNotification)
	m.HandleFunc("GET /statements/{date}", s.getStatement)
	m.HandleFunc("GET /alipay/bill-url", s.getAlipayBillURL)
	m.HandleFunc("GET /alipay/bills/{file}", s.getAlipayBillZip)
	m.HandleFunc("GET /v3/bill/tradebill", s.getWechatBill)
	m.HandleFunc("GET /v3/bill/fundflowbill", s.getWechatBill)
	m.HandleFunc("GET /v3/billdownload/file", s.getWechatDownload)
	m.HandleFunc("GET /gateway.do", s.alipayGateway)
	m.HandleFunc("POST /gateway.do", s.alipayGateway)
	m.HandleFunc("GET /downloadBillFile.resource", s.getAlipayDownload)
	m.HandleFunc("GET /v1/payouts", s.getStripePayouts)
	m.HandleFunc("GET /v1/balance_transactions", s.getStripeBalanceTransactions)
	m.HandleFunc("GET /v1/charges/{id}", s.getStripeCharge)
	m.HandleFunc("GET /reports/download/MerchantAccount/{account}/{file}", s.getAdyenReport)
	m.HandleFunc("GET /_paysim/protocol", s.getProtocol)
	m.HandleFunc("POST /_paysim/protocol/merchants", s.postMerchant)
	m.HandleFunc("POST /_paysim/protocol/rotate", s.postRotate)
	m.HandleFunc("GET /_paysim/charges", s.adminListCharges)
	m.HandleFunc("POST /_paysim/charges", s.adminInsertCharge)
	m.HandleFunc("PATCH /_paysim/charges/{id}", s.adminAlterCharge)
	m.HandleFunc("POST /_paysim/orders/{key}/close", s.adminCloseOrder)
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux = m
}

// ServeHTTP serves the channel's API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// ChargeCount is how many charges the channel holds for a merchant order number: exactly one
// for an order charged once, two after a double charge.
func (s *Server) ChargeCount(merchantOrderNo string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.st.byOrder[merchantOrderNo])
}

// Notification returns the notification received under key, if any.
func (s *Server) Notification(key string) (Notification, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.st.notes[key]
	if !ok {
		return Notification{}, false
	}
	return n.Notification, true
}

// Save writes the state file now (a no-op without one).
func (s *Server) Save() error {
	if s.cfg.StateFile == "" {
		return nil
	}
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	// The write stays under s.mu so an older snapshot never lands after a newer one that
	// changed() wrote.
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := json.Marshal(stateFile{Version: stateFileVersion, state: s.st})
	if err != nil {
		return err
	}
	if err := writeFileAtomic(s.cfg.StateFile, b); err != nil {
		return err
	}
	s.dirty = false
	return nil
}

// Close stops the background saver and saves the state one last time.
func (s *Server) Close() error {
	var err error
	s.closed.Do(func() {
		close(s.stop)
		s.saverRun.Wait()
		err = s.Save()
	})
	return err
}

func (s *Server) saveLoop() {
	defer s.saverRun.Done()
	t := time.NewTicker(s.cfg.SaveInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.mu.Lock()
			dirty := s.dirty
			s.mu.Unlock()
			if dirty {
				if err := s.Save(); err != nil {
					s.cfg.Logger.Error("paysim: save state", "err", err)
				}
			}
		}
	}
}

// changed records a change; callers hold s.mu and answer only after it returns. With a state
// file the whole state is written and fsync'd here, before the answer, so a charge the channel
// confirmed survives kill -9 of paysim (the periodic saver then only retries a failed write).
func (s *Server) changed() {
	s.dirty = true
	if s.cfg.StateFile == "" {
		return
	}
	b, err := json.Marshal(stateFile{Version: stateFileVersion, state: s.st})
	if err == nil {
		err = writeFileAtomic(s.cfg.StateFile, b)
	}
	if err != nil {
		s.cfg.Logger.Error("paysim: save state", "err", err)
		return
	}
	s.dirty = false
}

// apiError is paysim's error body.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"code":"internal","message":"encode response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiError{Code: code, Message: msg})
}

// badRequest is a client error whose message names the field.
type badRequest struct {
	msg    string
	status int // 0: 400
}

// bodyStatus is the status of a decodeBody error: 413 for a body past the limit, else 400.
func bodyStatus(err error) int {
	var br badRequest
	if errors.As(err, &br) && br.status != 0 {
		return br.status
	}
	return http.StatusBadRequest
}

func (e badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error { return badRequest{msg: fmt.Sprintf(format, args...)} }

// decodeBody reads a JSON object of at most maxBodyBytes into v, rejecting unknown fields and
// wrong types with a message naming the field.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var mb *http.MaxBytesError
		switch {
		case errors.As(err, &mb):
			return badRequest{msg: fmt.Sprintf("body: larger than %d bytes", maxBodyBytes), status: http.StatusRequestEntityTooLarge}
		case errors.As(err, &te):
			return badf("%s: must be a JSON %s", te.Field, te.Type.Kind())
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return badf("%s: unknown field", strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`))
		case errors.Is(err, io.EOF):
			return badf("body: empty; want a JSON object")
		}
		return badf("body: not a JSON object: %v", err)
	}
	if dec.More() {
		return badf("body: data after the JSON object")
	}
	return nil
}

// validKey checks an Idempotency-Key the way idemops does: 1–255 printable ASCII characters.
func validKey(field, k string) error {
	if k == "" || len(k) > 255 {
		return badf("%s: must be 1 to 255 characters", field)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return badf("%s: character %d is not printable ASCII", field, i+1)
		}
	}
	return nil
}

// requestID is a random id for an answer's Request-ID.
func (s *Server) requestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func fingerprint(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256Sum(b)
	return sum
}
