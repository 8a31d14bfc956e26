package keys

// CappedCountSQL is CountCapped's statement, for a test that reads its plan.
var CappedCountSQL = cappedCountSQL
