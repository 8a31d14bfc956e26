package paysim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemops/idemops/errs"
)

// Errors a Client call may return, wrapped in an *APIError when paysim answered.
var (
	// ErrNotFound: 404, paysim holds no such charge or notification.
	ErrNotFound = errs.New(errs.NotFound, "paysim: not found")
	// ErrKeyReused: 422, the Idempotency-Key was used before with a different body.
	ErrKeyReused = errs.New(errs.Conflict, "paysim: idempotency key reused with a different request")
	// ErrRejected: another 4xx; the request is wrong and retrying it will not help.
	ErrRejected = errs.New(errs.Unprocessable, "paysim: request rejected")
	// ErrUnavailable: 5xx; the outcome of a write is unknown.
	ErrUnavailable = errs.New(errs.Unavailable, "paysim: unavailable")
)

// APIError is a non-2xx answer from paysim.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("paysim: %d %s: %s", e.Status, e.Code, e.Message)
}

// Unwrap sorts the answer into one of the sentinel errors.
func (e *APIError) Unwrap() error {
	switch {
	case e.Status == http.StatusNotFound:
		return ErrNotFound
	case e.Status == http.StatusUnprocessableEntity:
		return ErrKeyReused
	case e.Status >= 500:
		return ErrUnavailable
	}
	return ErrRejected
}

// maxResponseBytes bounds what the client reads (statements included).
const maxResponseBytes = 64 << 20

// Client talks to a paysim server.
type Client struct {
	baseURL string
	http    *http.Client
}

// NewClient returns a client for the server at baseURL (e.g. http://127.0.0.1:8090). A nil hc
// gets a client with a 30 s timeout.
func NewClient(baseURL string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{baseURL: strings.TrimRight(baseURL, "/"), http: hc}
}

// BaseURL is the server's address as given.
func (c *Client) BaseURL() string { return c.baseURL }

// CreateCharge posts a charge. With a key it is idempotent (a replay answers the same charge);
// with key "" it is not, and req.MerchantOrderNo is required. fault, when not "", is sent as
// X-Paysim-Fault. A declined charge is a *Charge with Status "failed", not an error.
func (c *Client) CreateCharge(ctx context.Context, key string, req ChargeRequest, fault string) (*Charge, error) {
	var out Charge
	_, err := c.do(ctx, http.MethodPost, "/charges", key, fault, req, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// GetCharge looks up the (first) charge for a merchant order number; ErrNotFound when none.
func (c *Client) GetCharge(ctx context.Context, merchantOrderNo string) (*Charge, error) {
	var out Charge
	if _, err := c.do(ctx, http.MethodGet, "/charges/"+url.PathEscape(merchantOrderNo), "", "", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Refund refunds part or all of the order's charge, idempotent on refundKey.
func (c *Client) Refund(ctx context.Context, merchantOrderNo, refundKey string, req RefundRequest) (*Refund, error) {
	var out Refund
	path := "/charges/" + url.PathEscape(merchantOrderNo) + "/refunds"
	if _, err := c.do(ctx, http.MethodPost, path, refundKey, "", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Notify delivers a receipt notification (a JSON object) under key.
func (c *Client) Notify(ctx context.Context, key string, body json.RawMessage) (*Notification, error) {
	var out Notification
	if _, err := c.do(ctx, http.MethodPost, "/notifications", key, "", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetNotification returns the notification under key with its delivery count.
func (c *Client) GetNotification(ctx context.Context, key string) (*Notification, error) {
	var out Notification
	if _, err := c.do(ctx, http.MethodGet, "/notifications/"+url.PathEscape(key), "", "", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Charges lists every charge paysim holds for a merchant order number (two after a double
// charge; none → an empty list, not an error).
func (c *Client) Charges(ctx context.Context, merchantOrderNo string) (*ChargeList, error) {
	var out ChargeList
	path := "/_paysim/charges?merchant_order_no=" + url.QueryEscape(merchantOrderNo)
	if _, err := c.do(ctx, http.MethodGet, path, "", "", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ChargeCount is how many charges paysim holds for a merchant order number.
func (c *Client) ChargeCount(ctx context.Context, merchantOrderNo string) (int, error) {
	l, err := c.Charges(ctx, merchantOrderNo)
	if err != nil {
		return 0, err
	}
	return l.Count, nil
}

// InsertChannelCharge fabricates a charge the merchant never recorded.
func (c *Client) InsertChannelCharge(ctx context.Context, in ChannelCharge) (*Charge, error) {
	var out Charge
	if _, err := c.do(ctx, http.MethodPost, "/_paysim/charges", "", "", in, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AlterCharge changes what the channel reports for the charge with id.
func (c *Client) AlterCharge(ctx context.Context, id string, ch ChargeChange) (*Charge, error) {
	var out Charge
	if _, err := c.do(ctx, http.MethodPatch, "/_paysim/charges/"+url.PathEscape(id), "", "", ch, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Statement downloads the statement of format f for date (YYYY-MM-DD), as the channel serves
// it (the Alipay one in GBK).
func (c *Client) Statement(ctx context.Context, date string, f Format) ([]byte, error) {
	path := "/statements/" + url.PathEscape(date) + "?format=" + url.QueryEscape(string(f))
	return c.do(ctx, http.MethodGet, path, "", "", nil, nil)
}

// do sends one request and decodes a 2xx JSON answer into out; it returns the raw body.
func (c *Client) do(ctx context.Context, method, path, key, fault string, in, out any) ([]byte, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("paysim: encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL+path, body)
	if err != nil {
		return nil, fmt.Errorf("paysim: %w", err)
	}
	// net/http silently resends a request carrying an Idempotency-Key when a reused connection
	// dies before the answer; the caller, not the transport, decides about retries here.
	req.GetBody = nil
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set(HeaderIdempotencyKey, key)
	}
	if fault != "" {
		req.Header.Set(HeaderFault, fault)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("paysim: %s %s: %w", method, strings.SplitN(path, "?", 2)[0], err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("paysim: read answer: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		ae := &APIError{Status: resp.StatusCode}
		var e apiError
		if json.Unmarshal(raw, &e) == nil {
			ae.Code, ae.Message = e.Code, e.Message
		}
		return nil, ae
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return nil, fmt.Errorf("paysim: decode answer: %w", err)
		}
	}
	return raw, nil
}

// CloseOrder asks the channel to close an unpaid order (POST /_paysim/orders/{no}/close); the
// merchant hears of it through a charge.closed callback. fault is an X-Paysim-Fault value.
func (c *Client) CloseOrder(ctx context.Context, merchantOrderNo, fault string) error {
	_, err := c.do(ctx, http.MethodPost, "/_paysim/orders/"+url.PathEscape(merchantOrderNo)+"/close", "", fault, nil, nil)
	return err
}
