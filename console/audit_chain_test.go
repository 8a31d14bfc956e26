package console

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestAudit_HeadSequenceIsAMetric(t *testing.T) {
	b := setup(t)
	b.appendAudit(3)
	resp, err := http.Get(b.ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "\nidemops_audit_head_seq 3\n") {
		t.Errorf("/metrics lacks idemops_audit_head_seq 3:\n%s", body)
	}
}
