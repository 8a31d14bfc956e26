package paysim

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"golang.org/x/text/encoding/simplifiedchinese"
)

// Bills as the channels deliver them: WeChat Pay's bill download answers gzip when asked
// (tar_type=GZIP); Alipay's bill query (alipay.data.dataservice.bill.downloadurl.query) answers
// the URL of a zip holding the 业务明细 detail and its 业务明细(汇总) summary, GBK-encoded, entry
// names in GBK without the UTF-8 flag.

// alipaySummaryHeader is the 业务明细(汇总) header: one row per store and a 合计 row.
var alipaySummaryHeader = []string{"门店编号", "门店名称", "交易订单总笔数", "退款订单总笔数", "订单金额（元）",
	"商家实收（元）", "支付宝优惠（元）", "商家优惠（元）", "卡消费金额（元）", "服务费（元）", "分润（元）", "实收净额（元）"}

// alipaySummary renders 业务明细(汇总) for the day in GBK: the day's counts and totals, 实收净额 =
// 商家实收 + 服务费 (the fee is negative).
func (s *Server) alipaySummary(d day, entries []entry) ([]byte, error) {
	var trades, refunds int
	var ordered, received, fees int64
	for _, e := range entries {
		if r := e.refund; r != nil {
			refunds++
			received -= r.AmountMinor
			continue
		}
		trades++
		ordered += e.charge.AmountMinor
		received += e.charge.AmountMinor
		fees -= s.fee(e)
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "#支付宝业务汇总查询\n#账号：[%s]\n", s.cfg.AlipayPID)
	fmt.Fprintf(&buf, "#起始日期：[%s]   终止日期：[%s]\n", d.start.Format(alipayDateLayout), d.end.Format(alipayDateLayout))
	fmt.Fprintf(&buf, "#-----------------------------------------业务汇总列表----------------------------------------\n")
	zero := formatMinor(0, "CNY")
	row := func(store string) []string {
		return []string{store, "", itoa(trades), itoa(refunds), formatMinor(ordered, "CNY"), formatMinor(received, "CNY"),
			zero, zero, zero, formatMinor(fees, "CNY"), zero, formatMinor(received+fees, "CNY")}
	}
	if err := csvRows(&buf, [][]string{alipaySummaryHeader, row(""), row("合计")}); err != nil {
		return nil, err
	}
	fmt.Fprintf(&buf, "#-----------------------------------------业务汇总列表结束------------------------------------\n")
	fmt.Fprintf(&buf, "#导出时间：[%s]\n", s.cfg.Now().In(Shanghai).Format(alipayDateLayout))
	return simplifiedchinese.GBK.NewEncoder().Bytes(buf.Bytes())
}

// AlipayBillZip renders the day's Alipay bill zip: {PID}_{yyyymmdd}_业务明细.csv and
// {PID}_{yyyymmdd}_业务明细(汇总).csv.
func (s *Server) AlipayBillZip(date string) ([]byte, error) {
	start, err := time.ParseInLocation("2006-01-02", date, Shanghai)
	if err != nil {
		return nil, fmt.Errorf("%w, got %q", ErrBadDate, date)
	}
	d := day{date: date, start: start, end: start.AddDate(0, 0, 1)}
	entries := s.entries(d, FormatAlipay)
	detail, err := s.alipayDetail(d, entries)
	if err != nil {
		return nil, err
	}
	summary, err := s.alipaySummary(d, entries)
	if err != nil {
		return nil, err
	}
	prefix := s.cfg.AlipayPID + "_" + strings.ReplaceAll(date, "-", "") + "_"
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range []struct {
		name string
		body []byte
	}{{prefix + "业务明细.csv", detail}, {prefix + "业务明细(汇总).csv", summary}} {
		name, err := simplifiedchinese.GBK.NewEncoder().String(f.name)
		if err != nil {
			return nil, err
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, NonUTF8: true, Modified: s.cfg.Now()})
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// getAlipayBillURL handles GET /alipay/bill-url?bill_date=YYYY-MM-DD, answering as Alipay's
// bill query does: the URL of the day's bill zip.
func (s *Server) getAlipayBillURL(w http.ResponseWriter, r *http.Request) {
	date := r.URL.Query().Get("bill_date")
	if _, err := time.Parse("2006-01-02", date); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "bill_date: "+ErrBadDate.Error())
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	writeJSON(w, http.StatusOK, map[string]any{"alipay_data_dataservice_bill_downloadurl_query_response": map[string]string{
		"code": "10000", "msg": "Success", "bill_download_url": scheme + "://" + r.Host + "/alipay/bills/" + date + ".zip"}})
}

// getAlipayBillZip handles GET /alipay/bills/{YYYY-MM-DD}.zip.
func (s *Server) getAlipayBillZip(w http.ResponseWriter, r *http.Request) {
	date, ok := strings.CutSuffix(r.PathValue("file"), ".zip")
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "no such bill")
		return
	}
	b, err := s.AlipayBillZip(date)
	switch {
	case errors.Is(err, ErrBadDate):
		writeError(w, http.StatusBadRequest, "invalid_request", "date: "+err.Error())
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/zip")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="alipay_%s.zip"`, date))
	w.Write(b)
}

// gzipped compresses a WeChat bill for tar_type=GZIP.
func gzipped(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
