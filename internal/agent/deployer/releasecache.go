package deployer

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// releaseSecrets is the Secrets client one Helm action works through: it
// lists the Secrets of a release once and answers the action's later
// queries of the same release from that list and its own writes.
//
// An upgrade asks for the release's history three times (the agent's own
// look at the last revision, Helm's Last and Deployed, and the history trim
// after the new revision is stored), each a LIST that returns and decodes
// every stored revision. The agent runs one action per release at a time
// and builds a new releaseSecrets for each, so within one action its own
// writes are the only changes, and an answer from the first list plus them
// is what the API server would have said.
//
// Only label-only LISTs are cached; any other option, and a LIST whose
// selector does not narrow one already made (helm list's owner=helm), goes
// to the API server. Every write through it updates the lists (Helm's
// driver writes with Create, Update and Delete only).
type releaseSecrets struct {
	typedcorev1.SecretInterface

	mu    sync.Mutex
	lists []cachedList
}

type cachedList struct {
	selector map[string]string
	items    map[string]*corev1.Secret
}

func newReleaseSecrets(s typedcorev1.SecretInterface) *releaseSecrets {
	return &releaseSecrets{SecretInterface: s}
}

// List answers an equality selector that includes every label of a list
// already made from that list; it makes and keeps the list otherwise.
func (r *releaseSecrets) List(ctx context.Context, opts metav1.ListOptions) (*corev1.SecretList, error) {
	sel, ok := equalitySelector(opts)
	if !ok {
		return r.SecretInterface.List(ctx, opts)
	}
	r.mu.Lock()
	for _, l := range r.lists {
		if narrows(sel, l.selector) {
			out := &corev1.SecretList{}
			match := labels.SelectorFromSet(sel)
			for _, s := range l.items {
				if match.Matches(labels.Set(s.Labels)) {
					out.Items = append(out.Items, *s.DeepCopy())
				}
			}
			r.mu.Unlock()
			return out, nil
		}
	}
	r.mu.Unlock()
	list, err := r.SecretInterface.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	items := make(map[string]*corev1.Secret, len(list.Items))
	for i := range list.Items {
		items[list.Items[i].Name] = list.Items[i].DeepCopy()
	}
	r.mu.Lock()
	r.lists = append(r.lists, cachedList{selector: sel, items: items})
	r.mu.Unlock()
	return list, nil
}

func (r *releaseSecrets) Create(ctx context.Context, s *corev1.Secret, opts metav1.CreateOptions) (*corev1.Secret, error) {
	out, err := r.SecretInterface.Create(ctx, s, opts)
	if err == nil {
		r.store(out)
	}
	return out, err
}

func (r *releaseSecrets) Update(ctx context.Context, s *corev1.Secret, opts metav1.UpdateOptions) (*corev1.Secret, error) {
	out, err := r.SecretInterface.Update(ctx, s, opts)
	if err == nil {
		r.store(out)
	}
	return out, err
}

func (r *releaseSecrets) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	err := r.SecretInterface.Delete(ctx, name, opts)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		// Whatever happened, the lists can no longer be trusted.
		r.lists = nil
		return err
	}
	for _, l := range r.lists {
		delete(l.items, name)
	}
	return nil
}

func (r *releaseSecrets) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*corev1.Secret, error) {
	out, err := r.SecretInterface.Patch(ctx, name, pt, data, opts, sub...)
	if err == nil {
		r.store(out)
	}
	return out, err
}

func (r *releaseSecrets) DeleteCollection(ctx context.Context, opts metav1.DeleteOptions, list metav1.ListOptions) error {
	err := r.SecretInterface.DeleteCollection(ctx, opts, list)
	r.mu.Lock()
	r.lists = nil
	r.mu.Unlock()
	return err
}

// store puts a Secret this action wrote into every list whose selector it
// matches, and takes it out of the others (its labels may have changed).
func (r *releaseSecrets) store(s *corev1.Secret) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.lists {
		if labels.SelectorFromSet(l.selector).Matches(labels.Set(s.Labels)) {
			l.items[s.Name] = s.DeepCopy()
		} else {
			delete(l.items, s.Name)
		}
	}
}

// equalitySelector returns the labels of a LIST that selects by label
// equality only, with no other option set.
func equalitySelector(opts metav1.ListOptions) (map[string]string, bool) {
	rest := opts
	rest.LabelSelector = ""
	if rest != (metav1.ListOptions{}) || opts.LabelSelector == "" {
		return nil, false
	}
	sel, err := labels.ConvertSelectorToLabelsMap(opts.LabelSelector)
	if err != nil {
		return nil, false
	}
	return sel, true
}

// narrows reports whether sel requires every label base does, so that
// what sel selects is a subset of what base selected.
func narrows(sel, base map[string]string) bool {
	for k, v := range base {
		if w, ok := sel[k]; !ok || w != v {
			return false
		}
	}
	return true
}
