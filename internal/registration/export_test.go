package registration

// KubeconfigRecheck lets the package's tests shorten how often the manager
// looks at an imported cluster's kubeconfig Secret again; they set it in
// an init function, before TestMain starts the managers that read it.
var KubeconfigRecheck = &kubeconfigRecheck
