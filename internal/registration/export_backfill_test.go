package registration

// BackfillSpread lets the package's tests set the time over which a
// manager backfills status.agentConfigHash; they set it in an init
// function, before TestMain starts the managers that read it.
var BackfillSpread = &backfillSpread
