package serve

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fleetgo/fleet/internal/contentapi"
)

// Bounds of one credential watch: the agent's own timeoutSeconds, at most
// maxCredentialWatch (it watches again after), defaultCredentialWatch when
// it sets none.
const (
	defaultCredentialWatch = time.Minute
	maxCredentialWatch     = 5 * time.Minute
)

// parseCredentialPath splits
// /apis/<group>/<version>/namespaces/<ns>/registrationcredentials[/<name>];
// name is empty for the collection (a watch).
func parseCredentialPath(p string) (ns, name string, ok bool) {
	rest, found := strings.CutPrefix(p, "/apis/"+contentapi.Group+"/"+contentapi.Version+"/namespaces/")
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[1] != contentapi.CredentialResource || parts[0] == "" {
		return "", "", false
	}
	if len(parts) == 3 {
		if parts[2] == "" {
			return "", "", false
		}
		return parts[0], parts[2], true
	}
	return parts[0], "", true
}

// serveCredential answers a GET of one registration's credential, or a
// watch for it (the collection, with fieldSelector=metadata.name=<name>).
// The API server has authorized the caller to get or watch
// registrationcredentials in the namespace; which registration's
// credential the caller may have, the Credentials decide from its user.
func (h *handler) serveCredential(w http.ResponseWriter, r *http.Request, ns, name string) {
	if h.credentials == nil {
		// As if the resource did not exist (no name in the details): the
		// agent then waits for a hand-over Secret.
		writeStatus(w, apierrors.NewNotFound(contentapi.CredentialGroupResource, ""))
		return
	}
	if !h.admit(w, r, contentapi.CredentialGroupResource, http.MethodGet) {
		return
	}
	user := h.user(r)
	if user == "" {
		writeStatus(w, apierrors.NewUnauthorized("the aggregation layer sent no user"))
		return
	}
	q := r.URL.Query()
	watching := q.Get("watch") == "true" || q.Get("watch") == "1"
	if name != "" && !watching {
		cred, err := h.credentials.Credential(r.Context(), contentapi.CredentialRequest{User: user, Namespace: ns, Name: name})
		if err != nil {
			writeStatus(w, err)
			return
		}
		writeJSON(w, http.StatusOK, cred)
		return
	}
	if !watching {
		writeStatus(w, apierrors.NewMethodNotSupported(contentapi.CredentialGroupResource, "list"))
		return
	}
	if name == "" {
		var err error
		if name, err = selectedName(q); err != nil {
			writeStatus(w, err)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), watchTimeout(q))
	defer cancel()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	cred, err := h.credentials.Credential(ctx, contentapi.CredentialRequest{User: user, Namespace: ns, Name: name, Wait: true})
	switch {
	case err != nil:
		st := statusOf(err)
		writeEvent(w, "ERROR", &st)
	case cred != nil:
		writeEvent(w, "ADDED", cred)
	}
}

// user is the caller the aggregation layer authenticated (only called
// after authenticate accepted the aggregation layer's certificate, so the
// header is the API server's, not the client's).
func (h *handler) user(r *http.Request) string {
	fp := h.proxy.Load()
	if fp == nil {
		return ""
	}
	for _, k := range fp.userHeaders {
		if v := r.Header.Get(k); v != "" {
			return v
		}
	}
	return ""
}

// selectedName is the registration a collection watch names with
// fieldSelector=metadata.name=<name>: a watch is of one registration.
func selectedName(q url.Values) (string, error) {
	sel, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err == nil {
		if name, ok := sel.RequiresExactMatch("metadata.name"); ok && name != "" {
			return name, nil
		}
	}
	return "", apierrors.NewBadRequest("a watch of registrationcredentials names one registration: fieldSelector=metadata.name=<registration>")
}

// watchTimeout is the watch's timeoutSeconds, bounded.
func watchTimeout(q url.Values) time.Duration {
	if s, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && s > 0 {
		return min(time.Duration(s)*time.Second, maxCredentialWatch)
	}
	return defaultCredentialWatch
}

// writeEvent writes one watch event.
func writeEvent(w http.ResponseWriter, typ string, obj any) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return
	}
	_ = json.NewEncoder(w).Encode(&metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: raw}})
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}
