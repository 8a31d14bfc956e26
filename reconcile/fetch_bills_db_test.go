package reconcile

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/idemops/idemops/chanproto"
	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// The fetchers get every bill their channel serves, verified, even the ones no statement format
// reads yet (so no job can choose them): WeChat Pay's fund flow bill (资金账单) and Alipay's
// signcustomer bill (账务明细).
func TestFetchers_FundFlowAndSignCustomerBills(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	sim, err := paysim.NewServer(paysim.Config{Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	now := time.Now().In(shanghai)
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, shanghai).AddDate(0, 0, -1)
	at := day.Add(10 * time.Hour)
	if _, err := paysim.NewClient(srv.URL, nil).InsertChannelCharge(ctx, paysim.ChannelCharge{AmountMinor: 4200, Currency: "CNY",
		MerchantOrderNo: "order-fund-1", CreatedAt: &at}); err != nil {
		t.Fatal(err)
	}
	merchant, _ := rsa.GenerateKey(rand.Reader, 2048)
	if err := sim.AddMerchant(paysim.Merchant{WechatSerial: "ABCDEF01", WechatPublicKey: string(chanproto.EncodePublicKey(&merchant.PublicKey)),
		AlipayAppID: "2021000100000009", AlipayPublicKey: string(chanproto.EncodePublicKey(&merchant.PublicKey))}); err != nil {
		t.Fatal(err)
	}
	keys, err := sim.ProtocolKeys()
	if err != nil {
		t.Fatal(err)
	}
	ring, _ := NewKeyring([]byte("fetch-bills-test-secret-01"))
	r, err := New(db, Config{Sources: SourcePolicy{Allow: []string{srv.URL}}, Keyring: ring, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	key := string(chanproto.EncodePrivateKey(merchant))
	if _, err := r.SetChannelSettings(ctx, db, "wx", KindWechatPay, AccountSettings{APIBase: srv.URL, MchID: keys.WechatMchID,
		PlatformKeys: []PlatformKey{{ID: keys.WechatPlatform[0].ID, PEM: keys.WechatPlatform[0].PEM}}}, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SetCredential(ctx, db, "wx", CredMerchantPrivateKey, CredentialInput{Value: key, Label: "ABCDEF01"}, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SetChannelSettings(ctx, db, "ali", KindAlipay, AccountSettings{APIBase: srv.URL + "/gateway.do", AppID: "2021000100000009",
		AlipayPublicKey: keys.AlipayPublicKey}, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SetCredential(ctx, db, "ali", CredAppPrivateKey, CredentialInput{Value: key}, "test"); err != nil {
		t.Fatal(err)
	}
	read := func(f Fetcher, channel, bill string) (string, string) {
		t.Helper()
		acct, err := r.channelAccount(ctx, channel)
		if err != nil {
			t.Fatal(err)
		}
		got, err := f.Fetch(ctx, FetchRequest{Job: &ReconJob{JobSpec: JobSpec{Bill: bill}}, Account: acct, BillDate: day.Format(time.DateOnly)})
		if err != nil {
			t.Fatalf("%s %s: %v", channel, bill, err)
		}
		defer got.close()
		u, err := Unpack(got.f, got.size, ArchiveLimits{})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		b, _ := io.ReadAll(u.Statement)
		return u.StatementName, string(b)
	}
	if _, bill := read(wechatFetcher{r}, "wx", "fundflowbill"); !strings.Contains(bill, "资金流水总笔数") || !strings.Contains(bill, "`order-fund-1") {
		t.Errorf("fund flow bill:\n%s", bill)
	}
	name, bill := read(alipayFetcher{r}, "ali", "signcustomer")
	text, _ := simplifiedchinese.GBK.NewDecoder().String(bill)
	if !strings.Contains(name, "账务明细") || !strings.Contains(text, "账务流水号") || !strings.Contains(text, "order-fund-1") {
		t.Errorf("signcustomer bill %s:\n%s", name, text)
	}
}
