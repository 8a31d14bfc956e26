// Package reconcile reads payment-channel statements, imports them, matches them against the
// local records (idempotency_keys) and keeps the findings that operators resolve.
//
// Reconciler (New) owns the tables of migrations/00004_reconcile.sql: Import loads a statement
// atomically (COPY into statement_lines in the transaction that writes the statement row; SHA-256
// dedupe; versions with a diff),
// Match finds discrepancies set-based in SQL (see the comment above its queries), Reconcile does
// both on a recon_runs row with live progress, RunJob fetches a recon job's statement first, and
// Resolve, Ignore and Recover close findings (Recover through the claim logic). Job is the
// daemon job ("reconcile").
//
// # Statement formats
//
// Each format is a Parser, found by name with ParserFor (Formats lists them): "wechat" (WeChat
// Pay ALL trade bill), "alipay" (Alipay 业务明细, GBK), "stripe" (payout reconciliation,
// itemized), "adyen" (settlement details) and "profile" (any CSV, described by a YAML Profile).
// The layouts follow /work/shared/reference/statement-formats.md; paysim exports the same ones.
//
// Every parser maps columns by header name, never by position (older layouts have fewer
// columns), and turns each order row into a StatementLine: ids with their format decoration
// stripped, the amount in exact int64 minor units of its currency (never floating point), an ISO
// 4217 currency, a normalized Status, the time in UTC, and the raw row text. Amounts are signed
// from the merchant's side: refunds and chargebacks are negative whatever the file's convention.
// Rows that move money but are not orders (Stripe fees and payouts, Adyen MerchantPayout) are
// skipped and counted in Summary.Skipped.
//
// # Failing loudly
//
// A row that does not parse stops the parse with a *LineError, `line N: reason`, N being the
// physical line in the file. There is no silent zero: an empty, malformed or over-precise amount,
// an unknown status or business type, a row with more or fewer fields than the header, bytes
// invalid in the file's encoding — each is an error for its line.
//
// Where a statement states its own totals (the WeChat summary row, the Alipay footer), Parse
// compares them with the sums of the detail rows; if they differ the statement is to be rejected
// whole: Parse returns the Summary (holding stated and computed values per total, so the caller
// can also record a finding) with a *ControlTotalError (errors.Is ErrControlTotal). Stripe and
// Adyen statements state none; their Summary.Control is nil.
//
// # Streaming
//
// Parse holds one row at a time and hands each line to a callback, so a million-line statement
// parses in a few MiB of heap (BenchmarkParseWechat1M enforces it). Lines reach the callback
// before the control totals at the end of the file are read: an importer must load them in one
// transaction (or a staging table) and discard them all when Parse returns an error. The input is
// limited (WithMaxBytes, counted after gzip decompression; WithMaxLineBytes per line) and the
// context is checked every 1024 rows.
package reconcile
