package install

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Objects decodes a multi-document YAML stream (the output of Render and
// friends) into objects, skipping empty documents.
func Objects(stream string) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewBufferString(stream)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		obj := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &obj.Object); err != nil {
			return nil, fmt.Errorf("decoding manifest: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		out = append(out, obj)
	}
}

// Apply creates each object, or updates it when it exists, in order — what
// `kubectl apply -f` does for a fresh install.
func Apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {
	for _, obj := range objs {
		obj = obj.DeepCopy()
		err := c.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(obj.GroupVersionKind())
			if err = c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err == nil {
				obj.SetResourceVersion(cur.GetResourceVersion())
				err = c.Update(ctx, obj)
			}
		}
		if err != nil {
			return fmt.Errorf("applying %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
	}
	return nil
}
