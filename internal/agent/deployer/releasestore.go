package deployer

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	ri "helm.sh/helm/v4/pkg/release"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
)

// releaseStore is Helm's Secrets storage driver with its own writer of
// release Secrets. Reads (Get, List, Query, Delete) are Helm's. Writes store
// exactly what Helm stores — the same name, type, labels and
// base64(gzip(JSON)) at gzip's best compression, readable by any Helm — but
// reuse gzip writers: Helm allocates a new best-compression writer (about
// 1.5 MB) for every revision it writes, which was over a third of all the
// garbage of an install.
//
// It can also hold back a pending revision (holdPending): see Create.
//
// With a signer (sig), it signs every revision it writes (SignatureLabel)
// and shows Helm only revisions that carry a valid signature: whatever
// someone else stored under the release's name is neither the current
// release, nor in its history, nor deleted or uninstalled by Helm. Without
// one (tests of the storage itself) it trusts all.
type releaseStore struct {
	*driver.Secrets
	impl typedcorev1.SecretInterface

	// sig signs and verifies the revisions of namespace, the one impl
	// reads and writes.
	sig       *signer
	namespace string

	// holdPending makes Create keep a pending revision in memory until
	// its first Update, which then creates it as updated.
	holdPending bool

	// mu guards held and heldErr, and is held while a held revision is
	// written.
	mu sync.Mutex
	// held are the revisions Create kept back, by key.
	held map[string]ri.Releaser
	// heldErr is why writing a held revision failed.
	heldErr error
}

func newReleaseStore(impl typedcorev1.SecretInterface) *releaseStore {
	return &releaseStore{Secrets: driver.NewSecrets(impl), impl: impl}
}

// releaseSecretType is the Secret type Helm 3 and 4 store releases as.
const releaseSecretType corev1.SecretType = "helm.sh/release.v1"

var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestCompression)
	return w
}}

// encodeRelease is Helm's release encoding: JSON, gzip, base64.
func encodeRelease(r *release.Release) ([]byte, error) {
	js, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(w)
	w.Reset(&buf)
	if _, err := w.Write(js); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	out := make([]byte, base64.StdEncoding.EncodedLen(buf.Len()))
	base64.StdEncoding.Encode(out, buf.Bytes())
	return out, nil
}

// secretOf builds the Secret Helm's driver would write for r; stamp is the
// createdAt (Create) or modifiedAt (Update) label.
func secretOf(key string, rel ri.Releaser, stamp string) (*corev1.Secret, error) {
	r, err := asV1(rel)
	if err != nil {
		return nil, err
	}
	data, err := encodeRelease(r)
	if err != nil {
		return nil, fmt.Errorf("failed to encode release %q: %w", r.Name, err)
	}
	labels := make(map[string]string, len(r.Labels)+5)
	maps.Copy(labels, r.Labels)
	labels[stamp] = strconv.FormatInt(time.Now().Unix(), 10)
	labels["name"] = r.Name
	labels["owner"] = "helm"
	labels["status"] = r.Info.Status.String()
	labels["version"] = strconv.Itoa(r.Version)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: key, Labels: labels},
		Type:       releaseSecretType,
		Data:       map[string][]byte{"release": data},
	}, nil
}

// Create stores a new revision; ErrReleaseExists if it is already stored.
//
// With holdPending, a revision Helm creates as pending (pending-install,
// -upgrade or -rollback) is only kept in memory, and its first Update
// creates it with what Helm has recorded by then (deployed, failed, or a
// hook that started). Helm writes every install and upgrade twice, pending
// and then done; held, it is written once: one Secret write less per deploy
// on the cluster, and one encoding less in the agent. Helm's pending
// revision is a lock against a concurrent helm upgrade of the same release
// and a trace of an upgrade interrupted halfway; the agent is the only
// writer of its releases and deploys each one at a time (the Deployer's
// releaseLocks, under which it also checks who owns the release), and an
// interrupted deploy is simply done again (the revision before it is still
// the last one stored). The Deployer holds only deploys that do not wait
// for readiness, so no revision stays unwritten for long.
func (s *releaseStore) Create(key string, rel ri.Releaser) error {
	if s.holdPending {
		if r, err := asV1(rel); err == nil && r.Info != nil && r.Info.Status.IsPending() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if _, ok := s.held[key]; ok {
				return driver.ErrReleaseExists
			}
			if s.held == nil {
				s.held = map[string]ri.Releaser{}
			}
			s.held[key] = rel
			return nil
		}
	}
	return s.create(key, rel)
}

func (s *releaseStore) create(key string, rel ri.Releaser) error {
	obj, err := secretOf(key, rel, "createdAt")
	if err == nil {
		err = s.sign(obj, rel)
	}
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	ctx := context.Background()
	_, err = s.impl.Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) && s.sig != nil {
		err = s.replaceForeign(ctx, obj)
	}
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return driver.ErrReleaseExists
		}
		return fmt.Errorf("create: failed to create: %w", err)
	}
	return nil
}

// replaceForeign stores obj, a new revision, where a Secret is already
// stored under its name. Helm never sees that Secret unless the agent
// wrote it (Get, Query): one it did not write — someone else's, under the
// name of the agent's next revision — would otherwise fail every deploy
// of the release. So it is deleted (storage only, never what it lists,
// as purgeLeftovers does; under its UID, so a Secret replaced meanwhile
// stays) and obj created again. One the agent wrote is a revision Helm
// should have seen: it is named in the error.
func (s *releaseStore) replaceForeign(ctx context.Context, obj *corev1.Secret) error {
	old, err := s.impl.Get(ctx, obj.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading storage Secret %s/%s, which is in the way of a new revision: %w", s.namespace, obj.Name, err)
	}
	if rel, derr := decodeStored(old.Data["release"]); derr == nil && s.sig.verifySecret(old, rel) {
		return fmt.Errorf("storage Secret %s/%s is already a revision this agent wrote: %w", s.namespace, obj.Name, driver.ErrReleaseExists)
	}
	crlog.FromContext(ctx).Info("deleting Helm release storage this agent did not write, stored under the name of its next revision (the Secret only, nothing it lists)",
		"secret", s.namespace+"/"+obj.Name)
	err = s.impl.Delete(ctx, obj.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &old.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting storage Secret %s/%s, which this agent did not write, in the way of a new revision: %w", s.namespace, obj.Name, err)
	}
	_, err = s.impl.Create(ctx, obj, metav1.CreateOptions{})
	return err
}

// Update replaces a stored revision, or creates a held one.
func (s *releaseStore) Update(key string, rel ri.Releaser) error {
	s.mu.Lock()
	if _, ok := s.held[key]; ok {
		// Under the lock until it is stored: an Update racing this one
		// (Helm records a failure from a second goroutine when the
		// context ends) must find the Secret, not the held revision.
		defer s.mu.Unlock()
		delete(s.held, key)
		err := s.create(key, rel)
		if err != nil {
			// Helm ignores a failure to record the end of an install:
			// flush reports it.
			s.heldErr = errors.Join(s.heldErr, err)
		}
		return err
	}
	s.mu.Unlock()
	obj, err := secretOf(key, rel, "modifiedAt")
	if err == nil {
		err = s.sign(obj, rel)
	}
	if err != nil {
		return fmt.Errorf("update: %w", err)
	}
	if _, err := s.impl.Update(context.Background(), obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update: failed to update: %w", err)
	}
	return nil
}

// sign labels obj, the storage Secret of rel, with rel's signature.
func (s *releaseStore) sign(obj *corev1.Secret, rel ri.Releaser) error {
	if s.sig == nil {
		return nil
	}
	r, err := asV1(rel)
	if err != nil {
		return err
	}
	sig, err := s.sig.signature(s.namespace, r, obj.Labels, true)
	if err != nil {
		return fmt.Errorf("signing release %q: %w", r.Name, err)
	}
	// Replaces the signature of the revision Helm copied the labels from.
	obj.Labels[SignatureLabel] = sig
	return nil
}

// trusted reports whether rel, as Helm's driver read it from the Secret
// named key (with the labels of that Secret), is a revision the agent
// wrote (signer.verifySecret).
func (s *releaseStore) trusted(key string, rel ri.Releaser) bool {
	if s.sig == nil {
		return true
	}
	r, err := asV1(rel)
	if err != nil || r == nil {
		return false
	}
	return s.sig.verifySecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key, Namespace: s.namespace, Labels: r.Labels}}, r)
}

// listTrusted is Helm's driver's List and Query: the revisions stored in
// the Secrets selector selects, each with its Secret's labels, but only
// those the agent wrote. Helm's driver does not say which Secret a
// revision came from, and a signed revision copied under another name is
// not the agent's.
func (s *releaseStore) listTrusted(selector string) ([]ri.Releaser, error) {
	list, err := s.impl.List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	var out []ri.Releaser
	for i := range list.Items {
		item := &list.Items[i]
		r, err := decodeStored(item.Data["release"])
		if err != nil {
			continue
		}
		r.Labels = item.Labels
		if s.trusted(item.Name, r) {
			out = append(out, r)
		}
	}
	return out, nil
}

// Get returns a held revision as Helm would read it back, else the stored
// one if the agent wrote it: any other is not found.
func (s *releaseStore) Get(key string) (ri.Releaser, error) {
	s.mu.Lock()
	rel, ok := s.held[key]
	s.mu.Unlock()
	if ok {
		return rel, nil
	}
	if s.sig == nil {
		return s.Secrets.Get(key)
	}
	// Read here rather than through Helm's driver, which drops the labels
	// name, version and owner that verification compares with the payload.
	obj, err := s.impl.Get(context.Background(), key, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, driver.ErrReleaseNotFound
		}
		return nil, fmt.Errorf("get: failed to get %q: %w", key, err)
	}
	r, err := decodeStored(obj.Data["release"])
	if err != nil {
		return nil, fmt.Errorf("get: failed to decode data %q: %w", key, err)
	}
	if !s.sig.verifySecret(obj, r) {
		return nil, driver.ErrReleaseNotFound
	}
	// As Helm's Get returns it: without the labels Helm itself sets.
	r.Labels = maps.Clone(obj.Labels)
	for _, k := range []string{"name", "owner", "status", "version", "createdAt", "modifiedAt"} {
		delete(r.Labels, k)
	}
	return r, nil
}

// List is Helm's, of the revisions the agent wrote.
func (s *releaseStore) List(filter func(ri.Releaser) bool) ([]ri.Releaser, error) {
	if s.sig == nil {
		return s.Secrets.List(filter)
	}
	rels, err := s.listTrusted(k8slabels.Set{"owner": "helm"}.String())
	if err != nil {
		return nil, fmt.Errorf("list: failed to list: %w", err)
	}
	var out []ri.Releaser
	for _, rel := range rels {
		if filter(rel) {
			out = append(out, rel)
		}
	}
	return out, nil
}

// Query is Helm's, of the revisions the agent wrote: none is not found.
func (s *releaseStore) Query(labels map[string]string) ([]ri.Releaser, error) {
	if s.sig == nil {
		return s.Secrets.Query(labels)
	}
	for _, v := range labels {
		if errs := validation.IsValidLabelValue(v); len(errs) != 0 {
			return nil, fmt.Errorf("invalid label value: %q: %s", v, strings.Join(errs, "; "))
		}
	}
	out, err := s.listTrusted(k8slabels.Set(labels).String())
	if err != nil {
		return nil, fmt.Errorf("query: failed to query with labels: %w", err)
	}
	if len(out) == 0 {
		return nil, driver.ErrReleaseNotFound
	}
	return out, nil
}

// Delete forgets a held revision, or deletes a stored one the agent wrote.
func (s *releaseStore) Delete(key string) (ri.Releaser, error) {
	s.mu.Lock()
	rel, ok := s.held[key]
	delete(s.held, key)
	s.mu.Unlock()
	if ok {
		return rel, nil
	}
	// Helm's Delete reads the revision first, too.
	rel, err := s.Get(key)
	if err != nil {
		return nil, err
	}
	if err := s.impl.Delete(context.Background(), key, metav1.DeleteOptions{}); err != nil {
		return nil, err
	}
	return rel, nil
}

// flush writes the revisions still held, as Helm would have left them, and
// returns why any held revision could not be written. The Deployer calls it
// when an action has returned: Helm updates every revision it creates
// before it returns, so normally nothing is left.
func (s *releaseStore) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := []error{s.heldErr}
	for key, rel := range s.held {
		errs = append(errs, s.create(key, rel))
	}
	s.held, s.heldErr = nil, nil
	return errors.Join(errs...)
}
