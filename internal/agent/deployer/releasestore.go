package deployer

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	ri "helm.sh/helm/v4/pkg/release"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// releaseStore is Helm's Secrets storage driver with its own writer of
// release Secrets. Reads (Get, List, Query, Delete) are Helm's. Writes store
// exactly what Helm stores — the same name, type, labels and
// base64(gzip(JSON)) at gzip's best compression, readable by any Helm — but
// reuse gzip writers: Helm allocates a new best-compression writer (about
// 1.5 MB) for every revision it writes, which was over a third of all the
// garbage of an install.
type releaseStore struct {
	*driver.Secrets
	impl typedcorev1.SecretInterface
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
func (s *releaseStore) Create(key string, rel ri.Releaser) error {
	obj, err := secretOf(key, rel, "createdAt")
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if _, err := s.impl.Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return driver.ErrReleaseExists
		}
		return fmt.Errorf("create: failed to create: %w", err)
	}
	return nil
}

// Update replaces a stored revision.
func (s *releaseStore) Update(key string, rel ri.Releaser) error {
	obj, err := secretOf(key, rel, "modifiedAt")
	if err != nil {
		return fmt.Errorf("update: %w", err)
	}
	if _, err := s.impl.Update(context.Background(), obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update: failed to update: %w", err)
	}
	return nil
}
