package daemon

// TestSignals switches d's test signals on and returns them; call it before Start.
func (d *Daemon) TestSignals() *testSignals {
	d.signals.init()
	return &d.signals
}
