package paysim

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/idemops/idemops/chanproto"
)

// Alipay's gateway (/gateway.do) with the method alipay.data.dataservice.bill.downloadurl.query,
// and the bill download it answers with (/downloadBillFile.resource?token=…, living 30 seconds).
// A request must be signed RSA2 by a registered application's key; a refused one is answered
// as the gateway does, with an unsigned error_response (40002 isv.invalid-signature,
// isv.missing-signature, isv.invalid-app-id). Every other answer is signed with paysim's Alipay
// key over its response member.

const alipayBillMethod = "alipay.data.dataservice.bill.downloadurl.query"

// alipayGatewayError answers a refused request the gateway's way: error_response, unsigned.
func alipayGatewayError(w http.ResponseWriter, code, msg, subCode, subMsg string) {
	b, _ := json.Marshal(map[string]map[string]string{"error_response": {"code": code, "msg": msg, "sub_code": subCode, "sub_msg": subMsg}})
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.Write(b)
}

// alipayAnswer answers content signed in method's response member.
func (s *Server) alipayAnswer(w http.ResponseWriter, member string, content map[string]string) {
	key, err := s.alipaySigningKey()
	if err != nil {
		alipayGatewayError(w, "20000", "Service Currently Unavailable", "isp.unknow-error", "系统繁忙")
		return
	}
	c, _ := json.Marshal(content)
	body, err := chanproto.SignAlipayAnswer(key, member, c)
	if err != nil {
		alipayGatewayError(w, "20000", "Service Currently Unavailable", "isp.unknow-error", "系统繁忙")
		return
	}
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.Write(body)
}

// alipayGateway handles GET and POST /gateway.do.
func (s *Server) alipayGateway(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	if err := r.ParseForm(); err != nil {
		alipayGatewayError(w, "40001", "Missing Required Arguments", "isv.missing-method", "请求无法读取")
		return
	}
	params := url.Values{}
	for k, v := range r.Form {
		if len(v) > 0 {
			params.Set(k, v[0])
		}
	}
	m, ok := s.findMerchant(func(m merchantKeys) bool { return m.alipay != nil && m.AlipayAppID == params.Get("app_id") })
	switch {
	case params.Get("app_id") == "":
		alipayGatewayError(w, "40001", "Missing Required Arguments", "isv.missing-app-id", "缺少AppID参数")
		return
	case !ok:
		alipayGatewayError(w, "40002", "Invalid Arguments", "isv.invalid-app-id", "无效的AppID参数")
		return
	case params.Get("sign") == "":
		alipayGatewayError(w, "40001", "Missing Required Arguments", "isv.missing-signature", "缺少签名参数")
		return
	case params.Get("sign_type") != "RSA2":
		alipayGatewayError(w, "40002", "Invalid Arguments", "isv.invalid-signature-type", "无效的签名类型")
		return
	}
	if err := chanproto.VerifyAlipayRequest(m.alipay, params); err != nil {
		alipayGatewayError(w, "40002", "Invalid Arguments", "isv.invalid-signature", "验签出错")
		return
	}
	ts, err := time.ParseInLocation("2006-01-02 15:04:05", params.Get("timestamp"), Shanghai)
	if d := s.cfg.Now().Sub(ts); err != nil || d > 15*time.Minute || d < -15*time.Minute {
		alipayGatewayError(w, "40002", "Invalid Arguments", "isv.invalid-timestamp", "非法的时间戳参数")
		return
	}
	if params.Get("method") != alipayBillMethod {
		alipayGatewayError(w, "40002", "Invalid Arguments", "isv.invalid-method", "不存在的方法名")
		return
	}
	member := strings.ReplaceAll(alipayBillMethod, ".", "_") + "_response"
	var biz struct {
		BillType string `json:"bill_type"`
		BillDate string `json:"bill_date"`
	}
	bad := func(sub string) {
		s.alipayAnswer(w, member, map[string]string{"code": "40004", "msg": "Business Failed", "sub_code": "isv.invalid-arguments",
			"sub_msg": sub})
	}
	if json.Unmarshal([]byte(params.Get("biz_content")), &biz) != nil {
		bad("biz_content 不是 JSON")
		return
	}
	if biz.BillType != "trade" && biz.BillType != "signcustomer" {
		bad("bill_type 应为 trade 或 signcustomer")
		return
	}
	date, err := time.ParseInLocation("2006-01-02", biz.BillDate, Shanghai)
	if err != nil {
		bad("bill_date 格式不正确")
		return
	}
	if date.After(s.cfg.Now()) || !s.billReady(date) {
		s.alipayAnswer(w, member, map[string]string{"code": "40004", "msg": "Business Failed", "sub_code": "isp.bill_not_exist",
			"sub_msg": "账单不存在"})
		return
	}
	var zipped []byte
	if biz.BillType == "trade" {
		zipped, err = s.AlipayBillZip(biz.BillDate)
	} else {
		zipped, err = s.alipayAccountZip(biz.BillDate)
	}
	if err != nil {
		alipayGatewayError(w, "20000", "Service Currently Unavailable", "isp.unknow-error", "系统繁忙")
		return
	}
	token := s.offerDownload("alipay", zipped, s.cfg.AlipayDownloadLife)
	s.alipayAnswer(w, member, map[string]string{"code": "10000", "msg": "Success",
		"bill_download_url": baseURL(r) + "/downloadBillFile.resource?bizType=" + biz.BillType + "&fileType=csv.zip&token=" + token})
}

// getAlipayDownload handles GET /downloadBillFile.resource?token=…: the zip, while the URL lives.
func (s *Server) getAlipayDownload(w http.ResponseWriter, r *http.Request) {
	body, ok := s.takeDownload("alipay", r.URL.Query().Get("token"))
	if !ok {
		http.Error(w, "the bill download link has expired", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/zip")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.Write(body)
}

// alipayAccountHeader is 账务明细's header (the signcustomer bill).
var alipayAccountHeader = []string{"账务流水号", "业务流水号", "商户订单号", "商品名称", "发生时间", "对方账号", "收入金额（+元）",
	"支出金额（-元）", "账户余额（元）", "交易渠道", "业务类型", "备注"}

// alipayAccountZip renders the day's signcustomer bill: a zip holding 账务明细, GBK.
func (s *Server) alipayAccountZip(date string) ([]byte, error) {
	start, err := time.ParseInLocation("2006-01-02", date, Shanghai)
	if err != nil {
		return nil, err
	}
	d := day{date: date, start: start, end: start.AddDate(0, 0, 1)}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "#支付宝账务明细查询\n#账号：[%s]\n#起始日期：[%s]   终止日期：[%s]\n", s.cfg.AlipayPID,
		d.start.Format(alipayDateLayout), d.end.Format(alipayDateLayout))
	rows := [][]string{alipayAccountHeader}
	var balance int64
	for i, e := range s.entries(d, FormatAlipay) {
		c := e.charge
		in, out, kind, order := formatMinor(c.AmountMinor, "CNY"), "", "在线支付", c.MerchantOrderNo
		if e.refund != nil {
			in, out, kind = "", formatMinor(-e.refund.AmountMinor, "CNY"), "交易退款"
			balance -= e.refund.AmountMinor
		} else {
			balance += c.AmountMinor
		}
		rows = append(rows, []string{fmt.Sprintf("%s%08d\t", strings.ReplaceAll(date, "-", ""), i+1), c.ID + "\t", order + "\t",
			c.Description, e.at.Format(stampLayout), "", in, out, formatMinor(balance, "CNY"), "支付宝", kind, ""})
	}
	if err := csvRows(&buf, rows); err != nil {
		return nil, err
	}
	fmt.Fprintf(&buf, "#导出时间：[%s]\n", s.cfg.Now().In(Shanghai).Format(alipayDateLayout))
	gbk, err := simplifiedchinese.GBK.NewEncoder().Bytes(buf.Bytes())
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	name, _ := simplifiedchinese.GBK.NewEncoder().String(s.cfg.AlipayPID + "_" + strings.ReplaceAll(date, "-", "") + "_账务明细.csv")
	fw, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, NonUTF8: true, Modified: s.cfg.Now()})
	if err != nil {
		return nil, err
	}
	if _, err := fw.Write(gbk); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
