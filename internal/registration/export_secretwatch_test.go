package registration

// KubeconfigRecheckOf lets the package's tests give some clusters a
// recheck interval of their own; they set it in an init function, before
// TestMain starts the managers that read it.
var KubeconfigRecheckOf = &kubeconfigRecheckOf
