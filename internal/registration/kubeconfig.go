package registration

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// importRESTConfig parses the kubeconfig of a manager-initiated import.
//
// The kubeconfig comes from a Secret that any user who may write Secrets in
// the workspace controls, and the manager acts on it with its own
// filesystem and process. client-go would read files the kubeconfig names
// (tokenFile, client-certificate, client-key, certificate-authority) and
// run the commands of exec and auth-provider plugins. A kubeconfig with
// "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token" and a
// server of the user's choosing would hand that server the manager's own
// credential. So only self-contained kubeconfigs are accepted: credentials
// and CA inline (token, username and password, *-data fields).
func importRESTConfig(data []byte) (*rest.Config, error) {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		// The parser's message may quote the document: keep it out.
		return nil, fmt.Errorf("key \"value\" is not a valid kubeconfig")
	}
	if refs := localReferences(cfg); len(refs) > 0 {
		return nil, fmt.Errorf("the kubeconfig refers to local files or plugins (%s); an imported kubeconfig must carry its credentials and CA inline (token, client-certificate-data, client-key-data, certificate-authority-data)",
			strings.Join(refs, ", "))
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("key \"value\" is not a usable kubeconfig (no current context?)")
	}
	return rc, nil
}

// localReferences lists, by entry and field name (never by value), what in
// cfg would make client-go read a local file or run a command.
func localReferences(cfg *clientcmdapi.Config) []string {
	var out []string
	for name, c := range cfg.Clusters {
		if c != nil && c.CertificateAuthority != "" {
			out = append(out, fmt.Sprintf("cluster %q certificate-authority", name))
		}
	}
	for name, u := range cfg.AuthInfos {
		if u == nil {
			continue
		}
		for field, set := range map[string]bool{
			"tokenFile":          u.TokenFile != "",
			"client-certificate": u.ClientCertificate != "",
			"client-key":         u.ClientKey != "",
			"exec":               u.Exec != nil,
			"auth-provider":      u.AuthProvider != nil,
		} {
			if set {
				out = append(out, fmt.Sprintf("user %q %s", name, field))
			}
		}
	}
	sort.Strings(out)
	return out
}
