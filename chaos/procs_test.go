package chaos

import (
	"context"
	"testing"
	"time"
)

// TestClaimCycle_OneKillAndRestartAtATime: a running part can be claimed for a kill and restart
// once; a second fault meanwhile is refused (it would kill the restart's own process and race it
// for the port); once the cycle ends it can be claimed again; a part that is down cannot.
func TestClaimCycle_OneKillAndRestartAtATime(t *testing.T) {
	p := &proc{name: "part", bin: "/bin/sh", args: []string{"-c", "echo READY up; exec sleep 30"}, logs: t.TempDir()}
	if err := p.start(context.Background(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	if !p.claimCycle() {
		t.Fatal("a running part could not be claimed")
	}
	if p.claimCycle() {
		t.Fatal("a second claim while the first cycle is under way was granted")
	}
	p.cycling.Store(false) // the cycle's restart ended
	if !p.claimCycle() {
		t.Fatal("after the cycle ended the part could not be claimed again")
	}
	p.cycling.Store(false)
	p.kill()
	if p.claimCycle() {
		t.Fatal("a part that is down was claimed for a kill")
	}
}
