package paysim

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idemops/idemops/chanproto"
)

// WeChat Pay APIv3's bill endpoints: GET /v3/bill/tradebill and /v3/bill/fundflowbill answer
// where the bill can be downloaded, GET /v3/billdownload/file serves it. Every request must carry
// a valid WECHATPAY2-SHA256-RSA2048 Authorization by a registered merchant (else 401 SIGN_ERROR,
// as WeChat Pay answers); every JSON answer is signed with the platform key.

// wechatAnswer writes a signed JSON answer.
func (s *Server) wechatAnswer(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"code":"SYSTEM_ERROR","message":"系统错误"}`)
	}
	keys, err := s.platformKeys()
	if err == nil {
		err = chanproto.SignWechatAnswer(w.Header(), keys[0].key, keys[0].id, body, s.cfg.Now())
	}
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"code":"SYSTEM_ERROR","message":"系统错误"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(chanproto.HeaderRequestID, "paysim-"+s.requestID())
	w.WriteHeader(status)
	w.Write(body)
}

// wechatError answers WeChat Pay's error body {"code", "message"}.
func (s *Server) wechatError(w http.ResponseWriter, status int, code, message string) {
	s.wechatAnswer(w, status, map[string]string{"code": code, "message": message})
}

// wechatAuthorized checks the request's Authorization as WeChat Pay does: a known merchant id,
// a registered merchant certificate serial, a timestamp within five minutes, a signature over
// the request by that certificate's key. A refused request is answered 401 SIGN_ERROR.
func (s *Server) wechatAuthorized(w http.ResponseWriter, r *http.Request) bool {
	a, err := chanproto.ParseWechatAuthorization(r.Header.Get("Authorization"))
	if err != nil {
		s.wechatError(w, http.StatusUnauthorized, "SIGN_ERROR", "Authorization 头缺失或格式不正确")
		return false
	}
	if a.MchID != s.cfg.WechatMchID {
		s.wechatError(w, http.StatusUnauthorized, "SIGN_ERROR", "商户号与 Authorization 不符")
		return false
	}
	m, ok := s.findMerchant(func(m merchantKeys) bool { return m.wechat != nil && strings.EqualFold(m.WechatSerial, a.SerialNo) })
	if !ok {
		s.wechatError(w, http.StatusUnauthorized, "SIGN_ERROR", "商户证书序列号有误")
		return false
	}
	if d := s.cfg.Now().Sub(time.Unix(a.Timestamp, 0)); d >= chanproto.WechatMaxSkew || d <= -chanproto.WechatMaxSkew {
		s.wechatError(w, http.StatusUnauthorized, "SIGN_ERROR", "请求时间戳已过期")
		return false
	}
	msg := chanproto.WechatRequestMessage(r.Method, r.URL.RequestURI(), a.Timestamp, a.Nonce, nil)
	if err := chanproto.VerifySHA256(m.wechat, msg, a.Signature); err != nil {
		s.wechatError(w, http.StatusUnauthorized, "SIGN_ERROR", "签名错误")
		return false
	}
	return true
}

// getWechatBill handles GET /v3/bill/tradebill and /v3/bill/fundflowbill.
func (s *Server) getWechatBill(w http.ResponseWriter, r *http.Request) {
	if !s.wechatAuthorized(w, r) {
		return
	}
	q := r.URL.Query()
	date, err := time.ParseInLocation("2006-01-02", q.Get("bill_date"), Shanghai)
	if err != nil {
		s.wechatError(w, http.StatusBadRequest, "PARAM_ERROR", "bill_date 格式应为 yyyy-MM-DD")
		return
	}
	now := s.cfg.Now().In(Shanghai)
	if date.After(now) || now.Sub(date) > 93*24*time.Hour {
		s.wechatError(w, http.StatusBadRequest, "INVALID_REQUEST", "仅支持三个月内的账单下载申请")
		return
	}
	if !s.billReady(date) {
		s.wechatError(w, http.StatusBadRequest, "STATEMENT_CREATING", "账单生成中")
		return
	}
	fund := strings.HasSuffix(r.URL.Path, "/fundflowbill")
	d := day{date: q.Get("bill_date"), start: date, end: date.AddDate(0, 0, 1)}
	var bill []byte
	if fund {
		bill, err = s.wechatFundFlowBill(d)
	} else {
		if bt := q.Get("bill_type"); bt != "" && bt != "ALL" {
			s.wechatError(w, http.StatusBadRequest, "PARAM_ERROR", "paysim 只提供 bill_type=ALL")
			return
		}
		bill, err = s.wechatBill(s.entries(d, FormatWechat))
	}
	if err != nil {
		s.wechatError(w, http.StatusInternalServerError, "SYSTEM_ERROR", "系统错误")
		return
	}
	sum := sha1.Sum(bill) // of the bill itself, decompressed: "原始账单(gzip需要解压缩)的摘要值"
	served := bill
	if strings.EqualFold(q.Get("tar_type"), "GZIP") {
		if served, err = gzipped(bill); err != nil {
			s.wechatError(w, http.StatusInternalServerError, "SYSTEM_ERROR", "系统错误")
			return
		}
	}
	base := baseURL(r) + "/v3/billdownload/file?token="
	switch s.cfg.WechatBillMode {
	case WechatBillEncrypted, WechatBillSplit:
		s.answerEncryptedBill(w, r, served, base)
		return
	}
	token := s.offerDownload("wechat", served, s.cfg.WechatDownloadLife)
	s.wechatAnswer(w, http.StatusOK, map[string]string{"hash_type": "SHA1", "hash_value": hex.EncodeToString(sum[:]),
		"download_url": base + token})
}

// answerEncryptedBill answers download_bill_list: the served bill cut into parts, each
// encrypted for the merchant that asked, hashed as downloaded.
func (s *Server) answerEncryptedBill(w http.ResponseWriter, r *http.Request, served []byte, base string) {
	a, _ := chanproto.ParseWechatAuthorization(r.Header.Get("Authorization"))
	m, _ := s.findMerchant(func(m merchantKeys) bool { return m.wechat != nil && strings.EqualFold(m.WechatSerial, a.SerialNo) })
	n := 1
	if s.cfg.WechatBillMode == WechatBillSplit {
		n = max(s.cfg.WechatBillParts, 1)
	}
	type part struct {
		BillSequence int    `json:"bill_sequence"`
		DownloadURL  string `json:"download_url"`
		EncryptKey   string `json:"encrypt_key"`
		HashType     string `json:"hash_type"`
		HashValue    string `json:"hash_value"`
		Nonce        string `json:"nonce"`
	}
	var parts []part
	size := (len(served) + n - 1) / n
	for i := 0; i < n; i++ {
		lo, hi := min(i*size, len(served)), min((i+1)*size, len(served))
		ek, nonce, ct, err := chanproto.EncryptWechatBill(m.wechat, served[lo:hi])
		if err != nil {
			s.wechatError(w, http.StatusInternalServerError, "SYSTEM_ERROR", "系统错误")
			return
		}
		sum := sha1.Sum(ct)
		parts = append(parts, part{BillSequence: i + 1, DownloadURL: base + s.offerDownload("wechat", ct, s.cfg.WechatDownloadLife),
			EncryptKey: ek, HashType: "SHA1", HashValue: hex.EncodeToString(sum[:]), Nonce: nonce})
	}
	// Listed last part first: the merchant joins them in bill_sequence order, not list order.
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	s.wechatAnswer(w, http.StatusOK, map[string]any{"download_bill_count": len(parts), "download_bill_list": parts})
}

// getWechatDownload handles GET /v3/billdownload/file?token=…: a signed GET whose answer is the
// bill itself, unsigned (WeChat Pay sends no signature headers with a download).
func (s *Server) getWechatDownload(w http.ResponseWriter, r *http.Request) {
	if !s.wechatAuthorized(w, r) {
		return
	}
	body, ok := s.takeDownload("wechat", r.URL.Query().Get("token"))
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"code":"INVALID_REQUEST","message":"下载链接已过期或不存在"}`)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.Write(body)
}

// wechatFundFlowHeader is the fund flow bill's (资金账单) detail header.
var wechatFundFlowHeader = []string{"记账时间", "微信支付业务单号", "资金流水单号", "业务名称", "业务类型", "收支类型",
	"收支金额（元）", "账户结余（元）", "资金变更提交申请人", "备注", "业务凭证号"}

// wechatFundFlowBill renders the day's fund flow bill: one income row per charge, one expense
// row per refund, backtick-prefixed, then the summary.
func (s *Server) wechatFundFlowBill(d day) ([]byte, error) {
	entries := s.entries(d, FormatWechat)
	rows := [][]string{wechatFundFlowHeader}
	var balance, in, out int64
	var nIn, nOut int
	for i, e := range entries {
		c := e.charge
		kind, dir, amount, voucher, id := "交易", "收入", c.AmountMinor, c.MerchantOrderNo, c.ID
		if e.refund != nil {
			kind, dir, amount, voucher, id = "退款", "支出", e.refund.AmountMinor, e.refund.MerchantRefundNo, e.refund.ID
			balance -= amount
			out += amount
			nOut++
		} else {
			balance += amount
			in += amount
			nIn++
		}
		rows = append(rows, backticked(e.at.Format(stampLayout), id, fmt.Sprintf("%s%06d", strings.ReplaceAll(d.date, "-", ""), i+1),
			kind, kind, dir, formatMinor(amount, "CNY"), formatMinor(balance, "CNY"), "system", "", voucher))
	}
	rows = append(rows, []string{"资金流水总笔数", "收入笔数", "收入金额", "支出笔数", "支出金额"},
		backticked(itoa(nIn+nOut), itoa(nIn), formatMinor(in, "CNY"), itoa(nOut), formatMinor(out, "CNY")))
	var buf strings.Builder
	for _, row := range rows {
		buf.WriteString(strings.Join(row, ","))
		buf.WriteByte('\n')
	}
	return []byte(buf.String()), nil
}
