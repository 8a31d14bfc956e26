// Package paysim is a payment-channel simulator: an HTTP server that takes idempotent charges,
// refunds and receipt notifications, answers lookups, exports daily statements in four real
// channel layouts, and injects faults deterministically — so that idemops' takeover,
// reconciliation and outbox paths meet the failures they exist for. Client is its Go client.
//
// # Endpoints
//
//	POST  /charges                        Idempotency-Key header (the downstream key); no key: not idempotent
//	GET   /charges/{merchant_order_no}    the charge (the first one, when a no-key double charge made two); 404 when none
//	POST  /charges/{merchant_order_no}/refunds   Idempotency-Key header required (the merchant refund number)
//	POST  /notifications                  Idempotency-Key header required; counts deliveries per key
//	GET   /notifications/{key}            the notification and its delivery count; 404 when none
//	GET   /statements/{YYYY-MM-DD}?format=wechat|alipay|stripe|adyen[&tar_type=GZIP]   (GZIP: gzip-compressed, as WeChat Pay serves it)
//	GET   /alipay/bill-url?bill_date=YYYY-MM-DD   Alipay's bill query: JSON whose bill_download_url is the day's zip
//	GET   /alipay/bills/{YYYY-MM-DD}.zip   业务明细 + 业务明细(汇总), GBK, GBK entry names
//	GET   /v3/bill/tradebill, /v3/bill/fundflowbill   WeChat Pay APIv3 bill queries (signed; see Statement protocols)
//	GET   /v3/billdownload/file?token=…    WeChat Pay's bill download (signed request, unsigned answer, expires)
//	GET|POST /gateway.do                  Alipay's gateway: alipay.data.dataservice.bill.downloadurl.query (RSA2)
//	GET   /downloadBillFile.resource?token=…   Alipay's bill zip (expires 30 s after the answer)
//	GET   /v1/payouts, /v1/balance_transactions, /v1/charges/{id}   Stripe's API (Bearer secret key)
//	GET   /reports/download/MerchantAccount/{account}/settlement_detail_report_batch_N.csv   Adyen (X-API-Key or basic)
//	GET   /_paysim/protocol               paysim's public keys and ids; POST /_paysim/protocol/merchants registers a merchant's
//	POST  /_paysim/protocol/rotate        a new WeChat Pay platform key signs; the previous one stays listed
//	GET   /_paysim/charges?merchant_order_no=X    every charge for an order number, with a count
//	POST  /_paysim/orders/{merchant_order_no}/close   close an unpaid order (409 order_paid when paid); a charge.closed callback follows
//	POST  /_paysim/charges                fabricate a charge the merchant never recorded (channel-only)
//	PATCH /_paysim/charges/{id}           change a charge's amount, currency or status as the channel reports it
//	GET   /healthz
//
// A first POST answers 201; a replay of the same key and body answers 200 with the same charge
// and `Idempotent-Replayed: true`; the same key with another body answers 422. Errors are JSON
// {"code": "...", "message": "..."}.
//
// # Faults
//
// Config (or the paysim command's flags) sets rates for: an injected 503 before anything is
// committed; "commit, then drop the response" (the connection is closed without an answer, or a
// 502 where the connection cannot be hijacked); and, for charges sent without a key, charging
// twice. Latency is added to every charge, refund, lookup and notification call. Each decision
// is a hash of (seed, fault, subject, n) where subject is the request's key (or merchant order
// number) and n counts requests for that subject, so the same seed and the same requests give the
// same faults whatever the interleaving. The X-Paysim-Fault request header forces faults for one
// request: a comma-separated list of none, error, drop-response, double-charge, latency=DURATION.
//
// # Callbacks
//
// With a notify URL (Config.NotifyURL, SetNotifyURL, --notify-url) the channel tells the merchant
// asynchronously what happened to an order: charge.succeeded after a succeeded charge,
// charge.refunded after a refund, charge.closed after an admin close. Each is a POST of a
// CallbackEvent signed in HeaderSignature ("t=<unix>,v1=<hex HMAC-SHA256 of t.body>", see
// VerifySignature), retried on Config.NotifySchedule until a 2xx answer, then given up. Faults,
// decided per event from the seed or forced by the causing request's X-Paysim-Fault:
// notify-duplicate (sent again after the acknowledgement), notify-reorder (held back until the
// order's next event has been tried, or NotifyDelay), notify-delay=DURATION, and late-close (a
// stale charge.closed once the succeeded callback is acknowledged).
//
// # Statement protocols
//
// paysim speaks the channels' own statement protocols (protocol.go): it checks a merchant's
// request as the channel does and refuses it with the channel's own answer — WeChat Pay 401
// SIGN_ERROR for a missing or bad Authorization (unknown serial, a timestamp five minutes or more
// off, a signature that does not verify), Alipay's unsigned error_response 40001/40002
// (isv.missing-signature, isv.invalid-signature, isv.invalid-app-id; Alipay answers these with
// HTTP 200), Stripe's 401 invalid_request_error, Adyen's 401 security error. Its answers are
// signed: WeChat Pay's in the Wechatpay-* headers by a platform certificate (or, with
// WechatPublicKeyMode, a WeChat Pay public key PUB_KEY_ID_…), Alipay's over the response member.
// A WeChat Pay bill query answers hash_value = the SHA1 of the bill (decompressed) and a
// download_url that lives WechatDownloadLife; in WechatBillEncrypted or WechatBillSplit mode it
// answers download_bill_list instead: parts encrypted AEAD_AES_256_GCM under a key wrapped for the
// merchant (RSA-OAEP), hashed as downloaded, listed out of bill_sequence order. With BillReady
// ReadyNextDay10 a date's bill is STATEMENT_CREATING (WeChat Pay) or isp.bill_not_exist (Alipay)
// until 10:00 Asia/Shanghai the next day. Stripe's balance transactions and payouts are derived
// from the charges and refunds (a payout per UTC day and currency, arriving two days later);
// Adyen's batch N is the UTC day N days after 1970-01-01.
//
// # Statements
//
// A statement lists the day's succeeded charges (by creation time) and refunds (by refund time);
// declined charges moved no money and appear in none. "The day" is local to the channel: WeChat
// Pay and Alipay dates are Asia/Shanghai days (UTC+8, no daylight saving), Stripe and Adyen dates
// are UTC days. A charge made through a channel (ChargeRequest.Channel: wechat, alipay, stripe,
// adyen) is listed on that channel's statements only, its refunds too; a charge of no channel in
// particular is listed as before channels were told apart: the WeChat and Alipay bills are
// domestic CNY bills and list CNY transactions only; Stripe and Adyen list every currency. In every layout the merchant order number is the
// downstream key and the channel transaction id is the charge id (ch_…); refunds carry the
// refund id (re_…) and the merchant refund number (the refund's Idempotency-Key). Amounts are
// rendered exactly from int64 minor units with the currency's exponent. The fee is FeeBasisPoints
// of a charge (half up, in minor units); refunds return no fee.
//
//   - wechat: the ALL trade bill, UTF-8: 27-column header, detail rows with every value
//     backtick-prefixed (an empty value is a lone backtick), refunds as 交易状态 REFUND with
//     应结订单金额 0.00 and the refund columns filled, then the summary header and one summary
//     row (总交易单数 counts every detail row).
//   - alipay: 业务明细, GBK: `#` preamble, 25-column header, rows with a trailing TAB after
//     支付宝交易号, 商户订单号 and a filled 退款批次号/请求号, refunds with 业务类型 退款 and
//     negative 订单金额/商家实收, then `#` footer lines with the 交易合计 and 退款合计 totals.
//     The bill zip (/alipay/bills/…) holds it with its 业务明细(汇总): header 门店编号,门店名称,
//     交易订单总笔数,退款订单总笔数,订单金额（元）,商家实收（元）,…,服务费（元）,分润（元）,实收净额（元）,
//     a store row and a 合计 row; 实收净额 = 商家实收 + 服务费.
//   - stripe: payout_reconciliation.itemized.5 columns, major units, lower-case currency,
//     reporting_category charge|refund, the order number in payment_metadata[order_no] (on refund
//     rows too) and the refund number in refund_metadata[refund_no]; one automatic payout per
//     currency, whose payout row (last, gross = net = −the payout) is the settlement it states.
//   - adyen: settlement details, Type Settled (Gross Credit) and Refunded (Gross Debit), Merchant
//     Reference = order number, then one MerchantPayout row per net currency whose Net Debit is
//     the day's net total (the control total).
package paysim
