package demo

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/idemops/idemops/downstream/paysim"
)

// CallbackPath is where the payments service receives paysim's callbacks.
const CallbackPath = "/v1/callbacks/paysim"

// maxCallbackBytes bounds a callback body.
const maxCallbackBytes = 16 << 10

// CallbackHandler receives the channel's asynchronous callbacks: it verifies the signature,
// then moves the order through Orders.HandleCallback. It answers 200 {"code":"SUCCESS"} —
// the channel's "acknowledged, stop sending" — for an applied event, a duplicate and an event
// that can never apply (a late close after paid); 404 for an order it does not know yet and 409
// for an event whose precondition has not come yet, so the channel sends them again.
type CallbackHandler struct {
	Orders *Orders
	// Elsewhere, when set, gives the orders of the other cells (WorldConfig.Stores) as the cell
	// map places tenants now: a callback names an order by its merchant order number alone, so
	// one Orders does not know is looked for there (the number is unique: it is the key's
	// downstream key, tenant included).
	Elsewhere func() []*Orders
	Secret    []byte
	// Tolerance is how far a signature's time may be from now (default 5 min).
	Tolerance time.Duration
	Logger    *slog.Logger
}

func (h *CallbackHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		callbackAnswer(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "POST only")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCallbackBytes))
	if err != nil {
		callbackAnswer(w, http.StatusRequestEntityTooLarge, "TOO_LARGE", "body: larger than 16384 bytes")
		return
	}
	tol := h.Tolerance
	if tol == 0 {
		tol = 5 * time.Minute
	}
	if err := paysim.VerifySignature(h.Secret, body, r.Header.Get(paysim.HeaderSignature), time.Now(), tol); err != nil {
		callbackAnswer(w, http.StatusUnauthorized, "BAD_SIGNATURE", paysim.HeaderSignature+": "+err.Error())
		return
	}
	ev, err := decodeCallback(body)
	if err != nil {
		callbackAnswer(w, http.StatusBadRequest, "INVALID", err.Error())
		return
	}
	res, err := h.Orders.HandleCallback(r.Context(), ev)
	if errors.Is(err, ErrOrderUnknown) && h.Elsewhere != nil {
		for _, o := range h.Elsewhere() {
			if res, err = o.HandleCallback(r.Context(), ev); !errors.Is(err, ErrOrderUnknown) {
				break
			}
		}
	}
	switch {
	case errors.Is(err, ErrOrderUnknown):
		callbackAnswer(w, http.StatusNotFound, "ORDER_UNKNOWN", "no order with this merchant_order_no yet; send again later")
	case errors.Is(err, ErrNotYet):
		callbackAnswer(w, http.StatusConflict, "NOT_YET", "the order is "+string(res.From)+"; send again later")
	case err != nil:
		h.logger().Error("callback", "event", ev.ID, "type", ev.Type, "err", err)
		callbackAnswer(w, http.StatusInternalServerError, "INTERNAL", "internal error; send again later")
	default:
		if res.Outcome == OutcomeIgnored { // duplicates are routine; an event that can never apply is worth a line
			h.logger().Info("callback changed nothing", "event", ev.ID, "type", ev.Type, "order_status", res.From, "outcome", res.Outcome)
		}
		callbackAnswer(w, http.StatusOK, "SUCCESS", res.Outcome)
	}
}

func (h *CallbackHandler) logger() *slog.Logger {
	if h.Logger != nil {
		return h.Logger
	}
	return slog.Default()
}

// decodeCallback parses and checks a callback body, naming the field that is wrong.
func decodeCallback(body []byte) (paysim.CallbackEvent, error) {
	var ev paysim.CallbackEvent
	if !utf8.Valid(body) || bytes.IndexByte(body, 0) >= 0 {
		return ev, errors.New("body: not valid UTF-8 or holds a NUL byte")
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		return ev, errors.New("body: not a JSON callback object")
	}
	if err := printable("id", ev.ID); err != nil {
		return ev, err
	}
	if err := printable("merchant_order_no", ev.MerchantOrderNo); err != nil {
		return ev, err
	}
	if _, ok := transitions[ev.Type]; !ok {
		return ev, errors.New("type: must be charge.succeeded, charge.closed or charge.refunded")
	}
	return ev, nil
}

func printable(field, v string) error {
	if v == "" || len(v) > 255 {
		return errors.New(field + ": must be 1 to 255 characters")
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return errors.New(field + ": must be printable ASCII")
		}
	}
	return nil
}

func callbackAnswer(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"code": code, "message": msg})
	w.Write(append(b, '\n'))
}
