// Package manifest is the content of a bundle as the manager stores it and the
// agent reads it: the bundle's resources, serialized as JSON, gzip-compressed
// into a cluster-scoped Content object named by the manifest's sha256.
//
// The same manifest is stored once however many bundles or clusters use it,
// and a BundleDeployment names it through its deploymentID
// ("<manifestID>:<options hash>").
package manifest

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// KustomizationNames are the file names kustomize reads a kustomization
// from. The bundle reader (which warns about a kustomize.dir without one)
// and the agent (which then deploys without kustomize) must agree on them.
var KustomizationNames = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// MaxUncompressedSize bounds how large a manifest may grow when decompressed,
// so that a hostile Content or bundle resource (a zip bomb) cannot exhaust
// memory. It is far above what fits into etcd compressed.
const MaxUncompressedSize = 64 << 20

// EncodingBase64Gz is the BundleResource encoding for compressed content.
const EncodingBase64Gz = "base64+gz"

// Manifest is the ordered list of a bundle's files.
type Manifest struct {
	Resources []fleet.BundleResource `json:"resources"`
}

// New returns a manifest of resources, sorted by name and with every
// resource decoded to plain text, so that the same files always give the same
// ID whatever encoding the bundle used.
func New(resources []fleet.BundleResource) (*Manifest, error) {
	out := make([]fleet.BundleResource, 0, len(resources))
	for _, r := range resources {
		content, err := Decode(r)
		if err != nil {
			return nil, err
		}
		out = append(out, fleet.BundleResource{Name: r.Name, Content: content})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return &Manifest{Resources: out}, nil
}

// Decode returns the plain content of one resource.
func Decode(r fleet.BundleResource) (string, error) {
	switch r.Encoding {
	case "":
		return r.Content, nil
	case EncodingBase64Gz:
		raw, err := base64.StdEncoding.DecodeString(r.Content)
		if err != nil {
			return "", fmt.Errorf("resource %s: invalid base64: %w", r.Name, err)
		}
		b, err := gunzip(raw)
		if err != nil {
			return "", fmt.Errorf("resource %s: %w", r.Name, err)
		}
		return string(b), nil
	default:
		return "", fmt.Errorf("resource %s: unknown encoding %q", r.Name, r.Encoding)
	}
}

// Encode compresses content into a base64+gz resource.
func Encode(name, content string) (fleet.BundleResource, error) {
	b, err := gz([]byte(content))
	if err != nil {
		return fleet.BundleResource{}, err
	}
	return fleet.BundleResource{Name: name, Content: base64.StdEncoding.EncodeToString(b), Encoding: EncodingBase64Gz}, nil
}

// JSON is the canonical serialization the ID is computed over.
func (m *Manifest) JSON() ([]byte, error) {
	return json.Marshal(m)
}

// SHA256 is the hex sha256 of the canonical JSON.
func (m *Manifest) SHA256() (string, error) {
	b, err := m.JSON()
	if err != nil {
		return "", err
	}
	d := sha256.Sum256(b)
	return hex.EncodeToString(d[:]), nil
}

// ID is the manifest ID "s-<sha256>" (63 characters at most), the name of the
// Content object that stores it.
func (m *Manifest) ID() (string, error) {
	sum, err := m.SHA256()
	if err != nil {
		return "", err
	}
	return IDFromSHA(sum), nil
}

// IDFromSHA builds a manifest ID from a hex sha256.
func IDFromSHA(sum string) string {
	id := "s-" + sum
	if len(id) > 63 {
		id = id[:63]
	}
	return id
}

// Compressed is the gzip-compressed canonical JSON, the Content's payload.
func (m *Manifest) Compressed() ([]byte, error) {
	b, err := m.JSON()
	if err != nil {
		return nil, err
	}
	return gz(b)
}

// FromCompressed reads a Content payload, refusing anything that decompresses
// beyond MaxUncompressedSize.
func FromCompressed(data []byte) (*Manifest, error) {
	b, err := gunzip(data)
	if err != nil {
		return nil, err
	}
	m := &Manifest{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("invalid manifest JSON: %w", err)
	}
	return m, nil
}

// DeploymentID is "<manifestID>:<sha256 of the options>". Drift settings
// (diff, correctDrift) are left out, so changing them never redeploys.
func DeploymentID(manifestID string, opts fleet.BundleDeploymentOptions) (string, error) {
	o := opts.DeepCopy()
	o.Diff = nil
	o.CorrectDrift = nil
	b, err := json.Marshal(o)
	if err != nil {
		return "", err
	}
	d := sha256.Sum256(b)
	return manifestID + ":" + hex.EncodeToString(d[:]), nil
}

// ManifestIDOf returns the manifest ID part of a deploymentID.
func ManifestIDOf(deploymentID string) string {
	id, _, _ := strings.Cut(deploymentID, ":")
	return id
}

// ErrTooLarge is returned when decompressed data exceeds MaxUncompressedSize.
var ErrTooLarge = errors.New("manifest exceeds the maximum uncompressed size")

func gz(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func gunzip(b []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("invalid gzip data: %w", err)
	}
	defer r.Close()
	out, err := io.ReadAll(io.LimitReader(r, MaxUncompressedSize+1))
	if err != nil {
		return nil, fmt.Errorf("invalid gzip data: %w", err)
	}
	if len(out) > MaxUncompressedSize {
		return nil, ErrTooLarge
	}
	return out, nil
}
