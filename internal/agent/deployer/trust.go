package deployer

// Release storage trust. Helm keeps a release's revisions in Secrets of
// the release namespace, and the agent decides from them what to uninstall
// (garbage collection, the clean-up of a deleted BundleDeployment), what
// the current release of a BundleDeployment is (whose objects an upgrade
// deletes when they leave it) and what drift correction re-applies. Anyone
// who may create Secrets in some namespace can write a Secret that looks
// like such a revision, and the agent acts with far more rights than that
// user. So the agent signs every revision it writes (an HMAC over what
// those decisions read, keyed with a random key kept in a Secret of its
// own namespace) and acts only on revisions that carry a valid signature.
//
// Storage written before the agent signed anything is adopted (signed) by
// its BundleDeployment's next deploy when it was created before the
// adoption cutoff: the first key's creation time, recorded once on the
// agent's Namespace (SigningCutoffAnnotation). Not the current key's
// creation time: a key deleted and created again would make every unsigned
// revision planted meanwhile "older than the key", and adoptable.

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

const (
	// SignatureLabel on a release storage Secret is the agent's signature
	// of that revision. A label rather than an annotation: Helm's own
	// storage driver keeps a revision's custom labels when it rewrites it
	// (a status change), and drops annotations.
	SignatureLabel = "fleet.cattle.io/release-signature"
	// SigningKeySecret, in the agent's namespace, holds the key the agent
	// signs its release storage with. The agent creates it on first use.
	SigningKeySecret = "fleet-agent-release-signing-key"
	signingKeyField  = "key"
	signingKeyLen    = 32
	// SigningCutoffAnnotation on the agent's Namespace (RFC 3339) is the
	// adoption cutoff: revisions created before it were written before
	// the agent signed anything (adoptable, see adopt), unsigned ones
	// created since are never the agent's. The agent records the first
	// key's creation time once and never moves it later: it is not the
	// key Secret's own timestamp, which a deleted and re-created key
	// would move, nor anywhere a user who may only write Secrets of some
	// namespace can change.
	SigningCutoffAnnotation = "fleet.cattle.io/release-signing-cutoff"
)

var (
	// signerLoadTimeout bounds reading (or creating) the key and the
	// cutoff. A variable so that a test can shorten it.
	signerLoadTimeout = 30 * time.Second
	// cutoffRetryInterval is how long an agent that could not read or
	// record the cutoff adopts nothing before it tries again.
	cutoffRetryInterval = time.Minute
)

// signedStorageLabels are the storage labels a signature covers: what
// garbage collection reads from the label alone.
var signedStorageLabels = []string{StorageBundleIDLabel, StorageAgentNamespaceLbl, StorageKeepResourcesLabel, StorageDeleteNSLabel}

// signer signs and verifies revisions with the agent's key. The key never
// leaves it: no message, log or status quotes it.
type signer struct {
	key []byte
	// keyCreated is when the key Secret was created.
	keyCreated time.Time
	// cutoff is the adoption cutoff (SigningCutoffAnnotation), never
	// later than keyCreated; zero (nothing is adopted) while it could not
	// be read or recorded.
	cutoff time.Time
	// retryAt is when the Deployer tries again to read or record an
	// unknown cutoff; guarded by the Deployer's keyMu.
	retryAt time.Time
}

// signedRevision is what a signature covers: the revision's identity and
// everything a decision of the agent reads from it: the manifest (what an
// uninstall or upgrade deletes, what a rollback applies), the hooks (what
// an uninstall runs), the chart metadata (the serviceAccount an uninstall
// acts as, the BundleDeployment, keepResources) and the storage labels.
// Not the status: Helm changes it on revisions it already stored
// (superseded, failed), and it only chooses among the agent's revisions.
type signedRevision struct {
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Version   int               `json:"version"`
	Labels    map[string]string `json:"labels"`
	// ManifestSHA256 stands for the manifest, which may be large: JSON
	// round trips valid UTF-8 exactly, so its hash is the same read back.
	ManifestSHA256 string          `json:"manifestSHA256"`
	Hooks          []*release.Hook `json:"hooks"`
	Chart          *chart.Metadata `json:"chart"`
	ApplyMethod    string          `json:"applyMethod"`
}

var signatureEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// signature is the signature of rel, stored in namespace ns with storage
// labels lbls. A revision being written (fromMemory) is first put through
// JSON as its stored form will be, so that it signs what a reader decodes.
func (s *signer) signature(ns string, rel *release.Release, lbls map[string]string, fromMemory bool) (string, error) {
	manifest := rel.Manifest
	if fromMemory && !utf8.ValidString(manifest) {
		manifest = asJSONStores(manifest)
	}
	manifestSum := sha256.Sum256([]byte(manifest))
	c := signedRevision{Namespace: ns, Name: rel.Name, Version: rel.Version, Labels: map[string]string{},
		ManifestSHA256: hex.EncodeToString(manifestSum[:]), ApplyMethod: rel.ApplyMethod}
	for _, k := range signedStorageLabels {
		if v, ok := lbls[k]; ok {
			c.Labels[k] = v
		}
	}
	for _, h := range rel.Hooks {
		if h == nil {
			continue
		}
		// When a hook last ran changes on a stored revision.
		cp := *h
		cp.LastRun = release.HookExecution{}
		c.Hooks = append(c.Hooks, &cp)
	}
	if rel.Chart != nil {
		c.Chart = rel.Chart.Metadata
	}
	js, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	if fromMemory {
		var stored signedRevision
		if err := json.Unmarshal(js, &stored); err != nil {
			return "", err
		}
		if js, err = json.Marshal(stored); err != nil {
			return "", err
		}
	}
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte("fleet-release-signature/v1\x00"))
	mac.Write(js)
	return strings.ToLower(signatureEncoding.EncodeToString(mac.Sum(nil))), nil
}

// asJSONStores is s as encoding/json stores it: each byte that is not
// valid UTF-8 becomes U+FFFD, so that a revision signs what is read back.
func asJSONStores(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// verify reports whether rel, read from a storage Secret of namespace ns
// with labels lbls, carries this signer's signature. The labels Helm and
// the agent select and sort revisions by (name, version, owner) must say
// what the signed payload says: a copy of a signed Secret relabelled as
// another release, or as a later revision, is not the agent's.
func (s *signer) verify(ns string, rel *release.Release, lbls map[string]string) bool {
	got := lbls[SignatureLabel]
	if got == "" || rel == nil || rel.Namespace != ns || !labelsMatch(rel, lbls) {
		return false
	}
	want, err := s.signature(ns, rel, lbls, false)
	return err == nil && hmac.Equal([]byte(got), []byte(want))
}

// labelsMatch reports whether storage labels lbls name rel as its payload
// does.
func labelsMatch(rel *release.Release, lbls map[string]string) bool {
	return lbls["name"] == rel.Name && lbls["version"] == strconv.Itoa(rel.Version) && lbls["owner"] == "helm"
}

// storageKey is the name of the Secret Helm stores revision version of
// release name in.
func storageKey(name string, version int) string {
	return "sh.helm.release.v1." + name + ".v" + strconv.Itoa(version)
}

// verifySecret reports whether rel, decoded from storage Secret sec, is a
// revision the agent wrote: signed (verify) and stored under the name
// Helm gives that revision, so that a signed revision copied to another
// Secret name is not the agent's either.
func (s *signer) verifySecret(sec *corev1.Secret, rel *release.Release) bool {
	return rel != nil && sec.Name == storageKey(rel.Name, rel.Version) && s.verify(sec.Namespace, rel, sec.Labels)
}

// beforeKey reports whether storage Secret sec was created before the
// adoption cutoff: written by an agent that did not sign yet, never by
// this one. Always false while the cutoff is unknown.
func (s *signer) beforeKey(sec *corev1.Secret) bool {
	return sec.CreationTimestamp.Time.Before(s.cutoff)
}

// signer returns the agent's signing key, reading it from SigningKeySecret
// or creating it (and the agent namespace, where it does not exist yet),
// with the adoption cutoff (recordCutoff). The key is read once per
// Deployer; a failure is retried on the next call. A cutoff that could not
// be read or recorded leaves the signer adopting nothing, and is tried
// again after cutoffRetryInterval.
func (d *Deployer) signer(ctx context.Context) (*signer, error) {
	d.keyMu.Lock()
	defer d.keyMu.Unlock()
	if d.sig != nil && (d.sig.retryAt.IsZero() || time.Now().Before(d.sig.retryAt)) {
		return d.sig, nil
	}
	// Bounded: keyMu is held meanwhile, and a reconcile's context ends
	// only when the agent stops, so a hung read would otherwise block
	// every deploy of the agent until then.
	lctx, cancel := context.WithTimeout(ctx, signerLoadTimeout)
	defer cancel()
	sig := d.sig
	if sig == nil {
		var err error
		if sig, err = loadSigner(lctx, d.core, d.agentNamespace); err != nil {
			return nil, err
		}
	}
	cutoff, err := recordCutoff(lctx, d.core, d.agentNamespace, sig.keyCreated)
	if err != nil {
		// Fail closed: adopting up to a later time (the key's creation)
		// is what the recorded cutoff prevents. The error names the
		// namespace and annotation, never the key.
		crlog.FromContext(ctx).Error(err, "adopting no release storage stored before the agent signed its releases until the adoption cutoff is recorded",
			"namespace", d.agentNamespace, "annotation", SigningCutoffAnnotation, "retryIn", cutoffRetryInterval.String())
		if d.sig == nil {
			d.sig = sig
		}
		d.sig.retryAt = time.Now().Add(cutoffRetryInterval)
		return d.sig, nil
	}
	// A new signer rather than a changed one: stores of actions under
	// way read the old one without keyMu.
	d.sig = &signer{key: sig.key, keyCreated: sig.keyCreated, cutoff: cutoff}
	return d.sig, nil
}

// recordCutoff returns the adoption cutoff recorded on agent namespace ns
// (SigningCutoffAnnotation), never later than keyCreated, the creation of
// the key in use. Where none is recorded (a new agent, or one upgraded
// from a build that did not record it) it records keyCreated: the key is
// the first, or the one the earlier build signed with. The write is
// conditional on the Namespace read, so that two processes of the agent
// cannot record different times.
func recordCutoff(ctx context.Context, core corev1client.CoreV1Interface, ns string, keyCreated time.Time) (time.Time, error) {
	namespaces := core.Namespaces()
	for range 3 {
		obj, err := namespaces.Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			return time.Time{}, fmt.Errorf("reading the adoption cutoff of the agent namespace %s: %w", ns, err)
		}
		if v, ok := obj.Annotations[SigningCutoffAnnotation]; ok {
			recorded, err := time.Parse(time.RFC3339, v)
			if err != nil {
				// Not replaced by the key's creation, which may be later
				// than the lost value: an operator sets it.
				return time.Time{}, fmt.Errorf("annotation %s of the agent namespace %s is not an RFC 3339 time", SigningCutoffAnnotation, ns)
			}
			if keyCreated.Before(recorded) {
				return keyCreated, nil
			}
			return recorded, nil
		}
		if obj.Annotations == nil {
			obj.Annotations = map[string]string{}
		}
		obj.Annotations[SigningCutoffAnnotation] = keyCreated.UTC().Format(time.RFC3339)
		_, err = namespaces.Update(ctx, obj, metav1.UpdateOptions{FieldManager: FieldManager})
		switch {
		case err == nil:
			return keyCreated, nil
		case apierrors.IsConflict(err):
			// Changed meanwhile (maybe another process of this agent
			// recorded it): read it again.
			continue
		default:
			return time.Time{}, fmt.Errorf("recording the adoption cutoff on the agent namespace %s: %w", ns, err)
		}
	}
	return time.Time{}, fmt.Errorf("the adoption cutoff of the agent namespace %s could not be recorded: it kept changing", ns)
}

func loadSigner(ctx context.Context, core corev1client.CoreV1Interface, ns string) (*signer, error) {
	secrets := core.Secrets(ns)
	for range 3 {
		sec, err := secrets.Get(ctx, SigningKeySecret, metav1.GetOptions{})
		if err == nil {
			return signerOf(sec)
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading the release signing key %s/%s: %w", ns, SigningKeySecret, err)
		}
		key := make([]byte, signingKeyLen)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		obj := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: SigningKeySecret, Namespace: ns,
				Labels: map[string]string{"app.kubernetes.io/managed-by": FieldManager},
				Annotations: map[string]string{"fleet.cattle.io/description": "The key the Fleet agent signs its Helm release storage with. " +
					"Deleting it makes the agent distrust every release stored before; see docs/agent.md."}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{signingKeyField: key},
		}
		created, err := secrets.Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
		switch {
		case err == nil:
			return signerOf(created)
		case apierrors.IsAlreadyExists(err):
			// Another process of this agent was first: read its key.
			continue
		case apierrors.IsNotFound(err):
			// The agent namespace does not exist (yet): the agent's own.
			_, nerr := core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
				metav1.CreateOptions{FieldManager: FieldManager})
			if nerr != nil && !apierrors.IsAlreadyExists(nerr) {
				return nil, fmt.Errorf("creating the agent namespace %s for the release signing key: %w", ns, nerr)
			}
			continue
		default:
			return nil, fmt.Errorf("creating the release signing key %s/%s: %w", ns, SigningKeySecret, err)
		}
	}
	return nil, fmt.Errorf("the release signing key %s/%s could not be read or created", ns, SigningKeySecret)
}

func signerOf(sec *corev1.Secret) (*signer, error) {
	key := sec.Data[signingKeyField]
	if len(key) < signingKeyLen {
		// Not regenerated: every release signed with the lost key would
		// silently stop being the agent's.
		return nil, fmt.Errorf("the release signing key %s/%s holds no usable key (field %q, at least %d bytes); deleting the Secret has the agent create a new one, but releases signed with the lost key are then no longer trusted until their storage is removed or the annotation %s of the agent namespace is set to the new key's creation time (see docs/agent.md)",
			sec.Namespace, sec.Name, signingKeyField, signingKeyLen, SigningCutoffAnnotation)
	}
	return &signer{key: key, keyCreated: sec.CreationTimestamp.Time}, nil
}

// adopt signs the revisions of release ns/name (where bdName's options put
// it) that an agent stored before the adoption cutoff — an agent of an
// earlier version, which did not sign — so that the agent may act on them
// again. Only revisions that can be nothing but bdName's release are
// adopted: created before the cutoff (a Secret's creation time is set by
// the API server; nobody can date one back), stored where bdName deploys, under the name it deploys, labelled
// and annotated as written by this agent for bdName. Unsigned revisions
// written since the cutoff are never adopted, nor is anything while the
// cutoff is unknown. It is the first read of
// an action for bdName: Helm's later reads of the release are answered
// from the same list (releaseSecrets).
func (d *Deployer) adopt(ctx context.Context, ac *action.Configuration, bdName, name string) error {
	store, ok := ac.Releases.Driver.(*releaseStore)
	if !ok || store.sig == nil {
		return nil
	}
	ns := store.namespace
	list, err := store.impl.List(ctx, metav1.ListOptions{LabelSelector: labels.Set{"name": name, "owner": "helm"}.String()})
	if err != nil {
		return fmt.Errorf("reading release %s/%s: %w", ns, name, err)
	}
	for i := range list.Items {
		sec := &list.Items[i]
		if !store.sig.beforeKey(sec) || sec.Type != releaseSecretType ||
			sec.Labels[StorageAgentNamespaceLbl] != d.agentNamespace ||
			sec.Labels[StorageBundleIDLabel] != names.Limit(bdName, maxLabelValue) {
			continue
		}
		rel, err := decodeStored(sec.Data["release"])
		if err != nil || store.sig.verifySecret(sec, rel) {
			continue
		}
		// Only a revision labelled and named as Helm stores it: the
		// signature made now would vouch for those labels too.
		if sec.Name != storageKey(rel.Name, rel.Version) || !labelsMatch(rel, sec.Labels) {
			continue
		}
		if rel.Name != name || rel.Namespace != ns || rel.Chart == nil || rel.Chart.Metadata == nil ||
			rel.Chart.Metadata.Annotations[fleet.BundleIDAnnotation] != bdName ||
			rel.Chart.Metadata.Annotations[fleet.AgentNamespaceAnnotation] != d.agentNamespace {
			continue
		}
		signature, err := store.sig.signature(ns, rel, sec.Labels, false)
		if err != nil {
			return err
		}
		adopted := sec.DeepCopy()
		adopted.Labels[SignatureLabel] = signature
		// Under the resourceVersion read: a revision changed meanwhile is
		// not signed.
		if _, err := store.impl.Update(ctx, adopted, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
			return fmt.Errorf("adopting revision %s of release %s/%s, stored before the agent signed its releases: %w", sec.Name, ns, name, err)
		}
		crlog.FromContext(ctx).Info("adopted a release revision stored before the agent signed its releases",
			"release", ns+"/"+name, "secret", sec.Name, "bundledeployment", bdName)
	}
	return nil
}

// refuseForeign fails a first install of release ns/name when Secrets of
// that release that the agent did not write are stored: Helm, which sees
// only the agent's revisions, would install beside them and adopt every
// object they own. They are left alone; an operator removes them.
func refuseForeign(ctx context.Context, ac *action.Configuration, name string) error {
	store, ok := ac.Releases.Driver.(*releaseStore)
	if !ok || store.sig == nil {
		return nil
	}
	list, err := store.impl.List(ctx, metav1.ListOptions{LabelSelector: labels.Set{"name": name, "owner": "helm"}.String()})
	if err != nil {
		return fmt.Errorf("reading release %s/%s: %w", store.namespace, name, err)
	}
	if len(list.Items) == 0 {
		return nil
	}
	var stored []string
	for _, s := range list.Items[:min(len(list.Items), 3)] {
		stored = append(stored, s.Name)
	}
	return fmt.Errorf("release %s/%s is stored in Secrets this agent did not write (%s): it does not deploy over them; remove them to let it install",
		store.namespace, name, strings.Join(stored, ", "))
}

// purgeLeftovers deletes what is still stored of release name after Helm
// removed every revision of it the agent wrote: Secrets of the release's
// storage keys that the agent cannot verify. Only their storage goes,
// never anything they list, and as the identity that removed the release.
func purgeLeftovers(ctx context.Context, ac *action.Configuration, name string) error {
	store, ok := ac.Releases.Driver.(*releaseStore)
	if !ok || store.sig == nil {
		return nil
	}
	list, err := store.impl.List(ctx, metav1.ListOptions{LabelSelector: labels.Set{"name": name, "owner": "helm"}.String()})
	if err != nil {
		return fmt.Errorf("listing what is left of release %s/%s: %w", store.namespace, name, err)
	}
	var errs []error
	for _, s := range list.Items {
		if s.Type != releaseSecretType || !strings.HasPrefix(s.Name, "sh.helm.release.v1."+name+".v") {
			continue
		}
		err := store.impl.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting storage Secret %s/%s left of release %s: %w", store.namespace, s.Name, name, err))
		}
	}
	return errors.Join(errs...)
}
