package manifest

import (
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

func TestIDIsStableAcrossOrderAndEncoding(t *testing.T) {
	a, err := New([]fleet.BundleResource{{Name: "b.yaml", Content: "b"}, {Name: "a.yaml", Content: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := Encode("b.yaml", "b")
	if err != nil {
		t.Fatal(err)
	}
	b, err := New([]fleet.BundleResource{{Name: "a.yaml", Content: "a"}, enc})
	if err != nil {
		t.Fatal(err)
	}
	idA, _ := a.ID()
	idB, _ := b.ID()
	if idA != idB || !strings.HasPrefix(idA, "s-") || len(idA) > 63 {
		t.Fatalf("ids differ or malformed: %s %s", idA, idB)
	}
	c, _ := New([]fleet.BundleResource{{Name: "a.yaml", Content: "changed"}})
	idC, _ := c.ID()
	if idC == idA {
		t.Fatal("different content must give a different id")
	}
}

func TestCompressedRoundTrip(t *testing.T) {
	m, _ := New([]fleet.BundleResource{{Name: "cm.yaml", Content: "kind: ConfigMap"}})
	data, err := m.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	got, err := FromCompressed(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Resources) != 1 || got.Resources[0].Content != "kind: ConfigMap" {
		t.Fatalf("unexpected manifest %+v", got)
	}
}

func TestZipBombIsRefused(t *testing.T) {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	zeros := make([]byte, 1<<20)
	for range MaxUncompressedSize/len(zeros) + 2 {
		_, _ = w.Write(zeros)
	}
	_ = w.Close()
	if _, err := FromCompressed(buf.Bytes()); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("want ErrTooLarge, got %v", err)
	}
}

func TestDeploymentIDIgnoresDriftSettings(t *testing.T) {
	base := fleet.BundleDeploymentOptions{DefaultNamespace: "x"}
	withDrift := base
	withDrift.CorrectDrift = &fleet.CorrectDrift{Enabled: true}
	withDrift.Diff = &fleet.DiffOptions{ComparePatches: []fleet.ComparePatch{{Kind: "Deployment"}}}
	a, _ := DeploymentID("s-1", base)
	b, _ := DeploymentID("s-1", withDrift)
	if a != b {
		t.Fatal("drift settings must not change the deployment id")
	}
	other := base
	other.DefaultNamespace = "y"
	c, _ := DeploymentID("s-1", other)
	if c == a || ManifestIDOf(c) != "s-1" {
		t.Fatalf("unexpected ids %s %s", a, c)
	}
}

// FuzzBundleResources feeds hostile bundle resources and Content payloads to
// the decoders the agent runs on data it did not produce: they must return an
// error or a manifest, never panic, and never return more than the limit.
func FuzzBundleResources(f *testing.F) {
	enc, _ := Encode("a.yaml", "kind: ConfigMap")
	m, _ := New([]fleet.BundleResource{{Name: "a.yaml", Content: "kind: ConfigMap"}})
	payload, _ := m.Compressed()
	f.Add(enc.Content, EncodingBase64Gz, payload)
	f.Add("plain", "", []byte("not gzip"))
	f.Add("!!!", EncodingBase64Gz, []byte{0x1f, 0x8b, 0x08, 0x00})
	f.Fuzz(func(t *testing.T, content, encoding string, compressed []byte) {
		if out, err := Decode(fleet.BundleResource{Name: "f", Content: content, Encoding: encoding}); err == nil && len(out) > MaxUncompressedSize {
			t.Fatalf("decoded %d bytes, above the limit", len(out))
		}
		if got, err := FromCompressed(compressed); err == nil {
			if _, err := got.ID(); err != nil {
				t.Fatalf("a decoded manifest must have an ID: %v", err)
			}
		}
	})
}
